"""Measuring a policy: generate for a whole test set, score it, summarise it with intervals, compare before and
after with paired tests, report, plot, and explore a task's data.

- :mod:`~grpo_kit.evaluation.scoring`: :func:`evaluate` a backend on a dataset into an :class:`EvalResult`.
- :mod:`~grpo_kit.evaluation.summary`: one evaluation's metrics with bootstrap intervals; pass@k, maj@k.
- :mod:`~grpo_kit.evaluation.compare`: before/after on the same questions: paired intervals, flips, McNemar.
- :mod:`~grpo_kit.evaluation.stats`: the statistics themselves, pure functions.
- :mod:`~grpo_kit.evaluation.report`, :mod:`~grpo_kit.evaluation.plots`: markdown and charts.
- :mod:`~grpo_kit.evaluation.explore`: a task's data before training (notebook 01).
"""
