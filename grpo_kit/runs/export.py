"""Export a run's trained policy, merged (safetensors) or as GGUF, check it against the trained policy, card it,
upload it: ``python -m grpo_kit export`` / ``verify-export`` and notebook 04's last section.

Exporting is where training gets lost without anyone noticing: a merged LoRA that answers like the base
model (unsloth #1763, #2009, #2142, #5410; ``modules_to_save`` dropped until unsloth #3454), a GGUF
conversion that fails or changes the tokenizer (unsloth #1094, #2098, #3297, #3504). So no export is
called done before the runtime that will serve it (transformers for a merged model, llama.cpp through
llama-cpp-python for GGUF) has answered the same held-out questions, greedily, as the trained policy in
the run folder (:func:`verify_export`):

- a merged model in float32 must give identical completions, and (in the trained policy's dtype) its weights
  must equal the trained policy merged in memory;
- a GGUF in f32 / f16 / bf16, or a merged model in another dtype, must give at least
  :data:`IDENTICAL_THRESHOLDS` of identical completions;
- a quantized GGUF must agree on at least :data:`AGREEMENT_THRESHOLDS` of the questions' flexible answers, and
  its flexible accuracy must not be significantly lower (exact McNemar test, p < 0.05).

A refused export stays in ``<out>.refused`` with its ``verification.json``; the error shows the first
question where the two differ, side by side. A passed one gets ``verification.json`` (with the SHA-256 of
every file, so an upload can tell it is the checked artefact) and a model card (``README.md``).
"""

from __future__ import annotations

import csv
import itertools
import json
import logging
import math
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from grpo_kit.evaluation.scoring import evaluate
from grpo_kit.policy import llama_cpp, loading
from grpo_kit.policy.generation import Sampling, TransformersBackend
from grpo_kit.runs.folder import RunFolder, enclosing_run
from grpo_kit.runs.locks import hold_lock
from grpo_kit.system.files import follow_umask, json_or_none, sha256_file, write_json, write_text
from grpo_kit.system.hub import hub_offline, is_repo_id, upload_token
from grpo_kit.system.logs import counted
from grpo_kit.system.progress import phase_bar

__all__ = ["AGREEMENT_THRESHOLDS", "F32_GGUF_LIMIT", "FORMATS", "IDENTICAL_THRESHOLDS", "ExportFormat", "ExportRefused",
           "Gguf", "Merged", "Verification", "check_formats", "check_out", "check_record", "export", "merge_base",
           "model_card", "push_to_hub", "verification_record", "verify_export"]

log = logging.getLogger(__name__)

#: Share of identical greedy completions an unquantized export must reach, by type. Measured on the kit's
#: warm-started tiny policy (benchmarks/export.py, 32 GSM8K test questions, 64-token completions): the float32
#: merge, and GGUF f32, f16 and bf16 each gave 32/32; q8_0 30/32, q4_k_m 28/32, q4_0 26/32. The thresholds sit
#: below that (one or more questions of slack for another CPU's kernels, more for bf16's 8-bit mantissa). Merged
#: float16 / bfloat16 (a GPU run's base dtype) take the GGUF type's threshold; they are not measured here. Long
#: completions of a large model diverge sooner: ``threshold=`` (``--threshold``) sets another, stated in the card.
IDENTICAL_THRESHOLDS = {"float32": 1.0, "f32": 0.9, "f16": 0.875, "bf16": 0.75, "float16": 0.875, "bfloat16": 0.75}
#: Share of questions on which a quantized GGUF gives the trained policy's flexible answer, by type (else
#: :data:`DEFAULT_AGREEMENT`); measured as above: q8_0 100%, q4_k_m 97%, q4_0 91%.
AGREEMENT_THRESHOLDS = {"q8_0": 0.9}
DEFAULT_AGREEMENT = 0.75
_SIGNIFICANT = 0.05


class ExportRefused(ValueError):
    """An export that did not pass its verification; ``verification`` holds the numbers."""

    def __init__(self, message: str, verification: Verification) -> None:
        super().__init__(message)
        self.verification = verification


@dataclass
class Verification:
    """The check of one export against a run's trained policy.

    Attributes:
        export: the checked folder's or ``.gguf`` file's name; ``kind``: ``"merged"`` or ``"gguf"``; ``dtype``: the
            merged model's dtype or the GGUF's type.
        questions: held-out questions asked (greedy); ``identical``: how many completions were identical.
        agreement: share of questions with the same flexible answer (two completions without one agree only when
            identical); ``accuracy_trained`` /
            ``accuracy_export``: flexible accuracy; ``mcnemar_p``: exact McNemar test on its flips.
        weights: for a merged export in the trained dtype, ``{"max_abs_diff", "differing", "missing"}``.
        rule: what had to hold; ``passed``; ``first_difference``: the first question where the completions
            differ (``question``, ``trained``, ``export``), ``None`` when none do.
        files: SHA-256 of each file of the export, at verification time.
        run, step, model_digest: the run folder checked against (relative to the folder holding
            ``verification.json``: nothing of this machine goes to the Hub with it), the step its model was trained
            to and the trained weights' digest (``finished.json``) at verification time.
    """

    export: str
    kind: str
    dtype: str
    questions: int
    identical: int
    agreement: float
    accuracy_trained: float
    accuracy_export: float
    mcnemar_p: float
    rule: str
    passed: bool
    weights: dict[str, Any] | None = None
    first_difference: dict[str, str] | None = None
    files: dict[str, str] = field(default_factory=dict)
    run: str | None = None
    step: int | None = None
    model_digest: str | None = None

    @property
    def identical_share(self) -> float:
        return self.identical / self.questions

    def summary(self) -> str:
        """One paragraph: the numbers and the verdict."""
        text = (f"{self.kind} export ({self.dtype}) against the trained policy on {self.questions} held-out questions "
                f"(greedy): {self.identical}/{self.questions} identical completions ({self.identical_share:.0%}), "
                f"flexible answers agree on {self.agreement:.0%}, flexible accuracy {self.accuracy_trained:.3f} -> "
                f"{self.accuracy_export:.3f} (exact McNemar p = {self.mcnemar_p:.3g})")
        if self.weights is not None:
            text += f", weights max |diff| {self.weights['max_abs_diff']:.3g}"
        return f"{text}. Rule: {self.rule}. {'PASSED' if self.passed else 'REFUSED'}."

    def side_by_side(self) -> str:
        """The first differing question, the trained policy's completion beside the export's."""
        if self.first_difference is None:
            return "(every completion is identical)"
        d = self.first_difference
        return (f"first differing question: {d['question']!r}\n--- trained policy ---\n{d['trained']}\n"
                f"--- export ---\n{d['export']}")


