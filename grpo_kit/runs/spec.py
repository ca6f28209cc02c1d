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
from dataclasses import dataclass, field, replace
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
from grpo_kit.training.presets import (
    PLAN_FIELDS,
    Recipe,
    command_line,
    device_preset,
    get_preset,
    recipe_task,
    unsloth_first,
)
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
    probed_rows = [rows[i] for i in range(min(2, len(rows)))]
    probe(rewards, probed_rows, [render("probe", task.gold(row)) for row in probed_rows])


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
        task_rewards = task.reward_set()
        return RewardSet(task_rewards.rewards, preset.reward_weights or task_rewards.weights)
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


@dataclass(frozen=True)
class _RunChoices:
    """What a call chose of a run's rewards, questions and held-out evaluation (each ``None``: not chosen), as
    :meth:`RunSpec.resolve` takes them; resuming, each left ``None`` is the one the run recorded
    (:func:`_recorded_choices`). The fields are :meth:`RunSpec.resolve`'s parameters of the same names."""

    rewards: RewardSet | Sequence[Any] | Mapping[Any, float] | None
    train_size: int | None
    eval_steps: int | None
    eval_size: int | None
    eval_max_new_tokens: int | None
    seed: int | None


@dataclass(frozen=True)
class _TrainData:
    """The questions a run trains on and those it holds out (:func:`_resolve_data`).

    Attributes:
        train_split: the task's train split less the validation questions.
        validation: the validation questions (``None``: no held-out evaluation).
        split_rows: the rows of the train split before the validation questions were held out.
        eval_size: the validation questions' count (``eval_size`` as given, or 100, without held-out evaluation).
        eval_size_default: how the count was chosen when no one gave it (``""``: it was given).
    """

    train_split: Any
    validation: Any
    split_rows: int
    eval_size: int
    eval_size_default: str


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
        recipe_notes: what the kit made of the recipe's script keys (the data set, the rewards, the run folder, ...) and
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
    recipe_notes: tuple[str, ...] = field(default=(), compare=False)
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
        if run_dir is not None:
            check_run_dir(run_dir)  # '' would read ./recipe.yaml as the run's
        launch = launch or Launch.from_env()
        _check_fsdp(launch)  # before the recipe: reading it imports TRL, about 8 CPU seconds in every process
        recipe, notes, command_settings, recorded_plan = _resolve_recipe(preset, run_dir, resume, argv, overrides,
                                                                         algorithm, wandb_project)
        trust_remote_code = trust_remote_code or bool(command_settings.get("trust_remote_code"))
        task, task_notes = _resolve_task(task, recipe, run_dir, cache_dir, trust_remote_code)
        if eval_steps is None and recipe.eval_strategy_name == "steps":
            eval_steps = recipe.eval_steps or recipe.logging_steps
        choices = _RunChoices(rewards=rewards, train_size=train_size, eval_steps=eval_steps, eval_size=eval_size,
                              eval_max_new_tokens=eval_max_new_tokens,
                              seed=recipe.data_seed if recipe.data_seed is not None else seed)
        run_dir, recorded = _read_run_record(run_dir, recipe, task, resume, launch)
        recorded_choices = {} if recorded is None else \
            _recorded_choices(recorded, Path(run_dir), choices, recipe.reward_funcs, trust_remote_code)
        choices = replace(choices, **recorded_choices)  # the run as recorded, unless this call says otherwise
        choices = replace(choices, seed=0) if choices.seed is None else choices
        recipe, reward_set, reward_notes = _resolve_rewards(
            recipe, task, choices.rewards, from_record="rewards" in recorded_choices,
            trusted=trust_remote_code or "reward_funcs" in command_settings)
        _check_launch(choices, progress, launch, recipe)
        policy = PolicySource.of(model if model is not None else recipe.model, task, seed=recipe.seed, warm=warm,
                                 warm_steps=warm_steps, spec=tiny_spec, cache_dir=cache_dir)
        recipe, data, data_notes = _resolve_data(recipe, task, choices, launch.world_size)
        recipe = _check_before_loading(recipe, reward_set, task, data.train_split, launch, policy, model)
        folder, policy = _resolve_folder(run_dir, task, policy, recipe, resume,
                                         policy_chosen=model is not None or recipe.model is not None
                                         or warm is not None or warm_steps is not None or tiny_spec is not None)
        spec = cls(preset=recipe, task=task, rewards=reward_set, policy=policy, folder=folder, launch=launch,
                   resume=resume, train_size=choices.train_size, eval_steps=choices.eval_steps,
                   eval_size=data.eval_size, eval_max_new_tokens=choices.eval_max_new_tokens, seed=choices.seed,
                   progress=progress, groups=groups or GroupsKept(), train_split=data.train_split,
                   validation=data.validation, recipe_notes=(*notes, *task_notes, *reward_notes, *data_notes),
                   split_rows=data.split_rows, eval_size_default=data.eval_size_default)
        if recorded is not None:
            _check_resumes_as_recorded(spec, recorded["identity"], command_settings)
        if (from_record := recorded_plan | recorded_choices) and launch.is_main:  # said once the run is accepted
            logger.info(f"resuming as {folder.recipe.name} and {folder.train_settings.name} record it: "
                        + "; ".join(_setting_text(k, v) for k, v in from_record.items())
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
                f"{self.folder.checkpoints}{held_out}", *self.recipe_notes]

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


