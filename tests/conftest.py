"""Shared fixtures: a tiny policy built offline once per test session."""

from __future__ import annotations

import pytest

from grpo_kit.data import load_gsm8k, tokenizer_texts
from grpo_kit.models import TinyPolicySpec, build_tiny_policy

SMALL_SPEC = TinyPolicySpec(vocab_size=512, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                            intermediate_size=128, max_positions=512)


@pytest.fixture(scope="session")
def gsm8k_train_small():
    return load_gsm8k("train").select(range(64))


@pytest.fixture(scope="session")
def tiny_policy_files(tmp_path_factory, gsm8k_train_small):
    """A small random policy saved to disk; tests load their own copy (training changes weights)."""
    model, tokenizer = build_tiny_policy(tokenizer_texts(gsm8k_train_small, system_copies=5), seed=0, spec=SMALL_SPEC)
    path = tmp_path_factory.mktemp("tiny-policy")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture
def tiny_policy(tiny_policy_files):
    from grpo_kit.models import load_policy

    return load_policy(tiny_policy_files, dtype="float32")
