"""pass@k, maj@k, bootstrap intervals and McNemar against exact or hand computations."""

from __future__ import annotations

import itertools
import random

import pytest

from grpo_kit.evaluation.stats import bootstrap_ci, maj_at_k, mcnemar_exact, paired_bootstrap_ci, pass_at_k


@pytest.mark.parametrize("n, c", [(1, 0), (1, 1), (4, 1), (5, 2), (6, 3), (7, 0), (7, 7), (8, 5)])
def test_pass_at_k_equals_exact_enumeration(n, c):
    samples = [True] * c + [False] * (n - c)
    for k in range(1, n + 1):
        subsets = list(itertools.combinations(range(n), k))
        exact = sum(any(samples[i] for i in s) for s in subsets) / len(subsets)
        assert pass_at_k(n, c, k) == pytest.approx(exact)


def test_pass_at_k_rejects_bad_counts():
    for args in [(4, 5, 1), (4, 1, 0), (4, 1, 5), (3, -1, 1)]:
        with pytest.raises(ValueError):
            pass_at_k(*args)


def test_maj_at_k_votes_and_breaks_ties_by_first_appearance():
    assert maj_at_k(["7", "7", "3"], "7") == 1.0
    assert maj_at_k(["3", "7", "7", "3"], "3") == 1.0  # 2-2 tie: "3" was sampled first
    assert maj_at_k(["7", "3", "3", "7"], "3") == 0.0  # same votes, "7" first
    assert maj_at_k([None, None, "3"], "3") == 1.0  # unparsed answers do not vote
    assert maj_at_k([], "3") == 0.0
    assert maj_at_k(["1200.0"], "1200", equal=lambda a, b: float(a) == float(b)) == 1.0


def test_bootstrap_ci_covers_a_known_mean_about_95_percent_of_the_time():
    rng = random.Random(0)
    true_mean, trials, covered = 0.3, 200, 0
    for trial in range(trials):
        values = [1.0 if rng.random() < true_mean else 0.0 for _ in range(150)]
        low, high = bootstrap_ci(values, n_resamples=1000, seed=trial)
        covered += low <= true_mean <= high
    assert 0.90 <= covered / trials <= 0.99


def test_bootstrap_ci_is_seeded_and_checked():
    values = [0.0, 1.0, 1.0, 0.0, 1.0]
    assert bootstrap_ci(values, seed=3) == bootstrap_ci(values, seed=3)
    low, high = bootstrap_ci(values)
    assert 0.0 <= low <= 0.6 <= high <= 1.0
    with pytest.raises(ValueError):
        bootstrap_ci([])
    with pytest.raises(ValueError):
        bootstrap_ci(values, confidence=1.0)


def test_paired_bootstrap_ci_of_a_constant_shift():
    assert paired_bootstrap_ci([0.0, 0.5, 1.0], [0.5, 1.0, 1.5]) == (0.5, 0.5)
    with pytest.raises(ValueError):
        paired_bootstrap_ci([0.0], [0.0, 1.0])


def test_mcnemar_exact_hand_computed():
    # b=10, c=2: two-sided p = 2 * P(X <= 2), X ~ Binomial(12, 1/2) = 2 * (1 + 12 + 66) / 4096
    assert mcnemar_exact(10, 2) == pytest.approx(2 * 79 / 4096)
    assert mcnemar_exact(0, 6) == pytest.approx(2 / 64)
    assert mcnemar_exact(3, 3) == 1.0
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 2)
