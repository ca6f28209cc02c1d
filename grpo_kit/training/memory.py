"""How much GPU memory a recipe needs per GPU: arithmetic from the model's ``config.json``, an estimate.

One function, :func:`estimate_memory`, used by ``python -m grpo_kit plan`` (and so by ``train``'s checks)
and by the GPU proof (``benchmarks/gpu_proof.py``), which measures the same parts on a GPU. Every part is in
GiB (2**30 bytes) per GPU:

- ``weights``: the policy as loaded: 4-bit (bitsandbytes NF4 with double quantisation, about 4.13 bits a
  weight) for the linear layers under ``load_in_4bit``, the output projection, embeddings and norms 16-bit;
  16-bit for a LoRA base; float32 master weights for full fine-tuning (DeepSpeed ZeRO: a 16-bit module, the float32
  master copy being the optimizer's). Divided over the processes under ZeRO-3 / FSDP.
- ``trainable``: per trainable parameter, its gradient (float32; 16-bit under DeepSpeed), plus the float32
  adapter itself for LoRA (peft keeps adapters in float32). Gradients divided over the processes under
  ZeRO-2/3 and FSDP.
- ``optimizer``: AdamW's two moments: 8 bytes per trainable parameter, 2 with an 8-bit optimizer
  (``adamw_8bit``, ``paged_adamw_8bit``), plus DeepSpeed's float32 master copy (4) for full fine-tuning
  (2 + 2 + 12 bytes a parameter in all: Rajbhandari et al. 2020, "ZeRO"); divided over the processes under
  ZeRO and FSDP.
- ``vllm_weights``: vLLM's own 16-bit copy of the weights (TRL's colocated engine); 0 for Unsloth's
  ``fast_inference`` (it shares the weights) and on the training GPUs of server mode.
- ``kv_cache``: what vLLM's share (``gpu_memory_utilization`` of the card) holds after its weights: vLLM
  reserves it whole. At least one ``max_model_len`` sequence must fit or the engine does not start.
- ``activations``: one micro-batch (``per_device_train_batch_size`` completions of prompt + completion
  tokens): with gradient checkpointing each layer's 16-bit input plus one layer recomputed (34 bytes per
  token per hidden unit: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
  Models", without the attention-score term that flash attention avoids), without it every layer's 34;
  plus float32 logits (4 bytes per token per vocabulary entry).
- ``sync_gather``: LoRA under ZeRO-3 with vLLM generation: to merge the adapter before each weight sync, TRL
  gathers the whole model on every process at once (trl 1.15.0, ``trl/generation/vllm_generation.py``,
  ``_iter_named_params``: "we must gather the full model at once before merging"): the 16-bit weights the other
  processes hold, about 14 GiB for an 8B model on 8 GPUs. Activations are freed then, so the larger of the two
  counts, not both.
- ``overhead``: the CUDA context and the allocator's slack, 1 GiB.

``needed`` is their sum (less the smaller of ``activations`` and ``sync_gather``), ``available`` the card's memory,
``fits`` whether the one holds the other and, with colocated vLLM, whether vLLM's share leaves room for one
sequence's KV cache (else the engine does not start, whatever the total).
"""

from __future__ import annotations

from typing import Any

from grpo_kit.policy.devices import Gpu
from grpo_kit.policy.shapes import ModelShape
from grpo_kit.system.logs import counted
from grpo_kit.training.presets import Recipe

__all__ = ["LAUNCHES", "NF4_BYTES", "OVERHEAD_GIB", "estimate_memory"]

#: How a run can be launched (``plan --launch``): one process, or ``accelerate launch`` with configs/accelerate/.
LAUNCHES = ("single", "ddp", "zero2", "zero3", "fsdp2")
#: The CUDA context and allocator slack, GiB.
OVERHEAD_GIB = 1.0
_GIB = 2**30
#: bitsandbytes NF4 with double quantisation: 4 bits a weight, an 8-bit absmax per 64 and a float32 per 256 blocks.
NF4_BYTES = 0.5 + 1 / 64 + 4 / (64 * 256)


