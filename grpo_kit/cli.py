"""Command line: ``python -m grpo_kit demo | train | eval | presets`` (also ``grpo-kit ...``).

- ``demo``: the offline before/after pipeline on a CPU (warm start, measure, train, measure, report).
- ``train``: GRPO into a run folder, with checkpoints, ``--resume`` and held-out accuracy; the same
  pipeline as notebook 03 (:func:`grpo_kit.pipeline.train`), and what ``accelerate launch -m grpo_kit
  train`` runs on every process.
- ``eval``: ``--before`` measures the starting policy (notebook 02); without it, the run folder's trained
  model on the same questions and the before/after report (notebook 04).

Every argument is checked before any model, tokenizer or dataset loads.
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main", "parse_rewards", "parse_sets"]


def _say(message: str) -> None:
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"[grpo_kit] {message}", flush=True)


def parse_rewards(items: Sequence[str]) -> Any:
    """``--rewards`` values as a ``RewardMix``: ``name`` or ``name=weight``, space- or comma-separated, where a
    name is a registered reward or your own function as ``module:function`` (importable from the current folder).

    Raises:
        ValueError: an unknown reward name, a function that cannot be imported, or a weight that is not a number.

    >>> parse_rewards(["correctness_reward_func=2", "xmlcount_reward_func=0"])
    RewardMix({'correctness_reward_func': 2, 'xmlcount_reward_func': 0})
    """
    import importlib

    from grpo_kit.rewards import RewardMix

    rewards, weights = [], []
    for item in (part for entry in items for part in entry.split(",") if part.strip()):
        name, _, weight = item.strip().partition("=")
        try:
            weights.append(float(weight) if weight else 1.0)
        except ValueError:
            raise ValueError(f"--rewards {item!r}: the weight after '=' must be a number") from None
        if ":" in name:
            module, _, function = name.partition(":")
            try:
                rewards.append(getattr(importlib.import_module(module), function))
            except (ImportError, AttributeError) as e:
                raise ValueError(f"--rewards {name!r}: cannot import {function!r} from {module!r} ({e}); give "
                                 "module:function of a reward importable from the current folder") from None
        else:
            rewards.append(name)
    return RewardMix(rewards, weights)


def parse_sets(items: Sequence[str]) -> dict[str, Any]:
    """``--set FIELD=VALUE`` pairs as preset overrides; a value is read as a Python literal (number, None,
    True, a tuple or dict) and otherwise kept as text.

    Raises:
        ValueError: an item without ``=``.

    >>> parse_sets(["learning_rate=1e-5", "lora_rank=None", "optim=adamw_torch"])
    {'learning_rate': 1e-05, 'lora_rank': None, 'optim': 'adamw_torch'}
    """
    overrides = {}
    for item in items:
        field, sep, raw = item.partition("=")
        if not sep or not field.strip():
            raise ValueError(f"--set {item!r}: write FIELD=VALUE, e.g. --set learning_rate=1e-5")
        try:
            value: Any = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        overrides[field.strip()] = value
    return overrides


def _nonnegative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {value}")
    return value


def _share(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {value}")
    return value


def _quiet_library_bars() -> None:
    """Per-row map bars (datasets) and per-save shard bars (transformers) drown the kit's own progress."""
    import datasets
    from transformers.utils import logging

    datasets.disable_progress_bars()
    logging.disable_progress_bar()


def _demo(args: argparse.Namespace) -> int:
    from grpo_kit.demo import DemoConfig, run_demo
    from grpo_kit.warm_start import WarmStart

    warm = WarmStart(steps=args.warm_steps, xml_share=args.xml_share)  # bad values raise here
    config = DemoConfig(
        name=args.name if args.name is not None else ("demo" if args.task == "gsm8k" else f"demo-{args.task}"),
        task=args.task, runs_dir=args.runs_dir, cache_dir=args.cache_dir, eval_size=args.eval_size,
        train_size=args.train_size, grpo_steps=args.steps, samples=args.samples, warm=warm, seed=args.seed,
        resume=args.resume)
    _quiet_library_bars()
    run_demo(config)
    return 0


