"""The documentation's memory table (docs/how-to/plan-and-doctor.md, "Memory per GPU") is what `python -m grpo_kit
plan` answers, row by row."""

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
        memory = plan["memory"]
        expected = [memory["parts"][p] for p in PARTS] + [memory["needed"], memory["available"]]
        assert [float(n) for n in numbers] == expected, (preset, device, launch)
        assert fits.startswith("yes") == (not plan["fatal"]), (preset, device, launch, plan["problems"])
