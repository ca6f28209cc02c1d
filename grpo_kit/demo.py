"""The demo from Python: the shipped ``cpu-tiny`` recipe and a task run offline on a CPU through the pipeline's steps
(warm start, baseline, GRPO, after, report), as ``python -m grpo_kit demo`` and ``compare-demo`` run them.

``run_demo(DemoConfig(...))`` writes ``runs/<name>/``; ``run_compare_demo(CompareDemoConfig(...))`` trains several
reward sets from one warm start against one baseline; ``ship_demo_policy()`` rebuilds the demo's tiny policy
(``make tiny-weights``). They live with the steps they run, in :mod:`grpo_kit.runs.pipeline`; ``python -m
grpo_kit.demo`` runs the default demo.
"""

from grpo_kit.runs.pipeline import (
    CompareDemoConfig,
    DemoConfig,
    compare_tasks,
    demo_policy,
    run_compare_demo,
    run_demo,
    ship_demo_policy,
)

__all__ = ["CompareDemoConfig", "DemoConfig", "compare_tasks", "demo_policy", "run_compare_demo", "run_demo",
           "ship_demo_policy"]

if __name__ == "__main__":
    from grpo_kit.system.logs import configure_logging

    configure_logging()
    run_demo()
