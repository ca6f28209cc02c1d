"""Generation's measurements in the GPU proof's routes (``benchmarks/gpu_parts.py``): the seconds and tokens of the
trainer's own generation (:func:`time_generation`), whether it keeps its KV cache under gradient checkpointing
(:func:`watch_kv_cache`), the bytes a decoding step reads (:func:`decode_bytes`, for the card's memory-bound limit
in ``benchmarks/gpu_report.py``), and transformers' continuous batching with CUDA graphs called as TRL 1.15 calls it
(:func:`continuous_batching`).

The KV cache: TRL turns gradient checkpointing off around ``generate`` (``trl/models/utils.py``,
``_unwrap_model_for_generation``), and transformers drops the cache only where a layer checkpoints in training mode
(``transformers/modeling_layers.py``, ``GradientCheckpointingLayer.__call__``). :func:`watch_kv_cache` reads what the
first decoder layer is given during each generation: after the prompt's forward, one new token a forward over a
cache, with checkpointing off.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

#: What the continuous-batching measurement's peak covers.
CB_PEAK_COVERS = ("from the trained model on, after the training's peak was read: the model cast to bf16 as TRL "
                  "casts it, continuous batching's paged KV cache (TRL's default: half the free memory) and its CUDA "
                  "graphs")


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def time_generation(trainer: Any, progress: Any) -> dict[str, Any]:
    """Wrap ``trainer._generate`` (TRL 1.15's rollout, which Unsloth's trainer keeps calling as ``self._generate``)
    to add up the seconds spent generating, the completion tokens it returns (its second value: one list of ids per
    completion) and the decoding steps (each call's longest completion), each call's seconds noted in ``progress`` as
    it ends (a step cut short still says whether it was generating). Returns the running totals,
    ``{"seconds": s, "tokens": n, "calls": k, "decoding_steps": d, "active": bool}`` (``active`` while generating)."""
    totals: dict[str, Any] = {"seconds": 0.0, "tokens": 0, "calls": 0, "decoding_steps": 0, "active": False}
    generate = trainer._generate
    each: list[float] = []

    def timed(*args: Any, **kwargs: Any) -> Any:
        _sync()
        progress.note(phase=f"{progress.row.get('phase', 'training')}: generating (call {totals['calls'] + 1})")
        start = time.perf_counter()
        totals["active"] = True
        try:
            out = generate(*args, **kwargs)
            _sync()
        finally:
            totals["active"] = False
        each.append(round(time.perf_counter() - start, 2))
        totals["seconds"] += each[-1]
        totals["calls"] += 1
        progress.note(phase=f"training: generation call {totals['calls']} done, scoring and backward",
                      generation_call_s=each)
        try:
            lengths = [len(ids) for ids in out[1]]
            totals["tokens"] += sum(lengths)
            totals["decoding_steps"] += max(lengths, default=0)
        except (TypeError, IndexError):  # another return shape: seconds without tokens, said in the row
            totals["tokens_unread"] = True
        return out

    trainer._generate = timed
    return totals


def rates(times: list[float], generated: dict[str, Any]) -> dict[str, Any]:
    """Seconds per GRPO step (the median after the first, which includes compilation and warm-up) and generation's
    own throughput: completion tokens over the seconds spent inside ``_generate`` alone (all steps), and the
    milliseconds per decoding step."""
    out: dict[str, Any] = {"step_s": round(statistics.median(times[1:] or times), 3)}
    if generated["seconds"] > 0:
        out.update(generation_s=round(generated["seconds"], 2), generated_tokens=int(generated["tokens"]),
                   generation_tokens_per_s=round(generated["tokens"] / generated["seconds"], 1))
        if generated["decoding_steps"]:
            out["ms_per_decoding_step"] = round(1000 * generated["seconds"] / generated["decoding_steps"], 2)
    return out


class KvWatch:
    """What the first decoder layer (a transformers ``GradientCheckpointingLayer``) is given: while the trainer
    generates, per forward, the tokens it processes, whether a KV cache comes with them, and whether the layer
    checkpoints in training mode (which drops the cache); outside generation, how many forwards checkpointed (that
    gradient checkpointing was on in training). See the module docstring."""

    def __init__(self, generated: dict[str, Any]) -> None:
        self.generated = generated
        self.forwards: list[tuple[int, bool, bool]] = []
        self.training_checkpointed = 0
        self.layer: str | None = None

    def hook(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        checkpointing = bool(getattr(module, "gradient_checkpointing", False) and module.training)
        if not self.generated["active"]:
            self.training_checkpointed += checkpointing
            return
        hidden = args[0] if args else kwargs.get("hidden_states")
        tokens = int(hidden.shape[1]) if hidden is not None and hidden.dim() == 3 else -1
        self.forwards.append((tokens, kwargs.get("past_key_values") is not None, checkpointing))

    def summary(self) -> dict[str, Any]:
        """``{"kept": bool | None, ...}``: kept when every forward after each generation call's first (the prompt's)
        was one token over a cache and none checkpointed; ``None`` when no decoding forward was seen (a generation
        that calls no decoder layer as a module, as Unsloth's fast inference may)."""
        calls = self.generated["calls"]
        if len(self.forwards) <= calls:
            return {"kept": None, "layer": self.layer, "forwards_seen": len(self.forwards)}
        one_token = sum(1 for tokens, cached, _ in self.forwards if tokens == 1 and cached)
        checkpointing = sum(1 for *_, on in self.forwards if on)
        return {"kept": one_token == len(self.forwards) - calls and not checkpointing, "layer": self.layer,
                "generation_calls": calls, "forwards": len(self.forwards),
                "one_token_forwards_over_a_cache": one_token, "forwards_checkpointing": checkpointing,
                "training_forwards_checkpointing": self.training_checkpointed}


def watch_kv_cache(trainer: Any, generated: dict[str, Any]) -> KvWatch:
    """Hook :class:`KvWatch` onto the first ``GradientCheckpointingLayer`` of ``trainer.model`` (it records only
    while :func:`time_generation`'s ``generated["active"]``)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    watch = KvWatch(generated)
    layer = next((m for m in trainer.model.modules() if isinstance(m, GradientCheckpointingLayer)), None)
    if layer is not None:
        watch.layer = type(layer).__name__
        layer.register_forward_pre_hook(watch.hook, with_kwargs=True)
    return watch


def decode_bytes(model: Any, config: dict[str, Any], completions: int, prompt_tokens: int,
                 completion_tokens: int) -> dict[str, Any]:
    """The bytes one decoding step of ``completions`` sequences reads at least: every parameter as stored (the base
    weights, 4-bit ones packed, and the adapter in its own dtype; bitsandbytes' quantization constants, about 3% of
    4-bit weights, not counted), less the input embedding's table when it is not the output layer's (a step reads
    one row of it per sequence), plus the KV cache at the mean length of the generation (the prompt and half the
    completion) in the embedding's dtype (the activations'). Divided by the card's measured bandwidth, it is the
    step's memory-bound limit."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    embedding = model.get_input_embeddings().weight
    output = model.get_output_embeddings()
    if output is None or output.weight.data_ptr() != embedding.data_ptr():
        weights -= embedding.numel() * embedding.element_size()
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or config["num_attention_heads"]
    per_token = 2 * config["num_hidden_layers"] * kv_heads * head_dim * embedding.element_size()
    kv = completions * (prompt_tokens + completion_tokens / 2) * per_token
    return {"weights": int(weights), "kv_cache": int(kv), "total": int(weights + kv),
            "completions": completions, "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}


#: Continuous batching's paged cache: TRL's default share of free memory on a GPU; in the miniature a toy cache (the
#: share would be half of the CPU's free memory: 12 GB measured on a 24 GiB machine).
CB_CACHE = {"max_memory_percent": 0.5}
CB_CACHE_MINIATURE = {"num_blocks": 16, "max_batch_tokens": 256}


def continuous_batching(trainer: Any, tokenizer: Any, data: Any, config: dict[str, Any], progress: Any,
                        deadline: float | None, needs_s: float, cache: dict[str, Any] = CB_CACHE) -> None:
    """After the route's training: the same prompts' completions through transformers' ``generate_batch`` (paged
    attention, continuous batching) with CUDA graphs, called as TRL 1.15's ``use_transformers_continuous_batching``
    calls it (``grpo_trainer.py``, ``_generate_single_turn``): inside TRL's ``unwrap_model_for_generation`` (gradient
    checkpointing off), the model cast to bf16 when the recipe trains in bf16, the trainer's own
    ``generation_config``, ``cache`` (TRL's ``max_memory_percent`` of 0.5) with ``use_cuda_graph=True`` (a recipe's
    ``transformers_continuous_batching_config: {use_cuda_graph: true}``), a new manager each call. Two calls of one
    step's completions, each timed whole (TRL pays the manager's set-up and graph capture at every step); noted as
    ``continuous_batching`` with the bytes a decoding step then reads (:func:`decode_bytes` of the cast model,
    ``config`` the model's). Not started, said in the row, with fewer than ``needs_s`` seconds left before
    ``deadline``; the second call not with fewer than the first one's. An error is said in the row beside the
    route's measured training."""
    from benchmarks.gpu_parts import seconds_left

    if seconds_left(deadline) < needs_s:
        said = (f"continuous batching not run: it needs about {needs_s:.0f} s, "
                f"{max(seconds_left(deadline), 0):.0f} s were left")
        progress.note(stopped="; ".join(filter(None, [progress.row.get("stopped"), said])))
        return
    progress.note(phase="continuous batching")
    try:
        _generate_batches(trainer, tokenizer, data, config, progress, deadline, cache)
    except Exception as e:  # a finding beside the route's training, which stays measured: said in the row
        said = progress.row.get("continuous_batching") or {}
        progress.note(continuous_batching={**said, "error": f"{type(e).__name__}: {e}"[:600]})


def _generate_batches(trainer: Any, tokenizer: Any, data: Any, config: dict[str, Any], progress: Any,
                      deadline: float | None, cache: dict[str, Any]) -> None:
    """:func:`continuous_batching`'s two calls."""
    import torch
    from transformers.generation import ContinuousBatchingConfig
    from trl.models import unwrap_model_for_generation

    from benchmarks.gpu_parts import peak, reset_peak, seconds_left

    completions = trainer.args.per_device_train_batch_size * trainer.args.gradient_accumulation_steps
    texts = [data[i]["prompt"] for i in range(completions // trainer.num_generations)]
    prompt_ids = [ids for text in texts for ids in [tokenizer(text)["input_ids"]] * trainer.num_generations]
    batching = ContinuousBatchingConfig(**cache, use_cuda_graph=True)
    calls: list[dict[str, Any]] = []
    reset_peak()
    # TRL's own context: the model unwrapped, gradient checkpointing off while it generates (else a layer that
    # checkpoints in training mode drops the cache)
    with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator) as model, torch.no_grad():
        if trainer.args.bf16:
            model.to(torch.bfloat16)
        decode = decode_bytes(model, config, completions, len(prompt_ids[0]), trainer.args.max_completion_length)
        for _ in range(2):
            if calls and seconds_left(deadline) < calls[-1]["seconds"]:
                progress.note(stopped=f"at its deadline after continuous batching's call {len(calls)}")
                break
            _sync()
            start = time.perf_counter()
            outputs = model.generate_batch(prompt_ids, generation_config=trainer.generation_config,
                                           continuous_batching_config=batching, progress_bar=False)
            _sync()
            seconds = time.perf_counter() - start
            tokens = [len(o.generated_tokens) for o in outputs.values()]
            calls.append({"seconds": round(seconds, 2), "sequences": len(tokens), "tokens": sum(tokens),
                          "tokens_per_s": round(sum(tokens) / seconds, 1)})
            # asked for, transformers keeps CUDA graphs on a GPU and turns them off without one
            # (decide_use_cuda_graphs)
            progress.note(continuous_batching={"calls": calls, "cache": cache, "cuda_graphs": torch.cuda.is_available(),
                                               "decode_bytes": decode, "peak_covers": CB_PEAK_COVERS, **peak()})
