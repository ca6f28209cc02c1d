"""GRPO really changes a policy: a learning test, and a reward-hacking test, on a small arithmetic task.

A tiny warm-started policy that knows the sums but rarely uses the XML format (the answer format of
the blog post "LLM Reinforcement Learning with GRPO", 2025-03-03) learns the format from GRPO within
20 steps (held-out strict accuracy 0.07 before, then 0.34, 0.71, 0.86 and 0.91 after 10, 20, 30 and 40 steps on
one CPU). Here the warm start sees every single-digit sum; GRPO trains on 70% of the (a, b) pairs; strict accuracy
(strict format and correct answer) is measured greedily on the other 30%, before and after, with an exact McNemar
test on the per-question flips. The same policy, paid for length instead, loses its sums while its
reward rises, and the run's held-out evaluation raises the reward-hacking alarm.
(The choice of reward deciding what is learned: test_reward_choice.py.)
"""

from __future__ import annotations

import re

import pytest
import torch

from grpo_kit.evaluation.compare import flips
from grpo_kit.evaluation.scoring import evaluate
from grpo_kit.evaluation.stats import mcnemar_exact
from grpo_kit.policy.generation import Sampling, TransformersBackend
from grpo_kit.policy.loading import load_policy
from grpo_kit.tasks import RewardSet
from grpo_kit.tasks.answer_format import completion_text
from grpo_kit.training.trainer import build_trainer
from tests.addition import split_pairs


def last_number_correct(result):
    """Lenient, flexible-extract style: the last number anywhere in the completion is the gold answer."""
    return [(re.findall(r"-?\d+", r["completion"]) or [None])[-1] == r["answer"] for r in result.records]


def strict_correct(result):
    return [r["strict_format_reward_func"] > 0 and r["correctness_reward_func"] > 0 for r in result.records]


@pytest.mark.slow
def test_grpo_raises_held_out_strict_accuracy_significantly(addition_policy_files, tmp_path):
    from datasets import Dataset

    torch.manual_seed(0)
    train_rows, heldout_rows = split_pairs()
    model, tokenizer = load_policy(addition_policy_files, dtype="float32")

    greedy = Sampling(max_new_tokens=32)
    before = evaluate(TransformersBackend(model, tokenizer, batch_size=90, progress=False), heldout_rows, greedy)
    lenient_before = sum(last_number_correct(before)) / len(before.records)

    rewards = RewardSet(["xmlcount_reward_func", "strict_format_reward_func", "correctness_reward_func"],
                        (1.0, 1.0, 2.0))
    trainer = build_trainer(
        model, tokenizer, Dataset.from_list(train_rows).remove_columns(["solution", "question"]), "cpu-tiny",
        rewards, str(tmp_path / "grpo"), max_steps=20, max_completion_length=32, temperature=0.7,
        learning_rate=3e-5, per_device_train_batch_size=32, num_generations=8)
    trainer.args.disable_tqdm = True
    trainer.train()
    after = evaluate(TransformersBackend(trainer.model, tokenizer, batch_size=90, progress=False), heldout_rows,
                     greedy)

    ok_before, ok_after = strict_correct(before), strict_correct(after)
    gained, lost = flips(ok_before, ok_after)
    p = mcnemar_exact(gained, lost)
    rate_before, rate_after = sum(ok_before) / len(ok_before), sum(ok_after) / len(ok_after)
    print(f"held-out strict accuracy {rate_before:.3f} -> {rate_after:.3f} "
          f"({gained} wrong->right, {lost} right->wrong, McNemar p={p:.2g}); lenient before {lenient_before:.3f}")
    assert lenient_before >= 0.5  # the warm start knows the sums: the format is what GRPO has to teach
    assert rate_before <= 0.1  # and greedy decoding rarely uses the XML format
    assert rate_after - rate_before >= 0.2
    assert p < 0.01


@pytest.mark.slow
def test_a_reward_that_pays_for_length_destroys_accuracy_and_rings_the_alarm(addition_policy_files, tmp_path):
    from grpo_kit.runs.spec import RunSpec
    from grpo_kit.runs.train import train
    from grpo_kit.training.presets import get_preset
    from tests.addition import addition_task

    def length_reward(completions, **kwargs):
        """Pays for length and nothing else: a reward the policy can hack."""
        return [len(completion_text(c)) / 50 for c in completions]

    train_rows, heldout_rows = split_pairs()
    model, tokenizer = load_policy(addition_policy_files, dtype="float32")
    preset = get_preset("cpu-tiny", max_steps=16, max_completion_length=32, learning_rate=3e-4, save_steps=100)
    spec = RunSpec.resolve(preset, task=addition_task(train_rows, heldout_rows), rewards={length_reward: 1.0},
                           run_dir=tmp_path / "run", eval_steps=8, eval_size=len(heldout_rows), progress="none")
    result = train(spec, policy=(model, tokenizer))
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


@pytest.mark.rebuild
def test_a_rebuild_of_the_committed_addition_policy_answers_the_same(tmp_path):
    """``make tiny-weights`` from scratch (about 2 minutes): the rebuilt policy answers the held-out questions greedily
    as the committed one does (the same completions on nearly all, the same strict and lenient counts)."""
    from tests.conftest import ADDITION_POLICY, ship_addition_policy

    _, heldout_rows = split_pairs()
    results = []
    for folder in (ADDITION_POLICY, ship_addition_policy(tmp_path / "addition")):
        model, tokenizer = load_policy(folder, dtype="float32")
        results.append(evaluate(TransformersBackend(model, tokenizer, batch_size=90, progress=False), heldout_rows,
                                Sampling(max_new_tokens=32)))
    committed, rebuilt = results
    same = sum(a["completion"] == b["completion"] for a, b in zip(committed.records, rebuilt.records))
    assert same >= 0.9 * len(heldout_rows), f"{same} of {len(heldout_rows)} completions identical"
    for count in (strict_correct, last_number_correct):
        assert sum(count(committed)) == pytest.approx(sum(count(rebuilt)), abs=3), count.__name__
