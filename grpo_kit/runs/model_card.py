"""A run's model card (``README.md``), a Hugging Face model card: training writes one into ``model/``
(:func:`grpo_kit.runs.train.train`), :func:`grpo_kit.runs.export.export` one into every export that passed its check
(:func:`model_card`)."""

from __future__ import annotations

import csv
import itertools
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_kit.runs.folder import RunFolder
from grpo_kit.system.hub import is_repo_id
from grpo_kit.system.logs import counted

if TYPE_CHECKING:
    from grpo_kit.runs.verification import Verification

__all__ = ["model_card"]

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
    into ``model/`` (no ``verification``), :func:`grpo_kit.runs.export.export` into every passed export.

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
    from huggingface_hub import ModelCard, ModelCardData

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
    results = _eval_results(rows, task, preset if hub_data else {})
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


def _eval_results(rows: list[dict[str, str]], task: str, hub_preset: dict[str, Any]) -> list[Any]:
    """The exported model's results (``comparison.csv``'s ``rows``, their ``after`` column) as the card's
    ``model-index`` entries (``huggingface_hub.EvalResult``), on ``task``; ``hub_preset``: the recipe's settings when
    its data set is a Hub repository (its config and test split are named), else empty. Only this model's: the Hub
    shows model-index as the model's own, so the base model's stay in the text's before/after table. A damaged
    ``comparison.csv`` leaves the card without results (``[]``), not the export without its card."""
    from huggingface_hub import EvalResult

    try:
        return [EvalResult(task_type="text-generation", dataset_type=task, dataset_name=task,
                           dataset_config=hub_preset.get("dataset_config"),
                           dataset_split=hub_preset.get("dataset_test_split") or "test",
                           metric_type=re.sub(r"\W+", "_", row["metric"].lower()).strip("_"),
                           metric_name=row["metric"], metric_value=float(row["after"])) for row in rows]
    except (KeyError, TypeError, ValueError, AttributeError):
        return []
