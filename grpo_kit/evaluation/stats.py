"""Statistics for evaluations: pass@k, maj@k, bootstrap confidence intervals, exact McNemar.

Pure functions over plain numbers, so they are easy to test against hand computations.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["bootstrap_ci", "holm", "maj_at_k", "mcnemar_exact", "paired_bootstrap_ci", "pass_at_k"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct: ``1 - C(n-c, k) / C(n, k)``.

    The probability that at least one of ``k`` samples drawn without replacement from the
    ``n`` is correct (Chen et al. 2021, "Evaluating Large Language Models Trained on Code").

    Raises:
        ValueError: unless ``0 <= c <= n`` and ``1 <= k <= n``.

    >>> round(pass_at_k(10, 3, 1), 6)
    0.3
    >>> round(pass_at_k(4, 1, 2), 4)
    0.5
    """
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def maj_at_k(answers: Sequence[str | None], gold: str, equal: Callable[[Any, Any], bool] | None = None) -> float:
    """Majority vote: 1.0 when the most frequent answer among ``answers`` equals ``gold``.

    ``None`` answers (nothing extracted) do not vote. Ties go to the answer seen first
    among the tied ones (deterministic: the sample order decides), and no votes at all give 0.

    Args:
        answers: the k extracted answers of one question, normalised (e.g. ``"1200"``).
        gold: the gold answer.
        equal: how the winner is compared with ``gold``; default ``==``.

    >>> maj_at_k(["3", "4", "4", None, None], "4")
    1.0
    >>> maj_at_k(["3", "4"], "4")  # a tie: "3" came first
    0.0
    >>> maj_at_k([None, None], "4")
    0.0
    """
    votes = Counter(a for a in answers if a is not None)
    if not votes:
        return 0.0
    top = max(votes.values())
    winner = next(a for a in answers if a is not None and votes[a] == top)
    return 1.0 if (equal(winner, gold) if equal else winner == gold) else 0.0


def bootstrap_ci(values: Sequence[float], confidence: float = 0.95, n_resamples: int = 2000,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean of ``values`` (one value per question):
    ``scipy.stats.bootstrap`` with ``method="percentile"`` (Efron & Tibshirani 1993), resampling questions with
    replacement ``n_resamples`` times from a generator seeded with ``seed``, so the same values give the same interval.

    Returns:
        ``(low, high)``; ``(v, v)`` for a single value (scipy needs two).

    Raises:
        ValueError: no values, or ``confidence`` outside (0, 1).

    >>> bootstrap_ci([1.0] * 10)
    (1.0, 1.0)
    """
    import numpy as np
    from scipy.stats import bootstrap

    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        raise ValueError("no values to bootstrap")
    if data.size == 1:
        return float(data[0]), float(data[0])
    found = bootstrap((data,), np.mean, n_resamples=n_resamples, confidence_level=confidence, method="percentile",
                      rng=np.random.default_rng(seed)).confidence_interval
    return float(found.low), float(found.high)


def paired_bootstrap_ci(before: Sequence[float], after: Sequence[float], confidence: float = 0.95,
                        n_resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Bootstrap interval of ``mean(after) - mean(before)`` resampling the same questions for both.

    Raises:
        ValueError: the two lists differ in length (they must be the same questions in order).
    """
    if len(before) != len(after):
        raise ValueError(f"paired values need the same questions: {len(before)} before, {len(after)} after")
    return bootstrap_ci([a - b for a, b in zip(after, before)], confidence, n_resamples, seed)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the two discordant counts.

    Under no change each discordant pair is equally likely to go either way, so
    ``min(b, c)`` is Binomial(b + c, 1/2); the p-value is scipy's exact two-sided binomial
    test (McNemar 1947; the exact form as in Fagerland et al. 2013).

    Args:
        b: questions wrong before and right after.
        c: questions right before and wrong after.

    Returns:
        p-value in [0, 1]; 1.0 when there are no discordant pairs.

    Raises:
        ValueError: a negative count.

    >>> round(mcnemar_exact(10, 2), 4)
    0.0386
    """
    if b < 0 or c < 0:
        raise ValueError(f"counts must be non-negative, got {b} and {c}")
    if b + c == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(binomtest(b, b + c, 0.5).pvalue)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of several p-values for the number of tests (Holm 1979), in the given order.

    The i-th smallest p-value is multiplied by ``m - i + 1`` (``m`` tests, ``i`` from 1), the results are made
    non-decreasing in that order and capped at 1. Rejecting every hypothesis whose adjusted p-value is below ``alpha``
    keeps the chance of any false rejection at most ``alpha``, whatever the dependence between the tests.

    Raises:
        ValueError: a p-value outside [0, 1] (or not a number).

    >>> holm([0.01, 0.04, 0.03])
    [0.03, 0.06, 0.06]
    >>> holm([])
    []
    """
    import numpy as np

    values = [float(p) for p in p_values]
    if any(not 0 <= p <= 1 for p in values):  # also refuses NaN
        raise ValueError(f"p-values must be in [0, 1], got {values}")
    m, order = len(values), np.argsort(values, kind="stable")
    adjusted = np.empty(m)
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * np.asarray(values)[order]))
    return adjusted.tolist()
