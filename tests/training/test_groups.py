"""The training groups a run keeps (grpo_kit.training.groups): TRL's logged completions become one Parquet file per
kept step, bounded, written whole, and a resume drops what a killed run kept after its checkpoint.

TRL's files are written here as trl 1.15.0's ``GRPOTrainer.log`` writes them (``completions/completions_<step>.parquet``
under ``output_dir``); the real trainer writes them in tests/runs/test_train_runs.py.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import pytest

from grpo_kit.training.groups import GROUP_COLUMNS, GroupsKept, groups_frame, keep_groups, kept_steps, read_groups


def _trl(step: int, groups: int = 3, generations: int = 4) -> pd.DataFrame:
    rows = {"step": [], "prompt": [], "completion": [], "fmt": [], "right": [], "advantage": []}
    for g in range(groups):
        for i in range(generations):
            rows["step"].append(step)
            rows["prompt"].append([{"role": "system", "content": "S"}, {"role": "user", "content": f"q{step}-{g}"}])
            rows["completion"].append([{"role": "assistant", "content": f"c{step}-{g}-{i}"}])
            rows["fmt"].append(0.5)
            rows["right"].append(None if (g, i) == (1, 0) else float(g > 0 and i % 2 == 0))
            rows["advantage"].append(0.0 if g == 0 else (1.0 if i % 2 == 0 else -1.0))
    return pd.DataFrame(rows)


def _write_trl(output_dir, step: int) -> None:
    folder = output_dir / "completions"
    folder.mkdir(parents=True, exist_ok=True)
    _trl(step).to_parquet(folder / f"completions_{step:05d}.parquet")


def test_a_step_keeps_its_first_groups_with_the_weighted_total_and_the_spread():
    frame = groups_frame(_trl(5), 5, ["fmt", "right"], [1.0, 2.0], num_generations=4, groups=2)
    assert list(frame.columns) == [*GROUP_COLUMNS[:4], "reward/fmt", "reward/right", *GROUP_COLUMNS[4:]]
    assert len(frame) == 8 and list(frame["group"]) == [0] * 4 + [1] * 4 and set(frame["step"]) == {5}
    assert frame["prompt"][0] == "q5-0" and frame["completion"][5] == "c5-1-1"  # the text of the last message
    assert math.isnan(frame["reward/right"][4]) and frame["total"][4] == 0.5  # a reward that could not judge: skipped
    assert list(frame["total"][4:]) == [0.5, 0.5, 2.5, 0.5]
    assert set(frame["group_std"][:4]) == {0.0} and frame["group_std"][4] == pytest.approx(0.8660254)


def test_settings_out_of_range_are_refused():
    assert not GroupsKept(groups=0).on and GroupsKept().on
    for bad in ({"every": 0}, {"groups": -1}, {"every": 1.5}):
        with pytest.raises(ValueError, match="whole number"):
            GroupsKept(**bad)


def _events(callback, output_dir, steps, start=0):
    args, control = SimpleNamespace(output_dir=str(output_dir)), SimpleNamespace()
    callback.on_train_begin(args, SimpleNamespace(global_step=start), control)
    for step in steps:  # as the trainer orders them: the step ends, then TRL logs it
        callback.on_step_end(args, SimpleNamespace(global_step=step), control)
        _write_trl(output_dir, step)
    callback.on_train_end(args, SimpleNamespace(global_step=steps[-1]), control)


def test_every_nth_step_is_kept_whole_and_trl_copies_are_removed(tmp_path):
    out, kept = tmp_path / "checkpoints", tmp_path / "groups"
    _events(keep_groups(kept, GroupsKept(every=2, groups=2), ["fmt", "right"], [1.0, 1.0], 4), out, range(1, 7))
    assert [s for s, _ in kept_steps(kept)] == [2, 4, 6]
    assert sorted(p.name for p in kept.iterdir()) == ["step-000002.parquet", "step-000004.parquet",
                                                      "step-000006.parquet"]  # no temporary file left
    assert not list((out / "completions").iterdir())
    frame = read_groups(kept)
    assert list(frame["step"].unique()) == [2, 4, 6] and frame.groupby("step").size().tolist() == [8, 8, 8]
    assert read_groups(kept, steps=[4])["step"].unique().tolist() == [4]
    assert read_groups(tmp_path / "none").empty
    (kept / "step-000004.parquet").write_bytes(b"PAR1 torn")
    with pytest.raises(ValueError, match="step-000004.parquet is damaged"):
        read_groups(kept)
    damaged: list[str] = []
    assert read_groups(kept, damaged=damaged)["step"].unique().tolist() == [2, 6]  # only the torn step is left out
    assert len(damaged) == 1 and "delete it" in damaged[0]


def test_a_resume_drops_what_a_killed_run_kept_after_its_checkpoint(tmp_path, caplog):
    out, kept = tmp_path / "checkpoints", tmp_path / "groups"
    kept_args = (GroupsKept(), ["fmt", "right"], [1.0, 1.0], 4)
    _events(keep_groups(kept, *kept_args), out, range(1, 6))  # killed after step 5 was kept
    _write_trl(out, 6)  # ...and after TRL logged step 6
    (out / "completions" / "completions_00003.parquet").write_bytes(b"torn")  # a file a kill tore
    callback = keep_groups(kept, *kept_args)
    callback.on_train_begin(SimpleNamespace(output_dir=str(out)), SimpleNamespace(global_step=4), SimpleNamespace())
    assert [s for s, _ in kept_steps(kept)] == [1, 2, 3, 4]  # 5 and 6 are trained again
    assert "skipped the completions TRL logged at step 3" in caplog.text
    assert read_groups(kept, steps=[3])["completion"][0] == "c3-0-0"  # the step kept before stays
    assert not list((out / "completions").iterdir())


def test_nothing_is_written_off_the_main_process_or_with_zero_groups(tmp_path):
    out = tmp_path / "checkpoints"
    _events(keep_groups(tmp_path / "a", GroupsKept(), ["fmt"], [1.0], 4, is_main_process=False), out, [1, 2])
    assert not (tmp_path / "a").exists()
    _events(keep_groups(tmp_path / "b", GroupsKept(groups=0), ["fmt"], [1.0], 4), out, [3])
    assert not (tmp_path / "b").exists() and not list((out / "completions").iterdir())
