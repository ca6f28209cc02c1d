"""What an export is checked against: a finished run's trained policy loaded back as training and the after-table
saw it, its greedy answers to held-out questions and its weights merged in memory (:func:`load_reference`).

Used by :func:`grpo_kit.runs.export.export` and :func:`grpo_kit.runs.verification.verify_export`; the command line
asks :func:`trained_through_unsloth` before it imports anything else (Unsloth must come before transformers).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_kit.evaluation.scoring import evaluate
from grpo_kit.policy import loading
from grpo_kit.policy.generation import Sampling, TransformersBackend
from grpo_kit.runs.folder import RunFolder
from grpo_kit.system.files import json_or_none
from grpo_kit.tasks import Task, get_task
from grpo_kit.tasks.data import take_slice

__all__ = ["Reference", "TrainedModels", "dtype_name", "generation_placement", "load_reference", "open_trained_run",
           "saved_dtype", "trained_through_unsloth"]

_TRAIN_COMMAND = "python -m grpo_kit train (or notebook 03)"


def open_trained_run(run_dir: str | Path) -> tuple[RunFolder, dict[str, Any]]:
    """A run folder whose training finished, for reading, and its ``train_settings.json``.

    Raises:
        FileNotFoundError: no run folder, no trained model in it, or no ``train_settings.json``.
        ValueError: training has not finished (no ``finished.json``), or ``model/`` changed since.
        grpo_kit.runs.folder.RunFolderBusy: a training is still writing the folder.
    """
    if not Path(run_dir).is_dir():
        raise FileNotFoundError(f"no run folder at {run_dir}: give the folder a train run wrote (it holds model/ "
                                "and train_settings.json)")
    run = RunFolder(run_dir, write=False)  # export writes into --out only
    run.require(run.model, _TRAIN_COMMAND)
    if run.finished_step() is None:
        with run.lock("export", reading=True):  # a training still writing it is named (RunFolderBusy), else stopped
            pass
        raise ValueError(f"training in {run.path} has not finished (no {run.finished.name}; model/ may be "
                         f"half-written): run {run.command('train --resume')} to finish it, then export")
    run.check_model()  # model/ as training wrote it, or a ValueError naming the file
    return run, run.read_settings(run.train_settings, _TRAIN_COMMAND, ("identity",))


class TrainedModels:
    """The trained policy's models in memory, held until an export is read back, then released (:meth:`release`): an
    8B model and its export do not both fit on one card.

    Attributes:
        trained: the policy as loaded (an adapter on its base, or the full model); ``None`` once released.
        merged: the adapter folded into its base by peft (the full model itself when there is no adapter); ``None``
            where Unsloth merges its own while saving, or once released.
    """

    def __init__(self, trained: Any, merged: Any) -> None:
        self.trained, self.merged = trained, merged

    def release(self) -> None:
        """Drop both models and hand their GPU memory back; the answers computed with them stay."""
        import gc

        import torch

        self.trained = self.merged = None
        gc.collect()
        torch.cuda.empty_cache()  # a no-op where CUDA was never initialised (torch/cuda/memory.py)


@dataclass(frozen=True)
class Reference:
    """The trained policy's side of an export's check, built once by :func:`load_reference`.

    Attributes:
        task: the run's task; ``rows``: the held-out questions (the first ones of the baseline's seeded slice of the
            test split, a ``datasets.Dataset``); ``sampling``: greedy, with the baseline's completion budget.
        records: the trained policy's scored completions, one per row
            (:attr:`grpo_kit.evaluation.scoring.EvalResult.records`).
        tokenizer: the trained policy's tokenizer (a GGUF's prompts get its chat template).
        models: the models in memory (:class:`TrainedModels`), released before an export loads.
        dtype: the merged model's dtype (``"float32"``, ``"bfloat16"``, ...); ``None`` where Unsloth merges its own.
        parameters: the trained policy's parameters (a bitsandbytes 4-bit weight counts the two it packs in a byte).
        quantized_base: the policy ran on a 4-bit base (its export is merged into the 16-bit original, so the check
            is on answers, not identical completions).
    """

    task: Task
    rows: Any
    sampling: Sampling
    records: list[dict[str, Any]]
    tokenizer: Any
    models: TrainedModels
    dtype: str | None
    parameters: int
    quantized_base: bool


def load_reference(run: RunFolder, settings: dict[str, Any], questions: int, trust_remote_code: bool = False
                   ) -> Reference:
    """The trained policy's greedy answers to the first ``questions`` of the baseline's seeded test slice (with its
    completion budget, from ``eval_settings.json``), with its models and tokenizer.

    Args:
        run, settings: the run folder and its ``train_settings.json`` (:func:`open_trained_run`).
        questions: held-out questions to ask (at most the test split's size).
        trust_remote_code: the run's task file may import and run Python of its own
            (:func:`grpo_kit.tasks.task_file.check_task_code`).

    Raises:
        ValueError: a damaged ``eval_settings.json`` (its seed or budget not a whole number); the trained model cannot
            be loaded (an adapter's base moved).
    """
    seed, budget = _baseline_slice(run, settings)
    task = get_task(settings.get("task"), digest=settings.get("task_digest"), trust_remote_code=trust_remote_code)
    test = task.load("test")
    rows = take_slice(test, n=min(questions, len(test)), seed=seed)
    model, tokenizer, unsloth = _load_trained(run, settings)
    sampling = Sampling(temperature=0.0, max_new_tokens=budget)
    result = evaluate(TransformersBackend(model, tokenizer, name="the trained policy"), rows, sampling, task=task)
    # Unsloth merges its own (save_pretrained_merged), into the 16-bit original of a 4-bit base: no merge here.
    # peft's merge_and_unload folds the adapter (LoRA and modules_to_save) into its base; an adapter that trained the
    # tied output head (modules_to_save=["lm_head"]) leaves it apart from the input embedding, and merge_and_unload
    # then sets tie_word_embeddings=False (peft 0.21, tuners_utils.py), so saving writes both and loading keeps the
    # trained head (the loss of unsloth #3454). A full fine-tune (no adapter) is its own merge.
    merged = None if unsloth else model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
    packed = [getattr(p, "quant_state", None) is not None for p in model.parameters()]  # bitsandbytes 4-bit weights
    return Reference(task=task, rows=rows, sampling=sampling, records=result.records, tokenizer=tokenizer,
                     models=TrainedModels(model, merged), dtype=None if merged is None else dtype_name(merged),
                     # a 4-bit weight holds two parameters in each byte
                     parameters=sum(p.numel() * (1 + q) for p, q in zip(model.parameters(), packed)),
                     quantized_base=any(packed))


def _baseline_slice(run: RunFolder, settings: dict[str, Any]) -> tuple[int | None, int]:
    """``(seed, max_new_tokens)`` of the baseline's slice, as ``eval_settings.json`` records them (without one: the
    recipe's completion length, else 64).

    Raises:
        ValueError: either is not a whole number (the file was damaged or edited).
    """
    evaluated = run.read_json(run.eval_settings, "eval --before") if run.eval_settings.is_file() else {}
    budget = (evaluated.get("max_new_tokens") if isinstance(evaluated, dict) else None) or settings.get(
        "identity", {}).get("preset", {}).get("max_completion_length") or 64
    seed = evaluated.get("seed", 0) if isinstance(evaluated, dict) else None
    for name, value in (("seed", seed), ("max_new_tokens", budget)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "seed" else 1):
            raise ValueError(f"{run.eval_settings} is damaged or was edited ({name} = {value!r}, not a whole number): "
                             "restore it, or measure the baseline again in a new run folder (eval --before)")
    return seed, budget


def trained_through_unsloth(run_dir: str | Path) -> bool:
    """Whether the run folder's policy was trained (and so loads again) through Unsloth, as its
    ``train_settings.json`` records; ``False`` when it records nothing readable (the command that reads it says so).
    Such a run's commands must import Unsloth before transformers."""
    settings = json_or_none(Path(run_dir) / "train_settings.json")
    preset = settings.get("identity", {}).get("preset", {}) if isinstance(settings, dict) else {}
    return isinstance(preset, dict) and bool(preset.get("use_unsloth"))


def _load_trained(run: RunFolder, settings: dict[str, Any]) -> tuple[Any, Any, bool]:
    """The trained policy as training and the after-table saw it: ``(model, tokenizer, through_unsloth)``.

    A run trained through Unsloth loads through Unsloth again, on its GPU (its 4-bit base where it trained on one:
    the adapter's base is Unsloth's pre-quantized ``*-bnb-4bit`` repository, unsloth ``models/mapper.py``);
    others load as saved (an adapter on its base, or the full model), on the GPU where there is one
    (:func:`generation_placement`).
    """
    preset = settings.get("identity", {}).get("preset", {})
    if preset.get("use_unsloth"):
        unsloth = loading.Loading(use_unsloth=True, load_in_4bit=bool(preset.get("load_in_4bit")),
                                  fast_inference=False, lora_rank=preset.get("lora_rank"),
                                  max_seq_length=int(preset.get("max_seq_length", 512)))
        return (*loading.load_unsloth_policy(str(run.model), unsloth), True)
    try:
        return (*loading.load_policy(run.model, **generation_placement(saved_dtype(run.model))), False)
    except OSError as e:  # an adapter's base model moved or deleted, a file transformers cannot read
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"cannot load the trained model in {run.model} ({first}): an adapter needs its base model "
                         "where training found it (adapter_config.json's base_model_name_or_path); put it back "
                         "there") from None


def generation_placement(saved: str | None) -> dict[str, Any]:
    """``from_pretrained`` arguments for generating with a saved model of dtype ``saved`` in this process: on the
    first GPU where there is one, in the saved dtype unless the card has no bfloat16 (then float16: a T4 or V100,
    :class:`grpo_kit.policy.devices.Gpu`); on a CPU as saved (``"auto"``).
    """
    from grpo_kit.policy.devices import first_gpu

    if (gpu := first_gpu()) is None:
        return {"dtype": "auto"}
    return {"dtype": "float16" if saved == "bfloat16" and not gpu.bf16 else "auto", "device_map": {"": 0}}


def saved_dtype(folder: Path) -> str | None:
    """The dtype a saved model's ``config.json`` records (transformers 5 writes ``dtype``, 4 ``torch_dtype``)."""
    config = json_or_none(folder / "config.json")
    found = config.get("dtype") or config.get("torch_dtype") if isinstance(config, dict) else None
    return str(found).removeprefix("torch.") if found else None


def dtype_name(model: Any) -> str:
    """A model's dtype as its first parameter has it, without ``torch.`` (``"float32"``)."""
    return str(next(model.parameters()).dtype).removeprefix("torch.")
