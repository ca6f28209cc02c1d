"""One training run, resolved once: the recipe, the task, the rewards, the policy to start from, the run folder and
the launch's processes, checked before any model loads and passed down as one object.

The command line, notebook 03 and the demo each build a :class:`RunSpec` with :meth:`RunSpec.resolve`;
:func:`grpo_kit.runs.train.train` trusts it and checks nothing again. The task's train split is read
once, here, and kept on the spec.
"""

from __future__ import annotations

import logging
import math
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_kit.policy.devices import Launch, cuda_available, unsloth_problem
from grpo_kit.policy.routes import usable_loading
from grpo_kit.policy.source import PolicySource
from grpo_kit.policy.tiny import DEFAULT_CACHE_DIR, TinyPolicySpec
from grpo_kit.policy.warm_start import WarmStart
from grpo_kit.runs.folder import RunFolder, check_run_dir, read_record
from grpo_kit.system.logs import counted
from grpo_kit.tasks import DEFAULT_TASK, RewardSet, Task, get_task
from grpo_kit.tasks.answer_format import render
from grpo_kit.tasks.data import carve_validation
from grpo_kit.tasks.reward_registry import BUILTIN_REWARDS, import_reward, probe
from grpo_kit.tasks.task_file import check_digest, is_task_file
from grpo_kit.training.checkpoints import check_same_run, latest_complete, resume_point, run_identity
from grpo_kit.training.checks import check_model_code, check_settings
from grpo_kit.training.groups import GroupsKept
from grpo_kit.training.plan import preflight
from grpo_kit.training.presets import PLAN_FIELDS, Recipe, command_line, get_preset, recipe_task
from grpo_kit.training.recipe_keys import DATA_KEYS
from grpo_kit.training.tracking import setup_wandb

__all__ = ["PROGRESS", "RunSpec", "probe_rewards", "recipe_rewards"]

logger = logging.getLogger(__name__)

#: How a run shows its progress: a bar (notebooks), one log line per step (command line, launchers), or nothing.
PROGRESS = ("bar", "lines", "none")


def probe_rewards(rewards: RewardSet, task: Task, rows: Any) -> None:
    """Call every reward once as TRL will (:func:`grpo_kit.tasks.reward_registry.probe`) on the first two rows of
    ``rows``, each with its gold answer in the answer format as the completion: what ``train`` and ``reward-check``
    both do before anything else, so a reward one of them refuses the other refuses too.

    Raises:
        ValueError: a reward raised, or returned other than one number (or ``None``) per completion; the message names
            the reward.
    """
    picked = [rows[i] for i in range(min(2, len(rows)))]
    probe(rewards, picked, [render("probe", task.gold(row)) for row in picked])


def _with_wandb(preset: Recipe, project: str | None) -> Recipe:
    """``preset`` with wandb set up where its ``report_to`` names it (or ``all`` with wandb installed), whatever said
    so: the recipe, the command line or the notebook's ``wandb_project``. Never prompts or blocks
    (:func:`grpo_kit.training.tracking.setup_wandb`); wandb disabled (``WANDB_MODE=disabled``) drops it."""
    import importlib.util

    reports = [preset.report_to] if isinstance(preset.report_to, str) else list(preset.report_to or [])
    reports = [r.strip() for item in reports for r in str(item).split(",")]
    wanted = "wandb" in reports or ("all" in reports and importlib.util.find_spec("wandb"))
    if not wanted or setup_wandb(project or os.environ.get("WANDB_PROJECT") or "grpo-kit") == "wandb":
        return preset  # not asked for, or set up
    kept = [r for r in reports if r not in ("wandb", "all")]
    return get_preset(preset, report_to=",".join(kept) or "none")


#: open-r1's reward names (``open_r1.rewards.get_reward_funcs``), answered with the same functions.
_OPEN_R1_REWARDS = {"accuracy": "accuracy_reward", "format": "r1_format_reward_func",
                    "tag_count": "r1_tag_count_reward_func"}
#: The reward names ``trl grpo`` knows (trl/scripts/grpo.py), from ``trl.rewards``.
_TRL_REWARDS = ("accuracy_reward", "reasoning_accuracy_reward", "think_format_reward", "get_soft_overlong_punishment")


