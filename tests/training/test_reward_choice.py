"""The choice of reward decides what is learned: on sum3 a correctness reward raises held-out accuracy (choosing,
among the ways the warm-started policy answers, the right one), a format-only reward set on the same budget does not.

In a file of its own so that the test runner can run it beside the other learning tests (it takes the longest).
"""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_a_correctness_reward_raises_held_out_accuracy_where_a_format_only_reward_does_not(tmp_path):
    """The compare demo's experiment (docs/tutorials/compare-runs.md): sum3's warm-started policy
    answers in a worked style (right) or a sloppy one (wrong when the sum carries, a guess on unseen triples); two
    reward sets, one budget, 300 held-out questions. The warm-started policy ships with the kit (as
    `python -m grpo_kit compare-demo` loads it), so no warm start runs here."""
    from grpo_kit.demo import CompareDemoConfig, run_compare_demo
    from grpo_kit.evaluation.summary import sampled_metrics

    result = run_compare_demo(CompareDemoConfig(runs_dir=str(tmp_path), progress=False))
    pairs = result["report"].comparison.pairs
    flexible = pairs[pairs["key"] == "flexible_correct"].set_index(["a", "b"])
    correctness, format_only = flexible.loc[("baseline", "correctness")], flexible.loc[("baseline", "format-only")]
    head_to_head = flexible.loc[("format-only", "correctness")]
    sampled = sampled_metrics(result["measured"]["correctness"].before_sampled.records)
    pass_at_8 = sampled.loc["pass@8 (flexible)", "value"]
    print(flexible[["a_value", "b_value", "wrong_to_right", "right_to_wrong", "mcnemar_p", "holm_p"]].to_string())
    print(f"baseline pass@8 (flexible) {pass_at_8:.3f}; wall {result['wall']}")
    assert 0 < correctness["a_value"] <= 0.2  # greedy: right some of the time
    assert pass_at_8 >= 0.5 and pass_at_8 >= 3 * correctness["a_value"]  # and much more often among 8 samples
    # The size of the gain depends on the warm start, which differs between CPUs (docs/tutorials/compare-runs.md,
    # "How robust is it": +0.94 on one machine, +0.30 on another with the same seed, the shipped policy's); its
    # direction does not.
    assert correctness["delta"] >= 0.25 and correctness["mcnemar_p"] < 0.01
    assert not (format_only["delta"] > 0 and format_only["mcnemar_p"] < 0.01)  # paying the format teaches no sums
    assert head_to_head["delta"] >= 0.25 and head_to_head["holm_p"] < 0.01