def _file_hashes(folder: Path) -> dict[str, str]:
    return {p.name: sha256_file(p) for p in sorted(folder.iterdir())
            if p.is_file() and p.name not in ("README.md", "verification.json")}


def _run(run_dir: str | Path) -> tuple[RunFolder, dict[str, Any]]:
    """The run folder and its ``train_settings.json``.

    Raises:
        FileNotFoundError: no run folder, no trained model in it, or no ``train_settings.json``.
        ValueError: training has not finished (no ``finished.json``).
    """
    if not Path(run_dir).is_dir():
        raise FileNotFoundError(f"no run folder at {run_dir}: give the folder a train run wrote (it holds model/ "
                                "and train_settings.json)")
    run = RunFolder(run_dir, write=False)  # export writes into --out only
    run.require(run.model, "python -m grpo_kit train (or notebook 03)")
    if run.finished_step() is None:
        with run.lock("export", reading=True):  # a training still writing it is named (RunFolderBusy), else stopped
            pass
        raise ValueError(f"training in {run.path} has not finished (no {run.finished.name}; model/ may be "
                         f"half-written): run {run.command('train --resume')} to finish it, then export")
    run.check_model()  # model/ as training wrote it, or a ValueError naming the file
    return run, run.read_settings(run.train_settings, "python -m grpo_kit train (or notebook 03)", ("identity",))


def _reference(run: RunFolder, settings: dict[str, Any], questions: int, trust_remote_code: bool = False
               ) -> dict[str, Any]:
    """The trained policy's greedy answers to the held-out questions (the first ``questions`` of the baseline's seeded
    test slice, with its completion budget), its merged weights and tokenizer; ``trust_remote_code``: the run's task
    file may import and run Python of its own (:func:`grpo_kit.tasks.task_file.check_task_code`)."""
    from grpo_kit.tasks import get_task
    from grpo_kit.tasks.data import take_slice

    evaluated = run.read_json(run.eval_settings, "eval --before") if run.eval_settings.is_file() else {}
    budget = (evaluated.get("max_new_tokens") if isinstance(evaluated, dict) else None) or settings.get(
        "identity", {}).get("preset", {}).get("max_completion_length") or 64
    seed = evaluated.get("seed", 0) if isinstance(evaluated, dict) else None
    for name, value in (("seed", seed), ("max_new_tokens", budget)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "seed" else 1):
            raise ValueError(f"{run.eval_settings} is damaged or was edited ({name} = {value!r}, not a whole number): "
                             "restore it, or measure the baseline again in a new run folder (eval --before)")
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
    return {"task": task, "rows": rows, "sampling": sampling, "records": result.records, "model": merged,
            "trained": model, "tokenizer": tokenizer, "dtype": None if merged is None else _dtype_name(merged),
            # a 4-bit weight holds two parameters in each byte
            "parameters": sum(p.numel() * (1 + q) for p, q in zip(model.parameters(), packed)),
            "quantized_base": any(packed)}


#: Suffixes of Unsloth's pre-quantized repositories, whose 16-bit original its merge reads instead (unsloth
#: 2026.10.7 ``models/mapper.py``: ``unsloth/Meta-Llama-3.1-8B-Instruct-unsloth-bnb-4bit`` and ``...-bnb-4bit`` map to
#: ``unsloth/Meta-Llama-3.1-8B-Instruct``).
_QUANTIZED_SUFFIX = re.compile(r"(-unsloth)?-bnb-4bit$", re.IGNORECASE)
_BASE_HELP = ("pass --base PATH (notebook 04: export_base = PATH), a local folder holding that 16-bit model "
              "(config.json and *.safetensors, e.g. from `hf download NAME --local-dir PATH` on a machine online)")


def _safetensors_model(folder: Path) -> bool:
    """Whether ``folder`` holds an unquantized model Unsloth's merge reads: ``config.json`` without a 4-bit
    ``quantization_config`` and ``*.safetensors`` (every shard its index names)."""
    config = json_or_none(folder / "config.json")
    quantization = config.get("quantization_config") if isinstance(config, dict) else None
    if not isinstance(config, dict) or (isinstance(quantization, dict) and (
            quantization.get("load_in_4bit") or quantization.get("quant_method") in ("bitsandbytes", "gptq", "awq"))):
        return False
    index = json_or_none(folder / "model.safetensors.index.json")
    shards = set(index["weight_map"].values()) if isinstance(index, dict) and "weight_map" in index else set()
    return any(folder.glob("*.safetensors")) and all((folder / name).is_file() for name in shards)


def _hub_weights_bytes(repo: str) -> int:
    """The bytes of ``repo``'s safetensors files on the Hub (one metadata request, 30 s at most).

    Raises:
        Exception: whatever huggingface_hub raises when the Hub cannot be reached or the repository is not there.
    """
    from huggingface_hub import HfApi

    info = HfApi().model_info(repo, files_metadata=True, timeout=30)
    return sum(f.size or 0 for f in info.siblings or () if f.rfilename.endswith(".safetensors"))


def _cached_snapshot(repo: str) -> Path | None:
    """The Hugging Face cache's complete copy of ``repo`` (its snapshot folder), or ``None``; no network."""
    from huggingface_hub import snapshot_download

    try:
        folder = Path(snapshot_download(repo, local_files_only=True))
    except Exception:  # not cached (LocalEntryNotFoundError), or a damaged cache: the Hub decides then
        return None
    return folder if _safetensors_model(folder) else None


