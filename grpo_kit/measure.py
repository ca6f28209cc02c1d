"""Measuring before and after training on the same questions: notebooks 02 and 04, ``python -m grpo_kit eval``
and the demo.

:func:`measure_before` evaluates the starting policy on a seeded slice of the task's test split and,
only once that finished, records what it measured in ``eval_settings.json``: the slice, the
decoding, the evaluation route, the task, the system prompt, and the base model with a
fingerprint of its weights. :func:`measure_after` evaluates the trained model of the same run
folder through the same route, and refuses to compare when the model was trained from another
base, on another task or with another prompt than the baseline measured (the message names both),
so a before/after table never pairs what is not paired. The comparison itself pairs questions by
id (:func:`grpo_kit.evaluation.compare`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_kit.data import system_prompt_of
from grpo_kit.evaluation import EvalResult, compare, compare_markdown, evaluate, intervals_markdown, paired_test
from grpo_kit.generation import Sampling, base_weights_digest
from grpo_kit.presets import PRESETS, Preset, get_preset
from grpo_kit.runs import RunFolder
from grpo_kit.tasks import Task, get_task

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["EvalPlan", "Measured", "alarms_markdown", "check_pairing", "measure_after", "measure_before",
           "plan_from_settings", "report_markdown"]


@dataclass(frozen=True)
class EvalPlan:
    """What the evaluations before and after share (notebook 02's parameters).

    Attributes:
        task: the task (its test split, rules and metrics).
        preset: the recipe whose model and evaluation route are used.
        model: a Hub id or path instead of the preset's model.
        slice: ``{"n": int}`` or ``{"fraction": float}`` of the test split (:func:`grpo_kit.data.take_slice`).
        seed: the slice's seed (also the seed of the bootstrap intervals and of sampled completions).
        max_new_tokens: each completion's budget, in tokens.
        samples: sampled completions per question for avg@k / pass@k / maj@k (0: greedy only).
        temperature: the temperature of those samples.
        batch_size: prompts per ``generate`` call (transformers routes).
        backend: ``"vllm"`` / ``"transformers"`` for plain-transformers presets (:func:`grpo_kit.routes.eval_route`).
        warm_start_steps: the tiny policy's warm-start steps (presets without a model).
        cache_dir: where the tiny policy is cached.
    """

    task: Task
    preset: Preset
    model: str | None = None
    slice: dict[str, Any] = field(default_factory=lambda: {"fraction": 0.5})
    seed: int = 0
    max_new_tokens: int = 256
    samples: int = 0
    temperature: float = 0.7
    batch_size: int = 32
    backend: str | None = None
    warm_start_steps: int | None = None
    cache_dir: str = ".cache/grpo_kit"

    def __post_init__(self) -> None:
        if set(self.slice) - {"n", "fraction"} or len(self.slice) != 1:
            raise ValueError(f"slice must be {{'n': int}} or {{'fraction': float}}, got {self.slice}")
        for name in ("max_new_tokens", "batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
        if not isinstance(self.samples, int) or self.samples < 0:
            raise ValueError(f"samples must be 0 (greedy only) or a whole number above it, got {self.samples!r}")
        if self.samples and not (isinstance(self.temperature, (int, float)) and self.temperature > 0):
            raise ValueError(f"the temperature of sampled completions must be above 0, got {self.temperature!r}")

    def questions(self) -> Any:
        """The evaluation slice (a ``datasets.Dataset``).

        Raises:
            ValueError: the slice is out of range for the test split.
        """
        from grpo_kit.data import take_slice

        return take_slice(self.task.load("test"), seed=self.seed, **self.slice)

    def greedy(self) -> Sampling:
        return Sampling(temperature=0.0, max_new_tokens=self.max_new_tokens)

    def sampled(self) -> Sampling:
        return Sampling(temperature=self.temperature, n=self.samples, max_new_tokens=self.max_new_tokens,
                        seed=self.seed)


def _overrides(preset: Preset) -> dict[str, Any]:
    """The fields of ``preset`` that differ from the named preset it came from (all of them for a custom one)."""
    named = PRESETS.get(preset.name)
    fields = dataclasses.asdict(preset)
    if named is None:
        return {k: v for k, v in fields.items() if k != "name"}
    return {k: v for k, v in fields.items() if v != getattr(named, k)}


def plan_from_settings(settings: dict[str, Any], batch_size: int | None = None) -> EvalPlan:
    """Rebuild notebook 02's :class:`EvalPlan` from its ``eval_settings.json``."""
    preset = get_preset(settings["preset"], **settings.get("preset_overrides", {}))
    return EvalPlan(task=get_task(settings["task"]), preset=preset, model=settings.get("model_override"),
                    slice=settings["slice"], seed=settings["seed"], max_new_tokens=settings["max_new_tokens"],
                    samples=settings["samples"], temperature=settings["temperature"],
                    batch_size=batch_size or settings.get("batch_size", 32), backend=settings.get("backend"),
                    warm_start_steps=settings.get("warm_start_steps"), cache_dir=settings.get("cache_dir",
                                                                                            ".cache/grpo_kit"))


def _base_fingerprint(backend: Any) -> str | None:
    """The weights' fingerprint where the backend holds the model in this process (transformers routes)."""
    model = getattr(backend, "model", None)
    return base_weights_digest(model) if model is not None and hasattr(model, "named_parameters") \
        else None


def measure_before(plan: EvalPlan, run: RunFolder, backend: Any = None, base_name: str | None = None,
                   fingerprint: str | None = None) -> dict[str, EvalResult]:
    """Evaluate the starting policy (notebook 02) and record what was measured.

    Args:
        plan: what to evaluate and how.
        run: the run folder; gets ``baseline.jsonl`` (greedy), ``baseline_sampled.jsonl`` (with
            ``samples``), the generation cache and, once both finished, ``eval_settings.json``.
        backend: a ready generation backend (the demo's); default
            :func:`grpo_kit.routes.load_eval_backend` for the plan's preset.
        base_name: the policy's name as run folders record it (default :func:`grpo_kit.routes.policy_name`).
        fingerprint: its weights' fingerprint (default: computed where the backend holds the model).

    Returns:
        ``{"greedy": EvalResult, "sampled": EvalResult}`` (``"sampled"`` only with ``samples``).

    Raises:
        ValueError: bad settings, before any model loads.
    """
    from grpo_kit.routes import eval_route, load_eval_backend, policy_name

    questions = plan.questions()
    route = getattr(backend, "route", None) or eval_route(plan.preset, plan.backend)
    if backend is None:
        backend = load_eval_backend(plan.preset, plan.model, batch_size=plan.batch_size,
                                    warm_start_steps=plan.warm_start_steps, task=plan.task, backend=plan.backend,
                                    cache_dir=plan.cache_dir)
    results = {"greedy": evaluate(backend, questions, plan.greedy(), cache=run.generations, seed=plan.seed,
                                  task=plan.task)}
    results["greedy"].to_jsonl(run.baseline)
    if plan.samples > 0:
        results["sampled"] = evaluate(backend, questions, plan.sampled(), cache=run.generations, seed=plan.seed,
                                      task=plan.task)
        results["sampled"].to_jsonl(run.baseline_sampled)
    from grpo_kit.warm_start import WarmStart

    warm = WarmStart() if plan.warm_start_steps is None else WarmStart(steps=plan.warm_start_steps)
    # Written last: a baseline that died on the way leaves no settings for notebook 04 to pair with.
    run.write_json(run.eval_settings, {
        "task": plan.task.name, "slice": plan.slice, "seed": plan.seed, "max_new_tokens": plan.max_new_tokens,
        "samples": plan.samples, "temperature": plan.temperature, "batch_size": plan.batch_size,
        "preset": plan.preset.name, "preset_overrides": _overrides(plan.preset), "model_override": plan.model,
        "backend": plan.backend, "route": route, "warm_start_steps": plan.warm_start_steps,
        "cache_dir": plan.cache_dir,
        "base_model": base_name or policy_name(plan.preset, plan.model, plan.task, plan.cache_dir, warm),
        "base_fingerprint": fingerprint or _base_fingerprint(backend),
        "system_prompt": system_prompt_of(questions), "questions": len(questions),
    })
    return results


def check_pairing(evaluated: dict[str, Any], trained: dict[str, Any], folder: str | Path) -> None:
    """Refuse a trained model whose base model, task or prompt differs from the baseline's.

    Args:
        evaluated: ``eval_settings.json`` (notebook 02).
        trained: ``train_settings.json`` (notebook 03 / ``python -m grpo_kit train``).
        folder: the run folder (for the message).

    Raises:
        ValueError: a difference; the message names both values of each.
    """
    differences = []
    for key, label in (("base_model", "base model"), ("task", "task"), ("system_prompt", "system prompt")):
        if evaluated.get(key) != trained.get(key):
            differences.append(f"{label}: baseline {evaluated.get(key)!r}, trained {trained.get(key)!r}")
    a, b = evaluated.get("base_fingerprint"), trained.get("base_fingerprint")
    if a is not None and b is not None and a != b:
        differences.append(f"base weights: baseline {a}, trained from {b}")
    if differences:
        raise ValueError(f"the model in {folder} was not trained from what the baseline measured, so a before/after "
                         "table would pair different things:\n  " + "\n  ".join(differences) +
                         "\nRe-run the baseline (notebook 02 / eval --before) for this model, or train from the "
                         "baseline's model, task and prompt.")


@dataclass
class Measured:
    """The evaluation after training and its comparison with the baseline (notebook 04)."""

    plan: EvalPlan
    before: EvalResult
    after: EvalResult
    table: pd.DataFrame
    before_sampled: EvalResult | None
    after_sampled: EvalResult | None
    alarms: list[dict[str, Any]]


def measure_after(run: RunFolder, batch_size: int | None = None, backend: Any = None) -> Measured:
    """Evaluate the run folder's trained model on the baseline's questions, route and decoding, and compare.

    Args:
        run: a run folder holding the baseline (``eval_settings.json``, ``baseline.jsonl``) and the
            trained model (``model/``, ``train_settings.json``).
        batch_size: prompts per ``generate`` call (default the baseline's).
        backend: a ready backend over the trained model (the demo's); default
            :func:`grpo_kit.routes.load_eval_backend` with ``trained=run.model`` through the baseline's route.

    Returns:
        :class:`Measured`; ``trained.jsonl`` (and ``trained_sampled.jsonl``), ``comparison.csv`` and
        ``before_after.png`` are written.

    Raises:
        FileNotFoundError: a file of an earlier step is missing (the message names the step).
        ValueError: the trained model's base, task or prompt differs from the baseline's
            (:func:`check_pairing`); the route changed since the baseline (e.g. vLLM no longer installed).
    """
    evaluated = run.read_json(run.eval_settings, written_by="02_baseline_eval (or python -m grpo_kit eval --before)")
    trained = run.read_json(run.train_settings, written_by="03_train_grpo (or python -m grpo_kit train)")
    check_pairing(evaluated, trained, run.path)
    plan = plan_from_settings(evaluated, batch_size)
    before = EvalResult.from_jsonl(run.require(run.baseline, written_by="02_baseline_eval"))
    if backend is None:
        from grpo_kit.routes import load_eval_backend

        backend = load_eval_backend(plan.preset, plan.model, trained=run.require(run.model, "03_train_grpo"),
                                    batch_size=plan.batch_size, task=plan.task, backend=plan.backend,
                                    cache_dir=plan.cache_dir)
    route = getattr(backend, "route", evaluated["route"])
    if route != evaluated["route"]:
        raise ValueError(f"the baseline was generated through {evaluated['route']!r} and the trained model would go "
                         f"through {route!r}: evaluate both through one route (install what the baseline used, or "
                         "re-run the baseline)")
    questions = plan.questions()
    after = evaluate(backend, questions, plan.greedy(), cache=run.generations, seed=plan.seed, task=plan.task)
    after.to_jsonl(run.trained)
    before_sampled = after_sampled = None
    if plan.samples > 0:
        after_sampled = evaluate(backend, questions, plan.sampled(), cache=run.generations, seed=plan.seed,
                                 task=plan.task)
        after_sampled.to_jsonl(run.trained_sampled)
        before_sampled = EvalResult.from_jsonl(run.require(run.baseline_sampled, "02_baseline_eval"))
    table = compare(before, after, seed=plan.seed)
    table.to_csv(run.comparison, index=False)
    import matplotlib.pyplot as plt

    from grpo_kit.plots import plot_before_after

    plt.close(plot_before_after(table, run.before_after, title=f"before vs after GRPO ({plan.task.name}, "
                                                               f"{run.path.name})"))
    return Measured(plan=plan, before=before, after=after, table=table, before_sampled=before_sampled,
                    after_sampled=after_sampled, alarms=run.read_alarms())


def alarms_markdown(alarms: list[dict[str, Any]]) -> str:
    """The alarms raised while training, one bullet each (``"None raised."`` when there were none)."""
    if not alarms:
        return "None raised."
    lines = []
    for a in alarms:
        if a.get("kind") == "reward_hacking":
            lines.append(f"- **Reward hacking** at step {a['step']}: training reward {a['reward_before']:.3f} -> "
                         f"{a['reward_after']:.3f} while held-out {a['rule']} accuracy fell "
                         f"{a['accuracy_before']:.3f} -> {a['accuracy_after']:.3f} ({a['right_to_wrong']} "
                         f"right->wrong, {a['wrong_to_right']} wrong->right, McNemar p = {a['mcnemar_p']:.2g})")
        else:
            lines.append(f"- **Stale vLLM weights** at step {a['step']}: mean log-probability gap "
                         f"{a['mean_logp_gap']:.3f} nats per token (threshold {a['threshold']:g})")
    return "\n".join(lines)


def report_markdown(measured: Measured, title: str, notes: str = "", settings: dict[str, Any] | None = None,
                    wall: dict[str, float] | None = None, versions: dict[str, str] | None = None) -> str:
    """The before/after report: the greedy table, the headline test, sampled metrics, diagnostics, alarms.

    Args:
        measured: :func:`measure_after`'s result.
        title: the first heading.
        notes: a paragraph under "What this shows" (the demo's caveats).
        settings, wall, versions: extra sections, as ``name: value`` bullets.
    """
    import pandas as pd

    table, hard = measured.table, measured.table.attrs
    strict = paired_test(measured.before, measured.after, "strict_format_reward_func") \
        if "strict_format_reward_func" in measured.before.records[0] else None
    headline = {"correctness_reward_func": "Hard correctness", "strict_correct": "Strict accuracy"}[hard["metric"]]
    lines = [f"# {title}", "",
             f"{measured.plan.task.name}, before and after GRPO, on the same {len(measured.before.correct())} "
             "questions (paired by question id). Values with 95% bootstrap intervals over questions; deltas with "
             "paired intervals; exact McNemar tests on the flips.", "", "## Greedy", "", compare_markdown(table), "",
             f"{headline}: {hard['wrong_to_right']} wrong->right, {hard['right_to_wrong']} right->wrong, exact "
             f"McNemar p = {hard['mcnemar_p']:.3g}."]
    if strict is not None:
        lines[-1] += (f" Strict format: {strict['wrong_to_right']} gained, {strict['right_to_wrong']} lost, "
                      f"p = {strict['mcnemar_p']:.3g}.")
    gain = table.attrs.get("format_only_gain", math.nan)
    lines[-1] += f" Part of the strict-accuracy gain that flexible accuracy does not show (format only): {gain:+.3f}."
    lines.append("")
    if measured.before_sampled is not None and measured.after_sampled is not None:
        lines += [f"## Sampled ({measured.plan.samples} per question, temperature {measured.plan.temperature})", "",
                  intervals_markdown({"before": measured.before_sampled.sampled(),
                                      "after": measured.after_sampled.sampled()}), ""]
    diag = pd.DataFrame({"before": measured.before.diagnostics(), "after": measured.after.diagnostics()})
    lines += ["## Diagnostics (greedy completions)", "", diag.to_markdown(floatfmt=".3f"), "",
              "## Alarms during training", "", alarms_markdown(measured.alarms), ""]
    if notes:
        lines += ["## What this shows", "", notes, ""]
    for heading, values, fmt in (("Settings", settings, "{}"), ("Wall times (s)", wall, "{:.1f}"),
                                 ("Versions", versions, "{}")):
        if values:
            lines += [f"## {heading}", "", *[f"- {k}: {fmt.format(v)}" for k, v in values.items()], ""]
    return "\n".join(lines)
