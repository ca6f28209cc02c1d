"""Which engine generates a run's completions during training, what each refuses, and a check that none rounds the
trained weights.

TRL's ``GRPOTrainer`` generates in one of three ways, tried in this order (trl 1.15.0 and 1.16.0,
``grpo_trainer.py``, ``_generate_single_turn``): vLLM (``use_vllm``; on Unsloth routes ``fast_inference``, which
Unsloth's generated trainer turns into ``use_vllm``), transformers' continuous batching
(``use_transformers_continuous_batching``: the policy's ``generate_batch``, paged attention, CUDA graphs on a GPU,
sized by ``transformers_continuous_batching_config``, keyword arguments of transformers' ``ContinuousBatchingConfig``),
or the policy's own ``generate``. :func:`generator` names the one a recipe gets, with its basis;
:func:`check_generator` refuses, before any model loads, the continuous-batching settings that would be ignored, give
wrong completions or round the trained weights; :class:`PrecisionKept` stops a step whose trained weights lost
precision before its optimizer update.

Continuous batching is opt-in: no GPU has measured it against plain ``generate`` for the kit's shapes yet
(``benchmarks/generation_speed.py`` measures both on a CPU).
"""

from __future__ import annotations

import json
import math
from typing import Any

import torch
from transformers import TrainerCallback

from grpo_kit.training.presets import PRESETS, Recipe, get_preset  # noqa: F401 (doctests)

__all__ = ["PrecisionKept", "check_generator", "continuous_batching", "continuous_batching_config", "generator"]

#: ``max_memory_percent`` TRL passes to ``ContinuousBatchingConfig`` unless the recipe sets it (trl 1.15.0 and 1.16.0
#: ``GRPOTrainer.__init__``: transformers' own default, 0.9, would leave no memory for the backward pass).
TRL_MAX_MEMORY_PERCENT = 0.5
#: The ``max_batch_tokens`` suggested for a CPU: tokens per forward pass; lower only means more passes.
_CPU_BATCH_TOKENS = 1024


def continuous_batching(preset: Recipe) -> bool:
    """Whether TRL would generate through transformers' continuous batching (``use_transformers_paged`` is its
    deprecated name, which ``GRPOConfig`` turns into ``use_transformers_continuous_batching``)."""
    return bool(preset.use_transformers_continuous_batching or preset.use_transformers_paged)


def _switch(preset: Recipe) -> str:
    """The key that turned continuous batching on, as the recipe spelled it, for refusals to name."""
    return "use_transformers_continuous_batching" if preset.use_transformers_continuous_batching else \
        "use_transformers_paged"


def continuous_batching_config(preset: Recipe) -> dict[str, Any]:
    """``transformers_continuous_batching_config`` as a mapping (the command line gives it as JSON, which
    ``GRPOConfig`` parses the same way); ``{}`` where unset.

    Raises:
        ValueError: neither a mapping nor a JSON object.
    """
    given = value = preset.transformers_continuous_batching_config
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            pass
    if value is not None and not isinstance(value, dict):
        raise ValueError(f"transformers_continuous_batching_config = {given!r} is not a mapping: write it as "
                         "{\"use_cuda_graph\": true} on the command line, or as a mapping in the recipe")
    return dict(value or {})