def merge_base(run_dir: str | Path, base: str | Path | None = None) -> Path | None:
    """Where the merged export of an Unsloth LoRA run gets its 16-bit base, settled before any model loads.

    Unsloth's ``save_pretrained_merged(..., "merged_16bit")`` does not merge into the weights in memory: it reads
    the 16-bit original of the adapter's base again (unsloth 2026.10.7 ``save.py``
    ``unsloth_generic_save_pretrained_merged`` -> unsloth_zoo ``saving_utils.py`` ``merge_and_overwrite_lora``),
    from a local folder when ``determine_base_model_source`` finds one (the literal name, or its last part in the
    working folder; the Hugging Face cache is never looked at), else from the Hub: about 16 GB for an 8B model,
    and offline it raises "could not reach the Hugging Face Hub". The kit hands it a local folder (the model
    config's ``_name_or_path``, which ``merge_and_overwrite_lora`` reads) where it has one: ``base``, a local
    copy Unsloth would find itself, or a complete copy in the Hugging Face cache.

    Args:
        run_dir: the run folder.
        base: a local folder holding the 16-bit base (``export --base``).

    Returns:
        the local folder to merge from, or ``None``: no 16-bit base is read (not an Unsloth LoRA run), or Unsloth
        downloads it from the Hub, which answered (a log line gives its size).

    Raises:
        ValueError: ``base`` for a run that needs none, or not a folder holding an unquantized safetensors model;
            ``HF_HUB_OFFLINE`` set where the base would come from the Hub (the message names ``--base``).
        ConnectionError: the Hub does not answer for the base (the message names ``--base``).
    """
    adapter = RunFolder(run_dir, write=False).model / "adapter_config.json"
    if not (trained_through_unsloth(run_dir) and adapter.is_file()):
        if base is not None:
            raise ValueError(f"--base is for a LoRA run trained through Unsloth, whose merge reads a 16-bit base; "
                             f"{run_dir} merges into the base it loads: drop --base")
        return None
    if base is not None:
        folder = Path(base).expanduser()
        if not _safetensors_model(folder):
            raise ValueError(f"--base {base} is not a folder holding an unquantized model (config.json without a "
                             "4-bit quantization_config, and its *.safetensors): give the 16-bit original the run's "
                             "base was quantized from")
        return folder.resolve()
    try:
        name = str(json.loads(adapter.read_text(encoding="utf-8"))["base_model_name_or_path"])
    except (OSError, ValueError, KeyError, TypeError):
        raise ValueError(f"{adapter} is damaged or was edited (no base_model_name_or_path): restore it") from None
    name = _QUANTIZED_SUFFIX.sub("", name)
    for local in (Path(name), Path(name.split("/")[-1])):  # where merge_and_overwrite_lora looks itself
        if _safetensors_model(local):
            return local.resolve()
    if (cached := _cached_snapshot(name)) is not None:
        log.info(f"export: Unsloth's merge reads the 16-bit base {name} from the Hugging Face cache ({cached})")
        return cached
    needs = f"this run's merged export needs the 16-bit base {name}, which Unsloth's merge downloads from the Hub"
    if hub_offline():
        raise ValueError(f"{needs}, and HF_HUB_OFFLINE is set: {_BASE_HELP}")
    try:
        size = _hub_weights_bytes(name)
    except Exception as e:  # offline, DNS, timeout, gated, not found: huggingface_hub raises several types
        raise ConnectionError(f"{needs}, and the Hub does not answer for it ({type(e).__name__}): {_BASE_HELP}") \
            from None
    log.warning(f"export: Unsloth's merge downloads the 16-bit base {name} from the Hugging Face Hub ({size / 1e9:.1f} "
                "GB) into the export's folder, and the merged export takes as much again; --base PATH uses a local "
                "copy instead")
    return None


def _generation_placement(saved_dtype: str | None) -> dict[str, Any]:
    """``from_pretrained`` arguments for generating with a saved model in this process: on the first GPU where
    there is one, in the saved dtype unless the card has no bfloat16 (then float16: a T4 or V100,
    :class:`grpo_kit.policy.devices.Gpu`); on a CPU as saved (``"auto"``).
    """
    from grpo_kit.policy.devices import first_gpu

    if (gpu := first_gpu()) is None:
        return {"dtype": "auto"}
    return {"dtype": "float16" if saved_dtype == "bfloat16" and not gpu.bf16 else "auto", "device_map": {"": 0}}


