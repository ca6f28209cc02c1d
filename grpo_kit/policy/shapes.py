"""A model's shape from its ``config.json``: parameter counts, LoRA sizes, KV cache per token, and a random-weight
copy on the ``meta`` device, without its weights or a network.

The kit ships the ``config.json`` of each preset's model (``model_configs/``, see its ``SOURCE.md``);
:func:`model_config` reads those, a local folder's, or a Hub model's already in the local Hugging Face cache.
The memory arithmetic of ``python -m grpo_kit plan`` (:mod:`grpo_kit.training.memory`) and the GPU proof
(``benchmarks/gpu_proof.py``) both start here. Decoder-only Llama-family models (Llama, Qwen2, Mistral) only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["SHIPPED", "ModelShape", "build_on_meta", "build_random", "model_config", "model_shape"]

_CONFIGS = Path(__file__).parent / "model_configs"

#: Hub ids whose ``config.json`` the kit ships (Unsloth's copies have the same architecture).
SHIPPED: dict[str, str] = {
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b-instruct.json",
    "meta-llama/Meta-Llama-3.1-8B-Instruct": "llama-3.1-8b-instruct.json",
    "unsloth/Meta-Llama-3.1-8B-Instruct": "llama-3.1-8b-instruct.json",
    "unsloth/Llama-3.1-8B-Instruct": "llama-3.1-8b-instruct.json",
    "Qwen/Qwen2.5-1.5B-Instruct": "qwen2.5-1.5b-instruct.json",
    "unsloth/Qwen2.5-1.5B-Instruct": "qwen2.5-1.5b-instruct.json",
    "Qwen/Qwen2.5-3B-Instruct": "qwen2.5-3b-instruct.json",
    "unsloth/Qwen2.5-3B-Instruct": "qwen2.5-3b-instruct.json",
}


def model_config(model: str | Path) -> dict[str, Any]:
    """The ``config.json`` of ``model`` as a dict: shipped with the kit (:data:`SHIPPED`), a local folder's, or
    a Hub model's from the local Hugging Face cache (never downloaded).

    Raises:
        LookupError: none of these has it (the message says how to give one).
    """
    if str(model) in SHIPPED:
        return json.loads((_CONFIGS / SHIPPED[str(model)]).read_text(encoding="utf-8"))
    folder = Path(model)
    if (folder / "config.json").is_file():
        return json.loads((folder / "config.json").read_text(encoding="utf-8"))
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(str(model), "config.json")
    except Exception:  # not a Hub id, or no huggingface_hub: the same answer as "not cached"
        cached = None
    if isinstance(cached, str) and Path(cached).is_file():
        return json.loads(Path(cached).read_text(encoding="utf-8"))
    raise LookupError(f"no config.json for {model!r}: the kit ships {', '.join(sorted(set(SHIPPED.values())))}; "
                      "pass a local model folder, or download the model's config.json into the Hugging Face cache "
                      "(`huggingface-cli download MODEL config.json`)")


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a decoder-only transformer (Llama, Qwen2, Mistral), read from its ``config.json``.

    Attributes:
        name: what it was read for (a Hub id or folder).
        model_type: ``config.json``'s ``model_type``.
        hidden_size, intermediate_size, num_layers, num_heads, num_kv_heads, head_dim, vocab_size: the
            architecture.
        tied: whether the output projection shares the input embedding's weights.
        qkv_bias: whether the query, key and value projections have a bias (Qwen2 does).
        max_positions: the context length the model was built for (``max_position_embeddings``).
    """

    name: str
    model_type: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    tied: bool
    qkv_bias: bool
    max_positions: int

    @classmethod
    def from_config(cls, config: dict[str, Any], name: str = "") -> ModelShape:
        """Read a ``config.json`` dict.

        Raises:
            ValueError: a key the arithmetic needs is missing (not a Llama-family decoder).
        """
        try:
            hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
            return cls(name=name, model_type=str(config.get("model_type", "")), hidden_size=hidden,
                       intermediate_size=int(config["intermediate_size"]),
                       num_layers=int(config["num_hidden_layers"]), num_heads=heads,
                       num_kv_heads=int(config.get("num_key_value_heads") or heads),
                       head_dim=int(config.get("head_dim") or hidden // heads), vocab_size=int(config["vocab_size"]),
                       tied=bool(config.get("tie_word_embeddings", False)),
                       qkv_bias=bool(config.get("attention_bias", config.get("model_type") == "qwen2")),
                       max_positions=int(config.get("max_position_embeddings", 0)))
        except KeyError as e:
            raise ValueError(f"{name or 'this config'} has no {e.args[0]!r}: the kit's arithmetic knows decoder-only "
                             "Llama-family models (Llama, Qwen2, Mistral)") from None

    def projections(self) -> dict[str, tuple[int, int]]:
        """Each decoder layer's linear projections: ``{name: (in_features, out_features)}``."""
        h, q, kv, i = self.hidden_size, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim, \
            self.intermediate_size
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}

    @property
    def linear_parameters(self) -> int:
        """Weights of the decoder layers' linear projections (what 4-bit loading quantizes), biases excluded."""
        return self.num_layers * sum(a * b for a, b in self.projections().values())

    @property
    def embedding_parameters(self) -> int:
        """The input embedding plus, untied, the output projection (both stay 16-bit under 4-bit loading)."""
        return self.vocab_size * self.hidden_size * (1 if self.tied else 2)

    @property
    def other_parameters(self) -> int:
        """Norms and biases: two norms a layer and a final one, and the query/key/value biases where there are."""
        bias = (self.num_heads + 2 * self.num_kv_heads) * self.head_dim if self.qkv_bias else 0
        return self.num_layers * (2 * self.hidden_size + bias) + self.hidden_size

    @property
    def parameters(self) -> int:
        """Every parameter (a tied output projection counted once), as ``model.num_parameters()`` counts them.

        >>> model_shape("Qwen/Qwen2.5-1.5B-Instruct").parameters
        1543714304
        """
        return self.linear_parameters + self.embedding_parameters + self.other_parameters

    def lora_parameters(self, rank: int, targets: tuple[str, ...] | list[str]) -> int:
        """A LoRA adapter's parameters: ``rank * (in + out)`` for each targeted projection of each layer.

        Raises:
            ValueError: a target that is not one of :meth:`projections`.
        """
        projections = self.projections()
        unknown = sorted(set(targets) - set(projections))
        if unknown:
            raise ValueError(f"LoRA targets {unknown} are not projections of {self.name} ({', '.join(projections)})")
        return self.num_layers * sum(rank * sum(projections[t]) for t in targets)

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """KV cache for one token, in bytes: keys and values of every layer's KV heads.

        >>> model_shape("meta-llama/Llama-3.1-8B-Instruct").kv_bytes_per_token() // 1024  # KiB, bfloat16
        128
        """
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_bytes


