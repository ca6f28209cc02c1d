"""The documentation's memory and time tables (docs/how-to/plan-and-doctor.md, "Memory per GPU", "Time, download
and disk") are what `python -m grpo_kit plan` answers, row by row."""

from __future__ import annotations

from pathlib import Path

from grpo_kit.training.plan import make_plan

PAGE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "plan-and-doctor.md"
PARTS = ("weights", "trainable", "optimizer", "vllm_weights", "kv_cache", "activations", "overhead")


def _rows() -> list[list[str]]:
    text = PAGE.read_text(encoding="utf-8")
    section = text[text.index("## Memory per GPU"):]
    table = [line for line in section.splitlines() if line.startswith("| `")]
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in table]
    return [row for row in cells if len(row) == 14]  # the memory table (the fields table has 2 columns)


def test_every_row_of_the_documented_memory_table_is_what_plan_answers():
    rows = _rows()
    assert len(rows) >= 10
    for preset, device, launch, gpus, *numbers, fits in rows:
        plan = make_plan(preset.strip("`"), device=device, launch=launch, processes=int(gpus))
        memory = plan.memory
        expected = [memory["parts"][p] for p in PARTS] + [memory["needed"], memory["available"]]
        assert [float(n) for n in numbers] == expected, (preset, device, launch)
        assert fits.startswith("yes") == (not plan.fatal), (preset, device, launch, plan.problems)


def test_every_row_of_the_documented_time_and_disk_table_is_what_plan_answers():
    text = PAGE.read_text(encoding="utf-8")
    section = text[text.index("## Time, download and disk"):]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| `")]
    assert len(rows) >= 8 and all(len(row) == 8 for row in rows)
    for preset, device, launch, gpus, with_vllm, without, download, total in rows:
        plan = make_plan(preset.strip("`"), device=device, launch=launch, processes=int(gpus))
        time, disk = plan.time, plan.disk
        said = [f"{e['hours']:.1f} ({e['seconds_per_step']:.0f} s)" if e else "-"
                for e in (time["with_vllm"], time["without_vllm"])]
        assert [with_vllm, without, download, total] == [*said, f"{disk['download']:.1f}", f"{disk['total']:.1f}"], \
            (preset, device)