def _saved_dtype(folder: Path) -> str | None:
    """The dtype a saved model's ``config.json`` records (transformers 5 writes ``dtype``, 4 ``torch_dtype``)."""
    config = json_or_none(folder / "config.json")
    found = config.get("dtype") or config.get("torch_dtype") if isinstance(config, dict) else None
    return str(found).removeprefix("torch.") if found else None


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
    (:func:`_generation_placement`).
    """
    preset = settings.get("identity", {}).get("preset", {})
    if preset.get("use_unsloth"):
        unsloth = loading.Loading(use_unsloth=True, load_in_4bit=bool(preset.get("load_in_4bit")),
                                  fast_inference=False, lora_rank=preset.get("lora_rank"),
                                  max_seq_length=int(preset.get("max_seq_length", 512)))
        return (*loading.load_unsloth_policy(str(run.model), unsloth), True)
    try:
        return (*loading.load_policy(run.model, **_generation_placement(_saved_dtype(run.model))), False)
    except OSError as e:  # an adapter's base model moved or deleted, a file transformers cannot read
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"cannot load the trained model in {run.model} ({first}): an adapter needs its base model "
                         "where training found it (adapter_config.json's base_model_name_or_path); put it back "
                         "there") from None


#: Above this many parameters a quantized GGUF is converted through a 16-bit GGUF, not a float32 one (half the
#: disk; llama.cpp's quantizer reads either). At or below it float32 keeps the tiny policy's conversion exact.
F32_GGUF_LIMIT = 1_000_000_000


def _tokenizer_bytes(model: Path) -> int:
    """The bytes of a saved model folder's files other than its weights (tokenizer, configs): what a merged export
    copies, and about what a GGUF stores of the vocabulary."""
    weights = (".safetensors", ".bin", ".pt", ".pth")
    return sum(p.stat().st_size for p in model.rglob("*") if p.is_file() and not p.name.endswith(weights))


def _check_disk(where: Path, needed: int, format: str) -> None:
    """Refuse an export the disk under ``where`` cannot hold (``needed`` bytes: :meth:`ExportFormat.needed`), before
    writing anything.

    Raises:
        ValueError: less free space than needed (the message gives both, in GB, and what to do).
    """
    from tqdm import tqdm  # format_sizeof: bytes in the unit that shows them (a tiny policy's export is megabytes)

    folder = next(p for p in (where, *where.parents) if p.exists())
    free = shutil.disk_usage(folder).free
    if free < needed * 1.05:
        raise ValueError(f"this {format} export needs about {tqdm.format_sizeof(needed, 'B')} of free space under "
                         f"{folder}, which has {tqdm.format_sizeof(free, 'B')}: free some space, or give --out a "
                         "folder on a larger disk")


def _dtype_name(model: Any) -> str:
    return str(next(model.parameters()).dtype).removeprefix("torch.")


def _compare_weights(export_dir: Path, merged: Any) -> dict[str, Any]:
    """Every tensor of the export against the trained policy merged in memory."""
    from safetensors.torch import load_file

    reference = merged.state_dict()  # detached tensors, maybe on the GPU: one at a time comes over
    found = {k: v for file in sorted(export_dir.glob("*.safetensors")) for k, v in load_file(str(file)).items()}
    # the largest |difference| of each tensor that the trained merge holds at the same shape
    diffs = {name: (tensor.float() - reference[name].float().cpu()).abs().max().item() if tensor.numel() else 0.0
             for name, tensor in found.items() if name in reference and reference[name].shape == tensor.shape}
    # one without a counterpart, or off by more than float32 rounding of its largest weight, differs
    differing = [name for name in found if name not in diffs
                 or diffs[name] > 1e-6 * max(1.0, reference[name].float().abs().max().item())]
    tied = getattr(merged.config, "tie_word_embeddings", False)  # a tied head is saved once, as the embedding
    missing = [n for n in reference if n not in found and not (tied and n == "lm_head.weight")]
    return {"max_abs_diff": max(diffs.values(), default=0.0), "differing": differing, "missing": missing}


def verify_export(export: str | Path, against: str | Path, questions: int = 32,
                  reference: dict[str, Any] | None = None, threshold: float | None = None,
                  trust_remote_code: bool = False) -> Verification:
    """Check an export against a run's trained policy: the serving runtime's greedy answers to held-out questions.

    Works on an export made anywhere (this kit, Unsloth's ``save_pretrained_merged``, by hand): a folder
    with ``config.json`` is loaded with transformers, a ``.gguf`` file (or a folder holding one) with
    llama.cpp. The questions are the first ``questions`` of the run's baseline slice of the task's test split
    (seeded as ``eval_settings.json`` says), with its completion budget. The rules are in the module docstring.

    Args:
        export: the export folder or ``.gguf`` file.
        against: the run folder (``model/``, ``train_settings.json``).
        questions: held-out questions to ask (default 32).
        reference: the trained policy's answers already computed (:func:`export` passes them).
        threshold: replaces the type's threshold (:data:`IDENTICAL_THRESHOLDS`, :data:`AGREEMENT_THRESHOLDS`), in
            [0, 1]; a float32 merged export must still be identical.
        trust_remote_code: the run's task file may import and run Python of its own
            (:func:`grpo_kit.tasks.task_file.check_task_code`).

    Returns:
        :class:`Verification` (``passed`` says the verdict; nothing is raised for a failed check).

    Raises:
        FileNotFoundError: no export, no run folder or no trained model in it.
        ValueError: ``questions`` below 1; a folder that is neither a transformers model nor holds one GGUF.
    """
    _check_numbers(questions, threshold)
    export = Path(export)
    if not export.exists():
        raise FileNotFoundError(f"no export at {export}")
    fmt = next((f for f in FORMATS.values() if f.found(export) is not None), None)
    if fmt is None:
        raise ValueError(f"{export} is neither a transformers model folder (config.json) nor a .gguf file (or a "
                         "folder holding exactly one)")
    fmt.check_tools(verifying=True)  # before any model loads
    run, settings = _run(against)
    ref = reference or _reference(run, settings, questions, trust_remote_code)
    digest = run.check_model()
    from grpo_kit.evaluation.compare import flips
    from grpo_kit.evaluation.stats import mcnemar_exact

    backend, dtype, weights = fmt.open(fmt.found(export), ref)
    result = evaluate(backend, ref["rows"], ref["sampling"], task=ref["task"])
    before, after = ref["records"], result.records
    # Bytes that end inside a UTF-8 character are spelled U+FFFD by one decoder and dropped by another: the same
    # tokens, two spellings. Compared without the replacement character.
    same = [a["completion"].replace("\ufffd", "") == b["completion"].replace("\ufffd", "")
            for a, b in zip(before, after)]
    # The same flexible answer; two completions that both give none agree only when they are the same text (a
    # policy that never answers would otherwise agree with anything that never answers).
    agree = [a["flexible_answer"] == b["flexible_answer"] and (a["flexible_answer"] is not None or s)
             for a, b, s in zip(before, after, same)]
    right = [[r["flexible_correct"] > 0 for r in records] for records in (before, after)]
    n = len(before)
    acc_before, acc_after, p = sum(right[0]) / n, sum(right[1]) / n, mcnemar_exact(*flips(*right))
    # trained on a 4-bit base, exported from its 16-bit original (not the same weights), or a quantized GGUF
    if ref.get("quantized_base") or fmt.quantizes and dtype not in IDENTICAL_THRESHOLDS:
        need = threshold if threshold is not None else DEFAULT_AGREEMENT if ref.get("quantized_base") else \
            AGREEMENT_THRESHOLDS.get(dtype, DEFAULT_AGREEMENT)
        rule = (f"flexible answers agree on >= {need:.0%} and flexible accuracy not significantly lower (McNemar p "
                f">= {_SIGNIFICANT})" + (": the trained policy ran on a 4-bit base, the export on its 16-bit "
                                         "original" if ref.get("quantized_base") else ""))
        passed = sum(agree) / n >= need and not (acc_after < acc_before and p < _SIGNIFICANT)
    else:
        exact = dtype == "float32"  # a merged export in float32 (a GGUF's types are f32, f16, ...)
        need = 1.0 if exact else threshold if threshold is not None else IDENTICAL_THRESHOLDS.get(dtype, 1.0)
        rule = f">= {need:.0%} identical completions"
        passed = sum(same) / n >= need
        if weights is not None and exact:  # a 16-bit merge done elsewhere may round differently: reported only
            rule += " and every tensor equal to the trained policy's merge"
            passed = passed and not weights["differing"] and not weights["missing"]
    difference = next(({"question": a["question"], "trained": a["completion"], "export": b["completion"]}
                       for a, b, s in zip(before, after, same) if not s), None)
    files = _file_hashes(export) if export.is_dir() else {export.name: sha256_file(export)}
    beside = export if export.is_dir() else export.parent  # where verification.json goes
    return Verification(export=export.name, kind=fmt.name, dtype=dtype, questions=n, identical=sum(same),
                        agreement=sum(agree) / n, accuracy_trained=acc_before, accuracy_export=acc_after, mcnemar_p=p,
                        rule=rule, passed=passed, weights=weights, first_difference=difference, files=files,
                        run=os.path.relpath(run.path.resolve(), beside.resolve()), step=run.finished_step(),
                        model_digest=digest)


def _free_reference(reference: dict[str, Any]) -> None:
    """Drop the trained policy's models from ``reference`` (its answers stay) and return their GPU memory."""
    reference["model"] = reference["trained"] = None
    import gc

    import torch

    gc.collect()
    torch.cuda.empty_cache()  # a no-op where CUDA was never initialised (torch/cuda/memory.py)


def _check_numbers(questions: Any, threshold: Any) -> None:
    if isinstance(questions, bool) or not isinstance(questions, int) or questions < 1:
        raise ValueError(f"questions must be a whole number >= 1, got {questions!r}")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                  or not 0 <= threshold <= 1):
        raise ValueError(f"threshold must be a share in [0, 1], got {threshold!r}")


