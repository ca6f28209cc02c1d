"""Command line: ``python -m grpo_kit demo`` (the offline before/after pipeline) and ``presets``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _demo(args: argparse.Namespace) -> int:
    import datasets

    from grpo_kit.demo import DemoConfig, run_demo
    from grpo_kit.warm_start import WarmStart

    datasets.disable_progress_bars()  # per-row map/filter bars drown the phase bars

    config = DemoConfig(
        name=args.name if args.name is not None else ("demo" if args.task == "gsm8k" else f"demo-{args.task}"),
        task=args.task,
        runs_dir=args.runs_dir,
        cache_dir=args.cache_dir,
        eval_size=args.eval_size,
        train_size=args.train_size,
        grpo_steps=args.steps,
        samples=args.samples,
        warm=WarmStart(steps=args.warm_steps, xml_share=args.xml_share),
        seed=args.seed,
    )
    run_demo(config)
    return 0


def _presets(args: argparse.Namespace) -> int:  # noqa: ARG001
    from grpo_kit.training import PRESETS

    for preset in PRESETS.values():
        print(f"{preset.name:10s} {preset.model or '(tiny offline policy)'}\n           {preset.description}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m grpo_kit`` and ``grpo-kit``; returns the exit status."""
    from grpo_kit.demo import DemoConfig
    from grpo_kit.warm_start import WarmStart

    defaults, warm = DemoConfig(), WarmStart()
    parser = argparse.ArgumentParser(prog="python -m grpo_kit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="warm start, evaluate, GRPO, evaluate, report (offline, CPU)")
    demo.add_argument("--task", default=defaults.task, choices=["gsm8k", "countdown"],
                      help="the task to train and evaluate on (grpo_kit.tasks)")
    demo.add_argument("--name", default=None, help="run folder name under --runs-dir (default demo, demo-<task>)")
    demo.add_argument("--runs-dir", default=defaults.runs_dir)
    demo.add_argument("--cache-dir", default=defaults.cache_dir, help="where the warm-started policy is cached")
    demo.add_argument("--eval-size", type=int, default=defaults.eval_size, help="test questions to evaluate")
    demo.add_argument("--train-size", type=int, default=None, help="train questions for GRPO (default all)")
    demo.add_argument("--samples", type=int, default=defaults.samples,
                      help="sampled completions per question for avg@k / pass@k / maj@k (0: greedy only)")
    demo.add_argument("--steps", type=int, default=defaults.grpo_steps, help="GRPO optimiser steps")
    demo.add_argument("--warm-steps", type=int, default=warm.steps, help="supervised warm-start steps")
    demo.add_argument("--xml-share", type=float, default=warm.xml_share,
                      help="share of warm-start targets in the XML format")
    demo.add_argument("--seed", type=int, default=defaults.seed)
    demo.set_defaults(func=_demo)
    presets = sub.add_parser("presets", help="list the training presets")
    presets.set_defaults(func=_presets)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
