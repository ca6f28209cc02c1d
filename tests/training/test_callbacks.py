"""Held-out accuracy while training and the reward-hacking alarm."""

from __future__ import annotations

import json

import pytest

from grpo_kit.evaluation.report import alarms_markdown
from grpo_kit.evaluation.scoring import EvalResult
from grpo_kit.evaluation.summary import summarize
from grpo_kit.policy.generation import Sampling
from grpo_kit.tasks import get_task
from grpo_kit.training.callbacks import StaleWeightsAlarm, reward_hacking, training_reward

GSM8K = get_task("gsm8k")


def _result(correct: list[int]) -> EvalResult:
    records = [{"id": f"q{i}", "index": i, "sample": 0, "completion": "", "strict_correct": float(c),
                "flexible_correct": float(c), "strict_format_reward_func": 0.5, "total": 0.5}
               for i, c in enumerate(correct)]
    return EvalResult(records=records, summary=summarize(records, GSM8K), sampling=Sampling(), wall_s=0.0, task=GSM8K)


def test_the_alarm_needs_a_rising_reward_and_a_significant_paired_fall():
    before, after = _result([1] * 20 + [0] * 5), _result([0] * 15 + [1] * 5 + [0] * 5)
    findings = reward_hacking(before, after, reward_before=0.2, reward_after=0.6)
    assert {f["rule"] for f in findings} == {"strict", "flexible"}
    finding = findings[0]
    assert (finding["right_to_wrong"], finding["wrong_to_right"]) == (15, 0) and finding["mcnemar_p"] < 0.001
    assert finding["accuracy_before"] == pytest.approx(0.8) and finding["accuracy_after"] == pytest.approx(0.2)
    assert reward_hacking(before, after, reward_before=0.6, reward_after=0.2) == []  # the reward fell too
    assert reward_hacking(before, _result([1] * 18 + [0] * 7), 0.2, 0.6) == []  # 2 lost: not significant
    assert reward_hacking(before, before, 0.2, 0.6) == []
    text = alarms_markdown([{"kind": "reward_hacking", "step": 20, **finding}])
    assert "Reward hacking" in text and "0.800 -> 0.200" in text
    assert alarms_markdown([]) == "None raised."


def test_training_reward_windows():
    history = [{"step": s, "reward": float(s)} for s in range(1, 11)] + [{"step": 10, "eval/strict_accuracy": 0.5}]
    assert training_reward(history, 0, 5) == 3.0 and training_reward(history, 5, 10) == 8.0
    assert training_reward(history, 10, 20) is None


def test_stale_weights_alarm_reads_trls_logprob_gap(tmp_path, capsys, kit_log_on_stderr):
    from types import SimpleNamespace

    from grpo_kit.runs.folder import RunFolder

    alarm = StaleWeightsAlarm(threshold=0.1, records=RunFolder(tmp_path))
    state = SimpleNamespace(global_step=3)
    alarm.on_log(None, state, None, logs={"sampling/sampling_logp_difference/mean": 0.004})
    assert alarm.raised == []
    alarm.on_log(None, state, None, logs={"sampling/sampling_logp_difference/mean": 1.31})
    assert alarm.raised and "[grpo_kit] WARNING: STALE-WEIGHTS ALARM at step 3" in capsys.readouterr().err
    assert json.loads((tmp_path / "alarms.jsonl").read_text())["kind"] == "stale_vllm_weights"