def _results(run: RunFolder) -> tuple[str, list[dict[str, str]]]:
    """The greedy before/after table of the run's ``report.md`` and the McNemar line under it, verbatim, and its rows
    (``comparison.csv``, written with it), when they are of the model exported; else a line saying why none is shown
    (naming the run folder by its name: a card is published) and no rows."""
    if not run.report.is_file() or not run.comparison.is_file():
        return "No before/after evaluation in the run folder (run `python -m grpo_kit eval` before exporting).", []
    if (stale := run.stale_results()) is not None:
        stale = stale.replace(str(run.path), run.path.name)  # a card is published: the folder by its name
        return f"No current before/after evaluation, so none is shown: {stale}.", []
    lines = run.report.read_text(encoding="utf-8").splitlines()
    start = lines.index("## Greedy") + 1 if "## Greedy" in lines else 0
    with run.comparison.open(encoding="utf-8", newline="") as rows:
        return "\n".join(itertools.takewhile(lambda line: not line.startswith("## "), lines[start:])).strip(), \
            list(csv.DictReader(rows))


def _licence(base: str, shown: str) -> str:
    if base.startswith("tiny:"):
        return "the kit's tiny policy, built locally from random weights (no upstream licence)"
    card = Path(base) / "README.md"
    found = re.search(r"^license:\s*(\S+)", card.read_text(encoding="utf-8"), re.MULTILINE) if card.is_file() else None
    return found.group(1) if found else f"unknown: not recorded here; read {shown}'s model card before sharing"


def _on_hub(name: Any) -> bool:
    """Whether ``name`` (a model or data set as a run recorded it) is a Hub repository, not a local path."""
    return isinstance(name, str) and is_repo_id(name) and not Path(name).expanduser().exists()


def model_card(run_dir: str | Path, verification: Verification | None = None) -> str:
    """A run's model card (``README.md``), a Hugging Face model card (``huggingface_hub.ModelCard``): training writes it
    into ``model/`` (no ``verification``), :func:`export` into every passed export.

    Its metadata: the base model (when it is a Hub repository), licence, tags and, for an export, the before/after
    results as ``model-index`` evaluation results (``huggingface_hub.EvalResult``: task, dataset, metric, value), which
    the Hub shows beside the model. Its text: base model and licence, task, rewards and weights, the training settings
    (the recipe's values, else TRL's defaults: :class:`grpo_kit.training.presets.Recipe`), steps and train questions,
    the algorithm as the run recorded it (:func:`grpo_kit.training.algorithms.algorithm_markdown`: the variant, its
    paper and ``loss_type``), for an export the run's greedy before/after table (verbatim from ``report.md``) and the
    verification, and the versions training ran with and the kit's. Nothing in it is of this machine: a local base
    model or task file is named by its folder's or file's name.

    TRL's ``create_model_card`` is not used: it links any base model to the Hub (a local folder too), names the
    method GRPO after DeepSeekMath whatever ``loss_type`` ran, and lists the versions of the machine writing the card
    rather than those training ran with.

    Raises:
        FileNotFoundError / ValueError: no readable ``train_settings.json`` in ``run_dir`` (the message says what to
            rerun).
    """
    from huggingface_hub import EvalResult, ModelCard, ModelCardData

    from grpo_kit.system.install import installed_version
    from grpo_kit.tasks.task_file import task_name
    from grpo_kit.training.algorithms import algorithm_markdown
    from grpo_kit.training.presets import Recipe

    run = RunFolder(run_dir, write=False)
    settings = run.read_settings(run.train_settings, "python -m grpo_kit train (or notebook 03)", ("identity",))
    identity = settings.get("identity", {})
    preset = identity.get("preset", {})
    recipe = Recipe(str(preset.get("name")), {k: v for k, v in preset.items() if k not in ("name", "lora_rank")})
    base = str(settings.get("base_model", identity.get("model", "unknown")))
    on_hub = _on_hub(base)
    shown = base if on_hub or base.startswith("tiny:") else Path(base).name  # a local folder by its name
    licence = _licence(base, shown)
    # a recipe's Hub data set (its task file is in the kit's cache)
    hub_data = preset.get("dataset_name") if _on_hub(preset.get("dataset_name")) else None
    task = hub_data or task_name(settings.get("task"))  # a task file by its task's name, never its path
    algorithm = settings.get("algorithm") if isinstance(settings.get("algorithm"), dict) else None
    named = f"{algorithm['name']} (loss_type={algorithm['fields']['loss_type']})" if algorithm else "GRPO"
    keys = ("learning_rate", "lr_scheduler_type", "optim", "num_generations", "per_device_train_batch_size",
            "gradient_accumulation_steps", "max_completion_length", "temperature", "generation_kwargs",
            "max_grad_norm", "seed")
    trained = ", ".join(f"{k}={getattr(recipe, k, None)}" for k in keys if getattr(recipe, k, None) is not None)
    lora = preset.get("lora_rank")
    steps = run.finished_step() or settings.get("max_steps")  # training writes its card before finished.json
    table, rows = _results(run) if verification is not None else ("", [])
    try:  # a damaged comparison.csv leaves the metadata without results, not the export without its card
        # this model's results only: the Hub shows model-index as the model's own, so the base model's stay in the
        # text's before/after table
        results = [EvalResult(task_type="text-generation", dataset_type=task, dataset_name=task,
                              dataset_config=preset.get("dataset_config") if hub_data else None,
                              dataset_split=(preset.get("dataset_test_split") if hub_data else None) or "test",
                              metric_type=re.sub(r"\W+", "_", row["metric"].lower()).strip("_"),
                              metric_name=row["metric"], metric_value=float(row["after"])) for row in rows]
    except (KeyError, TypeError, ValueError, AttributeError):
        results = []
    kind = verification.kind if verification is not None else "peft" if lora is not None else "merged"
    data = ModelCardData(base_model=base if on_hub else None, license=licence if re.fullmatch(r"[\w.-]+", licence)
                         else "other", library_name={"merged": "transformers", "peft": "peft"}.get(kind),
                         tags=["trl", "grpo", "grpo_kit", *([algorithm["name"]] if algorithm else []),
                               *(["gguf"] if kind == "gguf" else [])],
                         datasets=hub_data, model_name=run.path.name, eval_results=results or None)
    rewards = identity.get("rewards", {})
    versions = ", ".join(f"{k} {v}" for k, v in (settings.get("versions") or {}).items()) or "not recorded"
    lines = [f"# {run.path.name}: {shown} trained with {named} on {task}", "",
             f"- base model: `{shown}`{'' if on_hub else ' (not on the Hub)'} (licence: {licence})", f"- task: {task}",
             f"- rewards (weight): {', '.join(f'{k} ({v})' for k, v in rewards.items()) or 'not recorded'}",
             f"- trained with TRL's GRPOTrainer, recipe `{recipe.name}`, {counted(steps, 'step')} on "
             f"{settings.get('train_questions', 'an unrecorded number of')} train questions; {trained}",
             f"- LoRA rank {lora} (lora_alpha {recipe.lora_alpha})" if lora is not None else "- full fine-tuning", "",
             "## Algorithm", "", algorithm_markdown(algorithm) if algorithm else "Not recorded by this run.", ""]
    if verification is not None:
        lines += ["## Before and after training (from the run's report.md)", "", table, "",
                  "## Verification of this export", "", verification.summary(), ""]
    lines += [f"Made by grpo_kit {installed_version('grpo_kit') or '(run from a clone)'}; trained with {versions}.", ""]
    return str(ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines)))


