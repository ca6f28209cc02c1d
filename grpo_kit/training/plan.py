"""What a launch would do, without loading a model or needing a GPU: ``python -m grpo_kit plan``.

:func:`make_plan` answers, for a preset (or a run folder to resume) on a card of :data:`grpo_kit.policy.devices.CARDS`
or this machine's GPUs, and a launch (one process, DDP, ZeRO-2/3, FSDP2): the route, the algorithm the
``GRPOConfig`` fields amount to (:func:`algorithm`), the ``GRPOConfig`` arguments, each process's placement, vLLM's
settings, the per-GPU memory estimate (:func:`grpo_kit.training.memory.estimate_memory`), whether the stale-weights
alarm can fire, the checkpoint a resume starts from, and the problems, each with its remedy, as a :class:`Plan`; what
``train`` builds on the recipe's route comes from :mod:`grpo_kit.training.builds`. :func:`preflight` runs the same
checks for ``train`` (from :meth:`grpo_kit.runs.spec.RunSpec.resolve`) before anything loads.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_kit.policy.devices import CARDS, Gpu, Launch, card, gpus
from grpo_kit.policy.shapes import ModelShape, model_shape
from grpo_kit.system.files import json_or_none
from grpo_kit.system.logs import counted
from grpo_kit.tasks import DEFAULT_TASK, RewardSet, get_task
from grpo_kit.training import builds
from grpo_kit.training.algorithms import algorithm_settings
from grpo_kit.training.checkpoints import checkpoint_step, checkpoints, is_complete, resume_point
from grpo_kit.training.cost import estimate_disk, estimate_time, time_lines
from grpo_kit.training.memory import LAUNCHES, estimate_memory
from grpo_kit.training.presets import (  # noqa: F401 (PRESETS: doctests)
    PRESETS,
    Recipe,
    get_preset,
    preset_for_device,
    recipe_task,
)

__all__ = ["SKIP_ESTIMATE", "Plan", "Problem", "algorithm", "format_plan", "launch_of", "make_plan", "preflight",
           "preset_of_run", "route_of", "run_rewards"]


#: Set to ``1`` to train although the memory estimate says the run does not fit (:func:`preflight`).
SKIP_ESTIMATE = "GRPO_KIT_SKIP_MEMORY_ESTIMATE"


@dataclass(frozen=True)
class Problem:
    """One thing that would go wrong, with its remedy; ``fatal`` ones would end the run."""

    text: str
    fatal: bool = True
    kind: str = ""


@dataclass(frozen=True)
class Plan:
    """What a launch would do (:func:`make_plan`): ``python -m grpo_kit plan`` prints it (:func:`format_plan`), and
    its ``--json`` is :meth:`to_json`, one key per field in this order (docs/how-to/plan-and-doctor.md).

    Attributes:
        preset: the recipe's name.
        recipe_keys: what the kit makes of the keys TRL's and open-r1's scripts read themselves, one line each
            (:meth:`grpo_kit.training.presets.Recipe.taken`).
        route: ``"unsloth"``, ``"transformers+peft"`` or ``"transformers"`` (:func:`route_of`).
        model: the policy's Hub id or folder, or ``"the kit's tiny policy"``.
        algorithm: the named variant, its fields and what the route adds (:func:`algorithm`).
        rewards: ``{reward name: weight}`` (:func:`run_rewards`).
        adapter: the LoRA adapter as ``train`` builds it, ``None`` for full fine-tuning
            (:func:`grpo_kit.training.builds.adapter`).
        grpo_config: the ``GRPOConfig`` arguments (:meth:`grpo_kit.training.presets.Recipe.grpo_kwargs`, the
            function ``train``'s config is) as the trainer will hold them: on Unsloth's route after
            ``unsloth_changes``.
        unsloth_changes: ``{field: {"passed": value, "effective": value}}``
            (:func:`grpo_kit.training.builds.unsloth_changes`).
        processes: one dict a process: its ``rank``, its ``from_pretrained`` keys
            (:func:`grpo_kit.training.builds.process_loading`) and its ``loader`` in words.
        device: the card planned for (:data:`grpo_kit.policy.devices.CARDS`) or this machine's first GPU; ``None``:
            no GPU.
        launch: one of :data:`grpo_kit.training.memory.LAUNCHES`.
        vllm: vLLM's settings (:func:`grpo_kit.training.builds.vllm_settings`), ``None`` without vLLM.
        memory: the per-GPU estimate in GiB (:func:`grpo_kit.training.memory.estimate_memory`), ``None`` without a
            card or the model's shape.
        alarm: whether the stale-weights alarm can fire, and why (:func:`grpo_kit.training.callbacks.
            stale_weights_alarm`).
        sampling: which temperature samples the completions and which the loss divides by, in words.
        generator: what generates the completions, and why (:func:`grpo_kit.training.generators.generator`).
        without_vllm: what a runtime without vLLM does, ``None`` where the recipe does not generate with it.
        time: the hours estimates (:func:`grpo_kit.training.cost.estimate_time`), ``None`` without a card or shape,
            or on a CPU.
        disk: the download and disk estimates in GB (:func:`grpo_kit.training.cost.estimate_disk`), ``None``
            without the model's shape.
        resume_from: the checkpoint a resume starts from (its path), ``None``: none.
        resume_why: why that checkpoint, or why none.
        problems: one line each with its remedy; ``"FATAL: "`` before one that would end the run.
        fatal: whether a problem would end the run (``plan`` then exits 2).
    """

    preset: str
    recipe_keys: list[str]
    route: str
    model: str
    algorithm: dict[str, Any]
    rewards: dict[str, float]
    adapter: dict[str, Any] | None
    grpo_config: dict[str, Any]
    unsloth_changes: dict[str, dict[str, Any]]
    processes: list[dict[str, Any]]
    device: Gpu | None
    launch: str
    vllm: dict[str, Any] | None
    memory: dict[str, Any] | None
    alarm: dict[str, Any]
    sampling: str
    generator: dict[str, str]
    without_vllm: str | None
    time: dict[str, Any] | None
    disk: dict[str, Any] | None
    resume_from: str | None
    resume_why: str
    problems: list[str]
    fatal: bool

    def to_json(self) -> dict[str, Any]:
        """The plan as ``plan --json`` prints it: a dict of the fields in order, ``device`` as its card's fields;
        values JSON cannot hold are left for ``json.dumps(..., default=str)``."""
        return dataclasses.asdict(self)


def route_of(preset: Recipe) -> str:
    """``"unsloth"``, ``"transformers+peft"`` (LoRA without Unsloth) or ``"transformers"`` (full fine-tuning).

    >>> route_of(PRESETS["a100"]), route_of(PRESETS["multi-gpu-lora"]), route_of(PRESETS["full-80gb"])
    ('unsloth', 'transformers+peft', 'transformers')
    """
    return "unsloth" if preset.use_unsloth else "transformers" if preset.lora_rank is None else "transformers+peft"


def algorithm(preset: Recipe) -> dict[str, Any]:
    """The algorithm a launch runs, as the recipes state it, and what its route adds.

    The named variant and every algorithm field (:func:`grpo_kit.training.algorithms.algorithm_settings`, what the
    run folder records), plus whether vLLM's importance-sampling correction applies: TRL turns it on for vLLM
    generation (``vllm_importance_sampling_correction=True``), Unsloth's generated config turns it off (unsloth
    2026.10.7, ``unsloth/models/rl.py``), and without vLLM there is nothing to correct.

    Returns:
        ``{"name", "paper", "fields", "overridden", "vllm_importance_sampling_correction": bool,
        "temperature": float, "summary": str}``.

    >>> algorithm(PRESETS["a100"])["summary"]
    'grpo: loss_type grpo, KL beta 0.04, advantages scaled per group; no vLLM importance-sampling correction'
    """
    recorded = algorithm_settings(preset)
    f = recorded["fields"]
    correction = bool(preset.use_vllm or preset.fast_inference) and \
        bool(preset.settings.get("vllm_importance_sampling_correction", not preset.use_unsloth))
    kl = f"KL beta {f['beta']:g}" if f["beta"] else "no KL"
    level = f["importance_sampling_level"]
    summary = (f"{recorded['name']}: loss_type {f['loss_type']}, {kl}, advantages scaled per {f['scale_rewards']}"
               + ("" if level == "token" else f", {level}-level importance ratio")
               + f"; {'' if correction else 'no '}vLLM importance-sampling correction")
    return {**recorded, "vllm_importance_sampling_correction": correction, "temperature": preset.temperature,
            "summary": summary}


def launch_of(kind: str, processes: int, rank: int = 0) -> Launch:
    """The :class:`grpo_kit.policy.devices.Launch` one process of an ``accelerate launch`` of ``kind`` sees.

    Raises:
        ValueError: an unknown ``kind`` (one of :data:`grpo_kit.training.memory.LAUNCHES`).
    """
    if kind not in LAUNCHES:
        raise ValueError(f"unknown launch {kind!r}: choose from {', '.join(LAUNCHES)}")
    n = 1 if kind == "single" else processes
    return Launch(world_size=n, rank=rank, local_rank=rank, fsdp=kind == "fsdp2",
                  zero_stage={"zero2": 2, "zero3": 3}.get(kind))


def preset_of_run(run_dir: str | Path, argv: Sequence[str] = (), **overrides: Any) -> tuple[Recipe, str | None]:
    """The recipe and model a run folder was trained with (its ``recipe.yaml``; the length and model its
    ``train_settings.json`` records), with ``overrides``.

    Raises:
        FileNotFoundError: the folder has no ``train_settings.json``.
        ValueError: it is not the JSON object train writes (damaged or edited).
    """
    settings = Path(run_dir) / "train_settings.json"
    if not settings.is_file():
        raise FileNotFoundError(f"{settings} does not exist: plan a new run with --preset instead")
    try:
        recorded = json.loads(settings.read_text(encoding="utf-8"))
        identity = recorded["identity"]
        fields = dict(identity["preset"])
    except (ValueError, TypeError, KeyError, IndexError, UnicodeDecodeError) as e:
        raise ValueError(f"{settings} is damaged or was edited ({type(e).__name__}: {e}): it is not the record "
                         "train writes, so the run cannot be planned or resumed; plan a new run folder with "
                         "--preset") from None
    if "max_steps" in recorded:  # the run's length as last trained; --max-steps extends it
        overrides = {"max_steps": recorded["max_steps"], **overrides}
    recipe = Path(run_dir) / "recipe.yaml"
    preset = get_preset(recipe if recipe.is_file() else fields.get("name", "cpu-tiny"), argv=argv, **overrides)
    model = identity.get("model")
    return preset, None if model is None or str(model).startswith("tiny:") else model


def _resume(run_dir: Path, max_steps: int) -> tuple[str | None, str, Problem | None]:
    """The checkpoint a resume would start from and why (or why none), as ``train --resume`` decides it
    (:func:`grpo_kit.training.checkpoints.resume_point`); a resume ``train`` would refuse is a fatal problem."""
    folder = run_dir / "checkpoints"
    recorded = json_or_none(run_dir / "finished.json")  # none: not finished (train names a damaged one itself)
    finished = recorded.get("step") if isinstance(recorded, dict) else None
    try:
        checkpoint = resume_point(folder, max_steps, finished)
    except ValueError as e:
        return None, str(e), Problem(str(e), kind="resume")
    if checkpoint is None:
        return None, f"no checkpoint in {folder}: training would start at step 0", None
    if finished == max_steps:
        return str(checkpoint), f"the run finished at step {finished}: train --resume trains nothing", None
    skipped = [p.name for p in checkpoints(folder)
               if checkpoint_step(p) > checkpoint_step(checkpoint) and not is_complete(p)]
    newer = f"; newer but incomplete: {', '.join(skipped)}" if skipped else ""
    return str(checkpoint), f"the newest complete checkpoint{newer}", None


def _problems(preset: Recipe, gpu: Gpu | None, kind: str, processes: int, memory: dict[str, Any] | None,
              shape: ModelShape | str | None, here: bool = True) -> list[Problem]:
    """The problems of running ``preset`` on ``gpu`` (``None``: no GPU) under ``kind`` with ``processes``, its model
    of ``shape`` (:func:`_shape`), on this machine (``here``) or on a card named by ``--device`` (what this machine
    lacks is then not fatal)."""
    from grpo_kit.training.checks import check_settings

    problems = []
    try:  # the rewards do not change these checks: the default task's stand in
        check_settings(preset, get_task(DEFAULT_TASK).reward_set(), num_processes=processes, tiny_policy=shape is None)
    except ValueError as e:
        problems.append(Problem(str(e), kind="settings"))
    problems += _machine_problems(preset, gpu is None or preset.use_cpu, shape, here)
    if gpu is None:
        if not preset.use_cpu:
            problems.append(Problem(f"preset {preset.name!r} needs a CUDA GPU and none is visible here: pass --device "
                                    f"CARD to plan for a card ({', '.join(CARDS)}), or use preset cpu-tiny on a CPU",
                                    kind="no_gpu"))
        return problems
    if preset.use_cpu:
        problems.append(Problem(f"preset {preset.name!r} runs on the CPU (use_cpu=True) although a GPU is there",
                                fatal=False))
    if preset.bf16 and not gpu.bf16:
        problems.append(Problem(f"preset {preset.name!r} computes in bfloat16 (bf16=True) and {gpu.name} has none "
                                "(compute capability below 8.0): use preset colab-t4, or --bf16 false --fp16 true",
                                kind="bf16"))
    if kind in ("zero3", "fsdp2") and preset.lora_rank is not None:
        problems.append(Problem(f"launch {kind} shards the weights, which a LoRA run (lora_r {preset.lora_rank}) "
                                "does not need: use --launch ddp (configs/accelerate/ddp.yaml)", fatal=False))
    if kind == "single" and processes > 1:
        problems.append(Problem(f"--gpus {processes} with --launch single: one process uses the GPUs; pass --launch "
                                "ddp (or zero2/zero3/fsdp2) to train on each", fatal=False))
    if memory is None:
        if isinstance(shape, str):  # the kit's tiny policy (no shape) needs no estimate
            problems.append(Problem(f"no memory estimate: {shape}", fatal=False, kind="memory"))
        return problems
    if memory["needed"] > memory["available"]:
        parts = ", ".join(f"{k} {v:g}" for k, v in memory["parts"].items() if v)
        problems.append(Problem(f"does not fit: about {memory['needed']:g} GiB per GPU needed ({parts}), "
                                f"{memory['available']:g} GiB on {gpu.name}: lower per_device_train_batch_size or "
                                "vllm_gpu_memory_utilization, use LoRA or 4-bit, or shard (--launch zero3/fsdp2 on "
                                "more GPUs)", kind="memory"))
    room = memory.get("kv_cache_room")
    if room is not None and room < memory["kv_cache_needed"]:
        problems.append(Problem(f"vLLM will not start: its share (vllm_gpu_memory_utilization "
                                f"{preset.vllm_gpu_memory_utilization:g} of {memory['available']:g} GiB) leaves "
                                f"{room:g} GiB after its weights, less than one {preset.vllm_max_model_len}-token "
                                f"sequence's KV cache ({memory['kv_cache_needed']:g} GiB): raise "
                                "vllm_gpu_memory_utilization or lower vllm_max_model_length", kind="vllm"))
    return problems


def _machine_problems(preset: Recipe, on_cpu: bool, shape: ModelShape | str | None, here: bool) -> list[Problem]:
    """What this machine lacks for a recipe, which transformers, TRL or DeepSpeed would say only once the model
    loaded (or the trainer pushed its first checkpoint): a CPU route that ``fp16``, a bitsandbytes ``optim`` or flash
    attention cannot take, a step too large for the memory, ``deepspeed``, bitsandbytes or flash-attn not installed,
    ``push_to_hub`` without the Hub. Fatal only ``here`` (not for a card planned from elsewhere), except what the CPU
    route cannot take."""
    import importlib.util

    from transformers.trainer_optimizer import _BITSANDBYTES_OPTIMIZERS

    from grpo_kit.system.hub import hub_problem

    problems = []
    if on_cpu and preset.fp16:
        problems.append(Problem("fp16 = True on a CPU: accelerate runs float16 mixed precision only on accelerators "
                                "and would train in float32 without a word (accelerate/accelerator.py): set --fp16 "
                                "false", kind="cpu"))
    if preset.optim in _BITSANDBYTES_OPTIMIZERS:  # the optim names transformers builds with bitsandbytes
        if on_cpu:
            problems.append(Problem(f"optim = {preset.optim!r} is a bitsandbytes optimizer, which runs on CUDA GPUs: "
                                    "on a CPU set --optim adamw_torch", kind="cpu"))
        elif importlib.util.find_spec("bitsandbytes") is None:
            problems.append(Problem(f"optim = {preset.optim!r} needs bitsandbytes, which is not installed here: pip "
                                    "install bitsandbytes, or set --optim adamw_torch", fatal=here, kind="packages"))
    if (attention := preset.settings.get("attn_implementation")) in ("flash_attention_2", "flash_attention_3"):
        if on_cpu:
            problems.append(Problem(f"attn_implementation {attention!r} runs on CUDA GPUs only: on a CPU set "
                                    "--attn_implementation sdpa", kind="cpu"))
        elif importlib.util.find_spec("flash_attn" if attention.endswith("2") else "flash_attn_interface") is None:
            problems.append(Problem(f"attn_implementation {attention!r} needs flash-attn, which is not installed here: "
                                    "pip install flash-attn, or set --attn_implementation sdpa", fatal=here,
                                    kind="packages"))
    if on_cpu and (problem := _cpu_memory_problem(preset, shape)):
        problems.append(Problem(problem, kind="cpu"))
    if preset.deepspeed is not None:
        if importlib.util.find_spec("deepspeed") is None:
            problems.append(Problem(f"deepspeed = {preset.deepspeed!r}: DeepSpeed is not installed here (pip install "
                                    "deepspeed, or requirements-deepspeed.txt), or drop deepspeed (python -m grpo_kit "
                                    "plan --launch zero2/zero3 shows the kit's DeepSpeed launches)", fatal=here,
                                    kind="packages"))
        elif isinstance(preset.deepspeed, str) and not Path(preset.deepspeed).is_file():
            problems.append(Problem(f"deepspeed = {preset.deepspeed!r}: no such DeepSpeed config file", fatal=here,
                                    kind="packages"))
    if preset.push_to_hub and (problem := hub_problem("push_to_hub uploads every checkpoint to the Hub")):
        problems.append(Problem(problem + ", or drop push_to_hub (python -m grpo_kit export --push-to-hub uploads a "
                                "verified export after training)", fatal=here, kind="hub"))
    return problems


def _cpu_memory_problem(preset: Recipe, shape: ModelShape | str | None) -> str | None:
    """A micro-batch whose float32 logits alone exceed this machine's memory (``per_device_train_batch_size``
    completions of ``max_prompt_tokens + max_completion_length`` tokens, each a row of ``vocab_size`` logits: the
    activations part of :func:`grpo_kit.training.memory.estimate_memory`), with the model's vocabulary where its
    shape is known here (:func:`_shape`), else the tiny policy's (a lower bound)."""
    import psutil

    from grpo_kit.policy.tiny import TinyPolicySpec

    vocab = shape.vocab_size if isinstance(shape, ModelShape) else TinyPolicySpec.vocab_size
    batch, length = preset.per_device_train_batch_size, preset.max_prompt_tokens + preset.max_completion_length
    needed, total = batch * length * vocab * 4 / 2**30, psutil.virtual_memory().total / 2**30
    return None if needed <= total else (
        f"one micro-batch does not fit this machine's memory: per_device_train_batch_size {batch} x {length} tokens x "
        f"{vocab} logits x 4 bytes = {needed:,.0f} GiB, more than its {total:,.0f} GiB: lower "
        "per_device_train_batch_size (a multiple of num_generations) or the lengths")


