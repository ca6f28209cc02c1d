"""Held-out accuracy while training and the reward-hacking alarm."""

from __future__ import annotations

import json

import pytest

from grpo_kit.answers import completion_text
from grpo_kit.evaluation import EvalResult, summarize
from grpo_kit.generation import Sampling
from grpo_kit.measure import alarms_markdown
from grpo_kit.monitor import StaleWeightsAlarm, reward_hacking, training_reward


def _result(correct: list[int]) -> EvalResult:
    records = [{"id": f"q{i}", "index": i, "sample": 0, "completion": "", "strict_correct": float(c),
                "flexible_correct": float(c), "strict_format_reward_func": 0.5, "total": 0.5}
               for i, c in enumerate(correct)]
    return EvalResult(records=records, summary=summarize(records), sampling=Sampling(), wall_s=0.0)


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


def test_stale_weights_alarm_reads_trls_logprob_gap(tmp_path, capsys):
    from types import SimpleNamespace

    alarm = StaleWeightsAlarm(threshold=0.1, folder=tmp_path)
    state = SimpleNamespace(global_step=3)
    alarm.on_log(None, state, None, logs={"sampling/sampling_logp_difference/mean": 0.004})
    assert alarm.raised == []
    alarm.on_log(None, state, None, logs={"sampling/sampling_logp_difference/mean": 1.31})
    assert alarm.raised and "STALE-WEIGHTS ALARM at step 3" in capsys.readouterr().err
    assert json.loads((tmp_path / "alarms.jsonl").read_text())["kind"] == "stale_vllm_weights"


@pytest.mark.slow
def test_a_reward_that_pays_for_length_destroys_accuracy_and_rings_the_alarm(addition_policy_files, tmp_path):
    from grpo_kit.models import load_policy
    from grpo_kit.pipeline import TrainRun, train
    from grpo_kit.presets import get_preset
    from tests.addition import addition_task, split_pairs

    def length_reward(completions, **kwargs):
        """Pays for length and nothing else: a reward the policy can hack."""
        return [len(completion_text(c)) / 50 for c in completions]

    train_rows, heldout_rows = split_pairs()
    model, tokenizer = load_policy(addition_policy_files, dtype="float32")
    preset = get_preset("cpu-tiny", max_steps=16, max_completion_length=32, learning_rate=3e-4, save_steps=100)
    run = TrainRun(preset=preset, task=addition_task(train_rows, heldout_rows), rewards={length_reward: 1.0},
                   run_dir=tmp_path / "run", eval_steps=8, eval_size=len(heldout_rows), progress="none")
    result = train(run, policy=(model, tokenizer))
    evals = [row for row in result.log_history if "eval/flexible_accuracy" in row]
    print("held-out flexible accuracy by step:", [(row["step"], round(row["eval/flexible_accuracy"], 3))
                                                  for row in evals])
    assert [row["step"] for row in evals] == [0, 8, 16]
    assert result.alarms and result.alarms[0]["kind"] == "reward_hacking"
    alarm = result.alarms[0]
    assert alarm["reward_after"] > alarm["reward_before"] and alarm["accuracy_after"] < alarm["accuracy_before"]
    assert alarm["mcnemar_p"] < 0.05 and alarm["right_to_wrong"] > alarm["wrong_to_right"]
    assert any(row.get("eval/reward_hacking_alarm") == 1.0 for row in evals)
    assert (tmp_path / "run" / "alarms.jsonl").is_file()
