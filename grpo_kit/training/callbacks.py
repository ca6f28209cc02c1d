"""Watching a GRPO run while it trains: held-out accuracy, a reward-hacking alarm, a stale-weights alarm.

TRL's trainer logs rewards under the training sampling settings only (trl #2959): a reward can
saturate while task accuracy collapses (trl PR #5790). :class:`HeldOutEval` measures the policy
every ``every`` steps, greedily, on a fixed seeded slice of the task's test split with the kit's
own evaluator, and logs ``eval/strict_accuracy`` and ``eval/flexible_accuracy`` with their 95%
intervals into the trainer's log history (and wandb). When the training reward has risen since
the previous evaluation while held-out strict or flexible accuracy fell by a paired-significant
amount (exact McNemar on the same questions, p < 0.05), it raises the reward-hacking alarm: a
warning naming both numbers, a line in the run folder's ``alarms.jsonl``.

:class:`StaleWeightsAlarm` reads TRL's ``sampling/sampling_logp_difference/mean`` (vLLM's
log-probabilities of the sampled tokens against the trainer's): a large gap means vLLM
generates from other weights than the ones being trained (trl #2698, #5312).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from transformers import TrainerCallback

from grpo_kit.evaluation.compare import flips, paired_ids
from grpo_kit.evaluation.scoring import EvalResult, evaluate
from grpo_kit.evaluation.stats import mcnemar_exact
from grpo_kit.evaluation.summary import rule_label
from grpo_kit.policy.generation import Sampling, TransformersBackend
from grpo_kit.system.logs import counted
from grpo_kit.training.presets import Recipe

if TYPE_CHECKING:
    from grpo_kit.tasks import Task

__all__ = ["SLOW_REWARD_SECONDS", "STALE_METRIC", "HeldOutEval", "RewardWatch", "RunRecords", "StaleWeightsAlarm",
           "StepPrinter", "reward_hacking", "stale_weights_alarm", "training_reward"]

log = logging.getLogger(__name__)
_RULES = ("strict", "flexible")
_ENDS = ("", "_ci_low", "_ci_high")  # a rule's logged accuracy, and its 95% interval: eval/<rule>_accuracy<end>


class RunRecords(Protocol):
    """Where a run keeps its held-out evaluations and alarms (:class:`grpo_kit.runs.folder.RunFolder` is one)."""

    def heldout_record(self, step: int) -> Path:
        """Where the held-out evaluation at ``step`` is written."""
        ...

    def heldout_records(self) -> list[tuple[int, Path]]:
        """The held-out evaluations kept, ``(step, path)``, oldest first."""
        ...

    def append_alarm(self, alarm: dict[str, Any]) -> None:
        """Keep one alarm."""
        ...


def _log(args: Any, state: Any, logs: dict[str, float]) -> None:
    """Append ``logs`` to the trainer's log history at the current step and send them to wandb when on."""
    state.log_history.append({**logs, "step": state.global_step})
    if "wandb" in (args.report_to or []):  # installed: transformers' WandbCallback refused to start otherwise
        import wandb

        if wandb.run is not None:
            wandb.log({**logs, "train/global_step": state.global_step})


def training_reward(log_history: Sequence[dict[str, Any]], after: int, upto: int) -> float | None:
    """Mean logged training ``reward`` over steps in ``(after, upto]``; ``None`` when none was logged."""
    values = [row["reward"] for row in log_history if "reward" in row and after < row.get("step", -1) <= upto]
    return sum(values) / len(values) if values else None