def run_rewards(preset: Recipe, resumed: str | Path | None = None) -> dict[str, float]:
    """The rewards ``train`` weighs for ``preset`` where the command names none (``--rewards``, ``--task``), as
    :func:`grpo_kit.runs.spec.recipe_rewards` reads them, without importing a reward's Python: the resumed run
    folder's recorded ones; else the recipe's ``reward_funcs`` weighted by ``reward_weights``; else its task's (the
    recipe's data set, :func:`grpo_kit.training.presets.recipe_task`, or the kit's default task) with
    ``reward_weights`` over their weights. Their weights, in order, are ``GRPOConfig.reward_weights``.

    Returns:
        ``{reward name: weight}``.

    Raises:
        ValueError: weights that do not match the rewards.
    """
    recorded = json_or_none(Path(resumed) / "train_settings.json") if resumed is not None else None
    identity = recorded.get("identity") if isinstance(recorded, dict) else None
    if isinstance(identity, dict) and isinstance(identity.get("rewards"), dict):
        return {name: float(w) for name, w in identity["rewards"].items()}
    if not preset.reward_funcs:
        own = get_task(recipe_task(preset) or DEFAULT_TASK).reward_set()
        own = RewardSet(own.rewards, preset.reward_weights or own.weights)
        return dict(zip(own.names, own.weights))
    weights = preset.reward_weights or [1.0] * len(preset.reward_funcs)
    if len(weights) != len(preset.reward_funcs):
        raise ValueError(f"reward_funcs / reward_weights: {len(weights)} weights for {len(preset.reward_funcs)} "
                         "rewards: give one weight per reward")
    return {name: float(w) for name, w in zip(preset.reward_funcs, weights)}