# The phases of RunSpec.resolve, in the order it runs them: the recipe; the task and the rewards; the data; the folder.

def _resolve_recipe(preset: str | Path | Recipe | None, run_dir: str | Path | None, resume: bool,
                    argv: Sequence[str], overrides: Mapping[str, Any], algorithm: str | None,
                    wandb_project: str | None) -> tuple[Recipe, list[str], dict[str, Any], dict[str, Any]]:
    """The recipe phase of :meth:`RunSpec.resolve`: ``preset`` with ``algorithm``'s values, then ``overrides``, then
    ``argv`` over its keys (:func:`grpo_kit.training.presets.get_preset`), and wandb set up (:func:`_with_wandb`).
    Resuming with no recipe, the one the run folder recorded; resuming from another recipe's name or file, the plan
    (:data:`grpo_kit.training.presets.PLAN_FIELDS`) ``recipe.yaml`` records, where no override changes it.

    Args:
        preset, run_dir, resume, argv, overrides, algorithm, wandb_project: :meth:`RunSpec.resolve`'s (``run_dir``
            already checked).

    Returns:
        The recipe; what the kit made of its script keys, one line each (:meth:`Recipe.taken`); the keys the call's
        ``overrides`` and the command line set (the command line's over the call's); the plan fields taken from
        the recorded ``recipe.yaml`` (``{}``: none).

    Raises:
        ValueError: an unknown algorithm, or what :func:`grpo_kit.training.presets.get_preset` refuses.
    """
    overrides = dict(overrides)
    if wandb_project is not None:
        overrides["report_to"] = "wandb"
    if algorithm is not None:  # its values over the recipe's, the overrides over those; an unknown name raises
        overrides = {"algorithm": algorithm, **overrides}
    recorded_recipe = Path(run_dir) / "recipe.yaml" if run_dir is not None else None
    recorded_plan: dict[str, Any] = {}
    resumed = resume and recorded_recipe is not None and recorded_recipe.is_file() and preset is None
    unsloth_first(recorded_recipe if resumed else preset or device_preset(), argv, overrides)  # before TRL's parser
    command_settings = {**overrides, **command_line(argv, strict=False)}  # get_preset below refuses what it must
    if resume and recorded_recipe is not None and recorded_recipe.is_file() and not isinstance(preset, Recipe):
        if preset is None:
            preset = recorded_recipe  # the recipe the run recorded, its plan with it
        else:  # another recipe's name or file: the run's plan (steps, checkpoints) unless an override changes it
            plan = get_preset(recorded_recipe)
            recorded_plan = {k: getattr(plan, k) for k in PLAN_FIELDS
                             if k not in command_settings and getattr(plan, k) is not None}
            overrides |= recorded_plan  # never a key of the overrides: those are in command_settings
    recipe = _with_wandb(get_preset(preset, argv=argv, **overrides), wandb_project)
    notes = recipe.taken()
    if run_dir is not None and recipe.settings.get("output_dir"):
        notes = [line if not line.startswith("run folder:") else f"output_dir set aside: --run-dir {run_dir}"
                 for line in notes]
    return recipe, notes, command_settings, recorded_plan


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
    other_reports = [r for r in reports if r not in ("wandb", "all")]
    return get_preset(preset, report_to=",".join(other_reports) or "none")