def recipe_rewards(preset: Recipe, task: Task, trusted: bool) -> RewardSet:
    """The rewards a recipe names as ``trl grpo`` reads them: ``reward_funcs`` (the kit's names, TRL's, open-r1's
    ``accuracy``, ``format`` and ``tag_count``, or ``module.function``) weighted by ``reward_weights``; without
    ``reward_funcs``, the task's rewards (weighted by ``reward_weights`` when given).

    Args:
        preset: the recipe.
        task: the run's task.
        trusted: Python a recipe names may be imported: the command line gave ``reward_funcs`` or
            ``trust_remote_code`` (a recipe file's own ``trust_remote_code`` does not count).

    Raises:
        ValueError: an unknown name; Python named by a recipe file
            without ``--trust_remote_code true``; weights that do not match the rewards.
    """
    try:
        if preset.reward_funcs:
            return RewardSet([_recipe_reward(name, trusted) for name in preset.reward_funcs], preset.reward_weights)
        own = task.reward_set()
        return RewardSet(own.rewards, preset.reward_weights or own.weights)
    except ValueError as e:
        raise ValueError(f"reward_funcs / reward_weights: {e}") from None


def _recipe_reward(name: str, trusted: bool) -> Any:
    """One ``reward_funcs`` name as a reward (:func:`recipe_rewards`)."""
    name = _OPEN_R1_REWARDS.get(name, name)
    if name in BUILTIN_REWARDS:
        return name
    if name in _TRL_REWARDS:
        import trl.rewards

        if name == "get_soft_overlong_punishment":  # with the values trl grpo gives it
            return trl.rewards.get_soft_overlong_punishment(max_completion_len=1280, soft_punish_cache=256)
        return getattr(trl.rewards, name)
    if "." in name or ":" in name:
        if not trusted:
            raise ValueError(f"{name!r} is Python the recipe file would import and run: name it on the command line "
                             "(--reward_funcs ...), or add --trust_remote_code true there if you trust the file")
        return import_reward(name if ":" in name else ":".join(name.rsplit(".", 1)), "reward_funcs")
    raise ValueError(f"unknown reward {name!r}: choose the kit's ({', '.join(BUILTIN_REWARDS)}), TRL's "
                     f"({', '.join(_TRL_REWARDS)}), open-r1's ({', '.join(_OPEN_R1_REWARDS)}), or module.function")


def _check_recorded_data(folder: RunFolder, task: Task, resume: bool) -> None:
    """Refuse a task file whose data changed since the folder's baseline (or, resuming, its training) recorded it."""
    for path in (folder.eval_settings, folder.train_settings) if resume else (folder.eval_settings,):
        if (recorded := read_record(path)).get("task") == task.ref:
            check_digest(task, recorded.get("task_digest"), folder.path)


def _recorded_task(run_dir: str | Path | None) -> tuple[str, dict[str, str] | None]:
    """The task a run folder recorded (its training, else its baseline) and the digest of its files; the kit's default
    task for a new folder."""
    for name in ("train_settings.json", "eval_settings.json") if run_dir is not None else ():
        if isinstance((recorded := read_record(Path(run_dir) / name)).get("task"), str):
            digest = recorded.get("task_digest")
            return recorded["task"], digest if isinstance(digest, dict) else None
    return DEFAULT_TASK, None