def _memory(preset: Recipe, shape: ModelShape | str | None, gpu: Gpu | None, kind: str,
            processes: int) -> dict[str, Any] | None:
    """:func:`grpo_kit.training.memory.estimate_memory`, or ``None`` without a card or a shape (:func:`_shape`)."""
    return estimate_memory(preset, shape, gpu, kind, processes) if isinstance(shape, ModelShape) and gpu is not None \
        else None


def _shape(preset: Recipe, model: str | None) -> ModelShape | str | None:
    """The model's shape (:func:`grpo_kit.policy.shapes.model_shape`) with the recipe's LoRA targets checked, or why
    there is none: no ``config.json`` here, not a causal language model, or LoRA targets naming none of its layers.
    ``None`` for the kit's tiny policy (``model`` ``None``), which needs no estimate."""
    if model is None:
        return None
    try:
        shape = model_shape(model)
        if preset.lora_rank is not None:
            shape.lora_parameters(1, preset.loading.lora_target_modules)
        return shape
    except (LookupError, ValueError) as e:
        return str(e)


def _time(preset: Recipe, shape: ModelShape | str | None, gpu: Gpu | None, steps: int,
          here: bool) -> dict[str, Any] | None:
    """The training time estimates (:func:`grpo_kit.training.cost.estimate_time`), with which route applies where the
    plan is for this machine (``here``: whether vLLM is installed); ``None`` without a card or a shape, or on a CPU
    (``train`` announces its time there, from this machine's measured speed)."""
    if not isinstance(shape, ModelShape) or gpu is None or preset.use_cpu:
        return None
    from grpo_kit.system.install import installed_version

    return estimate_time(preset, shape, gpu, steps, installed_version("vllm") is not None if here else None)


