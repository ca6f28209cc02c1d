"""GRPO through Unsloth LoRA, evaluation through every available backend, saving and reloading (GPU)."""

from __future__ import annotations

import pytest
import torch

from grpo_kit.evaluation import evaluate
from grpo_kit.generation import Sampling, TransformersBackend
from grpo_kit.models import check_adapter_trained, load_policy, save_merged
from grpo_kit.training import build_trainer, get_preset, save_policy

from .conftest import HAS_UNSLOTH, HAS_VLLM


def length_reward(completions, **kwargs):
    return [float(len(c[0]["content"])) for c in completions]


def small_run(**overrides):
    base = dict(max_steps=3, per_device_train_batch_size=8, num_generations=4, max_completion_length=16,
                learning_rate=1e-3, max_prompt_tokens=512, max_seq_length=768, save_steps=1000, warmup_ratio=0.0)
    base.update(overrides)
    return base


@pytest.mark.skipif(not HAS_UNSLOTH, reason="unsloth is not installed")
def test_unsloth_lora_grpo_trains_evaluates_saves_and_reloads(random_llama, gsm8k_small, tmp_path):
    from grpo_kit.models import load_unsloth_policy

    preset = get_preset("a100", model=str(random_llama), load_in_4bit=False, fast_inference=HAS_VLLM, lora_rank=8,
                        lora_alpha=16, gpu_memory_utilization=0.3, **small_run())
    model, tokenizer = load_unsloth_policy(str(random_llama), max_seq_length=preset.max_seq_length,
                                           load_in_4bit=False, lora_rank=8, lora_alpha=16,
                                           fast_inference=HAS_VLLM, gpu_memory_utilization=0.3)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    trainer = build_trainer(model, tokenizer, gsm8k_small, preset, str(tmp_path / "out"),
                            reward_funcs=["strict_format_reward_func", length_reward])
    trainer.train()
    after = dict(trainer.model.named_parameters())
    assert any(not torch.equal(p, after[n].detach()) for n, p in before.items()), "the adapter did not change"

    adapter = save_policy(trainer, tokenizer, tmp_path / "adapter")
    check_adapter_trained(adapter)
    questions = gsm8k_small.select(range(8))
    greedy = Sampling(max_new_tokens=16)
    reloaded, reloaded_tokenizer = load_policy(adapter, dtype="bfloat16", device_map="auto")
    backend = TransformersBackend(reloaded, reloaded_tokenizer, progress=False)
    assert len(evaluate(backend, questions, greedy).records) == 8
    if HAS_VLLM:
        from grpo_kit.vllm_backend import UnslothVLLMBackend

        sampled = Sampling(temperature=1.0, n=4, max_new_tokens=16)
        result = evaluate(UnslothVLLMBackend(trainer.model, tokenizer, lora_path=adapter), questions, sampled,
                          cache=tmp_path / "cache.jsonl")
        assert len(result.records) == 32

    merged = save_merged(trainer.model, tokenizer, tmp_path / "merged")
    assert (merged / "config.json").is_file()


@pytest.mark.skipif(not HAS_VLLM, reason="vllm is not installed")
def test_subprocess_vllm_returns_its_gpu_memory(random_llama, gsm8k_small, tmp_path):
    from grpo_kit.vllm_backend import SubprocessVLLMBackend

    free_before, _ = torch.cuda.mem_get_info()
    backend = SubprocessVLLMBackend(random_llama, gpu_memory_utilization=0.3, max_model_len=768)
    questions = gsm8k_small.select(range(8))
    result = evaluate(backend, questions, Sampling(temperature=0.8, n=2, max_new_tokens=16),
                      cache=tmp_path / "cache.jsonl")
    assert len(result.records) == 16
    free_after, total = torch.cuda.mem_get_info()
    assert free_after > free_before - 0.05 * total  # the child's memory came back


def test_transformers_peft_grpo_on_gpu(random_llama, gsm8k_small, tmp_path):
    model, tokenizer = load_policy(random_llama, dtype="bfloat16", device_map="auto")
    preset = get_preset("a100", use_unsloth=False, load_in_4bit=False, fast_inference=False, lora_rank=8,
                        lora_alpha=16, optim="adamw_torch", **small_run())
    trainer = build_trainer(model, tokenizer, gsm8k_small, preset, str(tmp_path / "out"),
                            reward_funcs=["strict_format_reward_func", length_reward])
    trainer.train()
    check_adapter_trained(save_policy(trainer, tokenizer, tmp_path / "adapter"))


@pytest.mark.skipif(not HAS_VLLM, reason="vllm is not installed")
def test_full_finetuning_with_trl_colocated_vllm(random_llama, gsm8k_small, tmp_path):
    model, tokenizer = load_policy(random_llama, dtype="bfloat16", device_map="auto")
    preset = get_preset("full-80gb", model=str(random_llama), gpu_memory_utilization=0.2, **small_run())
    before = next(model.parameters()).detach().clone()
    trainer = build_trainer(model, tokenizer, gsm8k_small, preset, str(tmp_path / "out"),
                            reward_funcs=["strict_format_reward_func", length_reward])
    trainer.train()
    assert not torch.equal(before, next(trainer.model.parameters()).detach())


@pytest.mark.skipif(not HAS_VLLM, reason="vllm is not installed")
def test_notebook_route_for_a_full_model_is_subprocess_vllm(random_llama, gsm8k_small):
    from grpo_kit.training import load_eval_backend
    from grpo_kit.vllm_backend import SubprocessVLLMBackend

    backend = load_eval_backend("full-80gb", model=str(random_llama), trained=random_llama)
    assert isinstance(backend, SubprocessVLLMBackend)
    result = evaluate(backend, gsm8k_small.select(range(4)), Sampling(max_new_tokens=16))
    assert len(result.records) == 4