def generator(preset: Recipe) -> dict[str, str]:
    """The engine that generates the completions of a run of ``preset`` during training, and where that is decided.

    Returns:
        ``{"name": str, "basis": str}``.

    >>> generator(PRESETS["a100"])["name"]
    "vLLM: Unsloth's colocated engine, sharing the policy's weights (fast_inference)"
    >>> generator(get_preset("cpu-tiny", use_peft=True, use_transformers_continuous_batching=True))["name"]
    'transformers continuous batching (generate_batch, paged attention; no CUDA graphs on a CPU)'
    """
    if preset.use_unsloth and preset.fast_inference:
        return {"name": "vLLM: Unsloth's colocated engine, sharing the policy's weights (fast_inference)",
                "basis": "Unsloth's generated trainer sets use_vllm and vllm_mode colocate over the config and "
                         "generates with the engine loaded with the model (unsloth/models/rl.py)"}
    if preset.use_vllm:
        return {"name": f"vLLM: TRL's, {preset.vllm_mode}",
                "basis": "use_vllm: TRL generates with vLLM and loads the trained weights into it after every step "
                         "(trl grpo_trainer.py)"}
    if continuous_batching(preset):
        try:
            config = continuous_batching_config(preset)
        except ValueError:  # check_generator says what is wrong with it
            config = {}
        graphs = config.get("use_cuda_graph")
        said = "no CUDA graphs on a CPU" if preset.use_cpu else "CUDA graphs " + (
            "as transformers decides (on where the attention needs no mask)" if graphs is None else
            "on" if graphs is True else "off" if graphs is False else f"{graphs} (prefill, decode)")
        share = config.get("max_memory_percent", TRL_MAX_MEMORY_PERCENT)
        cache = f"{config['num_blocks']} blocks of {config.get('block_size', 256)} tokens" if "num_blocks" in config \
            else f"{share:g} of the memory free once the policy is loaded"
        return {"name": f"transformers continuous batching (generate_batch, paged attention; {said})",
                "basis": "use_transformers_continuous_batching: TRL calls the policy's generate_batch with "
                         f"transformers_continuous_batching_config {config or '{}'}, its KV cache {cache} (trl "
                         "grpo_trainer.py); opt-in. Measured on one H200 at a100's 8B shape (random weights, "
                         "benchmarks/results/gpu-2026-11-29): 213 and 230 tokens/s against plain generate's 168, "
                         "94.9 GiB reserved with the default cache share"}
    if preset.use_unsloth:
        return {"name": "Unsloth's generate (its own decode path)",
                "basis": "TRL's generate inside Unsloth's for_inference (unsloth/models/rl.py); unsloth 2026.10.9 "
                         "replays its decode step as CUDA graphs there for Llama and Qwen3 on NVIDIA GPUs "
                         "(unsloth/models/_decode_graphs.py; UNSLOTH_DECODE_CUDA_GRAPHS=0 turns them off). Measured "
                         "on one H200 at a100's 8B shape: 861 tokens/s in 16 bits, 474 in 4 bits (random weights, "
                         "benchmarks/results/gpu-2026-11-29)"}
    return {"name": "transformers generate",
            "basis": "TRL's generate with the KV cache, gradient checkpointing off around it (trl/models/utils.py); "
                     "use_transformers_continuous_batching true opts into continuous batching"}


def check_generator(preset: Recipe) -> None:
    """Refuse, before any model loads, the continuous-batching settings TRL would ignore, that would give wrong
    completions, or that would round the trained weights.

    Raises:
        ValueError: one line with the remedy: ``transformers_continuous_batching_config`` without
            ``use_transformers_continuous_batching``, or keys transformers' ``ContinuousBatchingConfig`` refuses;
            continuous batching with vLLM (TRL tries vLLM first and ignores it), with Unsloth (its attention does not
            read the paged KV cache), with ``bf16`` or ``fp16`` (TRL casts the whole policy, trained weights
            included), with a sampling setting continuous batching drops, or on a CPU without ``num_blocks`` and
            ``max_batch_tokens``.
    """
    config = continuous_batching_config(preset)
    if not continuous_batching(preset):
        if config:
            raise ValueError(f"transformers_continuous_batching_config {config} without "
                             "use_transformers_continuous_batching: TRL reads it only with continuous batching on; "
                             "set use_transformers_continuous_batching true, or drop it")
        return
    _check_config(config)
    if preset.use_vllm or preset.fast_inference:
        vllm = "use_vllm" if preset.use_vllm else "fast_inference"
        raise ValueError(f"{_switch(preset)} with {vllm}: TRL generates with vLLM when it is on and "
                         "ignores continuous batching (grpo_trainer.py tries vLLM first): choose one")
    if preset.use_unsloth:
        raise ValueError(f"{_switch(preset)} with use_unsloth: Unsloth's attention does not read "
                         "the paged KV cache generate_batch passes (unsloth/models/llama.py, "
                         "LlamaAttention_fast_forward takes no cache argument), so completions would be wrong: "
                         "generate with Unsloth's own generate (use_transformers_continuous_batching false) or "
                         "its vLLM (fast_inference true), or train without Unsloth (use_unsloth false)")
    _check_precision(preset)
    _check_sampling(preset)
    if preset.use_cpu and not {"num_blocks", "max_batch_tokens"} <= set(config):
        raise ValueError(_cpu_sizing(preset, config))


def _check_config(config: dict[str, Any]) -> None:
    """``config`` as ``GRPOTrainer.__init__`` builds it into transformers' ``ContinuousBatchingConfig``."""
    from transformers.generation import ContinuousBatchingConfig

    try:
        ContinuousBatchingConfig(**{"max_memory_percent": TRL_MAX_MEMORY_PERCENT, **config})
    except (TypeError, ValueError) as e:
        raise ValueError(f"transformers_continuous_batching_config {config}: transformers' ContinuousBatchingConfig "
                         f"refuses it ({str(e).strip().splitlines()[0]})") from None