def _merged_to(reference: dict[str, Any], folder: Path) -> Path:
    """Save the trained policy merged: safetensors, base dtype, tokenizer, generation config.

    A run trained through Unsloth is saved by Unsloth's own ``save_pretrained_merged(..., save_method=
    "merged_16bit")`` (unsloth/save.py): for a 4-bit run it merges the adapter into the 16-bit original the
    ``*-bnb-4bit`` base was made from, where peft's ``merge_and_unload`` would re-quantize into 4-bit weights
    (peft ``tuners/lora/bnb.py``) that no GGUF converter reads (:func:`grpo_kit.policy.loading.save_merged`).
    """
    model = reference["trained"] if reference["model"] is None else reference["model"]  # Unsloth merges its own
    named = model.config._name_or_path
    if (base := reference.get("base")) is not None:  # an Unsloth LoRA run's 16-bit base (:func:`merge_base`)
        _check_base_shape(base, model.config)
        # merge_and_overwrite_lora finds its base from the config's _name_or_path (a local folder first)
        model.config._name_or_path = str(base)
    try:
        return loading.save_merged(model, reference["tokenizer"], folder)
    finally:
        model.config._name_or_path = named


def _check_base_shape(base: Path, config: Any) -> None:
    """Refuse a ``--base`` whose architecture is not the trained policy's (Unsloth would merge by tensor name).

    Raises:
        ValueError: a field of ``base/config.json`` differs from the loaded model's config (both values named).
    """
    saved = json.loads((base / "config.json").read_text(encoding="utf-8"))
    keys = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
    differing = [f"{k} {saved.get(k)!r} != {getattr(config, k, None)!r}" for k in keys
                 if k in saved and saved.get(k) != getattr(config, k, saved.get(k))]
    if differing:
        raise ValueError(f"--base {base} is another architecture than the trained policy ({'; '.join(differing)}): "
                         "give the 16-bit original of the run's base")


def _in_run_files(path: Path) -> str | None:
    """The run folder's own files that ``path`` is or lies in (``"the run folder R"``, ``"the run folder R's own
    model"``: its ``model/``, whose every file ``finished.json`` fingerprints, ``checkpoints/``, ...), or ``None``: in
    no run folder, in its ``export/``, or a new folder of its own (:func:`grpo_kit.runs.folder.enclosing_run`)."""
    found = enclosing_run(path)
    if found is None or found[1] == "export" or not (found[0] / found[1]).exists():
        return None
    return f"the run folder {found[0]}" + (f"'s own {found[1]}" if found[1] else "")


def check_out(out: str | Path, kind: str) -> Path:
    """Refuse an export folder that would overwrite something that is not an export, before any work.

    ``out`` may be new, an empty folder, or a previous export of the same ``kind`` (which is replaced whole); so may
    ``<out>.refused``, where a refused export goes. It may not be, or lie inside, any run folder's own files
    (:func:`_in_run_files`); one that holds a run folder holds files that are not an export.

    Args:
        out: the export folder asked for.
        kind: ``"merged"`` or ``"gguf"``.

    Returns:
        ``out`` as a path.

    Raises:
        ValueError: any other ``out``; the message names the path and what to choose instead.
    """
    out = Path(out)
    fix = "choose a new or empty folder for --out (or a previous export of this format, which is replaced)"
    if (where := _in_run_files(out)) is not None:
        raise ValueError(f"--out {out} would write into {where}: {fix}")
    for path, passed in ((out, True), (out.with_name(out.name + ".refused"), False)):
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            what = "a link" if path.is_symlink() else "a file"  # replacing a link's target would reach elsewhere
            raise ValueError(f"--out: {path} is {what}, and an export is a folder of its own: {fix}")
        record = json_or_none(path / "verification.json")  # an export of this kind the kit wrote, passed or not
        if path.is_dir() and any(path.iterdir()) and not (isinstance(record, dict) and record.get("kind") == kind
                                                          and bool(record.get("passed")) == passed):
            held = ", ".join(sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir())[:5])
            raise ValueError(f"--out: {path} holds files that are not a {kind} export ({held}), which exporting "
                             f"would delete: {fix}")
    return out


def _export_lock(out: Path) -> Any:
    """The export folder's write lock (``.<name>.lock`` beside it): two exports into one folder cannot both run."""
    return hold_lock(out.with_name(f".{out.name}.lock"), out.with_name(f".{out.name}.lock-holder.json"), out,
                     "export")


class ExportFormat:
    """One export format, everything it does in one place: what it takes and checks before any work
    (:meth:`check`, :meth:`check_tools`), the disk it needs (:meth:`needed`), how it is built from the trained policy
    (:meth:`build`), and how a built one is found and read back to be verified against the trained policy
    (:meth:`found`, :meth:`open`). Its folder under ``<run>/export/`` is its name, and a type's: ``gguf-q8_0``."""

    name = ""
    #: It takes a type to quantize to (``--quant``); a type outside :data:`IDENTICAL_THRESHOLDS` is judged by
    #: agreeing answers rather than identical completions.
    quantizes = False
    #: Of several formats exported together, the one ``--push-to-hub`` uploads.
    for_the_hub = False

    def check(self, quant: str | None) -> str | None:
        """The type to build (``quant`` checked).

        Raises:
            ValueError: a type this format does not take.
        """
        if quant is not None:
            raise ValueError(f"--quant {quant!r} sets a GGUF's type: add --format gguf (a {self.name} export keeps the "
                             "base model's dtype)")
        return None

    def check_tools(self, verifying: bool = False) -> None:
        """Refuse, before any work, when what building (or, ``verifying``, reading back) needs is not installed."""

    def needed(self, parameters: int, quant: str | None, float32: bool, tokenizer: int = 0) -> int:
        """Bytes of disk the build needs: the merged model (4 a parameter in float32, else 2) and its ``tokenizer``
        files (bytes: :func:`_tokenizer_bytes`)."""
        return parameters * (4 if float32 else 2) + tokenizer

    def build(self, reference: dict[str, Any], folder: Path, name: str, quant: str | None) -> None:
        """Write the export into ``folder`` (``name``: the run's, for a file's name)."""
        with phase_bar("merging and saving", None):
            _merged_to(reference, folder)

    def found(self, export: Path) -> Path | None:
        """What of ``export`` this format reads (``None``: not this format's)."""
        return export if (export / "config.json").is_file() else None

    def open(self, found: Path, reference: dict[str, Any]) -> tuple[Any, str, dict[str, Any] | None]:
        """``(a generation backend on it, its dtype, its weights against the trained policy's merge or None)``;
        the trained policy's models are freed first (an 8B reference and its export do not both fit on one card)."""
        saved = _saved_dtype(found)
        weights = _compare_weights(found, reference["model"]) \
            if reference["model"] is not None and saved == reference["dtype"] else None
        _free_reference(reference)
        model, tokenizer = loading.load_policy(found, **_generation_placement(saved))
        return TransformersBackend(model, tokenizer, name="the export"), saved or _dtype_name(model), weights


