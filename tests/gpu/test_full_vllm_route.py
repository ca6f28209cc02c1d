"""Full fine-tuning with TRL's colocated vLLM, and vLLM in a subprocess for evaluation (GPU)."""

from __future__ import annotations

import pytest
import torch

from grpo_kit.evaluation.scoring import evaluate
from grpo_kit.policy.generation import Sampling
from grpo_kit.policy.routes import load_eval_backend
from grpo_kit.training.presets import get_preset
from grpo_kit.training.trainer import build_trainer

from .conftest import HAS_VLLM, format_and_length, small_run, source_of

pytestmark = pytest.mark.skipif(not HAS_VLLM, reason="vllm is not installed")


def test_full_finetuning_at_the_presets_learning_rate_moves_the_weights(random_llama, gsm8k_small, tmp_path):
    """At lr 1e-6, float32 master weights move; bfloat16 weights would round most updates away."""
    preset = get_preset("full-80gb", model_name_or_path=str(random_llama), vllm_gpu_memory_utilization=0.2,
                        **small_run())
    assert preset.learning_rate == 1e-6
    model, tokenizer = source_of(preset).load(preset.loading)
    assert next(model.parameters()).dtype == torch.float32
    before = model.model.layers[0].mlp.down_proj.weight.detach().clone()
    trainer = build_trainer(model, tokenizer, gsm8k_small, preset, format_and_length(), str(tmp_path / "out"))
    trainer.train()
    after = trainer.model.model.layers[0].mlp.down_proj.weight.detach()
    assert (after != before).float().mean() > 0.5


def test_subprocess_vllm_returns_its_gpu_memory(random_llama, gsm8k_small, tmp_path):
    from grpo_kit.policy.vllm import SubprocessVLLMBackend

    free_before, _ = torch.cuda.mem_get_info()
    backend = SubprocessVLLMBackend(random_llama, gpu_memory_utilization=0.3, max_model_len=768)
    questions = gsm8k_small.select(range(8))
    result = evaluate(backend, questions, Sampling(temperature=0.8, n=2, max_new_tokens=16),
                      cache=tmp_path / "cache.jsonl")
    assert len(result.records) == 16
    free_after, total = torch.cuda.mem_get_info()
    assert free_after > free_before - 0.05 * total  # the child's memory came back


def test_notebook_route_for_a_full_model_is_subprocess_vllm(random_llama, gsm8k_small):
    preset = get_preset("full-80gb", model_name_or_path=str(random_llama))
    backend = load_eval_backend(source_of(preset), preset.loading, trained=random_llama)
    assert backend.route == "vllm"
    result = evaluate(backend, gsm8k_small.select(range(4)), Sampling(max_new_tokens=16))
    assert len(result.records) == 4
