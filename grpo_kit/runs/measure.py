"""Measuring before and after training on the same questions: notebooks 02 and 04, ``python -m grpo_kit eval``
and the demo.

:func:`measure_before` evaluates the starting policy on a seeded slice of the task's test split and,
only once that finished, records what it measured in ``eval_settings.json``: the slice, the
decoding, the evaluation route, the task, the system prompt, and the base model with a
fingerprint of its weights. :func:`measure_after` evaluates the trained model of the same run
folder through the same route, and refuses to compare when the model was trained from another
base, on another task or with another prompt than the baseline measured (the message names both),
so a before/after table never pairs what is not paired. The comparison itself pairs questions by
id (:func:`grpo_kit.evaluation.compare.compare`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_kit.evaluation.compare import compare
from grpo_kit.evaluation.report import BeforeAfter, report_markdown
from grpo_kit.evaluation.scoring import EvalResult, evaluate, with_rewards
from grpo_kit.policy.devices import unsloth_problem
from grpo_kit.policy.generation import Sampling, base_weights_digest
from grpo_kit.policy.source import PolicySource
from grpo_kit.policy.tiny import DEFAULT_CACHE_DIR, TinyPolicySpec
from grpo_kit.policy.warm_start import WarmStart
from grpo_kit.runs.folder import BASELINE_STEP, TRAIN_STEP, RunFolder
from grpo_kit.system.files import write_json, write_text
from grpo_kit.system.logs import counted
from grpo_kit.tasks import Task, get_task
from grpo_kit.tasks.data import system_prompt_of, take_slice
from grpo_kit.training.algorithms import algorithm_markdown
from grpo_kit.training.presets import Recipe, get_preset

log = logging.getLogger(__name__)

__all__ = ["EVAL_FRACTION", "EvalPlan", "Measured", "baseline_differences", "check_pairing", "evaluated_with",
           "measure_after", "measure_before", "plan_from_settings", "run_rewards"]


#: The share of the test split a baseline measures unless told otherwise: the blog post's half.
EVAL_FRACTION = 0.5


@dataclass(frozen=True)
class EvalPlan:
    """What the evaluations before and after share (notebook 02's parameters).

    Attributes:
        task: the task (its test split, rules and metrics).
        preset: the recipe whose model and evaluation route are used.
        model: a Hub id or path instead of the preset's model.
        slice: ``{"n": int}`` or ``{"fraction": float}`` of the test split (:func:`grpo_kit.tasks.data.take_slice`).
        seed: the slice's seed (also the seed of the bootstrap intervals and of sampled completions).
        max_new_tokens: each completion's budget, in tokens.
        samples: sampled completions per question for avg@k / pass@k / maj@k (0: greedy only).
        temperature: the temperature of those samples.
        batch_size: prompts per ``generate`` call (transformers routes).
        backend: ``"vllm"`` / ``"transformers"`` where the policy loads without Unsloth
            (:func:`grpo_kit.policy.routes.eval_route`).
        warm, tiny_spec, cache_dir: what shapes the tiny policy (presets without a model).

    Raises:
        ValueError: a slice that is not ``{"n": ...}`` or ``{"fraction": ...}``; a budget, batch or sample count
            out of range; a temperature that is not a finite number above 0 (:meth:`check_context`: a budget beyond
            the policy's context window).
    """

    task: Task
    preset: Recipe
    model: str | None = None
    slice: dict[str, Any] = field(default_factory=lambda: {"fraction": EVAL_FRACTION})
    seed: int = 0
    max_new_tokens: int = 256
    samples: int = 0
    temperature: float = 0.7
    batch_size: int = 32
    backend: str | None = None
    warm: WarmStart | None = None
    tiny_spec: TinyPolicySpec | None = None
    cache_dir: str = DEFAULT_CACHE_DIR

    def __post_init__(self) -> None:
        if set(self.slice) - {"n", "fraction"} or len(self.slice) != 1:
            raise ValueError(f"slice must be {{'n': int}} or {{'fraction': float}}, got {self.slice}")
        for name in ("max_new_tokens", "batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
        if not isinstance(self.samples, int) or self.samples < 0:
            raise ValueError(f"samples must be 0 (greedy only) or a whole number above it, got {self.samples!r}")
        # recorded whether or not samples use it: a value no sampler takes (-1, nan) is refused, not recorded
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, (int, float)) \
                or not math.isfinite(self.temperature) or self.temperature <= 0:
            raise ValueError(f"temperature (--temperature) must be a finite number above 0 (sampling divides the "
                             f"logits by it), got {self.temperature!r}")

    def check_context(self) -> None:
        """Refuse a completion budget the policy cannot hold: ``max_new_tokens`` at or beyond its context window
        (the tiny policy's ``max_positions``; a model's ``max_position_embeddings`` in its ``config.json``, read
        without loading it: :func:`grpo_kit.policy.shapes.model_config`), where the prompt must fit too. A model whose
        config is not on this machine is not checked here (its loader says so).

        Raises:
            ValueError: the budget, the window and where it was read, and what to give instead.
        """
        from grpo_kit.policy.shapes import model_config

        source = self.source
        if source.tiny is not None:
            window, where = source.tiny.spec.max_positions, "the tiny policy's max_positions"
        else:
            try:
                config = model_config(source.model)
            except (LookupError, OSError, ValueError):
                return
            config = config.get("text_config") or config  # a multimodal config holds its language model's
            window, where = config.get("max_position_embeddings"), f"{source.model}'s max_position_embeddings"
        if isinstance(window, int) and self.max_new_tokens >= window:
            raise ValueError(f"max_new_tokens (--max-new-tokens) {self.max_new_tokens} does not fit the policy's "
                             f"context window of {window} tokens ({where}), which holds the prompt too: give fewer, "
                             f"e.g. --max-new-tokens {min(1024, window // 2)}")

    @property
    def source(self) -> PolicySource:
        """The policy measured before training (and trained from)."""
        return PolicySource.of(self.model or self.preset.model, self.task, seed=self.preset.seed, warm=self.warm,
                               spec=self.tiny_spec, cache_dir=self.cache_dir)

    def questions(self) -> Any:
        """The evaluation slice (a ``datasets.Dataset``).

        Raises:
            ValueError: the slice is out of range for the test split (the message names the option, ``--eval-size``
                or ``--eval-fraction``, and the split's size).
        """
        test = self.task.load("test")
        n = self.slice.get("n")
        if n is not None and not isinstance(n, bool) and isinstance(n, int) and not 0 < n <= len(test):
            raise ValueError(f"--eval-size {n} (eval_size): the test split of {self.task.name} holds {len(test)} "
                             f"questions: give a number from 1 to {len(test)}")
        return take_slice(test, seed=self.seed, **self.slice)

    def describe(self) -> str:
        """Which test questions the plan measures, in words, naming the default share where it applies and what
        chooses another (printed by ``eval --before`` and notebook 02 before anything loads).

        Raises:
            ValueError: the slice is out of range (:meth:`questions`).
        """
        chosen, total = len(self.questions()), len(self.task.load("test"))
        share = self.slice.get("fraction")
        how = (f"a seeded share of {share:g}" + (", the default (the blog post's half); --eval-size N or "
                                                  "--eval-fraction F (notebook 02: eval_questions) chooses another"
                                                  if share == EVAL_FRACTION else "")
               if share is not None else f"seed {self.seed}")
        return f"{chosen} of the {total} test questions of {self.task.name} ({how})"

    def greedy(self) -> Sampling:
        """The greedy decoding of the headline evaluation."""
        return Sampling(temperature=0.0, max_new_tokens=self.max_new_tokens)

    def sampled(self) -> Sampling:
        """The sampled decoding of avg@k / pass@k / maj@k."""
        return Sampling(temperature=self.temperature, n=self.samples, max_new_tokens=self.max_new_tokens,
                        seed=self.seed)

    def settings(self) -> dict[str, Any]:
        """The plan as ``eval_settings.json`` records it (:func:`plan_from_settings` reads it back)."""
        digest = dict(self.task.digest) if self.task.digest is not None else None  # a task file's data
        return {"task": self.task.ref, "task_digest": digest, "slice": self.slice, "seed": self.seed,
                "max_new_tokens": self.max_new_tokens, "samples": self.samples, "temperature": self.temperature,
                "batch_size": self.batch_size, "preset": self.preset.name, "recipe": dict(self.preset.settings),
                "model_override": self.model, "backend": self.backend, "cache_dir": self.cache_dir,
                "warm": dataclasses.asdict(self.warm) if self.warm else None,
                "tiny_spec": dataclasses.asdict(self.tiny_spec) if self.tiny_spec else None}


def plan_from_settings(settings: dict[str, Any], batch_size: int | None = None, trust_remote_code: bool = False
                       ) -> EvalPlan:
    """Rebuild notebook 02's :class:`EvalPlan` from its ``eval_settings.json`` (:meth:`EvalPlan.settings`);
    ``trust_remote_code``: the recorded task file may import and run Python of its own
    (:func:`grpo_kit.tasks.task_file.check_task_code`)."""
    recorded = settings.get("recipe")  # a folder of an earlier version records a preset's overrides
    preset = get_preset(Recipe(settings["preset"], recorded)) if isinstance(recorded, dict) else \
        get_preset(settings["preset"], **settings.get("preset_overrides", {}))
    return EvalPlan(task=get_task(settings["task"], digest=settings.get("task_digest"),
                                  trust_remote_code=trust_remote_code), preset=preset,
                    model=settings.get("model_override"), slice=settings["slice"], seed=settings["seed"],
                    max_new_tokens=settings["max_new_tokens"],
                    samples=settings["samples"], temperature=settings["temperature"],
                    batch_size=batch_size or settings.get("batch_size", 32), backend=settings.get("backend"),
                    warm=WarmStart(**settings["warm"]) if settings.get("warm") else None,
                    tiny_spec=TinyPolicySpec(**settings["tiny_spec"]) if settings.get("tiny_spec") else None,
                    cache_dir=settings.get("cache_dir", DEFAULT_CACHE_DIR))


def _base_fingerprint(backend: Any) -> str | None:
    """The weights' fingerprint where the backend holds the model in this process (transformers routes)."""
    model = getattr(backend, "model", None)
    return base_weights_digest(model) if model is not None and hasattr(model, "named_parameters") else None


def measure_before(plan: EvalPlan, run: RunFolder, backend: Any = None,
                   replace: bool = False) -> dict[str, EvalResult]:
    """Evaluate the starting policy (notebook 02) and record what was measured.

    A run folder has one baseline, which is never replaced silently: when ``eval_settings.json`` exists, the same
    settings reuse its records (nothing is generated again), and other settings are refused, naming each
    difference, unless ``replace`` is given.

    Args:
        plan: what to evaluate and how.
        run: the run folder; gets ``baseline.jsonl`` (greedy), ``baseline_sampled.jsonl`` (with
            ``samples``), the generation cache and, once both finished, ``eval_settings.json``.
        backend: a ready generation backend over the plan's policy (the demo's); default
            :func:`grpo_kit.policy.routes.load_eval_backend` for it.
        replace: replace a baseline measured with other settings (``eval --before --replace-baseline``); what was
            measured against it (the evaluation after training, the report, the comparison) is removed first.

    Returns:
        ``{"greedy": EvalResult, "sampled": EvalResult}`` (``"sampled"`` only with ``samples``).

    Raises:
        ValueError: the slice is out of range, the completion budget beyond the policy's context window
            (:meth:`EvalPlan.check_context`), or the preset's route cannot run here; the folder holds a baseline
            measured with other settings and ``replace`` is off; all before any model loads.
        grpo_kit.runs.folder.RunFolderBusy: another process is writing the run folder.
    """
    questions = plan.questions()
    plan.check_context()
    source = plan.source
    if plan.preset.use_unsloth and backend is None and (problem := unsloth_problem(source.tiny is not None)):
        raise ValueError(problem)
    with run.lock("eval --before"):
        if run.eval_settings.is_file():
            differences = baseline_differences(run.read_json(run.eval_settings, BASELINE_STEP), plan.settings())
            if not differences:
                log.info(f"{run.path} already holds this baseline (same settings): reusing it")
                results = {"greedy": _records(run, run.baseline, plan, len(questions))}
                if plan.samples > 0:
                    results["sampled"] = _records(run, run.baseline_sampled, plan, len(questions))
                return results
            if not replace:
                raise ValueError(f"{run.path} already holds a baseline measured with other settings ("
                                 + "; ".join(differences) + "): a run folder has one baseline, and this would "
                                 "replace it. Measure this one in a new run folder (--run-dir), or replace it on "
                                 "purpose with eval --before --replace-baseline (notebook 02: replace=True), which "
                                 "also removes the evaluation after training and the report made against it")
            log.warning(f"replacing the baseline of {run.path}: " + "; ".join(differences))
            for path in (run.eval_settings, run.evaluated, run.trained, run.trained_sampled, run.report,
                         run.comparison, run.before_after, run.baseline_sampled):
                path.unlink(missing_ok=True)  # eval_settings.json first: a replacement cut short pairs nothing
        from grpo_kit.policy.routes import eval_route, load_eval_backend

        route = getattr(backend, "route", None) or eval_route(plan.preset.loading, plan.backend)
        if backend is None:
            backend = load_eval_backend(source, plan.preset.loading, batch_size=plan.batch_size, backend=plan.backend)
        results = {"greedy": _evaluated(backend, plan, questions, run, run.baseline)}
        if plan.samples > 0:
            results["sampled"] = _evaluated(backend, plan, questions, run, run.baseline_sampled, sampled=True)
        # Written last: a baseline that died on the way leaves no settings for notebook 04 to pair with.
        write_json(run.eval_settings, {**plan.settings(), "route": route, "base_model": source.name,
                                       "base_fingerprint": _base_fingerprint(backend),
                                       "system_prompt": system_prompt_of(questions), "questions": len(questions),
                                       "files": run.baseline_files()})
        return results


def baseline_differences(recorded: dict[str, Any], planned: dict[str, Any]) -> list[str]:
    """The settings of a planned baseline (:meth:`EvalPlan.settings`) that differ from those recorded in
    ``eval_settings.json``, as ``"name: recorded -> planned"``; the batch size and cache folder do not count (they
    change no completion).

    >>> baseline_differences({"task": "gsm8k", "seed": 0, "batch_size": 8}, {"task": "math500", "seed": 0,
    ...                                                                     "batch_size": 32})
    ["task: 'gsm8k' -> 'math500'"]
    """
    import json

    def plain(value: Any) -> Any:
        return json.loads(json.dumps(value, default=str))

    recorded = recorded if isinstance(recorded, dict) else {}
    return [f"{key}: {recorded.get(key)!r} -> {value!r}" for key, value in planned.items()
            if key not in ("batch_size", "cache_dir") and plain(recorded.get(key)) != plain(value)]


def _evaluated(backend: Any, plan: EvalPlan, questions: Any, run: RunFolder, path: Path, sampled: bool = False,
               rewards: Sequence[Any] = ()) -> EvalResult:
    """The plan's greedy (or sampled) evaluation of ``questions`` through ``backend`` (completions cached in the run
    folder), ``rewards`` scored beside the task's metrics, written to ``path``."""
    result = evaluate(backend, questions, plan.sampled() if sampled else plan.greedy(), cache=run.generations,
                      seed=plan.seed, task=plan.task)
    result = with_rewards(result, questions, rewards)
    result.to_jsonl(path)
    return result


def _records(run: RunFolder, path: Path, plan: EvalPlan, expected: int) -> EvalResult:
    """A baseline file of the run, checked whole (before any model loads): the file the baseline wrote
    (:meth:`grpo_kit.runs.folder.RunFolder.check_baseline`), readable, and the ``expected`` number of questions
    ``eval_settings.json`` describes.

    Raises:
        ValueError: the file was edited, is damaged or holds other questions than the plan's slice (the message names
            it).
    """
    run.check_baseline(path)
    try:
        result = EvalResult.from_jsonl(path, task=plan.task)
    except ValueError as e:
        raise ValueError(f"{e}. Delete {path} and {run.eval_settings.name} and run {BASELINE_STEP} again") from None
    found = len({r["id"] for r in result.records})
    if found != expected:
        raise ValueError(f"{path} holds {counted(found, 'question')} where "
                         f"{run.eval_settings.name} describes {expected}: the file was edited or cut short. Delete "
                         f"both and run {BASELINE_STEP} again")
    return result


def check_pairing(evaluated: dict[str, Any], trained: dict[str, Any], folder: str | Path) -> None:
    """Refuse a trained model whose base model, task or prompt differs from the baseline's.

    Args:
        evaluated: ``eval_settings.json`` (notebook 02).
        trained: ``train_settings.json`` (notebook 03 / ``python -m grpo_kit train``).
        folder: the run folder (for the message).

    Raises:
        ValueError: a difference; the message names both values of each.
    """
    differences = [f"{label}: baseline {evaluated.get(key)!r}, trained {trained.get(key)!r}" for key, label in
                   (("base_model", "base model"), ("task", "task"), ("system_prompt", "system prompt"))
                   if evaluated.get(key) != trained.get(key)]
    a, b = evaluated.get("base_fingerprint"), trained.get("base_fingerprint")
    if a is not None and b is not None and a != b:
        differences.append(f"base weights: baseline {a}, trained from {b}")
    if differences:
        raise ValueError(f"the model in {folder} was not trained from what the baseline measured, so a before/after "
                         "table would pair different things:\n  " + "\n  ".join(differences) +
                         "\nRe-run the baseline (notebook 02 / eval --before) for this model, or train from the "
                         "baseline's model, task and prompt.")


@dataclass
class Measured(BeforeAfter):
    """The evaluation after training, its comparison with the baseline (notebook 04), the plan they share, and the
    algorithm the run trained with (markdown; empty for a run folder written before the kit recorded it)."""

    plan: EvalPlan | None = None
    algorithm: str = ""


def measure_after(run: RunFolder, batch_size: int | None = None, backend: Any = None,
                  rewards: Sequence[Any] = (), trust_remote_code: bool = False) -> Measured:
    """Evaluate the run folder's trained model on the baseline's questions, route and decoding, and compare.

    Args:
        run: a run folder holding the baseline (``eval_settings.json``, ``baseline.jsonl``) and the
            trained model (``model/``, ``train_settings.json``).
        batch_size: prompts per ``generate`` call (default the baseline's).
        backend: a ready backend over the trained model (the demo's); default
            :func:`grpo_kit.policy.routes.load_eval_backend` with ``trained=run.model`` through the baseline's route.
        rewards: reward functions of your own to show beside the task's metrics, before and after (scored on the
            recorded completions). Every reward the run trained with (:func:`run_rewards`: built in, or your own
            that ``train_settings.json`` records as ``module:function``) is added; one defined in a notebook is
            passed here.
        trust_remote_code: the run's task file, and the rewards of your own its ``train_settings.json`` records, may
            import and run Python of their own (:func:`grpo_kit.tasks.user_code.check_trusted`).

    Returns:
        :class:`Measured`; ``trained.jsonl`` (and ``trained_sampled.jsonl``), ``comparison.csv``,
        ``before_after.png`` and ``report.md`` (:func:`grpo_kit.evaluation.report.report_markdown`) are written,
        then ``evaluated.json``: the training step and trained weights' digest they are of (results of an earlier
        step are stale once the run is trained further: ``RunFolder.stale_results``).

    Raises:
        FileNotFoundError: a file of an earlier step is missing (the message names the step).
        ValueError: the trained model's base, task or prompt differs from the baseline's
            (:func:`check_pairing`); the task file or the recorded rewards name Python of their own and
            ``trust_remote_code`` is off; the route changed since the baseline (e.g. vLLM no longer installed); a file
            of ``model/`` no longer matches what training wrote (``finished.json``).
    """
    with run.lock("eval"):
        return _measure_after(run, batch_size, backend, rewards, trust_remote_code)


def run_rewards(trained: dict[str, Any], given: Sequence[Any] = (), source: Any = "train_settings.json",
                trust_remote_code: bool = False) -> list[Any]:
    """Every reward a run was trained with, to score before and after beside the task's metrics: ``given`` (functions
    defined in a notebook), then those ``trained`` (``train_settings.json``, read from ``source``) records, built in
    by name and your own imported again as ``module:function`` only with ``trust_remote_code``
    (:func:`grpo_kit.tasks.reward_registry.recorded_paths`); one that cannot be imported is named in a warning and
    left out. Rewards the records already hold are skipped when scored
    (:func:`grpo_kit.evaluation.scoring.with_rewards`).

    Raises:
        ValueError: the record names rewards of your own outside ``grpo_kit`` and ``trust_remote_code`` is off (one
            line naming each, its module and ``source``, before anything is imported).
    """
    from grpo_kit.tasks.reward_registry import BUILTIN_REWARDS, import_reward, recorded_paths

    found = {getattr(f, "__name__", str(f)): f for f in given}
    paths = recorded_paths(trained, source, trust_remote_code, given=list(found))
    for name in [*(trained.get("rewards") or {}), *paths]:
        if name in found:
            continue
        if name in BUILTIN_REWARDS and name not in paths:
            found[name] = BUILTIN_REWARDS[name]
        elif paths.get(name) is None:
            log.warning(f"reward {name} of this run was defined where another process cannot import it (a notebook): "
                        "pass it as measure_after(..., rewards=[...]) to show it in the tables")
        else:
            try:
                found[name] = import_reward(paths[name], what="train_settings.json reward")
            except ValueError as e:
                log.warning(f"{e}: it is left out of the tables")
    return list(found.values())


def _measure_after(run: RunFolder, batch_size: int | None, backend: Any, rewards: Sequence[Any] = (),
                   trust_remote_code: bool = False) -> Measured:
    evaluated = run.read_settings(run.eval_settings, BASELINE_STEP, ("task", "route", "base_model", "system_prompt"))
    trained = run.read_settings(run.train_settings, TRAIN_STEP, ("base_model", "task", "system_prompt"))
    check_pairing(evaluated, trained, run.path)
    if run.finished_step() is None:
        raise ValueError(f"training in {run.path} has not finished (no {run.finished.name}; model/ may be missing or "
                         f"half-written): run 03_train_grpo with resume = True (or {run.command('train --resume')}) "
                         "to finish it, then evaluate")
    # changed data is refused, naming the file
    get_task(evaluated["task"], digest=evaluated.get("task_digest"), trust_remote_code=trust_remote_code)
    own = run_rewards(trained, rewards, run.train_settings, trust_remote_code)  # untrusted: refused before any work
    step, digest = run.finished_step(), run.check_model()  # model/ as training wrote it, else the file is named
    try:
        plan = plan_from_settings(evaluated, batch_size, trust_remote_code)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{run.eval_settings} is damaged or was edited ({type(e).__name__}: {e}): delete it and run "
                         f"{BASELINE_STEP} again") from None
    questions = plan.questions()
    examples = list(questions)
    before = with_rewards(_records(run, run.baseline, plan, len(questions)), examples, own)
    before_sampled = with_rewards(_records(run, run.baseline_sampled, plan, len(questions)), examples, own) \
        if plan.samples > 0 else None
    if backend is None:
        from grpo_kit.policy.routes import load_eval_backend

        backend = load_eval_backend(plan.source, plan.preset.loading, trained=run.require(run.model, TRAIN_STEP),
                                    batch_size=plan.batch_size, backend=plan.backend)
    route = getattr(backend, "route", evaluated["route"])
    if route != evaluated["route"]:
        raise ValueError(f"the baseline was generated through {evaluated['route']!r} and the trained model would go "
                         f"through {route!r}: evaluate both through one route (install what the baseline used, or "
                         "re-run the baseline)")
    run.evaluated.unlink(missing_ok=True)  # until this evaluation is whole, no result is current
    after = _evaluated(backend, plan, questions, run, run.trained, rewards=own)
    after_sampled = _evaluated(backend, plan, questions, run, run.trained_sampled, True, own) \
        if plan.samples > 0 else None
    table = compare(before, after, seed=plan.seed)
    write_text(run.comparison, table.to_csv(index=False))
    import matplotlib.pyplot as plt

    from grpo_kit.evaluation.plots import plot_before_after

    plt.close(plot_before_after(table, run.before_after, title=f"before vs after GRPO ({plan.task.name}, "
                                                               f"{run.path.name})"))
    measured = Measured(before=before, after=after, table=table, before_sampled=before_sampled,
                        after_sampled=after_sampled, samples=plan.samples, temperature=plan.temperature,
                        alarms=run.read_alarms(), plan=plan)
    measured.algorithm = algorithm_markdown(trained["algorithm"]) if "algorithm" in trained else ""
    write_text(run.report, report_markdown(measured, f"grpo_kit: {run.path.name}, after training step {step}",
                                           algorithm=measured.algorithm))
    run.mark_evaluated(step, digest, evaluated_with(evaluated))  # last: the results above are of this model
    return measured


def evaluated_with(settings: dict[str, Any]) -> dict[str, Any]:
    """The decoding settings of ``eval_settings.json`` that an evaluation after training must share with the baseline
    (recorded by :meth:`grpo_kit.runs.folder.RunFolder.mark_evaluated`, checked by ``stale_results``)."""
    return {key: settings.get(key) for key in ("max_new_tokens", "samples", "temperature", "seed", "route")}
