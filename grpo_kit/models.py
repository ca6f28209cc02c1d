"""Policies: a tiny offline one built from nothing, and loading for transformers (+ peft) and Unsloth.

The tiny policy lets everything run on a CPU with no network: a small Qwen2-architecture
causal LM with random weights and a byte-level BPE tokenizer trained on the text you give
it (REFERENCE section 6: hidden 128, 4 layers, 4 heads / 2 KV heads, FFN 512, tied
embeddings, single-digit tokens, the four XML tags as tokens). Both are deterministic in
the seed. Real models load by Hub name or path on users' machines.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_kit.presets import LORA_TARGETS

__all__ = [
    "TinyPolicySpec",
    "build_tiny_policy",
    "check_adapter_trained",
    "cuda_available",
    "describe_device",
    "device_preset",
    "import_unsloth",
    "load_policy",
    "load_unsloth_policy",
    "placement",
    "require_cuda",
    "save_merged",
    "train_tiny_tokenizer",
]

# ChatML, the format of Qwen2 instruct models; `generation` markers are not needed because
# the kit trains on prompt/completion pairs.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
XML_TAG_TOKENS = ("<reasoning>", "</reasoning>", "<answer>", "</answer>")


@dataclass(frozen=True)
class TinyPolicySpec:
    """Shape of the tiny offline policy (defaults: REFERENCE section 6, about 1M parameters
    plus ``vocab_size * hidden_size`` for the tied embedding)."""

    vocab_size: int = 2048
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 512
    max_positions: int = 1024


def train_tiny_tokenizer(texts: Iterable[str], vocab_size: int = TinyPolicySpec.vocab_size) -> Any:
    """Train the tiny policy's byte-level BPE tokenizer on ``texts`` (deterministic).

    Returns:
        ``PreTrainedTokenizerFast`` with a ChatML chat template, left padding,
        ``eos_token="<|im_end|>"``, ``pad_token="<|endoftext|>"`` and the four XML tags as
        single (non-special) tokens.
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    tok = Tokenizer(models.BPE())
    # Exactly the normaliser and pre-tokeniser transformers' Qwen2Tokenizer rebuilds when the saved
    # policy is loaded back (the model is a Qwen2), so a reloaded tokenizer splits text the same
    # way as the one trained here: single digits, byte level (no unknown token).
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    # The XML tags are single tokens but not special ones: decoding with
    # skip_special_tokens=True (as TRL does) must keep them in the completion text.
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in XML_TAG_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        padding_side="left",
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_policy(texts: Iterable[str], seed: int = 0, spec: TinyPolicySpec = TinyPolicySpec()) -> tuple[Any, Any]:
    """Build a small causal LM and its tokenizer locally, with no network, deterministically.

    Args:
        texts: text to train the BPE tokenizer on (e.g. GSM8K questions and solutions plus
            the system prompt); iterated once.
        seed: seeds the weight initialisation (``torch.manual_seed``).
        spec: the model's shape.

    Returns:
        ``(model, tokenizer)``: a ``transformers.Qwen2ForCausalLM`` in float32 with random
        weights, and a ``PreTrainedTokenizerFast`` with a ChatML chat template, left padding,
        ``eos_token="<|im_end|>"``, ``pad_token="<|endoftext|>"``.
    """
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = train_tiny_tokenizer(texts, spec.vocab_size)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        max_position_embeddings=spec.max_positions,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    return model, tokenizer


def placement(trains_all_weights: bool = False) -> dict[str, Any]:
    """``from_pretrained`` keyword arguments for this machine.

    On CUDA the weights go over the GPUs (``device_map="auto"``) in bfloat16, except for full
    fine-tuning (``trains_all_weights``): there they stay float32 master weights and training
    autocasts to bfloat16 (``GRPOConfig.bf16``), as TRL does by default. AdamW at the seeds'
    learning rates (1e-6 .. 5e-6) on bfloat16 weights rounds most updates away (8 bits of mantissa:
    an update below about 0.4% of a weight is lost). LoRA keeps its frozen base in bfloat16 (peft
    holds the adapter in float32). Without CUDA: float32 on the CPU.

    >>> placement(trains_all_weights=True)["dtype"]
    'float32'
    """
    import torch

    if torch.cuda.is_available():
        return {"dtype": "float32" if trains_all_weights else "bfloat16", "device_map": "auto"}
    return {"dtype": "float32", "device_map": None}