def reward_hacking(previous: EvalResult, current: EvalResult, reward_before: float | None,
                   reward_after: float | None, p_threshold: float = 0.05) -> list[dict[str, Any]]:
    """The reward-hacking findings between two held-out evaluations of the same questions.

    A finding is a rule (strict or flexible accuracy) whose per-question results got worse with
    exact McNemar p below ``p_threshold`` (more right -> wrong than wrong -> right) while the training
    reward rose (``reward_after > reward_before``).

    Returns:
        ``list`` of ``{"rule", "accuracy_before", "accuracy_after", "right_to_wrong", "wrong_to_right",
        "mcnemar_p", "reward_before", "reward_after"}`` (empty: no alarm).
    """
    if reward_before is None or reward_after is None or not reward_after > reward_before:
        return []
    ids = paired_ids(previous.records, current.records)
    findings = []
    for rule in _RULES:
        was, now = previous.correct(f"{rule}_correct"), current.correct(f"{rule}_correct")
        gained, lost = flips([was[i] for i in ids], [now[i] for i in ids])
        p = mcnemar_exact(gained, lost)
        if lost > gained and p < p_threshold:
            findings.append({"rule": rule, "accuracy_before": sum(was.values()) / len(was),
                             "accuracy_after": sum(now.values()) / len(now), "right_to_wrong": lost,
                             "wrong_to_right": gained, "mcnemar_p": p, "reward_before": reward_before,
                             "reward_after": reward_after})
    return findings


class HeldOutEval(TrainerCallback):
    """Greedy held-out accuracy every ``every`` optimiser steps (and at the start), with the reward-hacking alarm.

    Args:
        task: the :class:`grpo_kit.tasks.Task` (its rules and metrics score the completions).
        dataset: the fixed held-out questions (rows of ``task``; e.g. a seeded slice of its test split).
        tokenizer: the policy's tokenizer.
        every: steps between evaluations.
        records: where the evaluations and alarms are kept (the run folder: ``heldout/step-<N>.jsonl`` and
            ``alarms.jsonl``); ``None`` keeps nothing (a resumed run then has no previous evaluation to compare with).
        max_new_tokens: the completion budget of each greedy answer, in tokens.
        batch_size: prompts per ``generate`` call.
        p_threshold: the McNemar p-value below which a fall in accuracy raises the alarm.
        is_main_process: whether this process evaluates (the others skip; under several processes the
            policy is a full replica on each, DDP).
        split: which questions ``dataset`` holds, as the log and the alarms name them (``"validation (from <task>
            train)"`` for a run's questions held out of its train split).

    Attributes:
        alarms: the findings of :func:`reward_hacking` raised so far, each with its ``step``.
    """

    def __init__(self, task: Task, dataset: Any, tokenizer: Any, every: int, records: RunRecords | None = None,
                 max_new_tokens: int = 256, batch_size: int = 64, p_threshold: float = 0.05,
                 is_main_process: bool = True, split: str = "held-out") -> None:
        if every < 1:
            raise ValueError(f"eval_steps must be at least 1, got {every}")
        self.task, self.dataset, self.tokenizer, self.every = task, list(dataset), tokenizer, every
        self.records, self.split = records, split
        self.sampling = Sampling(temperature=0.0, max_new_tokens=max_new_tokens)
        self.batch_size, self.p_threshold, self.is_main_process = batch_size, p_threshold, is_main_process
        self.previous: tuple[int, EvalResult] | None = None
        self.alarms: list[dict[str, Any]] = []

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if not self.is_main_process:
            return
        self.previous = self._earlier_result(state.global_step)
        if self.previous is None or self.previous[0] != state.global_step:
            self._evaluate(args, state, model)
        elif not any("eval/strict_accuracy" in row and row.get("step") == state.global_step
                     for row in state.log_history):
            # kept in the folder but not in the restored log (killed after the step-0 evaluation, before the first
            # checkpoint): log the kept result rather than lose the row or measure it again
            _log(args, state, self._logs(self.previous[1]))

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.is_main_process and state.global_step % self.every == 0:
            self._evaluate(args, state, model)

    def _earlier_result(self, step: int) -> tuple[int, EvalResult] | None:
        """The latest held-out evaluation at or before ``step`` kept in the folder (a resumed run's reference)."""
        if self.records is None:
            return None
        kept = [(s, p) for s, p in self.records.heldout_records() if s <= step]
        if not kept:
            return None
        try:
            return kept[-1][0], EvalResult.from_jsonl(kept[-1][1], task=self.task)
        except ValueError as e:  # damaged by hand (the kit writes it whole): measured again, and said
            log.warning(f"{e}; evaluating step {kept[-1][0]} again instead")
            kept[-1][1].unlink()
            return self._earlier_result(step)

    def _evaluate(self, args: Any, state: Any, model: Any) -> None:
        start = time.perf_counter()
        backend = TransformersBackend(model, self.tokenizer, batch_size=self.batch_size, progress=False)
        result = evaluate(backend, self.dataset, self.sampling, task=self.task)
        if self.records is not None:
            result.to_jsonl(self.records.heldout_record(state.global_step))
        logs = self._logs(result)
        logs["eval/seconds"] = time.perf_counter() - start
        if self.previous is not None:
            before_step, before = self.previous
            earlier = max(0, before_step - self.every)
            findings = reward_hacking(before, result,
                                      training_reward(state.log_history, earlier, before_step)
                                      if before_step > 0 else _first_reward(state.log_history),
                                      training_reward(state.log_history, before_step, state.global_step),
                                      self.p_threshold)
            for finding in findings:
                self._alarm({**finding, "step": state.global_step, "previous_step": before_step,
                             "split": self.split})
            logs["eval/reward_hacking_alarm"] = float(bool(findings))
        _log(args, state, logs)
        self.previous = (state.global_step, result)

    @staticmethod
    def _logs(result: EvalResult) -> dict[str, float]:
        """The log-history values of one held-out evaluation: each rule's accuracy and its 95% interval."""
        logs: dict[str, float] = {}
        for rule in _RULES:
            row = result.summary.loc[rule_label(rule)]
            for end, column in zip(_ENDS, ("value", "ci_low", "ci_high")):
                logs[f"eval/{rule}_accuracy{end}"] = float(row[column])
        return logs

    def _alarm(self, finding: dict[str, Any]) -> None:
        self.alarms.append(finding)
        log.warning("REWARD-HACKING ALARM at step {step}: the training reward rose {reward_before:.3f} -> "
                    "{reward_after:.3f} since step {previous_step}, while held-out {rule} accuracy fell "
                    "{accuracy_before:.3f} -> {accuracy_after:.3f} ({right_to_wrong} right->wrong, {wrong_to_right} "
                    "wrong->right, exact McNemar p = {mcnemar_p:.2g}). Read the completions: the policy may be paid "
                    "for something other than solving the task.".format(**finding))
        if self.records is not None:
            self.records.append_alarm({"kind": "reward_hacking", **finding})