def _baseline_policy(run_dir: Path, policy: PolicySource, task: Task, seed: int, chosen: bool) -> PolicySource:
    """The policy to train in a run folder whose baseline was measured: the baseline's own when the command chose
    none (no model, warm start or shape given: the tiny policy the baseline warm-started), else ``policy``, which must
    be the one the baseline measured.

    Raises:
        ValueError: ``policy`` is not what the baseline measured (a before/after table would pair two policies, and
            only ``eval`` after training would say so); the message names both and what to pass.
    """
    measured = read_record(run_dir / "eval_settings.json")  # {}: no baseline yet (or a damaged one, which eval reports)
    base = measured.get("base_model")
    if not isinstance(base, str) or policy.name == base or (  # a folder given by two paths is one policy
            Path(base).is_dir() and Path(policy.name).is_dir() and Path(base).resolve() == Path(policy.name).resolve()):
        return policy
    warm = measured.get("warm") if isinstance(measured.get("warm"), dict) else None
    if not chosen and warm is not None:
        try:
            shape = TinyPolicySpec(**measured["tiny_spec"]) if measured.get("tiny_spec") else None
            theirs = PolicySource.of(None, task, seed=seed, warm=WarmStart(**warm), spec=shape,
                                     cache_dir=measured.get("cache_dir") or DEFAULT_CACHE_DIR)
        except (TypeError, ValueError):
            theirs = None
        if theirs is not None and theirs.name == base:
            logger.info(f"training the tiny policy the baseline in {run_dir} measured ({base}: warm start of "
                        f"{theirs.tiny.warm.steps} steps)")
            return theirs
    how = (f"--warm-steps {warm.get('steps')} (and the baseline's cache folder, {measured.get('cache_dir')})" if warm
           else f"--model_name_or_path {base}")
    raise ValueError(f"the baseline in {run_dir} measured {base}, and this would train {policy.name}: the before/after "
                     f"table would pair two policies. Train what the baseline measured ({how}, or leave the policy "
                     "options out), or measure this policy's baseline in a new run folder (eval --before)")


def _as_recorded(recorded: dict[str, Any], run_dir: Path, given: Mapping[str, Any], reward_funcs: Any,
                 trust_remote_code: bool) -> dict[str, Any]:
    """What a resume takes from the run's record (``train_settings.json``) for each of ``given`` left ``None``: the
    rewards (your own imported again; not where the recipe names ``reward_funcs``), the training questions and their
    seed, and the held-out evaluation's size, cadence and budget (a folder written before the cadence was recorded:
    read from its ``heldout/`` files).

    Raises:
        ValueError: a recorded reward of your own is not trusted, or cannot be imported again
            (:meth:`RewardSet.from_record`).
    """
    identity = recorded["identity"] if isinstance(recorded["identity"], dict) else {}
    heldout = recorded.get("heldout") if isinstance(recorded.get("heldout"), dict) else {}
    found: dict[str, Any] = {}
    if given["rewards"] is None and not reward_funcs and isinstance(recorded.get("rewards"), dict):
        # a resumed folder may have been copied from anyone, and the record (not this command) names the modules: so
        # its own rewards need the trust its task file needs, unless this command gives the rewards (--rewards)
        found["rewards"] = RewardSet.from_record(recorded, f"resuming {run_dir}: its reward",
                                                 RunFolder(run_dir, write=False).train_settings, trust_remote_code)
    for key, value in (("train_size", identity.get("train_size")), ("seed", identity.get("seed")),
                       ("eval_size", heldout.get("questions")),
                       ("eval_steps", heldout.get("eval_steps", _cadence(run_dir) if heldout else None)),
                       ("eval_max_new_tokens", heldout.get("max_new_tokens"))):
        if given[key] is None and isinstance(value, int) and not isinstance(value, bool):
            found[key] = value
    return found


def _cadence(run_dir: Path) -> int | None:
    """The steps between a run's held-out evaluations, from the ``heldout/step-<N>.jsonl`` files it wrote (``None``:
    fewer than two)."""
    steps = [step for step, _ in RunFolder(run_dir, write=False).heldout_records()]
    gaps = [b - a for a, b in zip(steps, steps[1:]) if b > a]
    return min(gaps) if gaps else None


def _resume_command(run_dir: Path, identity: Mapping[str, Any], overrides: Mapping[str, Any]) -> str:
    """The command that resumes ``run_dir`` as recorded: the run folder, the model where it is not the recipe's (a
    folder or Hub id given with ``--model_name_or_path``) and the length asked for, nothing else: the recipe, task,
    rewards, questions and held-out evaluation are then the recorded ones; and ``--trust-task-code`` with the Python it
    runs where the run's records name Python of your own (:meth:`RunFolder.trust_option`)."""
    model, steps = identity.get("model"), overrides.get("max_steps")
    recipe = run_dir / "recipe.yaml"
    named = get_preset(recipe).model if recipe.is_file() else None
    return " ".join(["python -m grpo_kit train --run-dir", shlex.quote(str(run_dir)), "--resume",
                     *([f"--model_name_or_path {shlex.quote(model)}"] if isinstance(model, str)
                       and not model.startswith("tiny:") and model != named else []),
                     *([f"--max_steps {steps}"] if steps is not None else [])]) + \
        RunFolder(run_dir, write=False).trust_option()