def _recipe_and_model(preset: str | Recipe | None, overrides: dict[str, Any], device: str | None,
                      resumed: str | Path | None, argv: Sequence[str]) -> tuple[Recipe, str | None]:
    """The recipe a plan is for and its model (``None``: the kit's tiny policy): the ``resumed`` run folder's
    (:func:`preset_of_run`), else ``preset`` (``None``: the one the notebooks pick for the card) with the overrides."""
    if resumed is not None:
        return preset_of_run(resumed, argv, **overrides)
    if preset is None:
        preset = preset_for_device(card(device) if device is not None else (gpus() or [None])[0])
    recipe = get_preset(preset, argv=argv, **overrides)
    return recipe, recipe.model


def _model_problems(model: str | None) -> list[Problem]:
    """Why ``model`` cannot be the policy, as ``train`` checks it (:class:`grpo_kit.policy.source.PolicySource`)."""
    if model is None:
        return []
    from grpo_kit.policy.source import PolicySource

    try:
        PolicySource.of(model, get_task(DEFAULT_TASK))
    except ValueError as e:
        return [Problem(str(e), kind="model")]
    return []


def _process_count(preset: Recipe, launch: str, processes: int | None, gpu_count: int) -> int:
    """The training processes (``--gpus``, :func:`make_plan`): by default one for ``single``, else one per GPU less
    the one a vLLM server keeps for itself.

    Raises:
        ValueError: fewer than one.
    """
    server = preset.use_vllm and not preset.fast_inference and preset.vllm_mode == "server"
    count = processes if processes is not None else (
        1 if launch == "single" else gpu_count - 1 if server and gpu_count > 1 else gpu_count)
    if count < 1:
        raise ValueError(f"--gpus must be at least 1, got {count}")
    return count