def estimate_memory(preset: Recipe, shape: ModelShape, gpu: Gpu, launch: str = "single",
                    processes: int = 1) -> dict[str, Any]:
    """The per-GPU memory of a training process of ``preset`` on ``gpu`` (see the module docstring), an estimate.

    Args:
        preset: the recipe.
        shape: its model's shape (:func:`grpo_kit.policy.shapes.model_shape`).
        gpu: the card (:data:`grpo_kit.policy.devices.CARDS` or this machine's).
        launch: one of :data:`LAUNCHES` (checked by the callers: ``plan --launch`` and
            :func:`grpo_kit.training.plan.launch_of`).
        processes: training processes (one GPU each), at least 1 (``make_plan`` checks ``--gpus``).

    Returns:
        ``{"estimate": True, "parts": {name: GiB}, "needed": GiB, "available": GiB, "fits": bool (the total, and
        vLLM's KV cache in its share),
        "kv_cache_needed": GiB (one max_model_len sequence; 0 without colocated vLLM), "kv_cache_room": GiB (what
        vLLM's share leaves after its weights; ``None`` without colocated vLLM), "basis": str}``.

    >>> from grpo_kit.policy.devices import card
    >>> from grpo_kit.policy.shapes import model_shape
    >>> from grpo_kit.training.presets import PRESETS
    >>> m = estimate_memory(PRESETS["a100"], model_shape("unsloth/Meta-Llama-3.1-8B-Instruct"), card("a100-40gb"))
    >>> m["fits"], round(m["parts"]["weights"], 1)
    (True, 5.3)
    """
    n = processes if launch != "single" else 1
    shard_weights = n if launch in ("zero3", "fsdp2") else 1
    shard = n if launch in ("zero2", "zero3", "fsdp2") else 1  # the gradients and the optimizer's state
    half = 2  # bfloat16 or float16
    total = shape.parameters
    deepspeed_full = preset.lora_rank is None and launch in ("zero2", "zero3")
    if deepspeed_full:
        # DeepSpeed with bf16: a 16-bit module and 16-bit gradients, and in the (partitioned) optimizer a float32
        # master copy plus the two moments: 2 + 2 + 12 bytes a parameter (Rajbhandari et al. 2020, ZeRO, section 3)
        weights, trainable_params = total * half, total
        trainable = total * half / shard
    elif preset.lora_rank is None:
        weights, trainable_params = total * 4, total
        trainable = trainable_params * 4 / shard
    else:
        weights = shape.linear_parameters * NF4_BYTES + (total - shape.linear_parameters) * half \
            if preset.load_in_4bit else total * half
        trainable_params = shape.lora_parameters(preset.lora_rank, preset.loading.lora_target_modules)
        trainable = trainable_params * 4 + trainable_params * 4 / shard
    weights /= shard_weights
    moments = 2 if "8bit" in preset.optim else 8
    optimizer = trainable_params * (moments + (4 if deepspeed_full else 0)) / shard
    vllm_weights = kv_cache = kv_needed = 0.0
    room: float | None = None
    if preset.fast_inference or (preset.use_vllm and preset.vllm_mode == "colocate"):
        kv_needed = shape.kv_per_token * half * preset.vllm_max_model_len
        share = preset.vllm_gpu_memory_utilization * gpu.memory_gib * _GIB
        # Unsloth's engine shares the policy's weights; TRL's holds a 16-bit copy of its own
        vllm_weights = 0.0 if preset.fast_inference else total * half
        room = share - (weights if preset.fast_inference else vllm_weights)
        kv_cache = max(room, kv_needed)
    tokens = preset.per_device_train_batch_size * (preset.max_prompt_tokens + preset.max_completion_length)
    per_token = shape.hidden_size * half * shape.num_layers + 34 * shape.hidden_size if preset.gradient_checkpointing \
        else 34 * shape.hidden_size * shape.num_layers
    activations = tokens * (per_token + 4 * shape.vocab_size)
    sync_gather = total * half * (1 - 1 / n) if (
        launch == "zero3" and preset.lora_rank is not None and (preset.use_vllm or preset.fast_inference)) else 0.0
    parts = {"weights": weights, "trainable": trainable, "optimizer": optimizer, "vllm_weights": vllm_weights,
             "kv_cache": kv_cache, "activations": activations, "sync_gather": sync_gather}
    parts = {k: round(v / _GIB, 2) for k, v in parts.items()}
    parts["overhead"] = OVERHEAD_GIB
    needed = round(sum(parts.values()) - min(parts["activations"], parts["sync_gather"]), 2)
    kv_fits = room is None or room >= kv_needed
    return {"estimate": True, "parts": parts, "needed": needed, "available": round(gpu.memory_gib, 2),
            "fits": needed <= gpu.memory_gib and kv_fits, "kv_cache_needed": round(kv_needed / _GIB, 2),
            "kv_cache_room": None if room is None else round(room / _GIB, 2),
            "basis": f"arithmetic from {shape.name}'s config.json ({total / 1e9:.2f}B parameters), "
                     f"{counted(n, 'process', 'processes')}, launch {launch}; see grpo_kit/training/memory.py"}
