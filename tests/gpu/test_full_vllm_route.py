"""Full fine-tuning with TRL's colocated vLLM, and vLLM in a subprocess for evaluation (GPU)."""

from __future__ import annotations

import pytest
import torch

from grpo_kit.evaluation import evaluate
from grpo_kit.generation import Sampling
from grpo_kit.presets import get_preset
from grpo_kit.routes import load_eval_backend, load_preset_policy
from grpo_kit.training import build_trainer

from .conftest import HAS_VLLM, length_reward, small_run

pytestmark = pytest.mark.skipif(not HAS_VLLM, reason="vllm is not installed")


def test_full_finetuning_at_the_presets_learning_rate_moves_the_weights(random_llama, gsm8k_small, tmp_path):
    """Defect 2: at lr 1e-6, float32 master weights move; bfloat16 weights would round most updates away."""
    preset = get_preset("full-80gb", model=str(random_llama), gpu_memory_utilization=0.2, **small_run())
    assert preset.learning_rate == 1e-6
    model, tokenizer = load_preset_policy(preset)
    assert next(model.parameters()).dtype == torch.float32
    before = model.model.layers[0].mlp.down_proj.weight.detach().clone()
    trainer = build_trainer(model, tokenizer, gsm8k_small, preset, str(tmp_path / "out"),
                            reward_funcs=["strict_format_reward_func", length_reward])
    trainer.train()
    after = trainer.model.model.layers[0].mlp.down_proj.weight.detach()
    assert (after != before).float().mean() > 0.5


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


def test_notebook_route_for_a_full_model_is_subprocess_vllm(random_llama, gsm8k_small):
    backend = load_eval_backend("full-80gb", model=str(random_llama), trained=random_llama)
    assert backend.route == "vllm"
    result = evaluate(backend, gsm8k_small.select(range(4)), Sampling(max_new_tokens=16))
    assert len(result.records) == 4
