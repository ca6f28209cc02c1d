"""GRPO really improves a policy: a learning test on a small synthetic arithmetic task.

REFERENCE section 6: a tiny warm-started policy that knows the sums but rarely uses the XML
format learns the format from GRPO within a few dozen steps. Here the warm start sees every
single-digit sum; GRPO trains on 70% of the (a, b) pairs; strict accuracy (strict format and
correct answer) is measured greedily on the other 30%, before and after, with an exact McNemar
test on the per-question flips.
"""

from __future__ import annotations

import re

import pytest
import torch

from grpo_kit.evaluation import evaluate, flips, mcnemar_exact
from grpo_kit.generation import Sampling, TransformersBackend
from grpo_kit.models import load_policy
from grpo_kit.training import build_trainer
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

    trainer = build_trainer(
        model, tokenizer, Dataset.from_list(train_rows).remove_columns(["solution", "question"]), "cpu-tiny",
        str(tmp_path / "grpo"),
        reward_funcs=["xmlcount_reward_func", "strict_format_reward_func", "correctness_reward_func"],
        reward_weights=(1.0, 1.0, 2.0), max_steps=60, max_completion_length=32, temperature=0.7,
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
