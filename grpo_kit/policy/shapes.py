"""A model's shape from its ``config.json``: parameter counts, LoRA sizes, KV cache per token, counted on a copy
built on the ``meta`` device (every tensor's shape, no memory), without its weights or a network.

The kit ships the ``config.json`` of each preset's model (``model_configs/``, see its ``SOURCE.md``);
:func:`model_config` reads those, a local folder's, or a Hub model's already in the local Hugging Face cache.
The memory arithmetic of ``python -m grpo_kit plan`` (:mod:`grpo_kit.training.memory`) and the GPU proof
(``benchmarks/gpu_proof.py``) both start here. Any model transformers' ``AutoModelForCausalLM`` builds from its
``config.json`` (no ``trust_remote_code``: a config whose architecture needs a repository's code is refused).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["SHIPPED", "ModelShape", "build_random", "model_config", "model_shape"]

_CONFIGS = Path(__file__).parent / "model_configs"

#: Hub ids whose ``config.json`` the kit ships (Unsloth's copies have the same architecture).
SHIPPED: dict[str, str] = {
    **dict.fromkeys(("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Meta-Llama-3.1-8B-Instruct",
                     "unsloth/Meta-Llama-3.1-8B-Instruct", "unsloth/Llama-3.1-8B-Instruct"),
                    "llama-3.1-8b-instruct.json"),
    **dict.fromkeys(("Qwen/Qwen2.5-1.5B-Instruct", "unsloth/Qwen2.5-1.5B-Instruct"), "qwen2.5-1.5b-instruct.json"),
    **dict.fromkeys(("Qwen/Qwen2.5-3B-Instruct", "unsloth/Qwen2.5-3B-Instruct"), "qwen2.5-3b-instruct.json")}


def model_config(model: str | Path) -> dict[str, Any]:
    """The ``config.json`` of ``model`` as a dict: shipped with the kit (:data:`SHIPPED`), a local folder's, or
    a Hub model's from the local Hugging Face cache (never downloaded).

    Raises:
        LookupError: none of these has it (the message says how to give one).
    """
    path = _CONFIGS / SHIPPED[str(model)] if str(model) in SHIPPED else Path(model) / "config.json"
    if not path.is_file():
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(str(model), "config.json")
        except Exception:  # not a Hub id, or no huggingface_hub: the same answer as "not cached"
            cached = None
        path = Path(cached) if isinstance(cached, str) else path
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    raise LookupError(f"no config.json for {model!r}: the kit ships {', '.join(sorted(set(SHIPPED.values())))}; "
                      "pass a local model folder, or download the model's config.json into the Hugging Face cache "
                      "(`huggingface-cli download MODEL config.json`)")


@dataclass(frozen=True)
class ModelShape:
    """The sizes the memory and cost arithmetic needs, counted on the model built on the ``meta`` device.

    Any architecture transformers' ``AutoModelForCausalLM`` builds from its ``config.json`` (Llama, Qwen2, Mistral,
    Gemma, Phi-3 ...): the counts are the built model's own tensors, not a formula per architecture.

    Attributes:
        name: what it was read for (a Hub id or folder).
        parameters: every parameter, a tied output projection counted once (``model.num_parameters()``).
        linear_parameters: the weights of the ``nn.Linear`` layers but the output projection: what 4-bit loading
            quantizes (transformers keeps the output projection, embeddings, norms and biases 16-bit).
        linears: per linear layer's name (``q_proj``, ``qkv_proj`` ...), its ``in_features + out_features`` summed
            over the layers: a LoRA of rank ``r`` on it adds ``r`` times that.
        hidden_size, num_layers, vocab_size: from the (text) config.
        kv_per_token: key and value elements one token holds in the KV cache, all layers (``2 * num_layers *
            num_key_value_heads * head_dim``; 65,536 for Llama-3.1-8B: 128 KiB a token in bfloat16).
    """

    name: str
    parameters: int
    linear_parameters: int
    linears: dict[str, int]
    hidden_size: int
    num_layers: int
    vocab_size: int
    kv_per_token: int

    @classmethod
    def from_config(cls, config: dict[str, Any], name: str = "") -> ModelShape:
        """Count a ``config.json`` dict's model, built on the ``meta`` device (no memory, no weights).

        Raises:
            ValueError: transformers cannot build a causal language model from it (the message says why).
        """
        return _counted(json.dumps(config, sort_keys=True), name)

    def lora_parameters(self, rank: int, targets: str | tuple[str, ...] | list[str]) -> int:
        """A LoRA adapter's parameters: ``rank * (in + out)`` for each targeted linear layer of each layer.

        ``targets`` is peft's ``target_modules``: linear layers' names, or ``"all-linear"`` (every linear layer but
        the output projection). As peft does, a name matching no layer adds nothing, and none matching is refused
        (``peft/tuners/tuners_utils.py``: "Target modules ... not found in the base model").

        Raises:
            ValueError: no target is one of :attr:`linears`.
        """
        targets = list(self.linears) if targets == "all-linear" else [targets] if isinstance(targets, str) else targets
        if not set(targets) & set(self.linears):
            raise ValueError(f"LoRA targets {list(targets)} name no linear layer of {self.name} "
                             f"({', '.join(self.linears)}): set lora_target_modules")
        return rank * sum(self.linears.get(t, 0) for t in targets)


@functools.lru_cache(maxsize=32)
def _counted(config_json: str, name: str) -> ModelShape:
    """:meth:`ModelShape.from_config` of a config as JSON text (cached: plan asks for one shape several times)."""
    import torch

    try:
        model = build_random(json.loads(config_json))
    except Exception as e:  # transformers' own refusal: an unknown model_type, no causal-LM class, sizes that clash
        raise ValueError(f"{name or 'this config'}: transformers cannot build a causal language model from its "
                         f"config.json ({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
    text, output = model.config.get_text_config(), model.get_output_embeddings()
    linears: dict[str, int] = {}
    quantized = 0
    for module_name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and module is not output:
            key = module_name.rsplit(".", 1)[-1]
            linears[key] = linears.get(key, 0) + module.in_features + module.out_features
            quantized += module.weight.numel()
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    return ModelShape(name=name, parameters=model.num_parameters(), linear_parameters=quantized, linears=linears,
                      hidden_size=text.hidden_size, num_layers=text.num_hidden_layers, vocab_size=text.vocab_size,
                      kv_per_token=2 * text.num_hidden_layers * kv_heads * head_dim)


def model_shape(model: str | Path) -> ModelShape:
    """The :class:`ModelShape` of a Hub id or folder (:func:`model_config`).

    >>> model_shape("Qwen/Qwen2.5-1.5B-Instruct").parameters
    1543714304

    Raises:
        LookupError: no ``config.json`` for it here.
        ValueError: transformers cannot build a causal language model from it.
    """
    return ModelShape.from_config(model_config(model), str(model))


def build_random(model: str | Path | dict[str, Any], device: str = "meta", dtype: str | None = None) -> Any:
    """The model with random weights (transformers' own initialisation, seeded with 0), built directly on ``device``.

    On ``meta`` every tensor has its shape and dtype and no memory: parameter counts at the real shapes
    on any machine. On ``"cuda"`` it is the GPU proof's model (``benchmarks/gpu_proof.py``): the published
    architecture and vocabulary without downloading a weight.

    Args:
        model: a Hub id or folder (:func:`model_config`), or a ``config.json`` dict.
        device: where the tensors are created (``"meta"``, ``"cpu"``, ``"cuda"``).
        dtype: ``"float32"``, ``"bfloat16"`` or ``"float16"`` (default: the config's ``torch_dtype``).

    Returns:
        a ``transformers`` ``PreTrainedModel`` on ``device``.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = dict(model) if isinstance(model, dict) else model_config(model)
    torch.manual_seed(0)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(AutoConfig.for_model(**config),
                                                dtype=getattr(torch, dtype or config.get("torch_dtype") or "float32"))