def _server_problems(vllm: dict[str, Any] | None, gpu: Gpu | None, processes: int, gpu_count: int) -> list[Problem]:
    """A vLLM server (:func:`grpo_kit.training.builds.vllm_settings`) left without a GPU of its own by ``processes``
    training processes on ``gpu_count`` GPUs."""
    if vllm is None or vllm["mode"] != "server" or gpu is None or processes < gpu_count:
        return []
    return [Problem(
        f"vllm_mode='server' generates on a GPU of its own (trl vllm-serve), and {processes} training processes "
        f"take all {gpu_count} GPUs: train on {gpu_count - 1} (--gpus {gpu_count - 1}, CUDA_VISIBLE_DEVICES leaving "
        "one out) and start the server on the one left" if gpu_count > 1 else
        "vllm_mode='server' generates on a GPU of its own (trl vllm-serve), and this machine's only GPU "
        "trains: use a preset that colocates vLLM (vllm_mode='colocate') or a machine with two GPUs",
        kind="vllm")]


def make_plan(preset: str | Recipe | None = None, overrides: dict[str, Any] | None = None, device: str | None = None,
              processes: int | None = None, launch: str = "single", run_dir: str | Path | None = None,
              resume: bool = False, argv: Sequence[str] = ()) -> Plan:
    """What a launch would do (``python -m grpo_kit plan``; its ``--json`` is :meth:`Plan.to_json`), computed without
    loading a model (docs/how-to/plan-and-doctor.md).

    Args:
        preset: a preset name or :class:`grpo_kit.training.presets.Recipe`; with ``run_dir`` and ``resume``, the
            run folder's recorded preset is used instead.
        overrides: recipe keys to replace (Python values; with ``resume`` only ``max_steps`` and the like).
        argv: overrides in TRL's command-line form (``["--learning_rate", "1e-5"]``), over ``overrides``.
        device: a card of :data:`grpo_kit.policy.devices.CARDS`; ``None``: this machine's first GPU (or none). An
            unknown name is refused (the message names the nearest card).
        processes: training processes, one GPU each (``--gpus``); default 1 for ``single``, else the GPUs here
            (8, as configs/accelerate/*.yaml, with ``device`` or without GPUs), less the one a vLLM server
            (``vllm_mode="server"``) needs; asking for every GPU with a server is a problem.
        launch: one of :data:`grpo_kit.training.memory.LAUNCHES`.
        run_dir, resume: the run folder, and whether to plan resuming it.

    Returns:
        The :class:`Plan`; its ``problems`` are lines, ``fatal`` says whether one would end the run.

    Raises:
        ValueError: an unknown preset, field, card or launch.
        FileNotFoundError: ``resume`` with a run folder that has no ``train_settings.json``.
    """
    resumed = run_dir if resume and run_dir is not None else None
    recipe, model = _recipe_and_model(preset, overrides or {}, device, resumed, argv)  # Unsloth first, if it trains
    from grpo_kit.training.callbacks import stale_weights_alarm
    from grpo_kit.training.generators import generator

    problems = _model_problems(model)
    visible = gpus() if device is None else []
    gpu, gpu_count = (card(device), 8) if device is not None else (visible[0] if visible else None, len(visible) or 8)
    count = _process_count(recipe, launch, processes, gpu_count)
    launches = [launch_of(launch, count, rank) for rank in range(1 if launch == "single" else count)]
    shape = _shape(recipe, model)
    memory = _memory(recipe, shape, gpu, launch, count)
    vllm = builds.vllm_settings(recipe, model)
    problems += _problems(recipe, gpu, launch, count, memory, shape, here=device is None)
    problems += _server_problems(vllm, gpu, count, gpu_count)
    resume_from, resume_why = (None, "not resuming (pass --run-dir RUN --resume)")
    if resumed is not None:
        resume_from, resume_why, refused = _resume(Path(resumed), recipe.max_steps)
        problems += [refused] if refused is not None else []
    steps_left = recipe.max_steps - ((checkpoint_step(resume_from) or 0) if resume_from is not None else 0)
    try:
        rewards = run_rewards(recipe, resumed)
    except ValueError as e:  # train refuses them the same way, before anything loads
        problems.append(Problem(str(e), kind="rewards"))
        rewards = dict.fromkeys(recipe.reward_funcs or (), 1.0)
    # what train's grpo_config passes to GRPOConfig, and what Unsloth's generated trainer makes of it
    grpo_kwargs = recipe.grpo_kwargs(str(Path(run_dir or "runs/run") / "checkpoints"), list(rewards.values()))
    changes = builds.unsloth_changes(recipe, grpo_kwargs)
    return Plan(
        preset=recipe.name, recipe_keys=recipe.taken(), route=route_of(recipe),
        model=model if model is not None else "the kit's tiny policy", algorithm=algorithm(recipe),
        rewards=rewards, adapter=builds.adapter(recipe),
        grpo_config={**grpo_kwargs, **{field: effective for field, (_, effective) in changes.items()}},
        unsloth_changes={field: {"passed": was, "effective": now} for field, (was, now) in changes.items()},
        processes=[builds.process_loading(recipe, la, gpu) for la in launches],
        device=gpu, launch=launch, vllm=vllm, memory=memory, alarm=stale_weights_alarm(recipe),
        sampling=builds.sampling(recipe), generator=generator(recipe), without_vllm=builds.without_vllm(recipe),
        time=_time(recipe, shape, gpu, steps_left, here=device is None),
        disk=estimate_disk(recipe, shape) if isinstance(shape, ModelShape) else None,
        resume_from=resume_from, resume_why=resume_why,
        problems=[("FATAL: " if q.fatal else "") + q.text for q in problems],  # FATAL: it would end the run
        fatal=any(q.fatal for q in problems))


