"""The demos' warm-started tiny policies ship with the kit: the demo, the compare demo and the CPU notebooks start from
them without a warm start, and a rebuild (``make tiny-weights``) evaluates the same."""

from __future__ import annotations

import hashlib
import time
from dataclasses import replace
from pathlib import Path

import pytest

from grpo_kit.demo import CompareDemoConfig, DemoConfig, demo_policy
from grpo_kit.policy.source import PolicySource
from grpo_kit.policy.warm_start import SHIP_THREADS, SHIPPED_DIR, ship, warm_started_tiny_policy
from grpo_kit.tasks import get_task


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def test_the_demos_policy_ships_and_the_demo_and_notebooks_find_it():
    tiny = demo_policy()
    assert tiny.shipped is not None, f"{SHIPPED_DIR / tiny.folder.name} missing: run make tiny-weights"
    size = sum(p.stat().st_size for p in tiny.shipped.iterdir())
    assert size < 10e6, f"the shipped policy is {size / 1e6:.1f} MB"
    # notebooks 02-04 with cpu_demo = True (no warm-start setting) resolve the same policy as the demo
    assert PolicySource.of(None, get_task("gsm8k")).tiny.folder.name == tiny.folder.name
    compare = demo_policy(CompareDemoConfig())  # the compare demo's (notebook 05's with cpu_demo = True)
    assert compare.shipped is not None, f"{SHIPPED_DIR / compare.folder.name} missing: run make tiny-weights"
    assert sum(p.stat().st_size for p in compare.shipped.iterdir()) < 10e6
    assert sorted(p.name for p in SHIPPED_DIR.iterdir() if not p.name.startswith(".")) == sorted(
        [tiny.folder.name, compare.folder.name])


def test_a_missing_cache_is_restored_from_the_shipped_copy_without_training(tmp_path):
    tiny = demo_policy(DemoConfig(cache_dir=str(tmp_path / "cache")))
    start = time.perf_counter()
    model, tokenizer, cached = warm_started_tiny_policy(tiny, progress=False)
    assert cached and time.perf_counter() - start < 60  # a warm start takes minutes
    assert _digests(tiny.folder) == _digests(tiny.shipped)  # copied whole
    assert not [p for p in tiny.folder.parent.iterdir() if p.name.startswith(".")]  # no staging folder left
    other = demo_policy(DemoConfig(cache_dir=str(tmp_path / "other"), seed=1))  # another policy: not shipped
    assert other.shipped is None and not other.cached


@pytest.mark.rebuild
@pytest.mark.parametrize("config", [DemoConfig(), CompareDemoConfig()], ids=["demo", "compare-demo"])
def test_a_rebuild_of_the_shipped_policy_evaluates_the_same(config, tmp_path):
    """``make tiny-weights`` from scratch (minutes): the rebuilt policy answers 64 test questions of its task greedily
    as the shipped one does (the same completions on nearly all, the same accuracy and format counts)."""
    import torch

    from grpo_kit.evaluation.scoring import evaluate
    from grpo_kit.policy.generation import Sampling, TransformersBackend
    from grpo_kit.policy.loading import load_policy
    from grpo_kit.tasks.data import take_slice

    tiny = demo_policy(config)
    rebuilt = ship(demo_policy(replace(config, cache_dir=str(tmp_path / "cache"))), shipped_dir=tmp_path / "shipped")
    shipped = tiny.shipped
    assert rebuilt.name == shipped.name and torch.get_num_threads() >= SHIP_THREADS
    task = tiny.task
    questions = take_slice(task.load("test"), n=64, seed=0)
    results = []
    for folder in (shipped, rebuilt):
        model, tokenizer = load_policy(folder, dtype="float32")
        results.append(evaluate(TransformersBackend(model, tokenizer, batch_size=64, progress=False), questions,
                                Sampling(temperature=0.0, max_new_tokens=64), task=task))
    before, after = ([r["completion"] for r in result.records] for result in results)
    same = sum(a == b for a, b in zip(before, after))
    assert same >= 0.9 * len(before), f"{same} of {len(before)} completions identical"
    for metric in ("strict_correct", "flexible_correct", "strict_format_reward_func"):
        assert [r[metric] for r in results[0].records].count(0) == pytest.approx(
            [r[metric] for r in results[1].records].count(0), abs=3), metric


def test_an_interrupted_warm_start_leaves_no_half_built_folder(tmp_path, monkeypatch):
    """Each interrupted warm start left .tiny-policy-*.building-<pid>/ in the cache."""
    import grpo_kit.policy.warm_start as warm_start_module
    from grpo_kit.policy.warm_start import TinyPolicy, _build_cache
    from grpo_kit.tasks import get_task

    def interrupted(model, tokenizer, train, folder, warm, **kwargs):
        (folder / "half").mkdir(parents=True)
        raise KeyboardInterrupt

    monkeypatch.setattr(warm_start_module, "build_tiny_policy", lambda *a, **k: (None, None))
    monkeypatch.setattr(warm_start_module, "warm_start", interrupted)
    tiny = TinyPolicy(get_task("sum3"), cache_dir=str(tmp_path))
    with pytest.raises(KeyboardInterrupt):
        _build_cache(tiny, train=tiny.task.load("train").select(range(2)))
    assert list(tmp_path.iterdir()) == []


def test_a_model_folder_that_cannot_take_its_place_leaves_the_old_one_where_it_was(tmp_path, monkeypatch):
    """saved_whole moves the old folder aside before renaming the new one in: when that rename fails (a full disk),
    the old folder goes back, and nothing half-built or set aside is left beside it."""
    import os

    from grpo_kit.policy import loading

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "done.json").write_text("old")
    real = os.replace

    def full_disk(src, dst):
        if ".building-" in str(src):
            raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(loading.os, "replace", full_disk)
    with pytest.raises(OSError, match="No space"), loading.saved_whole(folder, "done.json") as building:
        (building / "done.json").write_text("new")
    assert (folder / "done.json").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
