"""GPU tests: skipped where CUDA is absent (`make test` on a CPU), run by `make test-gpu`.

`make test-gpu` installs requirements.txt into .venv-gpu and runs each route's file in its own
process (Unsloth replaces TRL's trainers for the rest of a process once imported). It sets
GRPO_KIT_REQUIRE_GPU_STACK=1, and then a missing GPU, Unsloth or vLLM fails the run instead of
skipping tests and "passing".

Models are real architectures built from configs with random weights (no Hub): a small Llama
and the kit's byte-level tokenizer with a chat template. Nothing here imports transformers at
module level, so the Unsloth route's file can import Unsloth first.
"""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

from grpo_kit.tasks.gsm8k import load_gsm8k, tokenizer_texts

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
HAS_VLLM = importlib.util.find_spec("vllm") is not None
HAS_UNSLOTH = importlib.util.find_spec("unsloth") is not None


def missing_gpu_stack() -> list[str]:
    """What `make test-gpu` needs and this machine lacks."""
    missing = [] if torch.cuda.is_available() else ["a CUDA GPU"]
    return missing + [name for name, present in (("unsloth", HAS_UNSLOTH), ("vllm", HAS_VLLM)) if not present]


def pytest_collection_modifyitems(items):
    if os.environ.get("GRPO_KIT_REQUIRE_GPU_STACK") == "1" and missing_gpu_stack():
        raise pytest.UsageError(f"make test-gpu needs {', '.join(missing_gpu_stack())}: nothing was tested "
                                "(install requirements.txt on a CUDA machine)")
    for item in items:
        if "tests/gpu" in str(item.fspath):
            item.add_marker(pytest.mark.gpu)
            item.add_marker(requires_cuda)


@pytest.fixture(scope="session")
def gsm8k_small():
    return load_gsm8k("train").select(range(64))


@pytest.fixture(scope="session")
def random_llama(tmp_path_factory, gsm8k_small):
    """A 2-layer Llama with random weights and the kit's tokenizer, saved as a checkpoint folder."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from grpo_kit.policy.tiny import train_tiny_tokenizer

    tokenizer = train_tiny_tokenizer(tokenizer_texts(gsm8k_small, system_copies=5), vocab_size=1024)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=256, intermediate_size=688, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None,
                         tie_word_embeddings=False)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    path = tmp_path_factory.mktemp("random-llama")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def length_reward(completions, **kwargs):
    """Varies across a random policy's completions, so every group has a non-zero advantage."""
    return [float(len(c[0]["content"])) for c in completions]


def format_and_length():
    """The rewards the GPU routes train with: the strict format and :func:`length_reward`."""
    from grpo_kit.tasks import RewardSet

    return RewardSet(["strict_format_reward_func", length_reward])


def source_of(preset):
    """Where ``preset``'s policy comes from (its model: the tests' random Llama)."""
    from grpo_kit.policy.source import PolicySource
    from grpo_kit.tasks import get_task

    return PolicySource.of(preset.model, get_task("gsm8k"), seed=preset.seed)


def small_run(**overrides):
    """Recipe overrides for a few quick steps on the random Llama."""
    base = dict(max_steps=3, per_device_train_batch_size=8, num_generations=4, max_completion_length=16,
                max_prompt_tokens=512, max_seq_length=768, save_steps=1000, warmup_steps=0)
    base.update(overrides)
    return base
