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

Every argument is checked before any model or tokenizer loads (each command's options, their types and bounds:
:mod:`grpo_kit.cli_parser`). Results (tables, the report) go to standard output; what the kit is doing goes to the
``grpo_kit`` logger, shown on standard error.
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

from grpo_kit.cli_parser import build_parser
from grpo_kit.runs import export, pipeline
from grpo_kit.runs.export_reference import trained_through_unsloth
from grpo_kit.runs.folder import RunFolder, check_run_dir
from grpo_kit.runs.measure import EvalPlan, measure_after, measure_before
from grpo_kit.runs.spec import RunSpec
from grpo_kit.runs.verification import verify_export
from grpo_kit.system.logs import configure_logging
from grpo_kit.system.progress import quiet_library_bars_off_a_terminal
from grpo_kit.tasks import DEFAULT_TASK, RewardSet, get_task
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
        raise ValueError(f"{', '.join(ignored)} only appl{'ies' if len(ignored) == 1 else 'y'} to eval --before: the "
                         "evaluation after training repeats "
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
    """The command line (:func:`grpo_kit.cli_parser.build_parser`), each command answered by its function here."""
    handlers = {"demo": _demo, "compare-demo": _compare_demo, "train": _train, "eval": _eval,
                "reward-check": _reward_check, "compare": _compare, "view": _view, "export": _export,
                "verify-export": _verify_export, "plan": _plan, "doctor": _doctor, "presets": _presets,
                "algorithms": _algorithms}
    return build_parser(__doc__.split("\n\n")[0], handlers)


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
