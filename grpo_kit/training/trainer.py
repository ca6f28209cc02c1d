"""GRPO training around TRL's ``GRPOTrainer``: a preset and a reward set become a ``GRPOConfig``, a LoRA config and a
trainer.

:func:`grpo_config` turns a :class:`grpo_kit.training.presets.Recipe` into TRL's config and :func:`peft_config` into
the adapter TRL adds (``python -m grpo_kit plan`` shows what these two build); :func:`build_trainer` adds the policy,
the rewards and the data, after :func:`grpo_kit.training.checks.check_settings`, and checks afterwards that the
trainer trains what was asked (LoRA: only the adapter; full: every weight). The whole run (checkpoints, resume,
held-out evaluation, the run folder) is :func:`grpo_kit.runs.train.train`.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from grpo_kit.policy.devices import Launch
from grpo_kit.system.files import follow_umask, write_json
from grpo_kit.tasks import RewardSet
from grpo_kit.training.algorithms import ALGORITHM_FIELDS
from grpo_kit.training.checkpoints import WEIGHT_FILES
from grpo_kit.training.checks import check_settings
from grpo_kit.training.presets import Recipe, get_preset

__all__ = ["build_trainer", "check_trains_as_asked", "grpo_config", "is_unsloth_trainer", "peft_config", "save_policy"]

Rewards = RewardSet | Sequence[Any] | Mapping[Any, float]


def grpo_config(p: Recipe, output_dir: str, rewards: RewardSet) -> Any:
    """TRL's ``GRPOConfig`` for settings already checked (:func:`grpo_kit.training.checks.check_settings`): the
    keyword arguments of :meth:`grpo_kit.training.presets.Recipe.grpo_kwargs` with the rewards' weights.

    Returns:
        ``trl.GRPOConfig`` (Unsloth's ``UnslothGRPOConfig`` where Unsloth has patched TRL). Works with TRL 1.15 (GPU
        stack) and 1.16 (CPU stack).

    Raises:
        ValueError: the recipe's ``reward_weights`` are not the rewards' weights.
        RuntimeError: the config holds other algorithm fields than the recipe (Unsloth's config rewrites some).
    """
    from trl import GRPOConfig

    if p.reward_weights is not None and [float(w) for w in p.reward_weights] != rewards.weights:
        raise ValueError(f"reward_weights {list(p.reward_weights)} in the recipe, and the rewards given weigh "
                         f"{rewards.weights}: weigh them in one place (reward_weights with reward_funcs, or "
                         "--rewards NAME=WEIGHT)")
    config = GRPOConfig(**p.grpo_kwargs(output_dir, rewards.weights))
    # Unsloth's generated GRPOConfig rewrites some algorithm fields by loss_type (unsloth/models/rl.py): the run folder
    # records the recipe's values, so a config that runs other ones is refused rather than trained.
    changed = {k: (getattr(p, k), getattr(config, k)) for k in ALGORITHM_FIELDS if getattr(config, k) != getattr(p, k)}
    if changed:
        raise RuntimeError(f"{type(config).__name__} changed the algorithm's fields (asked -> got): {changed}; the "
                           "run would not train what its run folder records. Set those fields to the values shown")
    return config


def is_unsloth_trainer(trainer_class: type) -> bool:
    """Whether ``trainer_class`` is Unsloth's generated trainer (what ``from trl import GRPOTrainer`` gives
    once Unsloth has patched TRL in this process)."""
    return any(c.__name__.startswith(("Unsloth", "_Unsloth")) for c in trainer_class.__mro__)


def build_trainer(model: Any, tokenizer: Any, train_dataset: Any, preset: str | Recipe, rewards: Rewards,
                  output_dir: str, callbacks: Sequence[Any] = (), check: bool = True, **overrides: Any) -> Any:
    """Build a ``GRPOTrainer`` for the preset's route: Unsloth, or plain transformers (+ peft LoRA).

    Args:
        model: a loaded ``PreTrainedModel`` (see :meth:`grpo_kit.policy.source.PolicySource.load`).
        tokenizer: its tokenizer, with a chat template.
        train_dataset: a ``datasets.Dataset`` with ``prompt`` and the columns the rewards read.
        preset: a name in :data:`grpo_kit.training.presets.PRESETS` or a :class:`grpo_kit.training.presets.Recipe`.
        rewards: a :class:`grpo_kit.tasks.RewardSet` (its weights become ``GRPOConfig.reward_weights``; weight 0 =
            logged, not trained), or names and/or functions (weight 1 each), or a ``{reward: weight}`` mapping.
        output_dir: TRL's output folder (checkpoints).
        callbacks: ``transformers.TrainerCallback`` objects.
        check: check the settings first (:func:`grpo_kit.training.checks.check_settings`); the run pipeline,
            which checked them once before loading anything, passes ``False``.
        **overrides: preset fields to replace.

    Returns:
        ``trl.GRPOTrainer`` (Unsloth's generated one on an Unsloth preset); call ``.train()``.
        Logged metrics include ``rewards/<function name>/mean`` for every reward.

    Raises:
        ValueError: see :func:`grpo_kit.training.checks.check_settings` (raised before TRL touches the
            model); an Unsloth preset with a model that has no adapter; a plain-TRL preset
            (``use_unsloth=False``) in a process where Unsloth has replaced TRL's trainer (Unsloth's
            trainer drops ``peft_config`` and needs an Unsloth-loaded model: it would train every
            weight or fail at the first step).
        RuntimeError: the trainer does not train what the preset asks (a LoRA run whose model is
            not a peft model or trains more than the adapter; a full run with frozen weights). From ``.train()``
            with continuous batching: a step whose trained weights lost precision
            (:class:`grpo_kit.training.generators.PrecisionKept`).
    """
    p = get_preset(preset, **overrides)
    reward_set = RewardSet(rewards)
    if check:
        check_settings(p, reward_set, getattr(train_dataset, "features", None) or train_dataset.column_names,
                       num_processes=Launch.from_env().world_size)
    if p.use_unsloth and p.lora_rank is not None and not hasattr(model, "peft_config"):
        raise ValueError(f"preset {p.name!r} trains through Unsloth: load the policy with "
                         "grpo_kit.policy.source.PolicySource.load (it applies Unsloth's LoRA), or pass "
                         "use_unsloth=False")
    from trl import GRPOTrainer

    if is_unsloth_trainer(GRPOTrainer) and not p.use_unsloth:
        raise ValueError(
            f"preset {p.name!r} asks for plain TRL (use_unsloth=False), but Unsloth was imported in this process "
            "and replaced TRL's GRPOTrainer with its own, which ignores peft_config (it would train every weight) "
            "and needs an Unsloth-loaded model. Run this preset in a fresh Python process or notebook kernel that "
            "does not import unsloth, or use an Unsloth preset (use_unsloth=True).")
    config = grpo_config(p, output_dir, reward_set)
    from grpo_kit.training.generators import PrecisionKept, continuous_batching

    # TRL's continuous-batching generation casts the policy: each step checks the trained weights kept their precision
    kept = [PrecisionKept()] if continuous_batching(p) else []
    trainer = GRPOTrainer(model=model, reward_funcs=reward_set.checked_funcs, args=config, train_dataset=train_dataset,
                          processing_class=tokenizer, peft_config=peft_config(p), callbacks=[*callbacks, *kept])
    check_trains_as_asked(trainer.model, p)
    return trainer


def peft_config(recipe: Recipe) -> Any:
    """The LoRA adapter ``GRPOTrainer`` adds on the transformers route: TRL's own ``get_peft_config`` over the
    recipe's ``ModelConfig`` keys, as ``trl/scripts/grpo.py`` builds it (``lora_r``, ``lora_alpha``, ``lora_dropout``,
    ``lora_target_modules``, ``lora_target_parameters``, ``lora_modules_to_save``, ``lora_task_type``, ``use_rslora``,
    ``use_dora``), with the kit's :data:`grpo_kit.policy.loading.LORA_TARGETS` where the recipe names no targets, and
    the recipe's ``model_revision`` as the config's ``revision`` (peft's ``AutoPeftModelForCausalLM`` loads the saved
    adapter's base at it, so evaluation after training reads the weights that trained).

    Returns:
        a ``peft.LoraConfig``; ``None`` for full fine-tuning, and on the Unsloth route, where Unsloth's loader adds the
        adapter (:func:`grpo_kit.policy.loading.unsloth_peft_kwargs`).
    """
    if recipe.lora_rank is None or recipe.use_unsloth:
        return None
    from trl import ModelConfig, get_peft_config

    model_args = ModelConfig(**{f.name: getattr(recipe, f.name) for f in fields(ModelConfig)
                                if f.name != "lora_target_modules"})
    # set after __post_init__, which makes a list of one name a single string: peft would read that as a regular
    # expression matching no layer's full name (the kit's own check refuses a single string other than all-linear)
    targets = recipe.loading.lora_target_modules
    model_args.lora_target_modules = targets if isinstance(targets, str) else list(targets)
    config = get_peft_config(model_args)
    if "model_revision" in recipe.settings:  # recorded in adapter_config.json: peft loads the base at that revision
        config.revision = recipe.model_revision
    return config


def check_trains_as_asked(model: Any, preset: Recipe) -> None:
    """Check that ``model``'s trainable weights are what ``preset`` asks for.

    Raises:
        RuntimeError: LoRA (``lora_rank`` set) but the model is not a peft model, or weights outside
            the adapter (and the layers of ``lora_modules_to_save``) are trainable; full fine-tuning but some weights
            are frozen.
    """
    params = dict(model.named_parameters())
    trainable = [n for n, t in params.items() if t.requires_grad]
    if preset.lora_rank is not None:  # lora_modules_to_save: peft's trainable copies of whole layers
        outside = [n for n in trainable if "lora_" not in n and ".modules_to_save." not in n]
        if not hasattr(model, "peft_config") or outside or not trainable:
            raise RuntimeError(f"preset {preset.name!r} asks for LoRA rank {preset.lora_rank}, but the trainer's model "
                               f"is {type(model).__name__} with {len(trainable)} of {len(params)} tensors trainable "
                               f"(outside the adapter: {outside[:3]}): it would not train an adapter")
    elif len(trainable) != len(params):
        frozen = [n for n, t in params.items() if not t.requires_grad]
        raise RuntimeError(f"preset {preset.name!r} asks for full fine-tuning, but {len(frozen)} of {len(params)} "
                           f"tensors are frozen (e.g. {frozen[:3]})")


def _absolute_base(config: Path) -> None:
    """Record an adapter's base model as an absolute path when it was loaded from a relative one (the tiny policy's
    ``.cache/...``), so that the adapter loads from any working folder; a Hub id is left as it is."""
    if not config.is_file():
        return
    settings = json.loads(config.read_text(encoding="utf-8"))
    base = settings.get("base_model_name_or_path")
    if isinstance(base, str) and base and not Path(base).is_absolute() and Path(base).is_dir():
        write_json(config, {**settings, "base_model_name_or_path": str(Path(base).absolute())})


def save_policy(trainer: Any, tokenizer: Any, path: str | Path) -> Path:
    """Save the trained policy and its tokenizer: the LoRA adapter for a peft model, else the full model.

    :func:`grpo_kit.policy.loading.load_policy` loads either kind back. Under several processes every
    process must call this (the weights may be sharded); only the main one writes. Under FSDP the
    weights are gathered into one full state dict first, whatever the checkpoints' state-dict type. The folder is
    written whole or not at all: into ``<path>.partial`` first, then renamed over ``path``.

    Returns:
        the folder.

    Raises:
        RuntimeError: the main process finds no weights in the folder after saving (``path`` is left as it was).
    """
    path = Path(path)
    plugin = getattr(trainer.accelerator.state, "fsdp_plugin", None) if getattr(trainer, "is_fsdp_enabled", False) \
        else None
    if plugin is not None and "FULL_STATE_DICT" not in str(plugin.state_dict_type):
        # transformers 5.17's save_model gathers the weights under FSDP only with FULL_STATE_DICT (trainer.py,
        # save_model): with SHARDED_STATE_DICT (configs/accelerate/fsdp2.yaml) it would write no weights at all.
        # Checkpoints stay sharded; the final model is gathered.
        plugin.set_state_dict_type("FULL_STATE_DICT")
    partial, main = path.with_name(path.name + ".partial"), trainer.accelerator.is_main_process
    if main and partial.exists():
        shutil.rmtree(partial)  # a save killed half-way
    trainer.accelerator.wait_for_everyone()
    trainer.save_model(str(partial))
    if main:
        tokenizer.save_pretrained(str(partial))
        _absolute_base(partial / "adapter_config.json")
        if not any((partial / name).is_file() for name in WEIGHT_FILES):
            raise RuntimeError(f"the trainer saved no weights into {partial} (found: "
                               f"{sorted(p.name for p in partial.iterdir()) if partial.is_dir() else 'nothing'}): "
                               "the trained policy would be lost; the newest checkpoint in the run folder still "
                               "holds it")
        follow_umask(partial)  # safetensors writes its weights 0600
        old = path.with_name(path.name + ".old")
        if path.exists():
            shutil.rmtree(old, ignore_errors=True)
            path.rename(old)
        partial.rename(path)
        shutil.rmtree(old, ignore_errors=True)
    trainer.accelerator.wait_for_everyone()
    return path