def _resolve_task(task: str | Task | None, recipe: Recipe, run_dir: str | Path | None, cache_dir: str,
                  trust_remote_code: bool) -> tuple[Task, list[str]]:
    """The task phase of :meth:`RunSpec.resolve`: ``task``; without one, the task file of the recipe's data keys
    (:func:`grpo_kit.training.presets.recipe_task`), else the task the run folder recorded (one whose file moved
    since is found by its recorded digest), else the kit's default task.

    Args:
        task: a task name, file or :class:`Task` (``None``: as above).
        recipe: the run's recipe (its ``trust_remote_code`` is checked here, before a task file's code may run).
        run_dir: the run folder given (``None``: none).
        cache_dir: where the recipe's task file is written.
        trust_remote_code: the call trusts Python of a task file and a recipe.

    Returns:
        The task, and the lines that say where it came from or which recipe data keys it sets aside.

    Raises:
        ValueError: an unknown or untrusted task, one without a train split, or a recipe's ``trust_remote_code`` the
            call did not say (:func:`grpo_kit.training.checks.check_model_code`).
    """
    notes = []
    if task is None and (from_recipe := recipe_task(recipe, cache_dir)) is not None:
        task = from_recipe
        notes.append(f"task file: {task} (the recipe's data keys; --task THIS_FILE reads it again)")
    else:
        notes += [f"{', '.join(aside)} set aside: the task is {task}"
                  for aside in [[k for k in DATA_KEYS if k in recipe.settings]] if aside]
    check_model_code(recipe, trust_remote_code)
    # the run folder's task when none is given; one whose file moved since is named as the run's (get_task with the
    # recorded digest), and changed data is checked by _resolve_folder, against what each step recorded
    task, digest = (task, None) if task is not None else _recorded_task(run_dir)
    moved = digest is not None and is_task_file(task) and not Path(task).expanduser().is_file()
    task = get_task(task, digest=digest if moved else None, trust_remote_code=trust_remote_code)
    if not task.trains:
        raise ValueError(f"task {task.name!r} has no train split (it is for evaluation only): choose a task with one")
    return task, notes


def _recorded_task(run_dir: str | Path | None) -> tuple[str, dict[str, str] | None]:
    """The task a run folder recorded (its training, else its baseline) and the digest of its files; the kit's default
    task for a new folder."""
    for name in ("train_settings.json", "eval_settings.json") if run_dir is not None else ():
        if isinstance((recorded := read_record(Path(run_dir) / name)).get("task"), str):
            digest = recorded.get("task_digest")
            return recorded["task"], digest if isinstance(digest, dict) else None
    return DEFAULT_TASK, None


def _read_run_record(run_dir: str | Path | None, recipe: Recipe, task: Task, resume: bool,
                     launch: Launch) -> tuple[str | Path, dict[str, Any] | None]:
    """The run folder (``run_dir``, else the recipe's ``output_dir``, else ``runs/<recipe>-<task>``), checked free of
    another training by the main process of ``launch``, and resuming, its training's record (``train_settings.json``;
    ``None``: not resuming, or none written yet). Nothing is written here.

    Raises:
        ValueError: a folder that is not one of its own, one another training is writing, or a damaged record.
    """
    if run_dir is None:
        run_dir = recipe.settings.get("output_dir") or Path("runs") / f"{recipe.name}-{task.name}"
    check_run_dir(run_dir)  # a folder of its own, before anything is read from it
    record = RunFolder(run_dir, write=False)  # its writability is checked by _resolve_folder
    if launch.is_main:  # a training already writing it is named first, before its checkpoints are
        # only the main process writes the folder (grpo_kit.runs.train), and it may hold the lock by the time a slower
        # process of its launch gets here: that process would take its own launch for another writer
        record.check_free()
    recorded = record.read_settings(record.train_settings, "train", ("identity",)) \
        if resume and record.train_settings.is_file() else None
    return run_dir, recorded