def _first_reward(log_history: Sequence[dict[str, Any]]) -> float | None:
    """The first logged training reward (the reference for the interval after the step-0 evaluation)."""
    return next((row["reward"] for row in log_history if "reward" in row), None)


#: The metric the stale-weights alarm reads (TRL's GRPOTrainer; Unsloth's generated trainer logs the same name).
STALE_METRIC = "sampling/sampling_logp_difference/mean"


#: Why the metric is missing on Unsloth's routes, unless the recipe sets the key.
_UNSLOTH_OFF = ("Unsloth's generated GRPO trainer turns vllm_importance_sampling_correction off by default "
                "(unsloth/models/rl.py)")


def _unarmed(off: str) -> str:
    """Why a trainer whose ``vllm_importance_sampling_correction`` is off (``off`` says where) logs no
    :data:`STALE_METRIC`, and how to arm the alarm."""
    return (f"{off}, and the trainer logs {STALE_METRIC} only when it is on: nothing compares vLLM's "
            "log-probabilities with the trained policy's. To arm it, set vllm_importance_sampling_correction true "
            "(--vllm_importance_sampling_correction true; it also reweights the loss by that ratio)")


def stale_weights_alarm(preset: Recipe) -> dict[str, Any]:
    """Whether :class:`StaleWeightsAlarm` can fire on this recipe's route, and why (``python -m grpo_kit plan``'s
    ``alarm``).

    TRL logs :data:`STALE_METRIC` only when vLLM generates and ``vllm_importance_sampling_correction`` is on
    (trl 1.15.0, ``grpo_trainer.py``). TRL's default is on; Unsloth's generated trainer turns it off by default
    (unsloth 2026.10.7, ``unsloth/models/rl.py``, its GRPOConfig replacements). A recipe may set it.

    Returns:
        ``{"armed": bool, "metric": str | None, "why": str}``.

    >>> from grpo_kit.training.presets import PRESETS
    >>> stale_weights_alarm(PRESETS["a100"])["armed"], stale_weights_alarm(PRESETS["multi-gpu-lora"])["armed"]
    (False, True)
    """
    if not (preset.use_vllm or preset.fast_inference):
        return {"armed": False, "metric": None,
                "why": "no vLLM: the policy generates its own samples, so they cannot come from stale weights"}
    if not preset.settings.get("vllm_importance_sampling_correction", not preset.use_unsloth):
        return {"armed": False, "metric": STALE_METRIC,
                "why": _unarmed("the recipe sets vllm_importance_sampling_correction false"
                                if "vllm_importance_sampling_correction" in preset.settings else _UNSLOTH_OFF)}
    return {"armed": True, "metric": STALE_METRIC,
            "why": "vLLM generates with importance-sampling correction on, so the trainer logs the gap every step"}


