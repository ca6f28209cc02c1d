"""Training curves from a trainer's log history, drawn with matplotlib."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grpo_kit.system.files import replaced

__all__ = ["MAX_CHART_INCHES", "plot_before_after", "plot_runs", "plot_training_curves", "training_curves"]

#: The widest chart drawn, in inches (1760 px at the 110 dpi charts are saved with).
MAX_CHART_INCHES = 16


def training_curves(log_history: Sequence[dict[str, Any]]) -> dict[str, tuple[list[int], list[float]]]:
    """Per-step series of every reward's mean, the total reward, the completion length and held-out accuracy.

    Args:
        log_history: ``trainer.state.log_history`` (one dict per logging step).

    Returns:
        ``{metric: (steps, values)}`` for ``rewards/<name>/mean`` of each reward, ``reward``,
        ``completions/mean_length``, then ``eval/strict_accuracy`` and ``eval/flexible_accuracy``
        (logged by :class:`grpo_kit.monitor.HeldOutEval`) with their interval bounds
        (``..._ci_low``, ``..._ci_high``), in that order, where logged.

    >>> training_curves([{"step": 1, "reward": 0.5, "rewards/f/mean": 0.1}, {"step": 2, "reward": 0.7}])
    {'rewards/f/mean': ([1], [0.1]), 'reward': ([1, 2], [0.5, 0.7])}

    A step whose mean is ``None`` or NaN (no completion could be judged) has no point:

    >>> training_curves([{"step": 1, "rewards/f/mean": None}, {"step": 2, "rewards/f/mean": float("nan")}])
    {}
    """
    keys = [k for row in log_history for k in row if k.startswith("rewards/") and k.endswith("/mean")]
    held_out = [f"eval/{rule}_accuracy{part}" for rule in ("strict", "flexible")
                for part in ("", "_ci_low", "_ci_high")]
    keys = list(dict.fromkeys(keys)) + ["reward", "completions/mean_length", *held_out]
    curves = {}
    for key in keys:
        # A step where no completion could be judged logs None (or NaN): no point there, the curve goes on.
        points = [(row["step"], float(row[key])) for row in log_history if "step" in row
                  and isinstance(row.get(key), (int, float)) and math.isfinite(row[key])]
        if points:
            curves[key] = ([s for s, _ in points], [v for _, v in points])
    return curves


def plot_training_curves(log_history: Sequence[dict[str, Any]], path: str | Path | None = None,
                         title: str = "GRPO training", heldout: str = "held-out") -> Any:
    """Draw one small panel per curve of :func:`training_curves`; save a PNG when ``path`` is given.

    Held-out strict and flexible accuracy, when logged, get a panel each with their 95% interval
    as a band, beside the reward curves; ``heldout`` names their split in the panel titles (``"validation"``:
    questions held out of the train split).

    Returns:
        The ``matplotlib.figure.Figure``.

    Raises:
        ValueError: the log history holds no reward curve.
    """
    import matplotlib.pyplot as plt  # headless machines fall back to the Agg backend by themselves

    curves = training_curves(log_history)
    accuracies = [k for k in curves if k.startswith("eval/") and not k.endswith(("_ci_low", "_ci_high"))]
    intervals = {key: (curves.pop(f"{key}_ci_low", None), curves.pop(f"{key}_ci_high", None)) for key in accuracies}
    if not curves:
        raise ValueError("the log history has no rewards/<name>/mean, reward or completion length entries")
    cols = 4
    rows = -(-len(curves) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.8 * rows), squeeze=False)
    for ax, (key, (steps, values)) in zip(axes.flat, curves.items()):
        ax.plot(steps, values, lw=1.2, marker="o" if key in intervals else None, ms=3)
        low, high = intervals.get(key, (None, None))
        if low and high:
            ax.fill_between(low[0], low[1], high[1], alpha=0.25)  # the 95% interval
            ax.set_ylim(-0.02, 1.02)
        name = key.removeprefix("rewards/").removesuffix("/mean")
        ax.set_title(f"{heldout} {name.removeprefix('eval/')} (95% CI)" if key in intervals else name, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(curves):]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    return _saved(fig, path)


def plot_before_after(table: Any, path: str | Path | None = None, title: str = "before vs after GRPO") -> Any:
    """Bar chart of each metric before and after, as a share of the metric's maximum, with the
    95% bootstrap intervals as error bars.

    Args:
        table: :func:`grpo_kit.evaluation.compare`'s frame.
        path: where to save a PNG, if given.

    Returns:
        The ``matplotlib.figure.Figure``.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    x = np.arange(len(table))
    fig, ax = plt.subplots(figsize=(10, 3.6))
    for offset, when in ((-0.2, "before"), (0.2, "after")):
        value = table[when] / table["max"]
        # clip: a mean can sit a rounding error outside its percentile interval (matplotlib refuses < 0)
        errors = [(value - table[f"{when}_low"] / table["max"]).clip(lower=0),
                  (table[f"{when}_high"] / table["max"] - value).clip(lower=0)]
        ax.bar(x + offset, value, width=0.4, yerr=errors, capsize=3, label=when)
    ax.set_xticks(x, table["metric"], rotation=20, ha="right", fontsize=9)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("share of maximum (95% CI)")
    ax.set_title(title)
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return _saved(fig, path)


def plot_runs(metrics: Any, path: str | Path | None = None, title: str = "runs against their shared baseline") -> Any:
    """Grouped bars: each metric (as a share of its maximum) for the baseline and every run, with 95% intervals.

    Args:
        metrics: :attr:`grpo_kit.evaluation.compare.RunsComparison.metrics` (``run``, ``metric``, ``value``,
            ``low``, ``high``, ``max``).
        path: where to save a PNG, if given.

    Returns:
        The ``matplotlib.figure.Figure``.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    runs = list(dict.fromkeys(metrics["run"]))
    labels = list(dict.fromkeys(metrics["metric"]))
    x = np.arange(len(labels))
    width = 0.8 / len(runs)
    # At most 16 inches wide, whatever the number of runs (12 runs were 80 inches): bars get thinner instead.
    fig, ax = plt.subplots(figsize=(min(MAX_CHART_INCHES, max(8, 1.2 * len(labels) * len(runs) / 2 + 4)), 3.8))
    for k, run in enumerate(runs):
        rows = metrics[metrics["run"] == run].set_index("metric").loc[labels]
        value = rows["value"] / rows["max"]
        errors = [(value - rows["low"] / rows["max"]).clip(lower=0), (rows["high"] / rows["max"] - value).clip(lower=0)]
        ax.bar(x - 0.4 + width * (k + 0.5), value, width=width, yerr=errors, capsize=2, label=run)
    ax.set_xticks(x, labels, rotation=20, ha="right", fontsize=9)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("share of maximum (95% CI)")
    ax.set_title(title)
    ax.legend(fontsize=8, ncol=-(-len(runs) // 8))
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return _saved(fig, path)


def _saved(fig: Any, path: str | Path | None) -> Any:
    """``fig``, written to ``path`` (when given) whole or not at all, in the format its suffix names."""
    if path is not None:
        with replaced(path) as tmp:
            fig.savefig(tmp, dpi=110)
    return fig