def _recorded_choices(recorded: dict[str, Any], run_dir: Path, choices: _RunChoices, reward_funcs: Any,
                      trust_remote_code: bool) -> dict[str, Any]:
    """What a resume takes from the run's record (``train_settings.json``) for each of ``choices`` left ``None``: the
    rewards (your own imported again; not where the recipe names ``reward_funcs``), the training questions and their
    seed, and the held-out evaluation's size, cadence and budget (a folder written before the cadence was recorded:
    read from its ``heldout/`` files).

    Returns:
        ``{field of _RunChoices: recorded value}``: the rewards, ``train_size``, ``seed``, ``eval_size``,
        ``eval_steps``, ``eval_max_new_tokens``, in this order (the order the resume's log line says them).

    Raises:
        ValueError: a recorded reward of your own is not trusted, or cannot be imported again
            (:meth:`RewardSet.from_record`).
    """
    identity = recorded["identity"] if isinstance(recorded["identity"], dict) else {}
    heldout = recorded.get("heldout") if isinstance(recorded.get("heldout"), dict) else {}
    taken_from_record: dict[str, Any] = {}
    if choices.rewards is None and not reward_funcs and isinstance(recorded.get("rewards"), dict):
        # a resumed folder may have been copied from anyone, and the record (not this command) names the modules: so
        # its own rewards need the trust its task file needs, unless this command gives the rewards (--rewards)
        taken_from_record["rewards"] = RewardSet.from_record(
            recorded, f"resuming {run_dir}: its reward", RunFolder(run_dir, write=False).train_settings,
            trust_remote_code)
    for key, value in (("train_size", identity.get("train_size")), ("seed", identity.get("seed")),
                       ("eval_size", heldout.get("questions")),
                       ("eval_steps", heldout.get("eval_steps", _cadence(run_dir) if heldout else None)),
                       ("eval_max_new_tokens", heldout.get("max_new_tokens"))):
        if getattr(choices, key) is None and isinstance(value, int) and not isinstance(value, bool):
            taken_from_record[key] = value
    return taken_from_record


def _cadence(run_dir: Path) -> int | None:
    """The steps between a run's held-out evaluations, from the ``heldout/step-<N>.jsonl`` files it wrote (``None``:
    fewer than two)."""
    steps = [step for step, _ in RunFolder(run_dir, write=False).heldout_records()]
    gaps = [b - a for a, b in zip(steps, steps[1:]) if b > a]
    return min(gaps) if gaps else None


def _resolve_rewards(recipe: Recipe, task: Task, rewards: RewardSet | Sequence[Any] | Mapping[Any, float] | None,
                     from_record: bool, trusted: bool) -> tuple[Recipe, RewardSet, list[str]]:
    """The rewards phase of :meth:`RunSpec.resolve`: ``rewards`` where the call or the run's record gives them (the
    recipe's ``reward_funcs`` and ``reward_weights`` then set aside), else the recipe's (:func:`recipe_rewards`).

    Args:
        recipe: the run's recipe.
        task: the run's task.
        rewards: the call's or the record's rewards (``None``: the recipe's, else the task's).
        from_record: ``rewards`` came from the run's record (the line that sets the recipe's aside says so).
        trusted: Python a recipe names may be imported (:func:`recipe_rewards`).

    Returns:
        The recipe (without ``reward_funcs`` and ``reward_weights`` where ``rewards`` replaced them), the rewards, and
        the lines that say what was set aside.

    Raises:
        ValueError: what :class:`RewardSet` or :func:`recipe_rewards` refuses.
    """
    if rewards is None:
        return recipe, recipe_rewards(recipe, task, trusted=trusted), []
    reward_set = RewardSet(rewards)
    notes = [f"{key} set aside: {'the run recorded' if from_record else '--rewards gives'} the rewards"
             for key in ("reward_funcs", "reward_weights") if getattr(recipe, key)]
    if recipe.reward_funcs or recipe.reward_weights:
        recipe = get_preset(recipe, reward_funcs=None, reward_weights=None)
    return recipe, reward_set, notes