class StaleWeightsAlarm(TrainerCallback):
    """Warn when vLLM's log-probabilities of the sampled tokens drift from the trainer's.

    TRL logs :data:`STALE_METRIC` (mean absolute per-token gap, in nats) when vLLM generates with
    importance-sampling correction on. Numerical differences between vLLM's kernels and the trainer's stay
    well under ``threshold``; a gap above it means vLLM samples from other weights than the policy being
    trained (a weight sync that did not reach every layer). Where the metric is not logged (Unsloth's
    routes by default: :func:`stale_weights_alarm`), the first logged training step says, once, that the
    alarm cannot fire and why.

    Args:
        threshold: the mean gap (nats per token) that raises the alarm.
        records: where the alarm is kept (the run folder's ``alarms.jsonl``; ``None``: nowhere).
    """

    def __init__(self, threshold: float = 0.1, records: RunRecords | None = None) -> None:
        self.threshold, self.records, self.raised, self.checked = threshold, records, [], False

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        gap = logs.get(STALE_METRIC)
        if not self.checked and "reward" in logs:  # the first logged training step
            self.checked = True
            if gap is None:
                why = f"the trainer logged no {STALE_METRIC}"
                if getattr(args, "vllm_importance_sampling_correction", True) is False:
                    why = _unarmed("vllm_importance_sampling_correction is off in this trainer's config" + (
                        f" ({_UNSLOTH_OFF})" if getattr(type(args), "_unsloth_patched_rl_config", False) else ""))
                log.warning(f"the stale-weights alarm is NOT armed on this run: {why}. Nothing checks that vLLM "
                            "generates from the weights being trained (trl #2698, #5312).")
        if gap is None or gap <= self.threshold:
            return
        finding = {"kind": "stale_vllm_weights", "step": state.global_step, "mean_logp_gap": gap,
                   "threshold": self.threshold}
        self.raised.append(finding)
        log.warning(f"STALE-WEIGHTS ALARM at step {state.global_step}: vLLM's log-probabilities of the sampled "
                    f"tokens differ from the trainer's by {gap:.3f} nats per token on average (threshold "
                    f"{self.threshold:g}): vLLM is generating from weights other than the ones being trained "
                    "(trl #2698, #5312).")
        if self.records is not None:
            self.records.append_alarm(finding)


#: Seconds a reward may take within one optimiser step before the step log names it (a reward runs on every
#: completion of every step, so it adds to each step's time as much as generation does).
SLOW_REWARD_SECONDS = 1.0