def preflight(preset: Recipe, launch: Launch, model: str | None) -> None:
    """The plan's checks for ``train``, on this machine, before anything loads (no transformers or TRL import
    before Unsloth's).

    Checks what this machine lacks for the recipe (:func:`_machine_problems`: a CPU route that ``fp16``, a
    bitsandbytes ``optim`` or flash attention cannot take, a step too large for its memory, DeepSpeed, bitsandbytes or
    flash-attn not installed, ``push_to_hub`` without the Hub) and, on a GPU, the card against it (bfloat16, the
    memory estimate, vLLM's share) for the launch's processes. The memory checks rest on an estimate: with the
    environment variable :data:`SKIP_ESTIMATE` set to ``1`` they are skipped. Called by
    :meth:`grpo_kit.runs.spec.RunSpec.resolve`.

    Raises:
        ValueError: a problem that would end the run (each line with its remedy).
    """
    visible = [] if preset.use_cpu else gpus()
    kind = "single" if launch.world_size == 1 else (
        "fsdp2" if launch.fsdp else {2: "zero2", 3: "zero3"}.get(launch.zero_stage or 0, "ddp"))
    shape = _shape(preset, model)
    kinds = ("bf16", "cpu", "packages", "hub") + (() if os.environ.get(SKIP_ESTIMATE) == "1" else ("memory", "vllm"))
    gpu = visible[0] if visible else None
    problems = _machine_problems(preset, True, shape, True) if gpu is None else \
        _problems(preset, gpu, kind, launch.world_size, _memory(preset, shape, gpu, kind, launch.world_size), shape)
    fatal = [q for q in problems if q.fatal and q.kind in kinds]
    if fatal:
        where = gpu.name if gpu is not None else "this machine's CPU"
        estimates = any(q.kind in ("memory", "vllm") for q in fatal)
        raise ValueError(f"this run would fail on {where}: " + "; ".join(q.text for q in fatal)
                         + " (`python -m grpo_kit plan` shows the whole plan"
                         + (f"; the memory figures are estimates: {SKIP_ESTIMATE}=1 trains anyway)" if estimates
                            else ")"))