def model_shape(model: str | Path) -> ModelShape:
    """The :class:`ModelShape` of a Hub id or folder (:func:`model_config`).

    Raises:
        LookupError: no ``config.json`` for it here.
        ValueError: not a Llama-family decoder.
    """
    return ModelShape.from_config(model_config(model), str(model))


def build_random(model: str | Path | dict[str, Any], device: str = "meta", dtype: str | None = None,
                 seed: int = 0, **changes: Any) -> Any:
    """The model with random weights (transformers' own initialisation), built directly on ``device``.

    On ``meta`` every tensor has its shape and dtype and no memory: parameter counts at the real shapes
    on any machine. On ``"cuda"`` it is the GPU proof's model (``benchmarks/gpu_proof.py``): the published
    architecture and vocabulary without downloading a weight.

    Args:
        model: a Hub id or folder (:func:`model_config`), or a ``config.json`` dict.
        device: where the tensors are created (``"meta"``, ``"cpu"``, ``"cuda"``).
        dtype: ``"float32"``, ``"bfloat16"`` or ``"float16"`` (default: the config's ``torch_dtype``).
        seed: seeds the initialisation.
        **changes: ``config.json`` keys to replace (e.g. ``num_hidden_layers=2`` for a miniature).

    Returns:
        a ``transformers`` ``PreTrainedModel`` on ``device``.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = {**(dict(model) if isinstance(model, dict) else model_config(model)), **changes}
    dtype = dtype or config.get("torch_dtype") or "float32"
    hf_config = AutoConfig.for_model(**config)
    torch.manual_seed(seed)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(hf_config, dtype=getattr(torch, dtype))


def build_on_meta(model: str | Path | dict[str, Any]) -> Any:
    """The model on torch's ``meta`` device (:func:`build_random` there): every tensor's shape, no memory.

    Args:
        model: a Hub id or folder (:func:`model_config`), or a ``config.json`` dict.
    """
    return build_random(model, "meta")
