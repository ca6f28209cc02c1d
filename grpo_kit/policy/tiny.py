"""The kit's tiny offline policy: a small causal LM and its tokenizer, built from nothing, deterministically.

It lets everything run on a CPU with no network: a Qwen2-architecture model (hidden 128, 4 layers,
4 heads / 2 KV heads, FFN 512, tied embeddings) with random weights, and a byte-level BPE tokenizer
trained on the text you give it, with single-digit tokens and the answer format's four tags as
tokens. Both are deterministic in the seed. :mod:`grpo_kit.policy.warm_start` teaches it a task.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from grpo_kit.tasks.answer_format import TAGS

__all__ = ["CHAT_TEMPLATE", "DEFAULT_CACHE_DIR", "TinyPolicySpec", "build_tiny_policy", "train_tiny_tokenizer"]

#: Where the warm-started tiny policy is cached, relative to the working folder.
DEFAULT_CACHE_DIR = ".cache/grpo_kit"

# ChatML, the format of Qwen2 instruct models; `generation` markers are not needed because
# the kit trains on prompt/completion pairs.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


@dataclass(frozen=True)
class TinyPolicySpec:
    """Shape of the tiny offline policy: about 1M parameters plus ``vocab_size * hidden_size`` for the tied
    embedding (a Qwen2 small enough to train in minutes on two CPU cores)."""

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
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
                                                  pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    # The XML tags are single tokens but not special ones: decoding with
    # skip_special_tokens=True (as TRL does) must keep them in the completion text.
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAGS])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, padding_side="left")
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
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=spec.hidden_size,
                         intermediate_size=spec.intermediate_size, num_hidden_layers=spec.num_layers,
                         num_attention_heads=spec.num_heads, num_key_value_heads=spec.num_kv_heads,
                         max_position_embeddings=spec.max_positions, tie_word_embeddings=True, bos_token_id=None,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    return model, tokenizer