def format_plan(plan: Plan) -> str:
    """The plan of :func:`make_plan` as text for a terminal (``python -m grpo_kit plan`` without ``--json``)."""
    device = plan.device
    bandwidth = device and (f"{device.bandwidth_gbs:,.0f} GB/s" if device.bandwidth_gbs else "unknown")
    where = "no GPU" if device is None else (f"{device.name} ({device.memory_gib:g} GiB, bfloat16 "
                                             f"{'yes' if device.bf16 else 'no'}, memory bandwidth {bandwidth})")
    lines = [f"preset {plan.preset}: route {plan.route}, model {plan.model}",
             *(f"from the recipe: {line}" for line in plan.recipe_keys),
             f"algorithm: {plan.algorithm['summary']}", f"sampling: {plan.sampling}",
             f"device: {where}; launch {plan.launch}, {counted(len(plan.processes), 'process', 'processes')}"]
    lines += [f"  rank {p['rank']}: " + ", ".join(f"{k} {v}" for k, v in p.items() if k not in ("rank", "loader"))
              for p in plan.processes[:2]]
    if len(plan.processes) > 2:
        lines.append(f"  ... and {len(plan.processes) - 2} more, each on its own GPU")
    lines += [f"generation: {plan.generator['name']}", f"  basis: {plan.generator['basis']}"]
    vllm = plan.vllm
    if vllm is None:
        lines.append("vLLM: none (the policy generates with transformers)")
    else:
        share = vllm["gpu_memory_utilization"]
        lines.append(f"vLLM: {vllm['mode']} ({vllm['engine']}), max_model_len {vllm['max_model_len']}"
                     + (f", gpu_memory_utilization {share:g}" if share is not None else ""))
        if "command" in vllm:
            lines.append(f"  start it first, on a GPU of its own: {vllm['command']}")
    if plan.without_vllm:
        lines.append(f"  without vLLM (a runtime the install plan gives none: doctor --install-plan): "
                     f"{plan.without_vllm}")
    memory = plan.memory
    if memory is None:
        lines.append("memory: no estimate")
    else:
        parts = ", ".join(f"{k} {v:g}" for k, v in memory["parts"].items())
        verdict = "fits" if memory["fits"] else "DOES NOT FIT" + (
            "" if memory["needed"] > memory["available"] else " (vLLM's share leaves no room for its KV cache)")
        lines.append(f"memory per GPU (estimate, GiB): {parts}; needed {memory['needed']:g} of "
                     f"{memory['available']:g}: {verdict}")
    disk = plan.disk
    lines += time_lines(plan.time)  # each estimate with its basis
    if disk is not None:
        lines.append(f"download (estimate): {disk['download']:.1f} GB, {disk['download_what']}")
        lines.append(f"disk (estimate): {disk['total']:.1f} GB in all: the download, {disk['checkpoints']:.1f} GB of "
                     f"checkpoints ({disk['checkpoint']:.2f} GB each, save_total_limit of them), model/ "
                     f"{disk['model']:.2f} GB, a merged export {disk['merged_export']:.1f} GB"
                     + (f" and the 16-bit base it merges into {disk['base_for_merge']:.1f} GB (export --base PATH "
                        "uses a copy you have)" if disk["base_for_merge"] else ""))
    alarm = plan.alarm
    lines.append(f"stale-weights alarm: {'armed' if alarm['armed'] else 'NOT armed'} ({alarm['why']})")
    lines.append(f"resume from: {plan.resume_from or 'nothing'} ({plan.resume_why})")
    lines.append("rewards: " + ", ".join(f"{name} {weight:g}" for name, weight in plan.rewards.items()))
    adapter = plan.adapter
    lines.append("adapter: none (every weight trains)" if adapter is None else f"adapter ({adapter['built_by']}): "
                 + ", ".join(f"{k}={v!r}" for k, v in adapter.items() if k != "built_by"))
    lines.append("GRPOConfig: " + ", ".join(f"{k}={v!r}" for k, v in plan.grpo_config.items()))
    if plan.unsloth_changes:
        lines.append("  as Unsloth's generated trainer sets them: " + ", ".join(
            f"{k} {c['passed']!r} -> {c['effective']!r}" for k, c in plan.unsloth_changes.items()))
    lines += ["problems:"] + [f"  {p}" for p in plan.problems] if plan.problems else ["problems: none"]
    return "\n".join(lines)
