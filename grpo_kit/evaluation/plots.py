"""Training curves from a trainer's log history, drawn with matplotlib."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grpo_kit.system.files import replaced

__all__ = ["MAX_CHART_INCHES", "plot_before_after", "plot_runs", "plot_training_curves", "smoothed",
           "training_curves"]

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


def smoothed(values: Sequence[float], window: int) -> list[float]:
    """Trailing mean of the last ``window`` values at each point (fewer at the start).

    >>> smoothed([0, 1, 2, 3], 2)
    [0.0, 0.5, 1.5, 2.5]
    """
    import pandas as pd

    return pd.Series(values, dtype=float).rolling(window, min_periods=1).mean().tolist()


def _panel(key: str, heldout: str, rewards: dict[str, Any], total_max: float, max_length: int | None
           ) -> tuple[str, str, float | None]:
    """A curve's panel title in words, its y-axis label and the largest value it can take (``None``: no bound)."""
    if key == "reward":
        return "Weighted total reward (TRL's reward)", "reward", total_max
    if key == "completions/mean_length":
        return "Completion length", "tokens (mean)", max_length
    if key.startswith("eval/"):
        rule = key.removeprefix("eval/").removesuffix("_accuracy")
        return f"{heldout.capitalize()} {rule} accuracy (95% CI)", "accuracy", 1.0
    name = key.removeprefix("rewards/").removesuffix("/mean")
    reward = rewards.get(name)
    return (reward.label, name, reward.max_value) if reward is not None else (f"Reward {name}", name, None)


def plot_training_curves(log_history: Sequence[dict[str, Any]], path: str | Path | None = None,
                         title: str = "GRPO training", heldout: str = "held-out", rewards: Any = None,
                         max_length: int | None = None) -> Any:
    """Draw one small panel per curve of :func:`training_curves`; save a PNG when ``path`` is given.

    Each panel is titled in words with the largest value the curve can take (a dashed line at it): a reward's from
    its description (:class:`grpo_kit.tasks.rewards.Reward`), the total reward's the weighted sum of those, the
    completion length's the token budget. Per-step values are noisy (a handful of completions each), so each
    curve is drawn faint with its trailing mean (:func:`smoothed`, over a tenth of the steps) on top. Held-out strict
    and flexible accuracy, when logged, get a panel each with their 95% interval as a band; ``heldout`` names
    their split (``"validation"``: questions held out of the train split).

    Args:
        log_history: ``trainer.state.log_history``.
        path: where to save a PNG, if given.
        title: the figure's title.
        heldout: the held-out split's name in the accuracy panels.
        rewards: the run's :class:`grpo_kit.tasks.RewardSet` (names, labels, maxima and weights); without
            it the built-in rewards are described by name and the total has no maximum.
        max_length: the completion budget in tokens (``max_completion_length``).

    Returns:
        The ``matplotlib.figure.Figure``.

    Raises:
        ValueError: the log history holds no reward curve.
    """
    import matplotlib.pyplot as plt  # headless machines fall back to the Agg backend by themselves

    from grpo_kit.tasks import BUILTIN_REWARDS
    from grpo_kit.tasks.rewards import Reward

    curves = training_curves(log_history)
    accuracies = [k for k in curves if k.startswith("eval/") and not k.endswith(("_ci_low", "_ci_high"))]
    intervals = {key: (curves.pop(f"{key}_ci_low", None), curves.pop(f"{key}_ci_high", None)) for key in accuracies}
    if not curves:
        raise ValueError("the log history has no rewards/<name>/mean, reward or completion length entries")
    described = {name: Reward.of(func) for name, func in BUILTIN_REWARDS.items()}
    total_max = math.nan
    if rewards is not None:
        described.update({r.name: r for r in rewards.rewards})
        total_max = sum(w * r.max_value for r, w in zip(rewards.rewards, rewards.weights))
    cols = min(4, len(curves))
    rows = -(-len(curves) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    for ax, (key, (steps, values)) in zip(axes.flat, curves.items()):
        words, unit, top = _panel(key, heldout, described, total_max, max_length)
        if key in intervals:
            ax.plot(steps, values, lw=1.4, marker="o", ms=3)
            low, high = intervals[key]
            if low and high:
                ax.fill_between(low[0], low[1], high[1], alpha=0.25)  # the 95% interval
        else:
            window = max(1, len(values) // 10)
            ax.plot(steps, values, lw=0.8, alpha=0.3, color="C0", label="per step")
            ax.plot(steps, smoothed(values, window), lw=1.8, color="C0",
                    label=f"mean of {window} steps" if window > 1 else None)
        if top is not None and math.isfinite(top) and top > 0:
            ax.axhline(top, ls="--", lw=0.8, color="0.4")
            ax.set_ylim(min(0.0, min(values)) - 0.02 * top, top * 1.06)
            words += f", max {top:g}"
        ax.set_title(words, fontsize=9)
        ax.set_xlabel("training step", fontsize=8)
        ax.set_ylabel(unit, fontsize=7)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(curves):]:
        ax.axis("off")
    fig.suptitle(f"{title}: faint lines per step, bold their running mean; dashed lines the maximum", fontsize=10)
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
    import pandas as pd

    return plot_runs(pd.concat([pd.DataFrame({"run": when, "metric": table["metric"], "value": table[when],
                                              "low": table[f"{when}_low"], "high": table[f"{when}_high"],
                                              "max": table["max"]}) for when in ("before", "after")]), path, title)


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
        # clip: a mean can sit a rounding error outside its percentile interval (matplotlib refuses < 0)
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