class Gguf(ExportFormat):
    """llama.cpp's format: the merged model through llama.cpp's converter, then its quantizer; read back with
    llama-cpp-python."""

    name = "gguf"
    quantizes = True

    def check(self, quant: str | None) -> str | None:
        quant = "q8_0" if quant is None else str(quant).lower()  # Unsloth's notebooks' first choice
        if quant not in (types := llama_cpp.CONVERTER_TYPES + llama_cpp.QUANT_TYPES):
            raise ValueError(f"quant must be one of {', '.join(types)}, got {quant!r}")
        return quant

    def check_tools(self, verifying: bool = False) -> None:
        if not verifying:
            llama_cpp._converter()
        llama_cpp.import_llama_cpp()

    def needed(self, parameters: int, quant: str | None, float32: bool, tokenizer: int = 0) -> int:
        """What :meth:`build` has on disk at once: the merged model and the converter's GGUF of ``quant`` (f32, f16,
        bf16, q8_0: :data:`~grpo_kit.policy.llama_cpp.CONVERTER_TYPES`), or for a type only the quantizer writes, the
        converter's float32 or 16-bit GGUF in between and the quantizer's, at most q8_0's size
        (:data:`~grpo_kit.policy.llama_cpp.GGUF_BYTES_PER_WEIGHT`); each GGUF carries the vocabulary, counted as the
        ``tokenizer`` files' bytes."""
        size = llama_cpp.GGUF_BYTES_PER_WEIGHT
        merged = super().needed(parameters, quant, float32, tokenizer)
        if quant in llama_cpp.CONVERTER_TYPES:
            return merged + math.ceil(parameters * size[quant]) + tokenizer
        between = size["f32" if parameters <= F32_GGUF_LIMIT else "f16"]
        return merged + math.ceil(parameters * (between + size["q8_0"])) + 2 * tokenizer

    def build(self, reference: dict[str, Any], folder: Path, name: str, quant: str | None) -> None:
        super().build(reference, folder / "merged", name, quant)
        gguf = folder / f"{name}.gguf"
        # a type the converter writes directly; else through float32 only for a small model (an 8B model's float32
        # GGUF is 32 GB of disk), then the quantizer
        between = quant if quant in llama_cpp.CONVERTER_TYPES else "f32" if reference["parameters"] <= F32_GGUF_LIMIT \
            else "bf16" if reference["dtype"] in (None, "bfloat16") else "f16"
        with phase_bar(f"converting to GGUF {between} (llama.cpp's convert_hf_to_gguf.py)", None):
            full = llama_cpp.convert_to_gguf(
                folder / "merged", gguf if between == quant else folder / f"full-{between}.gguf.tmp", between)
        if full != gguf:
            with phase_bar(f"quantizing to {quant} (llama.cpp's llama_model_quantize)", None):
                llama_cpp.quantize_gguf(full, gguf, quant)
            full.unlink()
        shutil.rmtree(folder / "merged")

    def found(self, export: Path) -> Path | None:
        if export.is_file() and export.suffix == ".gguf":
            return export
        files = sorted(export.glob("*.gguf")) if export.is_dir() else []
        return files[0] if len(files) == 1 else None

    def open(self, found: Path, reference: dict[str, Any]) -> tuple[Any, str, dict[str, Any] | None]:
        tokenizer = reference["tokenizer"]
        _free_reference(reference)
        backend = llama_cpp.LlamaCppBackend(found, lambda prompt: tokenizer.apply_chat_template(
            prompt, add_generation_prompt=True, tokenize=False))
        # the type as the file's name says it (model-<type>.gguf)
        match = re.search(r"-(f32|f16|bf16|q\d\w*)\.gguf$", found.name, re.IGNORECASE)
        return backend, match.group(1).lower() if match else "unknown", None


class Merged(ExportFormat):
    """The base with the adapter folded in, in the base's dtype: safetensors, tokenizer, generation config; read back
    with transformers."""

    name = "merged"
    for_the_hub = True


#: The export formats by name, in the order the command line lists them (the first is the default).
FORMATS: dict[str, ExportFormat] = {f.name: f for f in (Merged(), Gguf())}


def check_formats(formats: list[str] | tuple[str, ...], quant: str | None = None) -> dict[str, str | None]:
    """Check a request for ``formats`` exported together, before any work: their names, ``quant`` (it goes to the
    formats that quantize; with none of them it is refused) and the tools each needs (:meth:`ExportFormat.check_tools`).

    Returns:
        Each format's type to build (:meth:`ExportFormat.check`: ``None`` where it keeps the base model's dtype).

    Raises:
        ValueError: an unknown format, or a ``quant`` no format takes; ImportError / FileNotFoundError: a format's
            tools are missing. Each message is one line saying what to change.
    """
    if unknown := [f for f in formats if f not in FORMATS]:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {unknown[0]!r}")
    typed = any(FORMATS[f].quantizes for f in formats)
    checked = {f: FORMATS[f].check(quant if FORMATS[f].quantizes or not typed else None) for f in formats}
    for format in formats:  # a missing llama.cpp is said before a merged export is built
        FORMATS[format].check_tools()
    return checked


