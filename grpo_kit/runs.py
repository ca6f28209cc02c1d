"""A run folder: the files one before/after experiment writes and reads, in one place.

Notebook 02 writes the baseline evaluation and its settings, 03 the trained model and the
trainer's log history, 04 reads both and writes the evaluation after training; the demo
writes the same files. Keeping the names here lets each step check that the earlier ones ran.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["RunFolder"]


@dataclass(frozen=True)
class RunFolder:
    """Paths inside one run folder (created on first use)."""

    path: Path

    def __init__(self, path: str | Path) -> None:
        object.__setattr__(self, "path", Path(path))
        self.path.mkdir(parents=True, exist_ok=True)

    baseline = property(lambda self: self.path / "baseline.jsonl", doc="records of the evaluation before training")
    trained = property(lambda self: self.path / "trained.jsonl", doc="records of the evaluation after training")
    baseline_sampled = property(lambda self: self.path / "baseline_sampled.jsonl", doc="sampled records, before")
    trained_sampled = property(lambda self: self.path / "trained_sampled.jsonl", doc="sampled records, after")
    generations = property(lambda self: self.path / "generations.jsonl", doc="the generation cache")
    comparison = property(lambda self: self.path / "comparison.csv", doc="the before/after table")
    before_after = property(lambda self: self.path / "before_after.png", doc="the before/after chart")
    model = property(lambda self: self.path / "model", doc="the trained LoRA adapter or full model")
    log_history = property(lambda self: self.path / "log_history.json", doc="the GRPO trainer's log history")
    curves = property(lambda self: self.path / "training_curves.png", doc="reward and length curves")
    eval_settings = property(lambda self: self.path / "eval_settings.json", doc="the evaluation slice and decoding")
    report = property(lambda self: self.path / "report.md", doc="the before/after report")

    def write_json(self, path: Path, data: Any) -> Path:
        """Write ``data`` as indented JSON to ``path`` (one of this folder's paths); returns it."""
        path.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
        return path

    def read_json(self, path: Path, written_by: str) -> Any:
        """Read a JSON file of this run.

        Raises:
            FileNotFoundError: the file is missing; the message names the step that writes it.
        """
        self.require(path, written_by)
        return json.loads(path.read_text(encoding="utf-8"))

    def require(self, path: Path, written_by: str) -> Path:
        """Return ``path``, or raise ``FileNotFoundError`` naming the step (``written_by``) that writes it."""
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: run {written_by} with run_dir={str(self.path)!r} first")
        return path