def device_preset() -> str:
    """The preset that fits this machine's first GPU (:func:`grpo_kit.presets.preset_for_device`):
    ``colab-t4`` on a card without bfloat16 (Colab's default T4), ``a100`` on one with it, ``cpu-tiny``
    without CUDA."""
    import torch

    from grpo_kit.presets import preset_for_device

    if not torch.cuda.is_available():
        return preset_for_device(None)
    return preset_for_device(torch.cuda.get_device_name(0), torch.cuda.is_bf16_supported())


def describe_device() -> str:
    """One line saying what runs where on this machine and which preset fits (the notebooks' GPU check)."""
    import torch

    preset = device_preset()
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        why = "no bfloat16 on this card" if preset == "colab-t4" else "bfloat16 available"
        return (f"CUDA GPU: {props.name}, {props.total_memory / 2**30:.0f} GiB ({why}). The preset that fits: "
                f"'{preset}' (used when the parameters cell leaves preset = None).")
    return ("No CUDA GPU: everything runs on the CPU. The preset that fits: 'cpu-tiny' (the kit's tiny offline "
            "policy); the GPU presets need a CUDA GPU (on Colab: Runtime > Change runtime type > GPU).")


def load_policy(name_or_path: str | Path, dtype: str = "auto", device_map: str | None = None) -> tuple[Any, Any]:
    """Load a causal LM and its tokenizer with plain transformers (CPU or GPU, no Unsloth).

    A folder holding a peft LoRA adapter (``adapter_config.json``) loads its base model
    and the adapter on top, so an adapter saved by training evaluates as is.

    Args:
        name_or_path: a Hub id (users' machines) or a local folder.
        dtype: ``"auto"`` (the checkpoint's), or a torch dtype name such as ``"float32"``.
        device_map: passed to ``from_pretrained`` (e.g. ``"auto"`` on a GPU); ``None`` keeps CPU.

    Returns:
        ``(model, tokenizer)``; the tokenizer pads on the left (batched generation) and has
        a pad token (its EOS token when it had none).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(name_or_path)
    adapter = path.is_dir() and (path / "adapter_config.json").is_file()
    if adapter:
        from peft import AutoPeftModelForCausalLM

        model = AutoPeftModelForCausalLM.from_pretrained(str(path), dtype=dtype, device_map=device_map)
    else:
        model = AutoModelForCausalLM.from_pretrained(str(name_or_path), dtype=dtype, device_map=device_map)
    tokenizer = AutoTokenizer.from_pretrained(str(name_or_path))
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def cuda_available() -> bool:
    """Whether torch sees a CUDA GPU (imports torch, not transformers: safe before Unsloth)."""
    import torch

    return torch.cuda.is_available()


def require_cuda(what: str) -> None:
    """Raise a clear error when ``what`` (an Unsloth or vLLM feature) is asked for without a CUDA GPU.

    Raises:
        RuntimeError: no CUDA device; the message names the CPU alternative.
    """
    if not cuda_available():
        raise RuntimeError(f"{what} needs an NVIDIA GPU with CUDA, and none is visible here. On a CPU use the "
                           "transformers + peft path: preset 'cpu-tiny', or any preset with use_unsloth=False, "
                           "and grpo_kit.generation.TransformersBackend for evaluation.")


#: Modules Unsloth patches when it is imported; imported before it, they keep unpatched code.
UNSLOTH_PATCHES = ("transformers", "trl", "peft")


def import_unsloth() -> Any:
    """Import ``unsloth`` before transformers, TRL and peft (it patches them when imported); return it.

    The GPU path calls this first (:func:`grpo_kit.routes.prepare_stack`), so Unsloth's patches apply to
    everything the run uses: its loader, its generated ``GRPOTrainer`` and its memory savings.

    Raises:
        RuntimeError: one of :data:`UNSLOTH_PATCHES` was imported before Unsloth in this process (restart
            the Python process or notebook kernel and let the kit load the model first).
        ImportError: Unsloth is not installed (``pip install -r requirements.txt``).
    """
    import sys

    if "unsloth" not in sys.modules:
        early = [name for name in UNSLOTH_PATCHES if name in sys.modules]
        if early:
            raise RuntimeError(f"{', '.join(early)} was imported before unsloth in this process, so Unsloth's "
                               "patches would not apply to it (the GPU route's memory savings and its trainer). "
                               "Restart the Python process or notebook kernel and run the kit's cells in order; "
                               "in your own script call grpo_kit.models.import_unsloth() before anything imports "
                               "transformers, trl or peft.")
    import unsloth

    return unsloth


def load_unsloth_policy(model_name: str, max_seq_length: int = 512, load_in_4bit: bool = True,
                        lora_rank: int | None = 32, lora_alpha: int = 32,
                        target_modules: tuple[str, ...] = LORA_TARGETS,
                        fast_inference: bool = True, gpu_memory_utilization: float = 0.6,
                        seed: int = 3407) -> tuple[Any, Any]:
    """Load a policy through Unsloth: 4-bit or 16-bit LoRA (optionally with colocated vLLM), or full weights.

    What runs where (REFERENCE section 3; unsloth #2846, #3577):

    | route | LoRA 4-bit | LoRA 16-bit | full fine-tuning |
    | --- | --- | --- | --- |
    | Unsloth + colocated vLLM (``fast_inference=True``) | yes | yes | no |
    | Unsloth, generation with transformers | yes | yes | yes (``lora_rank=None``) |
    | transformers + TRL's colocated vLLM (``use_unsloth=False, use_vllm=True``) | no | yes | yes |

    ``unsloth`` is imported here (:func:`import_unsloth`), before transformers, TRL and peft.

    Args:
        model_name: Hub id or path; a folder holding a saved LoRA adapter loads its base model with the
            adapter on top (the trained policy, evaluated through the same loader as its baseline).
        max_seq_length: prompt plus completion, in tokens.
        load_in_4bit: QLoRA (bitsandbytes 4-bit base weights).
        lora_rank, lora_alpha, target_modules: the adapter; ``lora_rank=None`` trains all weights.
        fast_inference: colocate a vLLM engine sharing the weights (TRL then generates with it).
        gpu_memory_utilization: the share of GPU memory vLLM may take.
        seed: the adapter's initialisation.

    Returns:
        ``(model, tokenizer)``.

    Raises:
        RuntimeError: no CUDA GPU.
        ValueError: full fine-tuning with ``fast_inference`` (Unsloth cannot do it).
    """
    if lora_rank is None and fast_inference:
        raise ValueError("Unsloth cannot combine full fine-tuning with fast_inference: pass fast_inference=False")
    require_cuda("Unsloth")
    import_unsloth()  # first: it patches transformers, TRL and peft
    from unsloth import FastLanguageModel

    # A folder holding a saved adapter loads its base and the adapter (Unsloth reads adapter_config.json).
    saved_adapter = (Path(model_name) / "adapter_config.json").is_file()
    kwargs: dict[str, Any] = dict(model_name=model_name, max_seq_length=max_seq_length, load_in_4bit=load_in_4bit,
                                  fast_inference=fast_inference)
    if fast_inference:
        kwargs.update(max_lora_rank=lora_rank, gpu_memory_utilization=gpu_memory_utilization)
    if lora_rank is None and not saved_adapter:
        kwargs.update(full_finetuning=True)
    model, tokenizer = FastLanguageModel.from_pretrained(**kwargs)
    if lora_rank is not None and not saved_adapter:
        model = FastLanguageModel.get_peft_model(model, r=lora_rank, lora_alpha=lora_alpha,
                                                 target_modules=list(target_modules),
                                                 use_gradient_checkpointing="unsloth", random_state=seed)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def check_adapter_trained(path: str | Path) -> None:
    """Check that a saved LoRA adapter is not the untrained initialisation (all ``lora_B`` zero).

    peft starts every ``lora_B`` at zero, so an adapter saved before any effective step leaves
    the model unchanged: evaluating it measures the base model by mistake.

    Raises:
        FileNotFoundError: no ``adapter_model.safetensors`` in ``path``.
        ValueError: every ``lora_B`` weight is zero (or there is none).
    """
    from safetensors.torch import load_file

    file = Path(path) / "adapter_model.safetensors"
    if not file.is_file():
        raise FileNotFoundError(f"no LoRA adapter at {file}")
    weights = load_file(str(file))
    lora_b = [t for name, t in weights.items() if "lora_B" in name]
    if not lora_b or all(not t.any() for t in lora_b):
        raise ValueError(f"the adapter in {path} is all zeros (lora_B never moved): it would evaluate the base "
                         "model. Train for at least one step with a non-zero advantage, or check the learning rate.")


def save_merged(model: Any, tokenizer: Any, path: str | Path) -> Path:
    """Save base plus LoRA merged into one 16-bit model (for vLLM or the Hub); returns the folder.

    An Unsloth model uses its ``save_pretrained_merged(..., save_method="merged_16bit")``; a peft
    model is merged with ``merge_and_unload`` (which folds the adapter into the base in place:
    keep using the returned files, not ``model``); a plain model is saved as is.
    """
    path = Path(path)
    if hasattr(model, "save_pretrained_merged"):
        model.save_pretrained_merged(str(path), tokenizer, save_method="merged_16bit")
        return path
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    model.save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return path