def _said(key: str, value: Any) -> str:
    """One setting a resume took from the record, as its log line says it."""
    if isinstance(value, RewardSet):
        return "rewards " + " ".join(f"{n}={w:g}" for n, w in zip(value.names, value.weights))
    return f"{'data_seed' if key == 'seed' else key} {value}"


@dataclass(frozen=True)
class RunSpec:
    """One GRPO run: what it trains, where it writes, how it is watched (build it with :meth:`resolve`).

    Attributes:
        preset: the recipe.
        task: the task: training data and held-out rules.
        rewards: the rewards and their weights (the run owns them).
        policy: the policy to start from.
        folder: the run folder (checkpoints in ``checkpoints/``, the model in ``model/``).
        launch: the processes of this run (:class:`grpo_kit.policy.devices.Launch`); only the main one writes.
        resume: continue from the newest complete checkpoint in the folder (or start when there is none).
        train_size: train questions to sample from (seeded slice; ``None``: every one that fits).
        eval_steps: evaluate held-out accuracy every this many steps (``None``: never).
        eval_size: validation questions held out of the train split for ``eval_steps`` (never test questions: the
            before/after table alone reads the test split).
        eval_max_new_tokens: the held-out completion budget (default the preset's ``max_completion_length``).
        seed: seeds the data slices (the tiny policy's seed is the preset's ``seed``).
        progress: one of :data:`PROGRESS`.
        groups: which training groups the run folder keeps (``groups/``; :class:`grpo_kit.training.groups.GroupsKept`).
        train_split: the task's train split, read once by :meth:`resolve`, less the validation questions.
        validation: the validation questions (:func:`grpo_kit.tasks.data.carve_validation`), with ``eval_steps``.
        taken: what the kit made of the recipe's script keys (the data set, the rewards, the run folder, ...) and
            what it set aside, one line each (:meth:`grpo_kit.training.presets.Recipe.taken`).
        split_rows: the rows of the task's train split before the validation questions were held out.
        eval_size_default: how ``eval_size`` was chosen when no one gave it (``""``: it was given), said by
            :meth:`describe`.
    """

    preset: Recipe
    task: Task
    rewards: RewardSet
    policy: PolicySource
    folder: RunFolder
    launch: Launch = Launch()
    resume: bool = False
    train_size: int | None = None
    eval_steps: int | None = None
    eval_size: int = 100
    eval_max_new_tokens: int | None = None
    seed: int = 0
    progress: str = "bar"
    groups: GroupsKept = GroupsKept()
    train_split: Any = field(default=None, repr=False, compare=False)
    validation: Any = field(default=None, repr=False, compare=False)
    taken: tuple[str, ...] = field(default=(), compare=False)
    split_rows: int = 0
    eval_size_default: str = ""

    @classmethod
    def resolve(cls, preset: str | Recipe | None = None, task: str | Task | None = DEFAULT_TASK,
                rewards: RewardSet | Sequence[Any] | Mapping[Any, float] | None = None, model: str | Path | None = None,
                run_dir: str | Path | None = None, resume: bool = False, train_size: int | None = None,
                eval_steps: int | None = None, eval_size: int | None = None, eval_max_new_tokens: int | None = None,
                seed: int | None = None, warm: WarmStart | None = None, warm_steps: int | None = None,
                tiny_spec: TinyPolicySpec | None = None, cache_dir: str = DEFAULT_CACHE_DIR, progress: str = "bar",
                launch: Launch | None = None, algorithm: str | None = None, groups: GroupsKept | None = None,
                argv: Sequence[str] = (), wandb_project: str | None = None, trust_remote_code: bool = False,
                **overrides: Any) -> RunSpec:
        """Resolve every name into its object and check everything that can be checked before a model loads.

        Args:
            preset: a shipped recipe's name, a recipe file or a :class:`grpo_kit.training.presets.Recipe`
                (``None``: resuming, the run folder's ``recipe.yaml``; else the shipped one that fits this machine);
                ``overrides`` (Python values) and then ``argv`` (the command line, TRL's ``--key value``) replace its
                keys (:func:`grpo_kit.training.presets.get_preset`). Resuming from a recipe's name or file, the
                run's plan (:data:`grpo_kit.training.presets.PLAN_FIELDS`: steps, checkpoints, logging) is the one
                ``recipe.yaml`` records, unless an override changes it.
            task: a task name or :class:`grpo_kit.tasks.Task`; ``None``: the task the run folder recorded (its
                training, else its baseline), else the kit's default task.
            rewards: a :class:`grpo_kit.tasks.RewardSet`, names and/or functions, or a ``{reward: weight}``
                mapping; ``None``: the task's rewards.
            model: a Hub id or folder instead of the preset's model.
            run_dir: the run folder (``None``: ``runs/<recipe>-<task>``).
            resume: see the attributes. Resuming, every one of ``rewards``, ``train_size``, ``eval_steps``,
                ``eval_size``, ``eval_max_new_tokens`` and ``seed`` left ``None`` is the one the run recorded
                (``train_settings.json``), and the first line logged says which were taken so.
            train_size, eval_max_new_tokens, progress, groups: see the attributes.
            eval_steps: see the attributes (``None``: the recipe's, as TRL reads ``eval_strategy`` and
                ``eval_steps``: every ``eval_steps`` steps, or ``logging_steps`` when it is unset).
            seed: seeds the data slices where the recipe sets no ``data_seed`` (transformers' name for it; ``None``: 0,
                or resuming, the run's).
            eval_size: validation questions (default the task's ``validation_size``, else 100 or a fifth of the
                train split's rows, whichever is fewer); carved out of the train split only with ``eval_steps``.
            warm, warm_steps, tiny_spec, cache_dir: what shapes the tiny policy (presets without a model).
            launch: the processes (default: read from the launcher's environment).
            algorithm: a named GRPO variant (:data:`grpo_kit.training.algorithms.ALGORITHMS`) replacing the preset's
                algorithm fields; ``overrides`` still replace any of them (``None``: the preset's own algorithm).
            wandb_project: log to this Weights & Biases project (``None``: the recipe's ``report_to``; a recipe
                that reports to wandb logs to ``WANDB_PROJECT``, default ``grpo-kit``). Either way wandb is set up
                by :func:`grpo_kit.training.tracking.setup_wandb`: it never prompts or blocks.
            trust_remote_code: a task file may import and run Python of its own
                (:func:`grpo_kit.tasks.task_file.check_task_code`), and so may the rewards of your own a resumed run
                records and a recipe file's ``reward_funcs``; ``trust_remote_code`` given in ``overrides`` or
                ``argv`` says the same.

        Raises:
            ValueError: an unknown algorithm; a bad preset setting or algorithm combination, reward or model
                (:func:`grpo_kit.training.checks.check_settings`); a task without a train split; ``eval_steps``,
                ``eval_size`` or ``train_size`` out of range; held-out evaluation with sharded weights (FSDP,
                ZeRO-3); FSDP on a CPU (accelerate would silently fall back to replicating the model); a run folder
                that cannot be written; a folder that holds checkpoints while ``resume`` is off, or another run's
                checkpoints (what differs, and the command that continues the run as recorded); a resume whose
                recorded reward of your own cannot be imported again; a recipe's ``trust_remote_code`` the command
                did not say (:func:`grpo_kit.training.checks.check_model_code`).
            ConnectionError: ``vllm_mode="server"`` and no ``trl vllm-serve`` answers at the preset's host and port.
        """
        if wandb_project is not None:
            overrides["report_to"] = "wandb"
        if algorithm is not None:  # its values over the recipe's, the overrides over those; an unknown name raises
            overrides = {"algorithm": algorithm, **overrides}
        if run_dir is not None:
            check_run_dir(run_dir)  # '' would read ./recipe.yaml as the run's
        recorded_recipe = Path(run_dir) / "recipe.yaml" if run_dir is not None else None
        kept: dict[str, Any] = {}
        given = {**overrides, **command_line(argv, strict=False)}  # get_preset below refuses what it must
        if resume and recorded_recipe is not None and recorded_recipe.is_file() and not isinstance(preset, Recipe):
            if preset is None:
                preset = recorded_recipe  # the recipe the run recorded, its plan with it
            else:  # another recipe's name or file: the run's plan (steps, checkpoints) unless an override changes it
                recorded_plan = get_preset(recorded_recipe)
                kept = {k: getattr(recorded_plan, k) for k in PLAN_FIELDS
                        if k not in given and getattr(recorded_plan, k) is not None}
                overrides |= kept  # never a key of the overrides: those are in given
        preset = _with_wandb(get_preset(preset, argv=argv, **overrides), wandb_project)
        taken = preset.taken()
        if task is None and (from_recipe := recipe_task(preset, cache_dir)) is not None:
            task = from_recipe
            taken.append(f"task file: {task} (the recipe's data keys; --task THIS_FILE reads it again)")
        else:
            taken += [f"{', '.join(aside)} set aside: the task is {task}"
                      for aside in [[k for k in DATA_KEYS if k in preset.settings]] if aside]
        trust_remote_code = trust_remote_code or bool(given.get("trust_remote_code"))
        check_model_code(preset, trust_remote_code)
        # the run folder's task when none is given; one whose file moved since is named as the run's (get_task with
        # the recorded digest), and changed data is checked below, against what each step recorded
        task, digest = (task, None) if task is not None else _recorded_task(run_dir)
        moved = digest is not None and is_task_file(task) and not Path(task).expanduser().is_file()
        task = get_task(task, digest=digest if moved else None, trust_remote_code=trust_remote_code)
        if not task.trains:
            raise ValueError(f"task {task.name!r} has no train split (it is for evaluation only): choose a task "
                             "with one")
        seed = preset.data_seed if preset.data_seed is not None else seed
        if eval_steps is None and preset.eval_strategy_name == "steps":
            eval_steps = preset.eval_steps or preset.logging_steps
        if run_dir is not None and preset.settings.get("output_dir"):
            taken = [line if not line.startswith("run folder:") else f"output_dir set aside: --run-dir {run_dir}"
                     for line in taken]
        if run_dir is None:
            run_dir = preset.settings.get("output_dir") or Path("runs") / f"{preset.name}-{task.name}"
        check_run_dir(run_dir)  # a folder of its own, before anything is read from it
        record = RunFolder(run_dir, write=False)  # read here; written (and its writability checked) below
        record.check_free()  # a training already writing it is named first, before its checkpoints are
        recorded = record.read_settings(record.train_settings, "train", ("identity",)) \
            if resume and record.train_settings.is_file() else None
        if recorded is not None:  # the run as recorded, unless this command says otherwise
            asked = {"rewards": rewards, "train_size": train_size, "eval_steps": eval_steps, "eval_size": eval_size,
                     "eval_max_new_tokens": eval_max_new_tokens, "seed": seed}
            kept |= (found := _as_recorded(recorded, Path(run_dir), asked, preset.reward_funcs, trust_remote_code))
            # found's keys are asked's: the merged dict keeps asked's order
            rewards, train_size, eval_steps, eval_size, eval_max_new_tokens, seed = {**asked, **found}.values()
        seed = 0 if seed is None else seed
        if rewards is not None:
            reward_set = RewardSet(rewards)
            taken += [f"{key} set aside: {'the run recorded' if 'rewards' in kept else '--rewards gives'} the rewards"
                      for key in ("reward_funcs", "reward_weights") if getattr(preset, key)]
            if preset.reward_funcs or preset.reward_weights:
                preset = get_preset(preset, reward_funcs=None, reward_weights=None)
        else:
            reward_set = recipe_rewards(preset, task, trusted=trust_remote_code or "reward_funcs" in given)
        launch = launch or Launch.from_env()
        if progress not in PROGRESS:
            raise ValueError(f"progress must be one of {', '.join(PROGRESS)}, got {progress!r}")
        for name, value in (("eval_steps", eval_steps), ("train_size", train_size),
                            ("eval_max_new_tokens", eval_max_new_tokens),
                            ("eval_size", eval_size if eval_steps is not None else None)):  # eval_size: with eval_steps
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"{name} must be a whole number >= 1 (or None), got {value!r}")
        if eval_steps is not None and launch.sharded:
            raise ValueError("held-out evaluation during training (eval_steps) runs on the main process with a full "
                             "copy of the policy; with FSDP or ZeRO-3 the weights are sharded: drop eval_steps and "
                             "evaluate the saved model afterwards (python -m grpo_kit eval)")
        if launch.fsdp and (preset.use_cpu or not cuda_available()):
            # accelerate 1.15 engages FSDP only for accelerator device types, not MULTI_CPU (accelerate/state.py): the
            # run would silently replicate the whole model on every process, which FSDP was chosen to avoid.
            # DeepSpeed ZeRO does run on CPU processes (its CPU accelerator, gloo): tests/runs/test_scaling.py.
            raise ValueError("accelerate was configured for FSDP, which shards only on GPUs: on a CPU every process "
                             "would hold the whole model. Use configs/accelerate/zero3.yaml (DeepSpeed ZeRO-3 runs on "
                             "CPU processes) or ddp.yaml here, or run FSDP on GPUs")
        policy = PolicySource.of(model if model is not None else preset.model, task, seed=preset.seed, warm=warm,
                                 warm_steps=warm_steps, spec=tiny_spec, cache_dir=cache_dir)
        train_split = task.load("train")
        split_rows, validation, eval_size_default = len(train_split), None, ""
        if eval_steps is not None:
            what = f"--eval-size {eval_size} (notebook 03: eval_size)"  # the message names where the size came from
            if eval_size is None:
                eval_size = task.validation_size or min(100, max(1, len(train_split) // 5))
                what = f"validation_size {eval_size} in {task.file}" if task.validation_size else \
                    f"the default validation size {eval_size} (a fifth of the train split, at most 100)"
                eval_size_default = ("the task file's validation_size" if task.validation_size else
                                     f"the default: a fifth of the {len(train_split)} train questions, at most 100"
                                     ) + "; --eval-size sets another"
            train_split, validation = carve_validation(train_split, eval_size, seed, what)
        if preset.max_steps == -1:  # TRL's default: train num_train_epochs over the train split
            questions = len(train_split) if train_size is None else min(train_size, len(train_split))
            steps = math.ceil(preset.num_train_epochs * questions * preset.num_iterations
                              / (preset.prompts_per_step * launch.world_size))
            preset = get_preset(preset, max_steps=max(1, steps))
            taken.append(f"max_steps -1: {preset.max_steps} steps are num_train_epochs {preset.num_train_epochs:g} "
                         f"over {questions} train questions")
        check_settings(preset, reward_set, train_split.features, num_processes=launch.world_size,
                       tiny_policy=policy.tiny is not None)
        if preset.use_unsloth and (problem := unsloth_problem(policy.tiny is not None)):
            raise ValueError(problem)
        if preset.use_unsloth and preset.fast_inference \
                and not usable_loading(preset.loading, "training").fast_inference:
            preset = get_preset(preset, fast_inference=False)  # as evaluation does (policy/routes.py)
        preflight(preset, launch, str(model) if model is not None else preset.model)  # this GPU: bf16, memory, vLLM
        if launch.is_main:  # once per run: a reward that writes somewhere does it once more, not once per process
            probe_rewards(reward_set, task, train_split)
        if preset.use_vllm and preset.vllm_mode == "server":
            from grpo_kit.policy.vllm import check_vllm_server

            check_vllm_server(preset.vllm_server_host, preset.vllm_server_port)
        folder = RunFolder(run_dir)
        _check_recorded_data(folder, task, resume)
        policy = _baseline_policy(folder.path, policy, task, preset.seed,
                                  chosen=model is not None or preset.model is not None or warm is not None
                                  or warm_steps is not None or tiny_spec is not None)
        if not resume and (folder.finished.is_file() or folder.model.exists()):
            at = f", finished at step {folder.finished_step()}" if folder.finished.is_file() else ""
            raise ValueError(f"{folder.path} holds a trained model ({folder.model.name}/{at}), which training again "
                             "would replace: pass --resume (notebook 03: resume = True) with a larger --max_steps to "
                             "train it further, or choose a new run folder")
        if not resume and (found := latest_complete(folder.checkpoints)) is not None:
            raise ValueError(f"{folder.path} already holds checkpoints (newest complete: {found.name}): pass --resume "
                             "(notebook 03: resume = True) to continue that run, or choose a new run folder")
        if resume:
            resume_point(folder.checkpoints, preset.max_steps, folder.finished_step())
        spec = cls(preset=preset, task=task, rewards=reward_set, policy=policy, folder=folder, launch=launch,
                   resume=resume, train_size=train_size, eval_steps=eval_steps,
                   eval_size=len(validation) if validation is not None else eval_size or 100,
                   eval_max_new_tokens=eval_max_new_tokens, seed=seed, progress=progress, groups=groups or GroupsKept(),
                   train_split=train_split, validation=validation, taken=tuple(taken), split_rows=split_rows,
                   eval_size_default=eval_size_default)
        if recorded is not None:
            try:
                check_same_run(recorded["identity"], spec.identity(), folder.path)
            except ValueError as e:
                raise ValueError(f"{e}\nTo continue it as recorded: "
                                 f"{_resume_command(folder.path, recorded['identity'], given)} "
                                 "(notebook 03: resume = True with the parameters it was trained with); or train "
                                 "into a new run folder") from None
        if kept and launch.is_main:  # said once the run is accepted
            logger.info(f"resuming as {folder.recipe.name} and {folder.train_settings.name} record it: "
                        + "; ".join(_said(k, v) for k, v in kept.items())
                        + " (the options of the same names change them)")
        return spec

    def describe(self) -> list[str]:
        """The run in a few lines, as ``train`` logs them and notebook 03 prints them: the recipe, task, rewards and
        algorithm; the steps, checkpoints and held-out evaluation; what the kit made of the recipe's script keys."""
        p = self.preset
        held_out = (f"; validation accuracy every {counted(self.eval_steps, 'step')} on "
                    f"{counted(self.eval_size, 'question')} held out of "
                    "the train split" + (f" ({self.eval_size_default})" if self.eval_size_default else "")
                    if self.eval_steps else "")
        return [f"{p.name} on {self.task.name} with {self.rewards}; algorithm {p.algorithm}: loss_type {p.loss_type}, "
                f"beta {p.beta}, scale_rewards {p.scale_rewards}, importance_sampling_level "
                f"{p.importance_sampling_level}, epsilon {p.epsilon}/{p.epsilon_high}",
                f"{counted(p.max_steps, 'step')} of {counted(p.prompts_per_step, 'prompt')} x "
                f"{counted(p.num_generations, 'completion')}; checkpoints every {counted(p.save_steps, 'step')} in "
                f"{self.folder.checkpoints}{held_out}", *self.taken]

    def heldout(self) -> dict[str, Any] | None:
        """What ``train_settings.json`` records of the held-out evaluation during training (``None``: none): the
        split, how many questions, the seed that chose them, how often and with what budget they are measured (what a
        resume continues with)."""
        if self.validation is None:
            return None
        return {"split": "validation", "carved_from": "train", "questions": len(self.validation), "seed": self.seed,
                "eval_steps": self.eval_steps, "max_new_tokens": self.eval_max_new_tokens}

    def identity(self) -> dict[str, Any]:
        """What this run trains, as its run folder records it (:func:`grpo_kit.training.checkpoints.run_identity`)."""
        return run_identity(self.preset, self.task.ref, self.policy.name, self.rewards,
                            {"train_size": self.train_size, "seed": self.seed,
                             "validation_size": self.eval_size if self.eval_steps is not None else None})