def _check_precision(preset: Recipe) -> None:
    """TRL casts the whole policy to ``bf16``'s or ``fp16``'s dtype before each ``generate_batch`` and leaves it there
    (trl 1.15.0 and 1.16.0 ``grpo_trainer.py``): float32 master weights or a float32 adapter would train in 16 bits,
    where AdamW's small updates round away (TRL's own note on 16-bit adapters, trl #7268)."""
    bf16 = preset.bf16 if preset.bf16 is not None else not preset.fp16  # TRL's default (_BaseConfig.__post_init__)
    if not (bf16 or preset.fp16):
        return
    dtype, key = ("bfloat16", "bf16") if bf16 else ("float16", "fp16")
    trained, keeps = ("the float32 master weights", "full fine-tuning then trains in float32; or generate with vLLM "
                      "(use_vllm true)") if preset.lora_rank is None else \
        ("the float32 LoRA adapter", "the base still loads in 16 bits on a GPU and the adapter stays float32")
    raise ValueError(f"{_switch(preset)} with {key} true: TRL casts the whole policy to {dtype} "
                     f"before each generate_batch and leaves it there, {trained} included, so AdamW's small updates "
                     f"would round away (trl grpo_trainer.py; trl #7268): set {key} false ({keeps})")


def _check_sampling(preset: Recipe) -> None:
    """Sampling settings whose logits processor continuous batching drops (with a log line only): transformers marks
    them ``supports_continuous_batching = False`` (``generation/logits_process.py``)."""
    from transformers.generation import logits_process

    processors = {"repetition_penalty": (logits_process.RepetitionPenaltyLogitsProcessor, 1.0),
                  "min_new_tokens": (logits_process.MinNewTokensLengthLogitsProcessor, None)}
    given = {"repetition_penalty": preset.repetition_penalty, **(preset.generation_kwargs or {})}
    for key, (processor, neutral) in processors.items():
        if given.get(key, neutral) not in (neutral, 0) and \
                getattr(processor, "supports_continuous_batching", None) is False:
            raise ValueError(f"{key} = {given[key]!r} with {_switch(preset)}: continuous "
                             f"batching drops {processor.__name__} (transformers generation/logits_process.py), so "
                             f"the completions would be sampled without it: drop {key}, or generate without "
                             "continuous batching")


def _cpu_sizing(preset: Recipe, config: dict[str, Any]) -> str:
    """Why a CPU needs the KV cache's size given, with a size that holds one generation batch (each completion's
    prompt and completion, in blocks of ``block_size`` tokens)."""
    completions = preset.generation_batch_size or preset.per_device_train_batch_size * (
        preset.steps_per_generation or preset.gradient_accumulation_steps)  # TRL's generation batch
    block = int(config.get("block_size", 256))
    blocks = completions * math.ceil((preset.max_prompt_tokens + preset.max_completion_length) / block)
    share = config.get("max_memory_percent", TRL_MAX_MEMORY_PERCENT)
    return (f"{_switch(preset)} on a CPU without num_blocks and max_batch_tokens: transformers "
            f"would size the paged KV cache to {share:g} of the machine's free RAM (the tiny policy's took 11.8 GiB of "
            f"24 and tens of seconds a step): set transformers_continuous_batching_config "
            f"{json.dumps({**config, 'num_blocks': blocks, 'max_batch_tokens': _CPU_BATCH_TOKENS})} ({completions} "
            f"completions of up to {preset.max_prompt_tokens + preset.max_completion_length} tokens, in blocks of "
            f"{block})")


class PrecisionKept(TrainerCallback):
    """Stops a training step in which a trained weight lost precision (float32 to bfloat16, say), before its
    optimizer update: AdamW's updates at GRPO's learning rates are far below a 16-bit weight's precision and would
    round away unseen. TRL's continuous-batching generation casts the whole policy to the training precision
    (:func:`check_generator` refuses that combination; this checks every step that nothing else does it).

    The dtypes are read when each step begins (after accelerate has prepared the model, so its own casts do not count)
    and compared before the optimizer steps (``TrainerCallback.on_pre_optimizer_step``).
    """

    def __init__(self) -> None:
        self.dtypes: dict[str, torch.dtype] = {}

    def on_step_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        self.dtypes = {n: p.dtype for n, p in model.named_parameters() if p.requires_grad and p.is_floating_point()}

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        """Raises:
            RuntimeError: a trained weight now has a dtype of less precision than when the step began."""
        lost = [(n, self.dtypes[n], p.dtype) for n, p in model.named_parameters() if n in self.dtypes
                and p.is_floating_point() and torch.finfo(p.dtype).eps > torch.finfo(self.dtypes[n]).eps]
        if lost:
            name, before, after = lost[0]
            raise RuntimeError(f"step {state.global_step + 1}: {len(lost)} trained weights went from {before} to "
                               f"{after} during the step (e.g. {name}), so its optimizer update would round away; "
                               "stopped before applying it. With use_transformers_continuous_batching, TRL casts the "
                               "policy to bf16's or fp16's dtype before generating: set bf16 and fp16 false")