def export(run_dir: str | Path, format: str = "merged", quant: str | None = None, out: str | Path | None = None,
           questions: int = 32, threshold: float | None = None, base: str | Path | None = None,
           trust_remote_code: bool = False) -> tuple[Path, Verification]:
    """Export a run's trained policy and verify it (:func:`verify_export`) before calling it done. (Uploading it:
    :func:`push_to_hub`, or :func:`grpo_kit.runs.pipeline.export_steps`, which checks the upload before exporting.)

    Args:
        run_dir: the run folder (``model/``: a LoRA adapter or a full model; ``train_settings.json``).
        format: ``"merged"`` (base with the adapter folded in, the base's dtype, safetensors, tokenizer,
            generation config) or ``"gguf"`` (llama.cpp's converter on the merged model, then its quantizer).
        quant: GGUF type, one of :data:`grpo_kit.policy.llama_cpp.CONVERTER_TYPES` or ``QUANT_TYPES``
            (default ``q8_0``, Unsloth's notebooks' first choice); merged exports take none.
        out: the export folder (default ``<run_dir>/export/merged`` or ``<run_dir>/export/gguf-<quant>``).
        questions: held-out questions to verify on.
        threshold: replaces the type's threshold (see :func:`verify_export`).
        base: a local folder holding the 16-bit base an Unsloth LoRA run merges into (:func:`merge_base`); without
            it Unsloth downloads that base from the Hub, which is checked before any model loads.
        trust_remote_code: the run's task file may import and run Python of its own
            (:func:`grpo_kit.tasks.task_file.check_task_code`).

    Returns:
        ``(the export folder, its Verification)``; the folder holds the model, ``README.md`` and
        ``verification.json``.

    Raises:
        ValueError: a bad format, quant, question count or ``base``; the 16-bit base needed from the Hub with
            ``HF_HUB_OFFLINE`` set (all before any model loads).
        ConnectionError: the Hub does not answer for that base (before any model loads).
        ExportRefused: the export failed its check (kept in ``<out>.refused``).
        FileNotFoundError: no run folder or trained model; llama.cpp not built (GGUF).
        grpo_kit.runs.folder.RunFolderBusy: another process is writing the run folder (training it).
    """
    quant, fmt = check_formats([format], quant)[format], FORMATS[format]
    _check_numbers(questions, threshold)
    run, settings = _run(run_dir)
    merge_from = merge_base(run.path, base)
    out = check_out(out if out is not None else run.path / "export" / "-".join(filter(None, (format, quant))), format)
    # One writer per export folder, and no training rewrites model/ while it is exported.
    with _export_lock(out), run.lock("export", reading=True):
        check_out(out, format)  # again, now that no other export can be writing it
        run.check_model()
        with loading.saved_whole(out, "verification.json") as folder:  # takes the place of out only when it passed
            reference = _reference(run, settings, questions, trust_remote_code)
            reference["base"] = merge_from
            _check_disk(folder, fmt.needed(reference["parameters"], quant, reference["dtype"] == "float32",
                                           _tokenizer_bytes(run.model)), format)
            fmt.build(reference, folder, f"{run.path.name}-{quant}", quant)
            verification = verify_export(folder, run.path, questions, reference=reference, threshold=threshold,
                                         trust_remote_code=trust_remote_code)
            target = out if verification.passed else out.with_name(out.name + ".refused")
            verification.export = target.name
            follow_umask(folder)  # safetensors writes its weights 0600
            if verification.passed:
                write_text(folder / "README.md", model_card(run.path, verification))
            write_json(folder / "verification.json", asdict(verification))
            if not verification.passed:  # kept for inspection, in place of an earlier refused export
                with loading.saved_whole(target, "verification.json") as kept:
                    for path in folder.iterdir():
                        path.rename(kept / path.name)
                raise ExportRefused(f"refused: {verification.summary()}\n{verification.side_by_side()}\n(the export "
                                    f"is kept in {target} for inspection)", verification)
    return out, verification


def push_to_hub(export_dir: str | Path, repo_id: str, private: bool = True, token: str | None = None) -> str:
    """Upload a verified export folder to the Hugging Face Hub: create the repository (private unless asked),
    then upload the folder. Returns the repository's URL.

    Raises:
        ValueError: a malformed ``repo_id``; the folder has no passed ``verification.json``, or a file changed
            since it was verified (its SHA-256 differs), or the run it was verified against was trained further.
        PermissionError: no token (``HF_TOKEN`` or ``hf auth login``), before anything is uploaded.
        ConnectionError: ``HF_HUB_OFFLINE`` is set, or the Hub cannot be reached (or refused the token), before
            anything is uploaded.
    """
    token = upload_token(repo_id, token)
    folder = Path(export_dir)
    verification = json_or_none(folder / "verification.json")
    if not isinstance(verification, dict):
        raise ValueError(f"{folder} was never verified (no readable verification.json): export it with `python -m "
                         "grpo_kit export`, or check it with `python -m grpo_kit verify-export` first")
    if not verification.get("passed"):
        raise ValueError(f"{folder} failed its verification ({verification.get('rule')}): not uploading it")
    if _file_hashes(folder) != verification.get("files"):
        raise ValueError(f"{folder} changed since it was verified (a file's SHA-256 differs): verify it again")
    source = folder / verification["run"] if verification.get("run") else None  # relative to the export
    if source and verification.get("model_digest") and (source / "finished.json").is_file():
        # a model/ edited since raises, naming the file
        if RunFolder(source, write=False).check_model() != verification["model_digest"]:
            raise ValueError(f"{source}/model was trained further or replaced since {folder} was verified against "
                             "it: export it again")
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    try:
        api.whoami()
    except Exception as e:  # DNS, no network, refused token: huggingface_hub raises several types
        raise ConnectionError(f"cannot reach the Hugging Face Hub with this token ({type(e).__name__}: {e}); "
                              "nothing was uploaded") from None
    url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
    api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="model",
                      commit_message="grpo_kit export (verified)")
    log.info(f"uploaded {folder} to {url}")
    return str(url)


def check_record(export: str | Path) -> Path:
    """Where ``verify-export --record`` would write ``verification.json``, refused before any work when that
    overwrites what is not the kit's or lies in a run folder's own files (as :func:`check_out` for ``export --out``).

    Args:
        export: the checked export: a folder, or a ``.gguf`` file (its folder receives the record).

    Returns:
        The ``verification.json`` path.

    Raises:
        ValueError: the folder is, or lies inside, a run folder's own files (:func:`_in_run_files`), or it holds a
            ``verification.json`` the kit did not write. The message says what to do instead.
    """
    folder = Path(export) if Path(export).is_dir() else Path(export).parent
    record = folder / "verification.json"
    if (where := _in_run_files(folder)) is not None:
        raise ValueError(f"--record would write {record} into {where}, which holds only what training wrote "
                         f"(eval and export would then refuse the run): check {export} without --record, or export "
                         "the run with python -m grpo_kit export, which verifies and records")
    if record.exists() and not (isinstance(found := json_or_none(record), dict) and "kind" in found):
        raise ValueError(f"--record would overwrite {record}, which the kit did not write: move it aside, or "
                         "check without --record")
    return record


def verification_record(export: str | Path, verification: Verification) -> Path:
    """Write ``verification.json`` into an export folder checked by :func:`verify_export` (the CLI's
    ``verify-export`` does, so a verified export made elsewhere can be uploaded); returns its path.

    Raises:
        ValueError: the place is refused (:func:`check_record`).
    """
    return write_json(check_record(export), asdict(verification))
