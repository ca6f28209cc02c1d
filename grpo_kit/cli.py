"""Command line: ``python -m grpo_kit demo | train | eval | reward-check | compare | view | compare-demo | export |
verify-export | plan | doctor | presets | algorithms`` (also ``grpo-kit ...``): one of the three front doors, beside
the notebooks' calls (:mod:`grpo_kit.notebook`) and the demo's (:mod:`grpo_kit.demo`); each translates its own
spelling of a setting into the pipeline's steps (:mod:`grpo_kit.runs.pipeline`) and imports neither of the others.

- ``demo``: the offline before/after pipeline on a CPU (warm start, measure, train, measure, report).
- ``train``: GRPO into a run folder, with checkpoints, ``--resume`` and held-out accuracy; the same
  pipeline as notebook 03 (:func:`grpo_kit.runs.train.train`), and what ``accelerate launch -m grpo_kit
  train`` runs on every process.
- ``eval``: ``--before`` measures the starting policy (notebook 02); without it, the run folder's trained
  model on the same questions and the before/after report (notebook 04).
- ``reward-check``: before training, whether a reward set can teach: per reward and for the weighted total, from the
  baseline's sampled completions (notebook 02's last cell).
- ``compare``: several trained runs that share a baseline in one paired table, Holm-adjusted (notebook 05).
- ``view``: one self-contained HTML page of what the runs did (notebooks 04 and 05's last cell).
- ``compare-demo``: the offline experiment where the reward set decides what GRPO teaches: one warm start, one
  baseline, one run per reward set, one paired table (notebook 05's steps).
- ``export`` / ``verify-export``: the trained policy merged or as GGUF, verified against the run before it is
  called done, with a model card; optionally uploaded to the Hub.
- ``plan`` / ``doctor``: what a launch would do, without loading a model or needing a GPU; the installed stack.
- ``presets`` / ``algorithms``: the recipes and the named GRPO variants.

Every argument is checked before any model or tokenizer loads. Results (tables, the report) go to
standard output; what the kit is doing goes to the ``grpo_kit`` logger, shown on standard error.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grpo_kit.policy.devices import CARDS
from grpo_kit.runs import export, pipeline
from grpo_kit.runs.export_formats import FORMATS
from grpo_kit.runs.export_reference import trained_through_unsloth
from grpo_kit.runs.folder import RunFolder, check_run_dir
from grpo_kit.runs.measure import EVAL_FRACTION, EvalPlan, measure_after, measure_before
from grpo_kit.runs.spec import RunSpec
from grpo_kit.runs.verification import verify_export
from grpo_kit.system.logs import configure_logging
from grpo_kit.system.progress import quiet_library_bars_off_a_terminal
from grpo_kit.tasks import DEFAULT_TASK, TASKS, RewardSet, get_task
from grpo_kit.training.algorithms import ALGORITHMS, algorithm_settings
from grpo_kit.training.groups import GroupsKept
from grpo_kit.training.presets import PRESETS, command_line, get_preset, recipe_task
from grpo_kit.training.recipe_keys import STALE, refusals, renamed_argv

__all__ = ["main", "parse_rewards"]

log = logging.getLogger("grpo_kit.cli")


def parse_rewards(items: Sequence[str]) -> Any:
    """``--rewards`` values as a :class:`grpo_kit.tasks.RewardSet`: ``name`` or ``name=weight``, space- or
    comma-separated, where a name is a built-in reward or your own function as ``module:function`` (importable
    from the current folder).

    Raises:
        ValueError: an unknown reward name, a module that cannot be imported (whatever it raised, ``SystemExit``
            included), a name that is not a function, or a weight that is not a number.

    >>> parse_rewards(["correctness_reward_func=2", "xmlcount_reward_func=0"])
    RewardSet({'correctness_reward_func': 2, 'xmlcount_reward_func': 0})
    """
    from grpo_kit.tasks.reward_registry import import_reward

    rewards, weights = [], []
    for item in (part for entry in items for part in entry.split(",") if part.strip()):
        name, _, weight = item.strip().partition("=")
        try:
            weights.append(float(weight) if weight else 1.0)
        except ValueError:
            raise ValueError(f"--rewards {item!r}: the weight after '=' must be a number") from None
        rewards.append(import_reward(name) if ":" in name else name)
    return RewardSet(rewards, weights)


def _number(kind: type, low: float, high: float | None = None, low_open: bool = False) -> Any:
    """An argparse type: a number of ``kind`` from ``low`` (above it, ``low_open``) up to ``high``; out of range, the
    one line argparse prints names the option and the range. (transformers' ``HfArgumentParser`` types an option by
    its field's annotation alone, so the kit's own options stay argparse's: docs/development/upstream.md.)"""
    def check(text: str) -> Any:
        value = kind(text)
        if value < low or (low_open and value == low) or (high is not None and value > high):
            bounds = f"in {'(' if low_open else '['}{low}, {high}]" if high is not None else f"{low} or more"
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {value}")
        return value

    check.__name__ = kind.__name__  # a word instead of a number: argparse says "invalid int value"
    return check


_nonnegative, _positive, _fraction, _share = _number(int, 0), _number(int, 1), _number(float, 0, 1, True), \
    _number(float, 0, 1)


def _quiet_library_bars() -> None:
    """Per-row map bars (datasets) and per-save shard bars (transformers) drown the kit's own progress."""
    import datasets
    from transformers.utils import logging

    datasets.disable_progress_bars()
    logging.disable_progress_bar()


def _demo(args: argparse.Namespace) -> int:
    from grpo_kit.policy.warm_start import WarmStart

    warm = WarmStart(steps=args.warm_steps, xml_share=args.xml_share)  # bad values raise here
    name = get_task(args.task, trust_remote_code=args.trust_task_code).name  # a task file is read and checked here
    config = pipeline.DemoConfig(
        name=args.name if args.name is not None else ("demo" if args.task == DEFAULT_TASK else f"demo-{name}"),
        task=args.task, runs_dir=args.runs_dir, cache_dir=args.cache_dir, eval_size=args.eval_size,
        train_size=args.train_size, grpo_steps=args.steps, samples=args.samples, warm=warm, seed=args.seed,
        resume=args.resume, trust_remote_code=args.trust_task_code)
    _quiet_library_bars()
    pipeline.run_demo(config)
    return 0


def _train(args: argparse.Namespace) -> int:
    from grpo_kit.runs.train import train

    spec = RunSpec.resolve(  # everything that can be checked before a model loads
        args.config or args.preset, args.task, rewards=parse_rewards(args.rewards) if args.rewards else None,
        run_dir=args.run_dir, resume=args.resume, train_size=args.train_size, eval_size=args.eval_size,
        eval_max_new_tokens=args.eval_max_new_tokens, warm_steps=args.warm_steps, cache_dir=args.cache_dir,
        progress="lines", argv=args.trl, groups=GroupsKept(args.groups_every, args.groups_per_step),
        trust_remote_code=args.trust_task_code)
    if not spec.preset.use_unsloth:  # on an Unsloth route transformers must wait until Unsloth is imported
        _quiet_library_bars()
    if spec.launch.is_main:
        for line in spec.describe():
            log.info(f"train: {line}")
    result = train(spec)
    if spec.launch.is_main and not result.already_finished:
        log.info(f"wrote {result.run.path}/ (model/, log_history.json, training_curves.png) in {result.wall_s:.0f} s"
                 + (f"; resumed from {result.resumed_from.name}" if result.resumed_from else ""))
        for alarm in result.alarms:
            log.warning(f"alarm at step {alarm['step']}: {alarm['kind']}")
    return 0


def _eval(args: argparse.Namespace) -> int:
    import datasets

    datasets.disable_progress_bars()  # datasets does not import transformers: safe before Unsloth
    check_run_dir(args.run_dir)  # '' is no folder of its own (Path('') would be the current folder)
    if not args.before:
        return _eval_after(args)
    run_dir = Path(args.run_dir)
    locks = {".lock", ".lock-holder.json"}  # all that a first baseline killed before it wrote anything leaves
    # the outermost folder this command creates (a/ of a/b/c), or a killed first baseline's: a refused first baseline
    # removes it
    created = next((p for p in reversed([run_dir, *run_dir.parents]) if not p.exists()), None) or \
        (run_dir if run_dir.is_dir() and any(run_dir.iterdir()) and {p.name for p in run_dir.iterdir()} <= locks
         else None)
    try:
        return _eval_before(args, RunFolder(run_dir))
    except BaseException:  # a refused or interrupted first baseline leaves no empty run folder behind
        leftover = {p.name for p in run_dir.iterdir()} if run_dir.is_dir() else set()
        if created is not None and leftover <= locks:
            import shutil

            shutil.rmtree(run_dir, ignore_errors=True)
            for parent in (p for p in run_dir.parents if p.is_relative_to(created)):  # the empty folders it created
                with contextlib.suppress(OSError):
                    parent.rmdir()
        raise


def _eval_before(args: argparse.Namespace, run: Any) -> int:
    if args.temperature is not None and not args.samples:  # else recorded, and no completion would use it
        raise ValueError(f"--temperature {args.temperature:g} sets the sampled completions' temperature, and none are "
                         "asked for (greedy only): add --samples K, or drop --temperature")
    preset = get_preset(args.config or args.preset, argv=args.trl)
    trusted = args.trust_task_code or bool(command_line(args.trl, strict=False).get("trust_remote_code"))
    task = args.task or recipe_task(preset, args.cache_dir or EvalPlan.cache_dir) or DEFAULT_TASK
    plan = pipeline.baseline_plan(task, preset, eval_size=args.eval_size, eval_fraction=args.eval_fraction,
                                  max_new_tokens=args.max_new_tokens, samples=args.samples,
                                  temperature=args.temperature, batch_size=args.batch_size, backend=args.backend,
                                  seed=preset.data_seed, warm_steps=args.warm_steps, cache_dir=args.cache_dir,
                                  trust_remote_code=trusted)
    results = measure_before(plan, run, replace=args.replace_baseline)  # checked before anything loads
    print(results["greedy"].summary.round(3).to_markdown(), flush=True)
    # the next commands as they can be pasted: the folder quoted for a shell, and the trust the task file needs with
    # the Python it runs (RunFolder.command)
    then = (f"next: {run.command('train')}, then {run.command('eval')}" if plan.task.trains else
            f"{plan.task.name} has no train split, so this baseline is a measurement on its own (train on another "
            "task, in another run folder)")  # an evaluation-only task: nothing to train on it
    log.info(f"baseline in {run.baseline} and {run.eval_settings}; {then}")
    return 0


def _eval_after(args: argparse.Namespace) -> int:
    ignored = [option for option, dest in args.before_only if getattr(args, dest) not in (None, False, [])]
    ignored += args.trl[:1]
    if ignored:
        raise ValueError(f"{', '.join(ignored)} only apply to eval --before: the evaluation after training repeats "
                         f"the baseline's settings ({Path(args.run_dir) / 'eval_settings.json'}). Drop them, or "
                         "measure a new baseline with --before in a new run folder")
    run = RunFolder.existing(args.run_dir, write=False)  # a mistyped folder is named, not created
    if not os.access(run.path, os.W_OK) and run.report.is_file() and run.stale_results() is None:
        log.info(f"{run.path} is read-only, and its evaluation after training is of the model it holds now: its "
                 "report, as eval wrote it")
        measured = None
    else:
        measured = measure_after(RunFolder(run.path), batch_size=args.batch_size,
                                 trust_remote_code=args.trust_task_code)
    report = run.report.read_text(encoding="utf-8")
    print(report.split("## Diagnostics")[0].strip() + "\n", flush=True)
    if "## Alarms" in report:
        print(report[report.index("## Alarms"):].split("\n## ")[0], flush=True)
    if measured is not None:
        log.info(f"wrote {run.report}, {run.comparison.name}, {run.before_after.name}")
    return 0


def _presets(args: argparse.Namespace) -> int:  # noqa: ARG001
    """``presets``: one row per preset with its model and the GRPO algorithm it trains with (the named variant,
    ``loss_type`` and ``beta``: ``grpo_kit.training.algorithms``), then each preset's description."""
    from tabulate import tabulate

    rows = [(preset.name, preset.model or "(tiny offline policy)", preset.algorithm, fields["loss_type"],
             f"{fields['beta']:g}") for preset in PRESETS.values() for fields in [algorithm_settings(preset)["fields"]]]
    print(tabulate(rows, ("preset", "model", "algorithm", "loss_type", "beta"), "plain", disable_numparse=True))
    print("\npython -m grpo_kit algorithms lists every variant's fields; --algorithm NAME or --KEY VALUE (any recipe "
          "key, TRL's form) changes them.\n")
    print("\n".join(f"{preset.name}: {preset.description}" for preset in PRESETS.values()))
    return 0


def _export(args: argparse.Namespace) -> int:
    if not trained_through_unsloth(args.run_dir):  # Unsloth must be imported before transformers
        _quiet_library_bars()
    try:
        for line in pipeline.export_steps(args.run_dir, args.format, out=args.out, quant=args.quant,
                                          push_to_hub=args.push_to_hub, private=args.private,
                                          questions=args.questions, threshold=args.threshold, base=args.base,
                                          trust_remote_code=args.trust_task_code):
            print(line, flush=True)
    except (export.ExportRefused, PermissionError) as e:  # unlike the trained policy (1); no Hub token (2)
        print(f"error: {e}", file=sys.stderr)
        return 1 if isinstance(e, export.ExportRefused) else 2
    return 0


def _verify_export(args: argparse.Namespace) -> int:
    if not trained_through_unsloth(args.against):  # Unsloth must be imported before transformers
        _quiet_library_bars()
    if args.record:
        export.check_record(args.export)  # before any model loads
    verification = verify_export(args.export, args.against, questions=args.questions,
                                        threshold=args.threshold, trust_remote_code=args.trust_task_code)
    print(verification.summary(), flush=True)
    if args.record:
        print(f"recorded in {export.verification_record(args.export, verification)}")
    if not verification.passed:
        print(verification.side_by_side(), file=sys.stderr)
        return 1
    return 0


def _compare(args: argparse.Namespace) -> int:
    from grpo_kit.runs.compare import compare_runs, comparison_folder

    out = args.out or comparison_folder(args.run_dirs)
    report = compare_runs(args.run_dirs, out_dir=out, names=args.names, seed=args.seed,
                          trust_remote_code=args.trust_task_code)
    print(report.markdown, flush=True)
    log.info(f"wrote {out}/ (runs_comparison.md, runs_metrics.csv, runs_pairs.csv, runs_comparison.png)")
    return 0


def _view(args: argparse.Namespace) -> int:
    from grpo_kit.runs.view import write_view

    print(write_view(args.run_dirs, out=args.out, names=args.names, seed=args.seed,
                     trust_remote_code=args.trust_task_code), flush=True)
    return 0


def _reward_check(args: argparse.Namespace) -> int:
    from grpo_kit.runs.reward_check import reward_check

    # what a user's reward prints goes to standard error, so that --json's standard output stays JSON
    with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
        check = reward_check(args.run_dir, parse_rewards(args.rewards) if args.rewards else None,
                             trust_remote_code=args.trust_task_code)
    print(json.dumps(check.to_json(), indent=1) if args.json else check.markdown(), flush=True)
    return 0


def _algorithms(args: argparse.Namespace) -> int:  # noqa: ARG001
    for a in ALGORITHMS.values():
        fields = ", ".join(f"{k}={v!r}" for k, v in a.fields.items())
        print(f"{a.name:13s} {a.paper}\n              {a.summary}\n              {fields}")
    return 0


def _compare_demo(args: argparse.Namespace) -> int:
    import dataclasses

    config = pipeline.CompareDemoConfig(
        name=args.name, task=args.task, runs_dir=args.runs_dir, cache_dir=args.cache_dir, eval_size=args.eval_size,
        samples=args.samples, grpo_steps=args.steps, learning_rate=args.learning_rate,
        warm=dataclasses.replace(pipeline.CompareDemoConfig.warm, steps=args.warm_steps),
        variants=tuple(args.variants) if args.variants else None, seed=args.seed)
    _quiet_library_bars()
    pipeline.run_compare_demo(config)
    return 0


def _recipe_options(parser: Any, choices: bool = True) -> None:
    """``--config`` or ``--preset``: the recipe a command takes, one of them (neither: the shipped recipe that fits
    this machine); any recipe key after them, in TRL's form ``--KEY VALUE``, lands in ``trl``: see :func:`main`."""
    parser = parser.add_mutually_exclusive_group()  # both name the recipe: argparse refuses the pair in one line
    parser.add_argument("--config", metavar="FILE.yaml", help="a recipe file: TRL's GRPOConfig and ModelConfig keys "
                        "and trl grpo's script keys (as trl grpo --config reads them) and grpo_kit's own; --KEY VALUE "
                        "after it overrides any key, e.g. --learning_rate 1e-5 --lora_r 16")
    parser.add_argument("--preset", choices=list(PRESETS) if choices else None, help="a shipped recipe (python -m "
                        "grpo_kit presets; default: the one that fits --device or this machine's GPU, e.g. t4-16gb "
                        "colab-t4, l4-24gb colab-l4, a100-40gb a100; cpu-tiny without one)")


def _rewards_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--rewards", nargs="+", metavar="NAME[=WEIGHT]", help=f"{what} (default the task's): "
                        "built-in names or your own module:function; weight 0 logs without training on it")


def _trust_option(parser: argparse.ArgumentParser) -> None:
    """``--trust-task-code``: the commands that read a task file (given, or recorded by a run folder) or the rewards
    of your own a run folder records."""
    parser.add_argument("--trust-task-code", action="store_true", help="let a task file (loader, rules, "
                        "demonstration, tokenizer_texts) or a run folder's train_settings.json (your own rewards) "
                        "import and run the Python it names outside grpo_kit as module:name; without it such a file "
                        "is refused, naming the modules, before anything is imported")


def _demo_options(parser: argparse.ArgumentParser, config: Any, folder: str) -> None:
    """The options both demos take, each defaulting to the demo's own setting (``config``)."""
    parser.add_argument("--name", help=f"folder under --runs-dir (default {folder})")
    parser.add_argument("--runs-dir", default=config.runs_dir)
    parser.add_argument("--cache-dir", default=config.cache_dir, help="where the warm-started policy is cached")
    parser.add_argument("--eval-size", type=_positive, default=config.eval_size, help="held-out test questions")
    parser.add_argument("--samples", type=_nonnegative, default=config.samples, help="sampled completions per "
                        "question for avg@k / pass@k / maj@k (0: greedy only)")
    parser.add_argument("--steps", type=_positive, default=config.grpo_steps, help="GRPO optimiser steps (each run)")
    parser.add_argument("--warm-steps", type=_positive, default=config.warm.steps, help="supervised warm-start steps")
    parser.add_argument("--seed", type=_nonnegative, default=config.seed)


def _runs_options(parser: argparse.ArgumentParser, out: str) -> None:
    """The run folders ``compare`` and ``view`` read, their names, where the result goes, the bootstrap's seed."""
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run folders (several: sharing a baseline)")
    parser.add_argument("--names", nargs="+", help="the runs' names (default: their folders')")
    parser.add_argument("--out", help=out)
    parser.add_argument("--seed", type=_nonnegative, default=0, help="the bootstrap's seed")
    _trust_option(parser)


def _verify_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--questions", type=_positive, default=32, help="held-out questions to verify on (greedy)")
    parser.add_argument("--threshold", type=_share, help="the share of identical completions (quantized GGUF: of "
                        "agreeing answers) to require instead of the type's measured one")


def _json_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--json", action="store_true", help=f"print the {what} as one JSON object")


_RECIPE_KEYS = ("Any recipe key goes after these options in TRL's form, --KEY VALUE (dashes or underscores): e.g. "
                "--max_steps 50, --learning_rate 1e-5, --lora_r 16, --model_name_or_path Qwen/Qwen2.5-0.5B-Instruct, "
                "--algorithm dapo, --seed 1, --data_seed 1 (the data slices' seed), --report_to wandb, "
                "--eval_strategy steps --eval_steps 10 (held-out accuracy during training). The command line wins "
                "over the recipe file, and the last of a key given twice.")
#: Options the command line no longer takes: one line each naming what to write instead.
_GONE_OPTIONS = {"--set": "write each recipe key in TRL's form, --KEY VALUE (e.g. --learning_rate 1e-5)",
                 "--wandb-project": "wandb reads its project from WANDB_PROJECT: WANDB_PROJECT=NAME python -m grpo_kit "
                                    "train ... --report_to wandb (default project grpo-kit)"}


def _refuse_gone(rest: Sequence[str]) -> None:
    """One line for an option the command line no longer takes (:data:`_GONE_OPTIONS`)."""
    for i, item in enumerate(rest):
        option, _, value = item.partition("=")
        if option in _GONE_OPTIONS:
            value = value or (rest[i + 1] if i + 1 < len(rest) else "")
            key, sep, setting = value.partition("=")
            if option == "--set" and sep:  # in today's names: --set lora_rank=8 is --use_peft true --lora_r 8
                today = renamed_argv([f"--{key}", setting])[0]
                refused = refusals([key], [], dash="--") if key in STALE and today[0] == f"--{key}" else []
                raise ValueError(f"--set is gone; {refused[0]}" if refused else
                                 f"--set is gone: write {' '.join(today)} (TRL's form)")
            raise ValueError(f"{option} is gone: {_GONE_OPTIONS[option]}")


def _parser() -> argparse.ArgumentParser:
    from grpo_kit.policy.tiny import DEFAULT_CACHE_DIR

    base = EvalPlan  # the baseline's defaults (a dataclass's field defaults are its class attributes)
    parser = argparse.ArgumentParser(prog="python -m grpo_kit", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, func: Any, summary: str, recipe: bool = False) -> argparse.ArgumentParser:
        found = sub.add_parser(name, help=summary, epilog=_RECIPE_KEYS if recipe else None,
                               allow_abbrev=False)  # an abbreviation would eat a recipe key
        found.set_defaults(func=func, **({"trl": []} if recipe else {}))  # only a recipe's commands take TRL's form
        return found

    demo = command("demo", _demo, "warm start, evaluate, GRPO, evaluate, report (offline, CPU)")
    demo.add_argument("--task", default=pipeline.DemoConfig.task, metavar="NAME|PATH.yaml", help="the task to "
                      "train and evaluate on: " + ", ".join(pipeline.demo_tasks()) + ", or a task file")
    _demo_options(demo, pipeline.DemoConfig(), "demo, demo-<task>")
    demo.add_argument("--train-size", type=_positive, help="train questions for GRPO (default all)")
    demo.add_argument("--xml-share", type=_share, default=pipeline.DemoConfig.warm.xml_share,
                      help="share of warm-start targets in the XML format")
    demo.add_argument("--resume", action="store_true", help="continue a killed demo from its newest checkpoint")
    _trust_option(demo)

    compare_demo = command("compare-demo", _compare_demo, "one warm start and baseline, one GRPO run per reward set, "
                           "one paired table (offline, CPU)")
    compare_demo.add_argument("--task", default=pipeline.CompareDemoConfig().task_name,
                              choices=pipeline.compare_tasks(), help="a task that names reward sets to compare")
    compare_demo.add_argument("--variants", nargs="+", metavar="NAME", help="which of the task's reward sets "
                              "(default all)")
    _demo_options(compare_demo, pipeline.CompareDemoConfig(), "compare-<task>")
    compare_demo.add_argument("--learning-rate", type=float, default=pipeline.CompareDemoConfig.learning_rate)

    train = command("train", _train, "GRPO into a run folder, with checkpoints, --resume and held-out accuracy",
                    recipe=True)
    _recipe_options(train)
    train.add_argument("--task", metavar="NAME|PATH.yaml",
                       help="the task: " + ", ".join(name for name, t in TASKS.items() if t.trains) + ", or a task "
                       f"file (default: the task the run folder recorded, else {DEFAULT_TASK})")
    _rewards_option(train, "rewards to train with")
    train.add_argument("--run-dir", help="the run folder (default runs/<preset>-<task>)")
    train.add_argument("--resume", action="store_true", help="continue from the newest complete checkpoint as the "
                       "run folder records it (recipe, rewards, questions, held-out evaluation) unless told otherwise")
    train.add_argument("--eval-size", type=_positive, help="validation questions held out of the train split for "
                       "eval_steps (seeded by data_seed; default the task file's validation_size, else 100 or a fifth "
                       "of the train split)")
    train.add_argument("--eval-max-new-tokens", type=_positive, help="held-out completion budget (default the "
                       "preset's max_completion_length)")
    train.add_argument("--train-size", type=_positive, help="train questions (a slice seeded by data_seed)")
    train.add_argument("--groups-every", type=_positive, default=GroupsKept.every, metavar="N", help="keep the "
                       "training groups (completions, rewards, advantages) of every N-th logged step in groups/ "
                       f"(default {GroupsKept.every})")
    train.add_argument("--groups-per-step", type=_nonnegative, default=GroupsKept.groups, metavar="K",
                       help=f"keep at most K groups a step (default {GroupsKept.groups}; 0 keeps none)")
    train.add_argument("--warm-steps", type=_positive, help="tiny policy only: warm-start steps (default the "
                       "baseline's, else sized to the task)")
    train.add_argument("--cache-dir", default=DEFAULT_CACHE_DIR, help="where the tiny policy is cached")
    _trust_option(train)

    ev = command("eval", _eval, "--before: the baseline (notebook 02); else the trained model and the before/after "
                 "report (notebook 04)", recipe=True)
    ev.add_argument("--run-dir", required=True, help="the run folder")
    ev.add_argument("--before", action="store_true", help="measure the starting policy and record the plan (the "
                    "same settings again reuse the baseline; other settings are refused)")
    ev.add_argument("--batch-size", type=_positive, help=f"prompts per generate call (default "
                    f"{base.batch_size}; after training: the baseline's)")
    _trust_option(ev)
    before = ev.add_argument_group("--before only", "the baseline's settings (the evaluation after training repeats "
                                   "them)")
    before.add_argument("--replace-baseline", action="store_true", help="replace a baseline measured with other "
                        "settings, and the evaluation after training and report made against it")
    _recipe_options(before)
    before.add_argument("--task", metavar="NAME|PATH.yaml", help=f"the task: {', '.join(TASKS)}, or a task file "
                        f"(default {DEFAULT_TASK})")
    before.add_argument("--eval-size", type=_positive, help="test questions (seeded slice)")
    before.add_argument("--eval-fraction", type=_fraction, help="share of the test split (default "
                        f"{EVAL_FRACTION}, the blog post's), when --eval-size is not given")
    before.add_argument("--max-new-tokens", type=_positive, help="each completion's budget in tokens (default "
                        f"{base.max_new_tokens}; a task file on the tiny policy: from its longest answer)")
    before.add_argument("--samples", type=_nonnegative, help=f"sampled completions per question (default "
                        f"{base.samples})")
    before.add_argument("--temperature", type=float, help=f"temperature of the samples (default {base.temperature})")
    before.add_argument("--backend", choices=["vllm", "transformers"], help="generation backend for "
                        "plain-transformers presets (default vLLM where usable)")
    before.add_argument("--warm-steps", type=_positive, help="tiny policy only: warm-start steps "
                        "(default 300; a task file: 20 passes over its train rows, 60 to 300)")
    before.add_argument("--cache-dir", help=f"where the tiny policy is cached (default {base.cache_dir})")
    # the evaluation after training repeats the baseline's settings, so one of these given without --before (each None
    # or off unless given; their defaults are EvalPlan's) is refused rather than ignored
    ev.set_defaults(before_only=[(action.option_strings[0], action.dest) for action in before._group_actions])

    check = command("reward-check", _reward_check, "before training: from the baseline's sampled completions, "
                    "whether a reward set can teach (zero-variance share, correlation with correctness), per reward")
    check.add_argument("run_dir", metavar="RUN_DIR", help="a run folder measured with eval --before --samples k")
    _rewards_option(check, "the reward set to check")
    _json_option(check, "check")
    _trust_option(check)

    _runs_options(command("compare", _compare, "several trained runs sharing a baseline: one paired table, "
                          "Holm-adjusted, and a chart (notebook 05)"),
                  "where the tables and chart go (default: comparison/ beside the first run folder)")
    _runs_options(command("view", _view, "one self-contained HTML page of what the runs did: before/after table, every "
                          "question's completions side by side with flip and text filters, training curves and "
                          "groups, reward-check"),
                  "the HTML file (default: view.html in the run folder; for several, comparison/view.html beside the "
                  "first)")

    exp = command("export", _export, "the run's trained policy merged (safetensors) or as GGUF, verified against it "
                  "before it is called done, with a model card; optionally uploaded to the Hub")
    exp.add_argument("run_dir", help="the run folder (model/, train_settings.json)")
    exp.add_argument("--format", nargs="+", choices=list(FORMATS), default=[next(iter(FORMATS))])
    exp.add_argument("--quant", help="GGUF type: f32, f16, bf16, q8_0 (default), q4_k_m, q5_k_m, ...")
    exp.add_argument("--out", help="export folder (default <run_dir>/export/<format>)")
    _verify_options(exp)
    _trust_option(exp)
    exp.add_argument("--base", metavar="PATH", help="a local folder holding the 16-bit base an Unsloth "
                     "LoRA run merges into (without it Unsloth downloads it from the Hub: about 16 GB for 8B)")
    exp.add_argument("--push-to-hub", metavar="OWNER/NAME", help="upload the verified export")
    exp.add_argument("--private", action=argparse.BooleanOptionalAction, default=True,
                     help="the Hub repository's visibility when created (default private)")

    ver = command("verify-export", _verify_export, "check an export made anywhere against a run's trained policy")
    ver.add_argument("export", help="a merged model folder or a .gguf file (or a folder holding one)")
    ver.add_argument("--against", required=True, help="the run folder")
    _verify_options(ver)
    _trust_option(ver)
    ver.add_argument("--record", action="store_true", help="write verification.json into the export (lets "
                     "--push-to-hub upload a verified export made elsewhere)")

    plan = command("plan", _plan, "what a launch would do (route, GRPOConfig, placement, vLLM, memory, alarm, resume, "
                   "problems), without loading a model or needing a GPU", recipe=True)
    _recipe_options(plan, choices=False)
    plan.add_argument("--device", metavar="CARD", help=f"plan for a card: {', '.join(CARDS)} (default: this "
                      "machine's GPUs; another name is refused, naming the nearest)")
    plan.add_argument("--gpus", type=_positive, help="training processes, one GPU each (default 1 for --launch "
                      "single, else 8 or the GPUs here, less one for a vLLM server)")
    plan.add_argument("--launch", default="single", choices=["single", "ddp", "zero2", "zero3", "fsdp2"],
                      help="one process, or accelerate launch with configs/accelerate/<launch>.yaml")
    plan.add_argument("--run-dir", help="a run folder (with --resume: plan resuming it)")
    plan.add_argument("--resume", action="store_true", help="plan resuming --run-dir with its recorded preset")
    _json_option(plan, "plan")

    doctor = command("doctor", _doctor, "the installed stack (live and on disk), the driver, bfloat16 and free GPU "
                     "memory against a preset")
    doctor.add_argument("--preset", help="a preset name (default: the one that fits this machine)")
    _json_option(doctor, "report")
    doctor.add_argument("--install-plan", action="store_true", help="what an install would put beside this "
                        "runtime's torch (or --torch/--driver's): the packages, whether torch is kept, which vLLM; "
                        "exit 2 when no GPU route exists")
    doctor.add_argument("--torch", metavar="VERSION", help="with --install-plan: a runtime's torch.__version__ (e.g. "
                        "2.11.0+cu128), not this one's")
    doctor.add_argument("--driver", metavar="VERSION", help="with --install-plan: an NVIDIA driver version (e.g. "
                        "570.172.08) instead of nvidia-smi's")
    doctor.add_argument("--keep-torch", action="store_true", help="with --install-plan: keep the runtime's torch where "
                        "the plan would replace it by PyPI's build of the same release for vLLM (no vLLM then)")

    command("presets", _presets, "list the training presets")
    command("algorithms", _algorithms, "list the named GRPO variants and the fields each sets")
    return parser


def _plan(args: argparse.Namespace) -> int:
    """``plan``: print the plan (or its JSON); exit 2 when a problem would end the run."""
    from grpo_kit.training.plan import format_plan, make_plan

    if args.resume and args.run_dir is None:
        raise ValueError("--resume plans resuming a run folder: pass --run-dir RUN")
    if args.launch == "single" and args.gpus not in (None, 1):
        raise ValueError(f"--launch single runs one process, and --gpus {args.gpus} asks for {args.gpus}: choose "
                         "--launch ddp, zero2, zero3 or fsdp2 for several GPUs, or drop --gpus")
    result = make_plan(args.config or args.preset, argv=args.trl, device=args.device, processes=args.gpus,
                       launch=args.launch, run_dir=args.run_dir, resume=args.resume)
    print(json.dumps(result.to_json(), indent=1, default=str) if args.json else format_plan(result))
    return 2 if result.fatal else 0


def _doctor(args: argparse.Namespace) -> int:
    """``doctor``: print the report; exit 2 when something would stop the preset here."""
    from grpo_kit.training.doctor import doctor, format_doctor, nvidia_driver

    if args.install_plan:
        from grpo_kit.system.install import install_plan, installed_version

        plan = install_plan(args.torch or installed_version("torch"), args.driver or nvidia_driver(),
                            keep=args.keep_torch)
        print(json.dumps(plan.to_json(), indent=1) if args.json else plan.describe())
        return 2 if plan.fatal else 0
    if args.torch or args.driver or args.keep_torch:
        raise ValueError("--torch, --driver and --keep-torch describe an install for --install-plan: add "
                         "--install-plan")
    report = doctor(args.preset)
    print(json.dumps(report, indent=1, default=str) if args.json else format_doctor(report))
    return 2 if report["problems"] else 0


def _interrupted_train(args: argparse.Namespace) -> str:
    """What an interrupted ``train`` keeps and how to go on: with a complete checkpoint, the command that resumes
    from it (its run folder with ``--resume``: the recorded recipe, task and rewards are taken again, and
    ``--trust-task-code`` with the Python it runs where the run's records need it); before the first, that nothing
    of its training was kept."""
    from grpo_kit.training.checkpoints import latest_complete

    if args.run_dir is None:
        return ("python -m grpo_kit train --resume with the same options continues from the newest complete "
                "checkpoint, if one was saved (none is before the first save_steps)")
    folder = RunFolder(args.run_dir, write=False)
    if latest_complete(folder.checkpoints) is None:
        return f"no checkpoint was saved yet in {folder.checkpoints}: run the same command again to start over"
    return f"{folder.command('train --resume')} continues from the newest complete checkpoint"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m grpo_kit`` and ``grpo-kit``; returns the exit status (2: bad input; 1: the system
    refused, e.g. a full disk; 130: Ctrl-C), each problem said in one line on standard error."""
    configure_logging()
    quiet_library_bars_off_a_terminal()  # before anything imports tqdm
    parser = _parser()
    try:
        args, rest = parser.parse_known_args(argv)
        if rest and not hasattr(args, "trl"):  # only train, eval --before and plan take a recipe's --KEY VALUE
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
    except SystemExit as e:  # argparse printed the problem and the usage
        return e.code if isinstance(e.code, int) else 2
    try:
        if rest:
            _refuse_gone(rest)
            args.trl = rest
        return args.func(args)
    # bad input, a package not installed (llama-cpp-python) -> 2; a library's failure (Unsloth's, vLLM's) -> 1: its
    # message, not a traceback
    except (ValueError, FileNotFoundError, ConnectionError, ImportError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1 if isinstance(e, RuntimeError) else 2
    except KeyboardInterrupt:  # Ctrl-C: one line; the kit's files are written whole or not at all
        again = _interrupted_train(args) if args.command == "train" else "run it again to go on"
        print(f"interrupted: {args.command} stopped; what it finished is kept ({again})", file=sys.stderr)
        return 130
    except OSError as e:  # a full disk, a folder that vanished: the system's words and the file, in one line
        folder = getattr(args, "run_dir", None) or getattr(args, "out", None)
        where = f" ({e.filename})" if e.filename else f" (writing under {folder})" if folder else ""
        full = e.errno in (errno.ENOSPC, errno.EDQUOT)
        fix = getattr(e, "fix", None) or f"{'free space there' if full else 'fix that'} and run the command again"
        print(f"error: {e.strerror or e}{where}: {fix}; every file is written whole or not at all, so nothing "
              "half-written is trusted", file=sys.stderr)
        return 1