def _check_launch(choices: _RunChoices, progress: str, launch: Launch, recipe: Recipe) -> None:
    """Refuse a ``progress`` not in :data:`PROGRESS`, sizes and cadences that are not whole numbers >= 1, and a
    held-out evaluation or FSDP the processes of ``launch`` cannot run.

    Raises:
        ValueError: the message says what to change.
    """
    if progress not in PROGRESS:
        raise ValueError(f"progress must be one of {', '.join(PROGRESS)}, got {progress!r}")
    for name, value in (("eval_steps", choices.eval_steps), ("train_size", choices.train_size),
                        ("eval_max_new_tokens", choices.eval_max_new_tokens),
                        ("eval_size", choices.eval_size if choices.eval_steps is not None else None)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ValueError(f"{name} must be a whole number >= 1 (or None), got {value!r}")
    if choices.eval_steps is not None and launch.sharded:
        raise ValueError("held-out evaluation during training (eval_steps) runs on the main process with a full "
                         "copy of the policy; with FSDP or ZeRO-3 the weights are sharded: drop eval_steps and "
                         "evaluate the saved model afterwards (python -m grpo_kit eval)")
    _check_fsdp(launch, recipe.use_cpu)


def _check_fsdp(launch: Launch, use_cpu: bool = False) -> None:
    """Refuse an FSDP launch (``ACCELERATE_USE_FSDP``, as ``accelerate launch`` sets it) without a CUDA GPU, or with
    a recipe that trains on the CPU (``use_cpu``): :meth:`RunSpec.resolve` asks once before it reads the recipe
    (only torch is imported), then again with the recipe's ``use_cpu``.

    Raises:
        ValueError: the message names the configs that do run here.
    """
    if launch.fsdp and (use_cpu or not cuda_available()):
        # accelerate 1.15 engages FSDP only for accelerator device types, not MULTI_CPU (accelerate/state.py): the
        # run would silently replicate the whole model on every process, which FSDP was chosen to avoid.
        # DeepSpeed ZeRO does run on CPU processes (its CPU accelerator, gloo): tests/runs/test_scaling.py.
        raise ValueError("accelerate was configured for FSDP, which shards only on GPUs: on a CPU every process "
                         "would hold the whole model. Use configs/accelerate/zero3.yaml (DeepSpeed ZeRO-3 runs on "
                         "CPU processes) or ddp.yaml here, or run FSDP on GPUs")


def _resolve_data(recipe: Recipe, task: Task, choices: _RunChoices,
                  world_size: int) -> tuple[Recipe, _TrainData, list[str]]:
    """The data phase of :meth:`RunSpec.resolve`: the task's train split, read once, with the validation questions
    held out of it when ``choices.eval_steps`` asks for held-out evaluation
    (:func:`grpo_kit.tasks.data.carve_validation`, seeded by ``choices.seed``), and a recipe's ``max_steps -1`` made
    the steps TRL would train: ``num_train_epochs`` over the train questions.

    Args:
        recipe: the run's recipe.
        task: the run's task.
        choices: the run's questions and held-out evaluation, as resolved (``seed`` not ``None``).
        world_size: the processes of the launch (each takes its own prompts at every step).

    Returns:
        The recipe (its ``max_steps`` set where it was -1), the data, and the line that says how ``max_steps`` -1 was
        read (``[]``: it was not -1).

    Raises:
        ValueError: fewer train questions than the validation questions need (the message says where their count
            came from).
    """
    train_split = task.load("train")
    split_rows, validation, eval_size, eval_size_default = len(train_split), None, choices.eval_size, ""
    if choices.eval_steps is not None:
        size_source = f"--eval-size {eval_size} (notebook 03: eval_size)"  # the message names where it came from
        if eval_size is None:
            eval_size = task.validation_size or min(100, max(1, len(train_split) // 5))
            size_source = f"validation_size {eval_size} in {task.file}" if task.validation_size else \
                f"the default validation size {eval_size} (a fifth of the train split, at most 100)"
            eval_size_default = ("the task file's validation_size" if task.validation_size else
                                 f"the default: a fifth of the {len(train_split)} train questions, at most 100"
                                 ) + "; --eval-size sets another"
        train_split, validation = carve_validation(train_split, eval_size, choices.seed, size_source)
    notes = []
    if recipe.max_steps == -1:  # TRL's default: train num_train_epochs over the train split
        questions = len(train_split) if choices.train_size is None else min(choices.train_size, len(train_split))
        steps = math.ceil(recipe.num_train_epochs * questions * recipe.num_iterations
                          / (recipe.prompts_per_step * world_size))
        recipe = get_preset(recipe, max_steps=max(1, steps))
        notes.append(f"max_steps -1: {recipe.max_steps} steps are num_train_epochs {recipe.num_train_epochs:g} "
                     f"over {questions} train questions")
    return recipe, _TrainData(train_split, validation, split_rows,
                              len(validation) if validation is not None else eval_size or 100, eval_size_default), notes


def _check_before_loading(recipe: Recipe, reward_set: RewardSet, task: Task, train_split: Any, launch: Launch,
                 policy: PolicySource, model: str | Path | None) -> Recipe:
    """Check that the run can start on this machine before any model loads: the recipe's settings with the rewards
    and the data's columns (:func:`grpo_kit.training.checks.check_settings`), Unsloth, this GPU (bf16, memory, vLLM:
    :func:`grpo_kit.training.plan.preflight`), every reward called once (:func:`probe_rewards`, on the main process
    only) and a vLLM server where the recipe names one.

    Returns:
        The recipe, with Unsloth's ``fast_inference`` off where this machine's vLLM cannot serve it (as evaluation
        does: :mod:`grpo_kit.policy.routes`).

    Raises:
        ValueError: what the checks refuse; ConnectionError: no ``trl vllm-serve`` answers.
    """
    check_settings(recipe, reward_set, train_split.features, num_processes=launch.world_size,
                   tiny_policy=policy.tiny is not None)
    if recipe.use_unsloth and (problem := unsloth_problem(policy.tiny is not None)):
        raise ValueError(problem)
    if recipe.use_unsloth and recipe.fast_inference \
            and not usable_loading(recipe.loading, "training").fast_inference:
        recipe = get_preset(recipe, fast_inference=False)
    preflight(recipe, launch, str(model) if model is not None else recipe.model)
    if launch.is_main:  # once per run: a reward that writes somewhere does it once more, not once per process
        probe_rewards(reward_set, task, train_split)
    if recipe.use_vllm and recipe.vllm_mode == "server":
        from grpo_kit.policy.vllm import check_vllm_server

        check_vllm_server(recipe.vllm_server_host, recipe.vllm_server_port)
    return recipe


def _resolve_folder(run_dir: str | Path, task: Task, policy: PolicySource, recipe: Recipe, resume: bool,
                    policy_chosen: bool) -> tuple[RunFolder, PolicySource]:
    """The folder phase of :meth:`RunSpec.resolve`: the run folder, opened to write, checked to hold what this run
    may continue: the task data its steps recorded (:func:`_check_recorded_data`), the policy its baseline measured
    (:func:`_baseline_policy`), no trained model or checkpoints unless resuming, and resuming, checkpoints short of
    the recipe's ``max_steps`` (:func:`grpo_kit.training.checkpoints.resume_point`).

    Args:
        run_dir: the run folder.
        task, policy, recipe, resume: the run's.
        policy_chosen: the call chose the policy (a model, warm start or tiny policy shape).

    Returns:
        The run folder, and the policy to train (the baseline's own where the call chose none).

    Raises:
        ValueError: a folder that cannot be written, or that holds what this run would replace or cannot continue;
            the message says what to pass instead.
    """
    folder = RunFolder(run_dir)
    _check_recorded_data(folder, task, resume)
    policy = _baseline_policy(folder.path, policy, task, recipe.seed, chosen=policy_chosen)
    if not resume and (folder.finished.is_file() or folder.model.exists()):
        finished_at = f", finished at step {folder.finished_step()}" if folder.finished.is_file() else ""
        raise ValueError(f"{folder.path} holds a trained model ({folder.model.name}/{finished_at}), which training "
                         "again would replace: pass --resume (notebook 03: resume = True) with a larger --max_steps to "
                         "train it further, or choose a new run folder")
    if not resume and (newest := latest_complete(folder.checkpoints)) is not None:
        raise ValueError(f"{folder.path} already holds checkpoints (newest complete: {newest.name}): pass --resume "
                         "(notebook 03: resume = True) to continue that run, or choose a new run folder")
    if resume:
        resume_point(folder.checkpoints, recipe.max_steps, folder.finished_step())
    return folder, policy


def _check_recorded_data(folder: RunFolder, task: Task, resume: bool) -> None:
    """Refuse a task file whose data changed since the folder's baseline (or, resuming, its training) recorded it."""
    for path in (folder.eval_settings, folder.train_settings) if resume else (folder.eval_settings,):
        if (recorded := read_record(path)).get("task") == task.ref:
            check_digest(task, recorded.get("task_digest"), folder.path)


def _baseline_policy(run_dir: Path, policy: PolicySource, task: Task, seed: int, chosen: bool) -> PolicySource:
    """The policy to train in a run folder whose baseline was measured: the baseline's own when the command chose
    none (no model, warm start or shape given: the tiny policy the baseline warm-started), else ``policy``, which must
    be the one the baseline measured.

    Raises:
        ValueError: ``policy`` is not what the baseline measured (a before/after table would pair two policies, and
            only ``eval`` after training would say so); the message names both and what to pass.
    """
    baseline_record = read_record(run_dir / "eval_settings.json")  # {}: no baseline (or a damaged one: eval says so)
    base = baseline_record.get("base_model")
    if not isinstance(base, str) or policy.name == base or (  # a folder given by two paths is one policy
            Path(base).is_dir() and Path(policy.name).is_dir() and Path(base).resolve() == Path(policy.name).resolve()):
        return policy
    warm = baseline_record.get("warm") if isinstance(baseline_record.get("warm"), dict) else None
    if not chosen and warm is not None:
        try:
            shape = TinyPolicySpec(**baseline_record["tiny_spec"]) if baseline_record.get("tiny_spec") else None
            baseline_policy = PolicySource.of(None, task, seed=seed, warm=WarmStart(**warm), spec=shape,
                                              cache_dir=baseline_record.get("cache_dir") or DEFAULT_CACHE_DIR)
        except (TypeError, ValueError):
            baseline_policy = None
        if baseline_policy is not None and baseline_policy.name == base:
            logger.info(f"training the tiny policy the baseline in {run_dir} measured ({base}: warm start of "
                        f"{baseline_policy.tiny.warm.steps} steps)")
            return baseline_policy
    advice = (f"--warm-steps {warm.get('steps')} (and the baseline's cache folder, "
              f"{baseline_record.get('cache_dir')})" if warm else f"--model_name_or_path {base}")
    raise ValueError(f"the baseline in {run_dir} measured {base}, and this would train {policy.name}: the before/after "
                     f"table would pair two policies. Train what the baseline measured ({advice}, or leave the policy "
                     "options out), or measure this policy's baseline in a new run folder (eval --before)")


def _check_resumes_as_recorded(spec: RunSpec, recorded_identity: Mapping[str, Any],
                               command_settings: Mapping[str, Any]) -> None:
    """Refuse to resume a run folder with another run than the one it recorded
    (:func:`grpo_kit.training.checkpoints.check_same_run`).

    Args:
        spec: the run resolved.
        recorded_identity: the ``identity`` of the folder's ``train_settings.json``.
        command_settings: the keys the call and the command line set (the ``max_steps`` of the command that resumes).

    Raises:
        ValueError: what differs, then the command that continues the run as recorded (:func:`_resume_command`).
    """
    try:
        check_same_run(recorded_identity, spec.identity(), spec.folder.path)
    except ValueError as e:
        raise ValueError(f"{e}\nTo continue it as recorded: "
                         f"{_resume_command(spec.folder.path, recorded_identity, command_settings)} "
                         "(notebook 03: resume = True with the parameters it was trained with); or train "
                         "into a new run folder") from None


def _resume_command(run_dir: Path, identity: Mapping[str, Any], command_settings: Mapping[str, Any]) -> str:
    """The command that resumes ``run_dir`` as recorded: the run folder, the model where it is not the recipe's (a
    folder or Hub id given with ``--model_name_or_path``) and the length asked for, nothing else: the recipe, task,
    rewards, questions and held-out evaluation are then the recorded ones; and ``--trust-task-code`` with the Python it
    runs where the run's records name Python of your own (:meth:`RunFolder.trust_option`)."""
    model, steps = identity.get("model"), command_settings.get("max_steps")
    recipe = run_dir / "recipe.yaml"
    recipe_model = get_preset(recipe).model if recipe.is_file() else None
    return " ".join(["python -m grpo_kit train --run-dir", shlex.quote(str(run_dir)), "--resume",
                     *([f"--model_name_or_path {shlex.quote(model)}"] if isinstance(model, str)
                       and not model.startswith("tiny:") and model != recipe_model else []),
                     *([f"--max_steps {steps}"] if steps is not None else [])]) + \
        RunFolder(run_dir, write=False).trust_option()


def _setting_text(key: str, value: Any) -> str:
    """One setting a resume took from the record, as its log line says it."""
    if isinstance(value, RewardSet):
        return "rewards " + " ".join(f"{n}={w:g}" for n, w in zip(value.names, value.weights))
    return f"{'data_seed' if key == 'seed' else key} {value}"