def _train_run(args: argparse.Namespace) -> Any:
    """The :class:`grpo_kit.pipeline.TrainRun` of ``train``'s arguments (checked, nothing loaded)."""
    from grpo_kit.pipeline import TrainRun
    from grpo_kit.presets import get_preset
    from grpo_kit.tasks import get_task
    from grpo_kit.tracking import setup_wandb
    from grpo_kit.warm_start import WarmStart

    task = get_task(args.task)
    overrides = parse_sets(args.set)
    for name in ("max_steps", "save_steps"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    if args.report_to == "wandb":
        overrides["report_to"] = setup_wandb(args.wandb_project)
    preset = get_preset(args.preset, **overrides)
    rewards = parse_rewards(args.rewards) if args.rewards else (preset.rewards if "rewards" in overrides else None)
    run_dir = Path(args.run_dir or Path("runs") / f"{preset.name}-{task.name}")
    return TrainRun(preset=preset, task=task, rewards=rewards, run_dir=run_dir, model=args.model, resume=args.resume,
                    train_size=args.train_size, eval_steps=args.eval_steps, eval_size=args.eval_size,
                    eval_max_new_tokens=args.eval_max_new_tokens, seed=args.seed,
                    warm=WarmStart() if args.warm_steps is None else WarmStart(steps=args.warm_steps),
                    cache_dir=args.cache_dir, progress="lines")


def _train(args: argparse.Namespace) -> int:
    from grpo_kit.pipeline import check_run, train

    run = _train_run(args)
    check_run(run)  # everything that can be checked before a model loads
    if not run.preset.use_unsloth:  # on an Unsloth route transformers must wait until Unsloth is imported
        _quiet_library_bars()
    _say(f"train: preset {run.preset.name}, task {run.task.name}, rewards {run.rewards}, {run.preset.max_steps} steps, "
         f"checkpoints every {run.preset.save_steps} into {run.run_dir / 'checkpoints'}"
         + (f", held-out accuracy every {run.eval_steps} steps on {run.eval_size} questions" if run.eval_steps else ""))
    result = train(run)
    _say(f"wrote {result.run.path}/ (model/, log_history.json, training_curves.png) in {result.wall_s:.0f} s"
         + (f"; resumed from {result.resumed_from.name}" if result.resumed_from else ""))
    for alarm in result.alarms:
        _say(f"alarm at step {alarm['step']}: {alarm['kind']}")
    return 0


def _eval(args: argparse.Namespace) -> int:
    import datasets

    from grpo_kit.measure import EvalPlan, measure_after, measure_before, report_markdown
    from grpo_kit.runs import RunFolder

    run = RunFolder(args.run_dir)
    datasets.disable_progress_bars()  # datasets does not import transformers: safe before Unsloth
    if args.before:
        from grpo_kit.presets import get_preset
        from grpo_kit.tasks import get_task

        plan = EvalPlan(task=get_task(args.task), preset=get_preset(args.preset, **parse_sets(args.set)),
                        model=args.model, slice={"n": args.eval_size} if args.eval_size else
                        {"fraction": args.eval_fraction}, seed=args.seed, max_new_tokens=args.max_new_tokens,
                        samples=args.samples, temperature=args.temperature, batch_size=args.batch_size,
                        backend=args.backend, warm_start_steps=args.warm_steps, cache_dir=args.cache_dir)
        plan.questions()  # a slice out of range fails here, before the model loads
        results = measure_before(plan, run)
        print(results["greedy"].summary.round(3).to_markdown(), flush=True)
        _say(f"baseline written to {run.baseline} and {run.eval_settings}; next: python -m grpo_kit train "
             f"--run-dir {run.path}, then python -m grpo_kit eval --run-dir {run.path}")
        return 0
    measured = measure_after(run, batch_size=args.batch_size)
    report = report_markdown(measured, f"grpo_kit eval: {run.path.name}")
    run.report.write_text(report, encoding="utf-8")
    print(report.split("## Diagnostics")[0].strip() + "\n", flush=True)
    if measured.alarms:
        print(report[report.index("## Alarms"):].split("\n## ")[0], flush=True)
    _say(f"wrote {run.report}, {run.comparison.name}, {run.before_after.name}")
    return 0


def _presets(args: argparse.Namespace) -> int:  # noqa: ARG001
    from grpo_kit.presets import PRESETS

    for preset in PRESETS.values():
        print(f"{preset.name:15s} {preset.model or '(tiny offline policy)'}\n                {preset.description}")
    return 0


def _parser() -> argparse.ArgumentParser:
    from grpo_kit.demo import DemoConfig
    from grpo_kit.presets import PRESETS
    from grpo_kit.tasks import TASKS
    from grpo_kit.warm_start import WarmStart

    defaults, warm = DemoConfig(), WarmStart()
    parser = argparse.ArgumentParser(prog="python -m grpo_kit", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="warm start, evaluate, GRPO, evaluate, report (offline, CPU)")
    demo.add_argument("--task", default=defaults.task, choices=["gsm8k", "countdown"],
                      help="the task to train and evaluate on (grpo_kit.tasks)")
    demo.add_argument("--name", default=None, help="run folder name under --runs-dir (default demo, demo-<task>)")
    demo.add_argument("--runs-dir", default=defaults.runs_dir)
    demo.add_argument("--cache-dir", default=defaults.cache_dir, help="where the warm-started policy is cached")
    demo.add_argument("--eval-size", type=_positive, default=defaults.eval_size, help="test questions to evaluate")
    demo.add_argument("--train-size", type=_positive, default=None, help="train questions for GRPO (default all)")
    demo.add_argument("--samples", type=_nonnegative, default=defaults.samples,
                      help="sampled completions per question for avg@k / pass@k / maj@k (0: greedy only)")
    demo.add_argument("--steps", type=_positive, default=defaults.grpo_steps, help="GRPO optimiser steps")
    demo.add_argument("--warm-steps", type=_positive, default=warm.steps, help="supervised warm-start steps")
    demo.add_argument("--xml-share", type=_share, default=warm.xml_share,
                      help="share of warm-start targets in the XML format")
    demo.add_argument("--seed", type=_nonnegative, default=defaults.seed)
    demo.add_argument("--resume", action="store_true", help="continue a killed demo from its newest checkpoint")
    demo.set_defaults(func=_demo)

    train = sub.add_parser("train", help="GRPO into a run folder, with checkpoints, --resume and held-out accuracy")
    train.add_argument("--preset", default=None, choices=list(PRESETS),
                       help="the recipe (default: the one that fits this machine's GPU, cpu-tiny without one)")
    train.add_argument("--task", default="gsm8k", choices=[t for t, spec in TASKS.items() if "train" in spec.splits])
    train.add_argument("--model", default=None, help="a Hub id or path instead of the preset's model")
    train.add_argument("--rewards", nargs="+", default=None, metavar="NAME[=WEIGHT]",
                       help="rewards to train with (default the task's): registered names or your own "
                       "module:function; weight 0 logs without training on it")
    train.add_argument("--max-steps", type=_positive, default=None, help="optimiser steps (with --resume: extends a "
                       "finished run)")
    train.add_argument("--save-steps", type=_positive, default=None, help="steps between checkpoints")
    train.add_argument("--run-dir", default=None, help="the run folder (default runs/<preset>-<task>)")
    train.add_argument("--resume", action="store_true", help="continue from the newest complete checkpoint")
    train.add_argument("--eval-steps", type=_positive, default=None,
                       help="measure held-out greedy accuracy every N steps (and at the start)")
    train.add_argument("--eval-size", type=_positive, default=100, help="held-out test questions (seeded slice)")
    train.add_argument("--eval-max-new-tokens", type=_positive, default=None,
                       help="held-out completion budget (default the preset's max_completion_length)")
    train.add_argument("--train-size", type=_positive, default=None, help="train questions (seeded slice)")
    train.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                       help="any preset field, e.g. --set learning_rate=1e-5 --set lora_rank=16")
    train.add_argument("--report-to", choices=["none", "wandb"], default="none")
    train.add_argument("--wandb-project", default="grpo-kit")
    train.add_argument("--seed", type=_nonnegative, default=0, help="seed of the data slices")
    train.add_argument("--warm-steps", type=_positive, default=None, help="tiny policy only: warm-start steps")
    train.add_argument("--cache-dir", default=".cache/grpo_kit", help="where the tiny policy is cached")
    train.set_defaults(func=_train)

    ev = sub.add_parser("eval", help="--before: the baseline (notebook 02); else the trained model and the "
                        "before/after report (notebook 04)")
    ev.add_argument("--run-dir", required=True, help="the run folder")
    ev.add_argument("--before", action="store_true", help="measure the starting policy and record the plan")
    ev.add_argument("--preset", default=None, choices=list(PRESETS), help="--before: the recipe (its model, route)")
    ev.add_argument("--task", default="gsm8k", choices=list(TASKS), help="--before: the task")
    ev.add_argument("--model", default=None, help="--before: a Hub id or path instead of the preset's model")
    ev.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="--before: preset fields")
    ev.add_argument("--eval-size", type=_positive, default=None, help="--before: test questions (seeded slice)")
    ev.add_argument("--eval-fraction", type=_fraction, default=0.5, help="--before: share of the test split "
                    "(seed 002: 0.5), when --eval-size is not given")
    ev.add_argument("--max-new-tokens", type=_positive, default=256)
    ev.add_argument("--samples", type=_nonnegative, default=0, help="--before: sampled completions per question")
    ev.add_argument("--temperature", type=float, default=0.7, help="--before: temperature of the samples")
    ev.add_argument("--backend", choices=["vllm", "transformers"], default=None,
                    help="--before: generation backend for plain-transformers presets (default vLLM where usable)")
    ev.add_argument("--batch-size", type=_positive, default=32)
    ev.add_argument("--seed", type=_nonnegative, default=0)
    ev.add_argument("--warm-steps", type=_positive, default=None, help="tiny policy only: warm-start steps")
    ev.add_argument("--cache-dir", default=".cache/grpo_kit")
    ev.set_defaults(func=_eval)

    presets = sub.add_parser("presets", help="list the training presets")
    presets.set_defaults(func=_presets)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m grpo_kit`` and ``grpo-kit``; returns the exit status (2: bad input)."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # argparse printed the problem and the usage
        return e.code if isinstance(e.code, int) else 2
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, ConnectionError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
