"""Generation backends: completions for many prompts at once.

A backend turns conversational prompts into completions: ``backend.generate(prompts, sampling)``
returns, for each prompt, ``sampling.n`` completion texts. The transformers backend (CPU or
GPU) batches prompts with left padding; a vLLM backend for GPUs will sit behind the same
interface and is imported only when asked for.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from grpo_kit.policy.devices import gpu_of
from grpo_kit.policy.speed import generation_seconds
from grpo_kit.system.logs import counted
from grpo_kit.system.progress import announce, expected_seconds, phase_bar

__all__ = ["Backend", "Generation", "Sampling", "TransformersBackend", "base_weights_digest", "model_fingerprint"]

Prompt = list[dict[str, str]]
#: Called as ``on_result(i, generations)`` once the completions of prompt ``i`` exist.
OnResult = Callable[[int, list["Generation"]], None]


@dataclass(frozen=True)
class Sampling:
    """How completions are drawn.

    ``temperature=0`` is greedy decoding (the headline evaluation; ``n`` must then be 1).
    ``max_new_tokens`` bounds each completion, in tokens; a completion that reaches it is
    reported as truncated. ``seed`` makes sampled runs repeatable.
    """

    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    n: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.max_new_tokens < 1 or self.n < 1:
            raise ValueError(f"bad sampling settings {self}: need temperature >= 0, 0 < top_p <= 1, "
                             "max_new_tokens >= 1, n >= 1")
        if self.greedy and self.n != 1:
            raise ValueError("greedy decoding (temperature=0) gives one completion per prompt: set n=1 "
                             "or a temperature above 0")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class Generation:
    """One completion: its text, its length in tokens, and whether it hit ``max_new_tokens``."""

    text: str
    num_tokens: int
    truncated: bool


class Backend(Protocol):
    """What evaluation needs from a generation backend."""

    def generate(self, prompts: Sequence[Prompt], sampling: Sampling,
                 on_result: OnResult | None = None) -> list[list[Generation]]:
        """Return ``sampling.n`` generations for each prompt, in prompt order; call ``on_result``
        for each prompt as soon as its generations exist."""

    def identity(self) -> str:
        """What the outputs depend on besides prompt and sampling: model and template (cache keys)."""


def _digest(params: dict[str, Any], strip_peft: bool = False) -> str:
    """16 hex digits of a SHA-256 over the named tensors (each sampled at about 65,536 evenly strided
    elements: a training step moves all of them), in name order.

    A parameter DeepSpeed ZeRO-3 has partitioned holds an empty tensor on every process (its ``ds_id`` marks it;
    its shape is ``ds_shape``): it is gathered whole, one at a time, for its sample (a collective: every process
    of the launch hashes, as ``train`` does), so a sharded model digests as the same model unsharded.
    """
    digest = hashlib.sha256()
    for name, param in sorted(params.items()):
        key = name.removeprefix("base_model.model.").replace(".base_layer", "") if strip_peft else name
        digest.update(f"{key}{tuple(getattr(param, 'ds_shape', param.shape))}{param.dtype}".encode())
        digest.update(_sample(param))
    return digest.hexdigest()[:16]


def _sample(param: Any) -> bytes:
    """About 65,536 evenly strided elements of a parameter, whole even where ZeRO-3 partitioned it."""
    if hasattr(param, "ds_id"):  # DeepSpeed ZeRO-3 (deepspeed/runtime/zero/partition_parameters.py)
        import deepspeed

        with deepspeed.zero.GatheredParameters([param], modifier_rank=None):
            return _sample(param.data)
    tensor = param.detach().reshape(-1)
    return tensor[::max(1, tensor.numel() // 65536)].float().cpu().numpy().tobytes()


def model_fingerprint(model: Any) -> str:
    """Name plus a SHA-256 of the weights: ``"<name_or_path>@<16 hex digits>"``.

    For a peft model only the adapter (``lora_`` parameters) is hashed, the base being named by
    ``name_or_path``. Tensors over 65,536 elements are hashed on an evenly strided sample of
    about that many elements (a training step moves all of them), so fingerprinting an 8B model
    reads megabytes, not gigabytes.
    """
    params = dict(model.named_parameters())
    adapter = {n: p for n, p in params.items() if "lora_" in n}
    name = getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__
    return f"{name}@{_digest(adapter or params)}"


def base_weights_digest(model: Any) -> str:
    """16 hex digits that identify a model's base weights, whatever adapter sits on them and wherever
    they were loaded from (a LoRA run's starting point; run folders record it).

    Every weight but the adapter's is hashed (as :func:`model_fingerprint` samples them), under
    its name without peft's wrapper prefixes, so a model and the same model wrapped by peft agree.
    """
    return _digest({n: p for n, p in model.named_parameters() if "lora_" not in n}, strip_peft=True)


def _parameters(model: Any) -> int:
    """A model's parameters, a 4-bit one's counted as its 16-bit original (transformers' ``num_parameters`` unpacks
    bitsandbytes' packed 4-bit weights; a bare ``numel`` counts half of them)."""
    count = getattr(model, "num_parameters", None)
    return int(count()) if callable(count) else sum(p.numel() for p in model.parameters())


def _counting(bar: Any) -> Any:
    """A ``StoppingCriteriaList`` that stops nothing and moves ``bar`` by one token per decoding step."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    class _Count(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            bar.update(1)
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    return StoppingCriteriaList([_Count()])


def _shares_prompt_prefill(model: Any) -> bool:
    """Whether :func:`_prefilled_once` may hand ``model`` a prompt cache: on a CPU (on a GPU, vLLM's prefix caching
    shares prompts, and this route is not run there), a causal LM of transformers' own ``forward``
    and ``generate`` (a LoRA adapter of peft's over one) whose every layer attends, fully or in a sliding window,
    through transformers' ``DynamicCache``. Unsloth's models (their ``forward`` replaced, with an inference cache of
    their own), linear-attention and state-space layers (a state, not keys and values per position) and peft's prompt
    learning (virtual tokens before the prompt) generate as they are, as every model does under a transformers
    without these cache classes (5.17's ``transformers/cache_utils.py``)."""
    from transformers import DynamicCache, GenerationMixin

    try:
        from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer
    except ImportError:
        return False
    if getattr(getattr(model, "active_peft_config", None), "is_prompt_learning", False) or \
            getattr(model, "device", None) is None or model.device.type != "cpu":
        return False
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    forward = type(inner).forward
    if getattr(inner.generate, "__func__", None) is not GenerationMixin.generate or \
            not forward.__module__.startswith("transformers.") or \
            "logits_to_keep" not in inspect.signature(forward).parameters:
        return False
    supports = getattr(inner, "_supports_default_dynamic_cache", None)  # transformers/generation/utils.py
    if not (callable(supports) and supports()):
        return False
    layers = DynamicCache(config=inner.config).layers
    return bool(layers) and all(type(layer) in (DynamicLayer, DynamicSlidingWindowLayer) for layer in layers)


def _prefilled_once(model: Any, enc: Any, n: int) -> dict[str, Any]:
    """The inputs of ``n`` samples per prompt with each prompt's key/value cache computed once, not ``n`` times.

    ``generate(num_return_sequences=n)`` repeats each prompt ``n`` times before its first forward pass, so the prompt
    is encoded ``n`` times; here all but each prompt's last token go through the model once, the cache is repeated
    ``n`` times (``DynamicCache.batch_repeat_interleave``, the order ``num_return_sequences`` gives) and ``generate``
    continues from it, as transformers' prefix caching does (docs: "Cache strategies", re-use cache to continue
    generation). Positions are counted over the attention mask, as ``generate`` counts them under left padding. With
    8 samples of the tiny policy's 43-token prompts this halves the CPU time of a sampled batch, the same tokens.

    Args:
        model: a model :func:`_shares_prompt_prefill` accepts.
        enc: the tokenizer's batch, ``input_ids`` and ``attention_mask`` of shape ``(prompts, length)``, left padded.
        n: samples per prompt.

    Returns:
        ``generate``'s keyword arguments: ``input_ids`` and ``attention_mask`` of shape ``(prompts * n, length)``
        and ``past_key_values`` holding the first ``length - 1`` positions of each row.
    """
    from transformers import DynamicCache

    ids, mask = enc["input_ids"], enc["attention_mask"]
    positions = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 1)
    cache = DynamicCache(config=model.config)
    model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1], position_ids=positions[:, :-1], past_key_values=cache,
          use_cache=True, logits_to_keep=1)  # only the cache is kept: not a vocabulary's logits per prompt token
    cache.batch_repeat_interleave(n)
    return {"input_ids": ids.repeat_interleave(n, dim=0), "attention_mask": mask.repeat_interleave(n, dim=0),
            "past_key_values": cache}


class TransformersBackend:
    """Batched generation with ``model.generate``: prompts sorted by length, left padded.

    Args:
        model: a causal LM (``PreTrainedModel`` or a peft model).
        tokenizer: its tokenizer, with a chat template and a pad token.
        batch_size: prompts per ``generate`` call (completions per call: ``batch_size * n``).
        progress: announce a long generation and show a bar of decoding steps, labelled greedy or sampled
            (:func:`grpo_kit.system.progress.phase_bar`).
        name: what generates, before that label ("the trained policy", "the export").
    """

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = 32, progress: bool = True, name: str = "") -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.model, self.tokenizer = model, tokenizer
        self.batch_size, self.progress, self.name = batch_size, progress, name

    def _announce(self, label: str, questions: int, batches: list[list[int]], sampling: Sampling,
                  shared: bool) -> float:
        """The line before a generation long enough to wait for (:func:`grpo_kit.system.progress.announce`); returns
        the seconds expected, announced or not, for the bar to correct. On a GPU the time is the kit's arithmetic for
        the card (:func:`grpo_kit.policy.speed.generation_seconds`, as ``plan`` reckons), with its basis; on a CPU this
        machine's measured speed, each prompt encoded once for its samples where ``shared``
        (:func:`_prefilled_once`)."""
        what = (f"{label} completions of {counted(questions, 'question')} (up to {sampling.max_new_tokens} new tokens "
                f"each, {counted(len(batches), 'batch', 'batches')})")
        shorten = "fewer questions, a smaller max_new_tokens or fewer samples shorten it"
        parameters = _parameters(self.model)
        gpu = gpu_of(self.model.device)
        if gpu is not None:
            tokens = questions * sampling.n * sampling.max_new_tokens
            seconds, basis = generation_seconds("transformers", tokens, parameters, gpu)
            if seconds >= 10:
                announce(what, seconds, shorten, where=f"at most on {gpu.name}, generating through transformers",
                         basis=basis)
            return seconds
        seconds = sum(expected_seconds("generate", parameters, sequences=len(b) * sampling.n, batches=1,
                                       new_tokens=sampling.max_new_tokens, samples=sampling.n if shared else 1)
                      for b in batches)
        if seconds >= 10:
            announce(what, seconds, shorten)
        return seconds

    def identity(self) -> str:
        """The model's fingerprint plus a hash of the chat template and special tokens."""
        template = f"{self.tokenizer.chat_template}|{self.tokenizer.eos_token}|{self.tokenizer.pad_token}"
        return f"{model_fingerprint(self.model)}|{hashlib.sha256(template.encode()).hexdigest()[:16]}"

    def _render(self, prompt: Prompt) -> str:
        return self.tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)

    def generate(self, prompts: Sequence[Prompt], sampling: Sampling,
                 on_result: OnResult | None = None) -> list[list[Generation]]:
        """Generate ``sampling.n`` completions per prompt.

        Args:
            prompts: conversational prompts, each a list of ``{"role", "content"}`` messages.
            sampling: decoding settings. Sampled runs seed torch with ``sampling.seed`` plus the
                batch number, so a rerun with the same prompts and batch size repeats itself.
            on_result: called with ``(prompt index, generations)`` after each batch.

        Returns:
            ``list`` (one per prompt, in the given order) of ``list[Generation]`` of length
            ``sampling.n``. Special tokens (EOS, padding) are removed from the text.
        """
        import torch

        texts = [self._render(p) for p in prompts]
        lengths = [len(self.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
        # Similar lengths in one batch waste less compute on padding.
        order = sorted(range(len(texts)), key=lambda i: lengths[i])
        results: list[list[Generation]] = [[] for _ in texts]
        pad, eos = self.tokenizer.pad_token_id, self.tokenizer.eos_token_id
        was_training = self.model.training
        self.model.eval()
        batches = [order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        label = "greedy" if sampling.greedy else f"sampled ({sampling.n} per question)"
        label = f"{self.name}, {label}" if self.name else label
        share = sampling.n > 1 and _shares_prompt_prefill(self.model)  # each prompt encoded once for its samples
        expected = self._announce(label, len(prompts), batches, sampling, share) if self.progress else None
        try:
            with phase_bar(label, len(batches) * sampling.max_new_tokens, "token", enabled=self.progress,
                           expected=expected) as bar:
                for batch_no, batch in enumerate(batches):
                    bar.set_postfix_str(f"batch {batch_no + 1}/{len(batches)}, {counted(len(batch), 'question')}",
                                        refresh=False)
                    start = bar.n
                    enc = self.tokenizer([texts[i] for i in batch], return_tensors="pt", padding=True,
                                         padding_side="left", add_special_tokens=False).to(self.model.device)
                    kwargs: dict[str, Any] = dict(max_new_tokens=sampling.max_new_tokens, pad_token_id=pad,
                                                  eos_token_id=eos, num_return_sequences=sampling.n,
                                                  stopping_criteria=_counting(bar))
                    if sampling.greedy:
                        kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
                    else:
                        torch.manual_seed(sampling.seed + batch_no)
                        kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=0)
                    with torch.no_grad():
                        if share and set(enc) == {"input_ids", "attention_mask"} and enc["input_ids"].shape[1] > 1:
                            enc = _prefilled_once(self.model, enc, sampling.n)
                            kwargs["num_return_sequences"] = 1  # the prompts come repeated, with their cache
                        out = self.model.generate(**enc, **kwargs)
                    bar.update(start + sampling.max_new_tokens - bar.n)  # a batch that stopped early: its budget done
                    new = out[:, enc["input_ids"].shape[1]:]
                    for row, ids in enumerate(new.tolist()):
                        ended = eos in ids
                        ids = ids[:ids.index(eos) + 1] if ended else [t for t in ids if t != pad]
                        text = self.tokenizer.decode(ids, skip_special_tokens=True)
                        truncated = not ended and len(ids) >= sampling.max_new_tokens
                        results[batch[row // sampling.n]].append(Generation(text, len(ids), truncated))
                    if on_result is not None:
                        for i in batch:
                            on_result(i, results[i])
        finally:
            self.model.train(was_training)
        return results