class RewardWatch(TrainerCallback):
    """What the rewards did at each step, from the :func:`grpo_kit.tasks.rewards.guarded` functions' counters.

    A reward that took more than ``slow`` seconds within a step is named in the step log with its seconds. A reward
    that has judged none of its completions (``None`` for all, or raised every time) is warned about once after the
    first step, and when training ends having judged none, raises the never-judged alarm: a warning, a line in
    ``alarms.jsonl`` (:func:`grpo_kit.evaluation.report.alarms_markdown` puts it in the report) and its entry in
    ``finished.json``. Such a reward moved no advantage: with every reward like it, the loss is 0 and nothing learned.

    Args:
        rewards: the trainer's reward functions (``trainer.reward_funcs``: the guarded ones carry ``calls``).
        records: where the alarm is kept (the run folder; ``None``: nowhere).
        slow: see above (default :data:`SLOW_REWARD_SECONDS`).

    Attributes:
        alarms: the never-judged alarms raised.
    """

    def __init__(self, rewards: Sequence[Any], records: RunRecords | None = None,
                 slow: float = SLOW_REWARD_SECONDS) -> None:
        self.rewards = [(f.__name__, f.calls) for f in rewards if hasattr(f, "calls")]
        self.records, self.slow = records, slow
        self.seconds = {name: calls.seconds for name, calls in self.rewards}
        self.warned: set[str] = set()
        self.alarms: list[dict[str, Any]] = []

    def on_step_end(self, args, state, control, **kwargs):
        for name, calls in self.rewards:
            took, self.seconds[name] = calls.seconds - self.seconds[name], calls.seconds
            if took > self.slow:
                log.warning(f"step {state.global_step}: reward {name} took {took:.1f} s of this step (it runs on "
                            "every completion of every step): make it faster, e.g. cache what it computes")
            if calls.completions and not calls.judged and name not in self.warned:
                self.warned.add(name)
                log.warning(f"step {state.global_step}: reward {name} has judged none of its {calls.completions} "
                            f"completions so far ({_unjudged(calls)}): it moves nothing; check it with python -m "
                            "grpo_kit reward-check")

    def on_train_end(self, args, state, control, **kwargs):
        for name, calls in self.rewards:
            if calls.completions and not calls.judged:
                alarm = {"kind": "reward_never_judged", "step": state.global_step, "reward": name,
                         "completions": calls.completions, "raised": calls.raised}
                self.alarms.append(alarm)
                log.warning(f"ALARM: reward {name} judged none of the {counted(calls.completions, 'completion')} of "
                            "this training "
                            f"({_unjudged(calls)}): it taught nothing; fix it and train again")
                if self.records is not None:
                    self.records.append_alarm(alarm)


def _unjudged(calls: Any) -> str:
    """How a reward judged none of its completions, from its counters."""
    return "None for every one" + (f", or raised {calls.raised} times" if calls.raised else "")


class StepPrinter(TrainerCallback):
    """One plain log line per logged step: the reward, each reward's mean, and the held-out accuracy when measured.

    For the command line and launchers, where a progress bar would be redrawn into a log file.

    Args:
        heldout: which questions the held-out accuracy is measured on, as the line names them (e.g. ``"10 validation
            questions from the train split"``); empty: not named.
    """

    def __init__(self, heldout: str = "") -> None:
        self.heldout = heldout

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if "reward" not in logs:
            return
        rewards = ", ".join(f"{k.split('/')[1]} {_number(v)}" for k, v in logs.items()
                            if k.startswith("rewards/") and k.endswith("/mean"))
        log.info(f"step {state.global_step}/{state.max_steps}: reward {_number(logs['reward'])} ({rewards}); "
                 f"completion length {_number(logs.get('completions/mean_length'), 1)}")

    def on_step_end(self, args, state, control, **kwargs):
        last = state.log_history[-1] if state.log_history else {}
        if last.get("step") == state.global_step and "eval/strict_accuracy" in last:
            measured = ", ".join("{} accuracy {:.3f} [{:.3f}, {:.3f}]".format(
                rule, *(last[f"eval/{rule}_accuracy{end}"] for end in _ENDS)) for rule in _RULES)
            log.info(f"step {state.global_step}: held-out {measured}" + (f" on {self.heldout}" if self.heldout else ""))


def _number(value: Any, digits: int = 3) -> str:
    """A logged value as text; ``None`` (a reward that skipped every sample) or one that is not a number says so."""
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) else "n/a"
