"""The command line's grammar: every command of ``python -m grpo_kit`` with its options, their types, bounds,
defaults and help texts, in the order ``--help`` lists them (:data:`COMMANDS`). :mod:`grpo_kit.cli` builds its parser
here (:func:`build_parser`) and answers each command with a function of its own; this module runs nothing.

Each option is typed and bounded where it is declared, so that a bad value is one line from argparse, with the usage,
before any model or tokenizer loads.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from grpo_kit.policy.devices import CARDS
from grpo_kit.policy.tiny import DEFAULT_CACHE_DIR
from grpo_kit.runs import pipeline
from grpo_kit.runs.export_formats import FORMATS
from grpo_kit.runs.measure import EVAL_FRACTION, EvalPlan
from grpo_kit.tasks import DEFAULT_TASK, TASKS
from grpo_kit.training.groups import GroupsKept
from grpo_kit.training.presets import PRESETS

__all__ = ["COMMANDS", "Command", "build_parser"]


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

#: The epilog of the commands that take a recipe: its keys go after their options, in TRL's form.
_RECIPE_KEYS_EPILOG = (
    "Any recipe key goes after these options in TRL's form, --KEY VALUE (dashes or underscores): e.g. --max_steps 50, "
    "--learning_rate 1e-5, --lora_r 16, --model_name_or_path Qwen/Qwen2.5-0.5B-Instruct, --algorithm dapo, --seed 1, "
    "--data_seed 1 (the data slices' seed), --report_to wandb, --eval_strategy steps --eval_steps 10 (held-out "
    "accuracy during training). The command line wins over the recipe file, and the last of a key given twice.")


def _recipe_options(parser: Any, choices: bool = True) -> None:
    """``--config`` or ``--preset``: the recipe a command takes, one of them (neither: the shipped recipe that fits
    this machine); any recipe key after them, in TRL's form ``--KEY VALUE``, lands in ``trl``: see
    :func:`grpo_kit.cli.main`."""
    recipe = parser.add_mutually_exclusive_group()  # both name the recipe: argparse refuses the pair in one line
    recipe.add_argument("--config", metavar="FILE.yaml", help="a recipe file: TRL's GRPOConfig and ModelConfig keys "
                        "and trl grpo's script keys (as trl grpo --config reads them) and grpo_kit's own; --KEY VALUE "
                        "after it overrides any key, e.g. --learning_rate 1e-5 --lora_r 16")
    recipe.add_argument("--preset", choices=list(PRESETS) if choices else None, help="a shipped recipe (python -m "
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


def _demo_arguments(demo: argparse.ArgumentParser) -> None:
    demo.add_argument("--task", default=pipeline.DemoConfig.task, metavar="NAME|PATH.yaml", help="the task to "
                      "train and evaluate on: " + ", ".join(pipeline.demo_tasks()) + ", or a task file")
    _demo_options(demo, pipeline.DemoConfig(), "demo, demo-<task>")
    demo.add_argument("--train-size", type=_positive, help="train questions for GRPO (default all)")
    demo.add_argument("--xml-share", type=_share, default=pipeline.DemoConfig.warm.xml_share,
                      help="share of warm-start targets in the XML format")
    demo.add_argument("--resume", action="store_true", help="continue a killed demo from its newest checkpoint")
    _trust_option(demo)


def _compare_demo_arguments(compare_demo: argparse.ArgumentParser) -> None:
    compare_demo.add_argument("--task", default=pipeline.CompareDemoConfig().task_name,
                              choices=pipeline.compare_tasks(), help="a task that names reward sets to compare")
    compare_demo.add_argument("--variants", nargs="+", metavar="NAME", help="which of the task's reward sets "
                              "(default all)")
    _demo_options(compare_demo, pipeline.CompareDemoConfig(), "compare-<task>")
    compare_demo.add_argument("--learning-rate", type=float, default=pipeline.CompareDemoConfig.learning_rate)


def _train_arguments(train: argparse.ArgumentParser) -> None:
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


def _eval_arguments(evaluate: argparse.ArgumentParser) -> None:
    """``eval``'s own options, then the baseline's (``--before`` only); the evaluation after training repeats the
    baseline's settings, so one of those given without ``--before`` is refused rather than ignored: the command
    reads which from ``before_only``."""
    baseline = EvalPlan  # the baseline's defaults (a dataclass's field defaults are its class attributes)
    evaluate.add_argument("--run-dir", required=True, help="the run folder")
    evaluate.add_argument("--before", action="store_true", help="measure the starting policy and record the plan (the "
                          "same settings again reuse the baseline; other settings are refused)")
    evaluate.add_argument("--batch-size", type=_positive, help=f"prompts per generate call (default "
                          f"{baseline.batch_size}; after training: the baseline's)")
    _trust_option(evaluate)
    before = evaluate.add_argument_group("--before only", "the baseline's settings (the evaluation after training "
                                         "repeats them)")
    before.add_argument("--replace-baseline", action="store_true", help="replace a baseline measured with other "
                        "settings, and the evaluation after training and report made against it")
    _recipe_options(before)
    before.add_argument("--task", metavar="NAME|PATH.yaml", help=f"the task: {', '.join(TASKS)}, or a task file "
                        f"(default {DEFAULT_TASK})")
    before.add_argument("--eval-size", type=_positive, help="test questions (seeded slice)")
    before.add_argument("--eval-fraction", type=_fraction, help="share of the test split (default "
                        f"{EVAL_FRACTION}, the blog post's), when --eval-size is not given")
    before.add_argument("--max-new-tokens", type=_positive, help="each completion's budget in tokens (default "
                        f"{baseline.max_new_tokens}; a task file on the tiny policy: from its longest answer)")
    before.add_argument("--samples", type=_nonnegative, help=f"sampled completions per question (default "
                        f"{baseline.samples})")
    before.add_argument("--temperature", type=float, help=f"temperature of the samples (default "
                        f"{baseline.temperature})")
    before.add_argument("--backend", choices=["vllm", "transformers"], help="generation backend for "
                        "plain-transformers presets (default vLLM where usable)")
    before.add_argument("--warm-steps", type=_positive, help="tiny policy only: warm-start steps "
                        "(default 300; a task file: 20 passes over its train rows, 60 to 300)")
    before.add_argument("--cache-dir", help=f"where the tiny policy is cached (default {baseline.cache_dir})")
    # each of these is None or off unless given (their defaults are EvalPlan's)
    evaluate.set_defaults(before_only=[(action.option_strings[0], action.dest) for action in before._group_actions])


def _reward_check_arguments(reward_check: argparse.ArgumentParser) -> None:
    reward_check.add_argument("run_dir", metavar="RUN_DIR", help="a run folder measured with eval --before --samples k")
    _rewards_option(reward_check, "the reward set to check")
    _json_option(reward_check, "check")
    _trust_option(reward_check)


def _compare_arguments(compare: argparse.ArgumentParser) -> None:
    _runs_options(compare, "where the tables and chart go (default: comparison/ beside the first run folder)")


def _view_arguments(view: argparse.ArgumentParser) -> None:
    _runs_options(view, "the HTML file (default: view.html in the run folder; for several, comparison/view.html "
                  "beside the first)")


def _export_arguments(export: argparse.ArgumentParser) -> None:
    export.add_argument("run_dir", help="the run folder (model/, train_settings.json)")
    export.add_argument("--format", nargs="+", choices=list(FORMATS), default=[next(iter(FORMATS))])
    export.add_argument("--quant", help="GGUF type: f32, f16, bf16, q8_0 (default), q4_k_m, q5_k_m, ...")
    export.add_argument("--out", help="export folder (default <run_dir>/export/<format>)")
    _verify_options(export)
    _trust_option(export)
    export.add_argument("--base", metavar="PATH", help="a local folder holding the 16-bit base an Unsloth "
                        "LoRA run merges into (without it Unsloth downloads it from the Hub: about 16 GB for 8B)")
    export.add_argument("--push-to-hub", metavar="OWNER/NAME", help="upload the verified export")
    export.add_argument("--private", action=argparse.BooleanOptionalAction, default=True,
                        help="the Hub repository's visibility when created (default private)")


def _verify_export_arguments(verify_export: argparse.ArgumentParser) -> None:
    verify_export.add_argument("export", help="a merged model folder or a .gguf file (or a folder holding one)")
    verify_export.add_argument("--against", required=True, help="the run folder")
    _verify_options(verify_export)
    _trust_option(verify_export)
    verify_export.add_argument("--record", action="store_true", help="write verification.json into the export (lets "
                               "--push-to-hub upload a verified export made elsewhere)")


def _plan_arguments(plan: argparse.ArgumentParser) -> None:
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


def _doctor_arguments(doctor: argparse.ArgumentParser) -> None:
    doctor.add_argument("--preset", help="a preset name (default: the one that fits this machine)")
    _json_option(doctor, "report")
    doctor.add_argument("--install-plan", action="store_true", help="what an install would put beside this "
                        "runtime's torch (or --torch/--driver's): the packages, whether torch is kept, which vLLM; "
                        "exit 2 when no GPU route exists")
    doctor.add_argument("--torch", metavar="VERSION", help="with --install-plan: a runtime's torch.__version__ (e.g. "
                        "2.11.0+cu128), not this one's")
    doctor.add_argument("--driver", metavar="VERSION", help="with --install-plan: an NVIDIA driver version (e.g. "
                        "570.172.08) instead of nvidia-smi's")
    doctor.add_argument("--keep-torch", action="store_true", help="with --install-plan: keep the runtime's torch "
                        "where the plan would replace it by PyPI's build of the same release for vLLM (no vLLM then)")


def _no_arguments(parser: argparse.ArgumentParser) -> None:  # noqa: ARG001
    """``presets`` and ``algorithms`` take none."""


class Command(NamedTuple):
    """One command of the command line: the line ``--help`` gives it, whether it takes a recipe (``--config`` or
    ``--preset``, and any recipe key after the options in TRL's form, gathered in ``trl``), and the function that
    adds its arguments to its parser."""

    summary: str
    takes_recipe: bool
    add_arguments: Callable[[argparse.ArgumentParser], None]


#: Every command, in the order ``python -m grpo_kit --help`` lists them.
COMMANDS: dict[str, Command] = {
    "demo": Command("warm start, evaluate, GRPO, evaluate, report (offline, CPU)", False, _demo_arguments),
    "compare-demo": Command("one warm start and baseline, one GRPO run per reward set, one paired table (offline, "
                            "CPU)", False, _compare_demo_arguments),
    "train": Command("GRPO into a run folder, with checkpoints, --resume and held-out accuracy", True,
                     _train_arguments),
    "eval": Command("--before: the baseline (notebook 02); else the trained model and the before/after report "
                    "(notebook 04)", True, _eval_arguments),
    "reward-check": Command("before training: from the baseline's sampled completions, whether a reward set can "
                            "teach (zero-variance share, correlation with correctness), per reward", False,
                            _reward_check_arguments),
    "compare": Command("several trained runs sharing a baseline: one paired table, Holm-adjusted, and a chart "
                       "(notebook 05)", False, _compare_arguments),
    "view": Command("one self-contained HTML page of what the runs did: before/after table, every question's "
                    "completions side by side with flip and text filters, training curves and groups, reward-check",
                    False, _view_arguments),
    "export": Command("the run's trained policy merged (safetensors) or as GGUF, verified against it before it is "
                      "called done, with a model card; optionally uploaded to the Hub", False, _export_arguments),
    "verify-export": Command("check an export made anywhere against a run's trained policy", False,
                             _verify_export_arguments),
    "plan": Command("what a launch would do (route, GRPOConfig, placement, vLLM, memory, alarm, resume, problems), "
                    "without loading a model or needing a GPU", True, _plan_arguments),
    "doctor": Command("the installed stack (live and on disk), the driver, bfloat16 and free GPU memory against a "
                      "preset", False, _doctor_arguments),
    "presets": Command("list the training presets", False, _no_arguments),
    "algorithms": Command("list the named GRPO variants and the fields each sets", False, _no_arguments),
}


def build_parser(description: str, handlers: Mapping[str, Callable[[argparse.Namespace], int]]
                 ) -> argparse.ArgumentParser:
    """The parser of ``python -m grpo_kit``: one subcommand per entry of :data:`COMMANDS`.

    Args:
        description: the text ``--help`` prints under the usage.
        handlers: for each command's name, the function that runs it; set as the parsed namespace's ``func``.
            A command that takes a recipe also gets ``trl=[]``, where the recipe keys given after its options go.

    Returns:
        The parser; its subcommand lands in ``command``.

    Raises:
        KeyError: a command of :data:`COMMANDS` without a handler.
    """
    parser = argparse.ArgumentParser(prog="python -m grpo_kit", description=description)
    subcommands = parser.add_subparsers(dest="command", required=True)
    for name, command in COMMANDS.items():
        # no command takes abbreviations: one would eat a recipe key
        subparser = subcommands.add_parser(name, help=command.summary, allow_abbrev=False,
                                           epilog=_RECIPE_KEYS_EPILOG if command.takes_recipe else None)
        subparser.set_defaults(func=handlers[name], **({"trl": []} if command.takes_recipe else {}))
        command.add_arguments(subparser)
    return parser
