"""The Unsloth route on a GPU: GRPO through Unsloth's LoRA, evaluation through its engine, saving and reloading.

Unsloth is imported first, at collection, before anything imports transformers (`make test-gpu`
runs this file in its own process).
"""

from __future__ import annotations

from grpo_kit.policy.loading import import_unsloth

from .conftest import HAS_UNSLOTH, HAS_VLLM, format_and_length, small_run, source_of

if HAS_UNSLOTH:
    import_unsloth()

import pytest  # noqa: E402
import torch  # noqa: E402

from grpo_kit.evaluation.scoring import evaluate  # noqa: E402
from grpo_kit.policy.generation import Sampling  # noqa: E402
from grpo_kit.policy.loading import check_adapter_trained, save_merged  # noqa: E402
from grpo_kit.policy.routes import eval_route, load_eval_backend  # noqa: E402
from grpo_kit.training.presets import get_preset  # noqa: E402
from grpo_kit.training.trainer import build_trainer, is_unsloth_trainer, save_policy  # noqa: E402

pytestmark = pytest.mark.skipif(not HAS_UNSLOTH, reason="unsloth is not installed")


def test_unsloth_lora_grpo_trains_evaluates_saves_and_reloads(random_llama, gsm8k_small, tmp_path):
    from trl import GRPOTrainer

    assert is_unsloth_trainer(GRPOTrainer)
    preset = get_preset("a100", model_name_or_path=str(random_llama), load_in_4bit=False, fast_inference=HAS_VLLM,
                        use_peft=True, lora_r=8, lora_alpha=16, vllm_gpu_memory_utilization=0.3, learning_rate=1e-4,
                        **small_run())
    model, tokenizer = source_of(preset).load(preset.loading)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    trainer = build_trainer(model, tokenizer, gsm8k_small, preset, format_and_length(), str(tmp_path / "out"))
    trainer.train()
    after = dict(trainer.model.named_parameters())
    assert any(not torch.equal(p, after[n].detach()) for n, p in before.items()), "the adapter did not change"

    adapter = save_policy(trainer, tokenizer, tmp_path / "adapter")
    check_adapter_trained(adapter)
    questions = gsm8k_small.select(range(8))
    if HAS_VLLM:  # the notebook route: the colocated engine, with the adapter as a LoRA request
        from grpo_kit.policy.vllm import UnslothVLLMBackend

        sampled = Sampling(temperature=1.0, n=4, max_new_tokens=16)
        result = evaluate(UnslothVLLMBackend(trainer.model, tokenizer, lora_path=adapter), questions, sampled,
                          cache=tmp_path / "cache.jsonl")
        assert len(result.records) == 32
    merged = save_merged(trainer.model, tokenizer, tmp_path / "merged")
    assert (merged / "config.json").is_file()


def test_unsloth_without_vllm_evaluates_before_and_after_through_unsloth(random_llama, gsm8k_small, tmp_path):
    """With fast_inference=False both sides load through Unsloth (not plain peft for the adapter)."""
    preset = get_preset("a100", model_name_or_path=str(random_llama), load_in_4bit=False, fast_inference=False,
                        use_peft=True, lora_r=8, lora_alpha=16, learning_rate=1e-4, **small_run())
    assert eval_route(preset.loading) == "unsloth"
    model, tokenizer = source_of(preset).load(preset.loading)
    trainer = build_trainer(model, tokenizer, gsm8k_small, preset, format_and_length(), str(tmp_path / "out"))
    trainer.train()
    adapter = save_policy(trainer, tokenizer, tmp_path / "adapter")
    questions, greedy = gsm8k_small.select(range(4)), Sampling(max_new_tokens=16)
    before = load_eval_backend(source_of(preset), preset.loading)
    after = load_eval_backend(source_of(preset), preset.loading, trained=adapter)
    assert before.route == after.route == "unsloth"
    assert hasattr(after.model, "for_inference"), "the trained adapter was not loaded through Unsloth"
    assert len(evaluate(after, questions, greedy).records) == len(evaluate(before, questions, greedy).records) == 4


def test_a_plain_trl_preset_is_refused_once_unsloth_replaced_the_trainer(random_llama, gsm8k_small, tmp_path):
    from grpo_kit.policy.loading import load_policy

    model, tokenizer = load_policy(random_llama, dtype="bfloat16", device_map="auto")
    preset = get_preset("a100", use_unsloth=False, load_in_4bit=False, fast_inference=False, use_peft=True, lora_r=8,
                        optim="adamw_torch", **small_run())
    with pytest.raises(ValueError, match="Unsloth was imported in this process"):
        build_trainer(model, tokenizer, gsm8k_small, preset, format_and_length(), str(tmp_path / "out"))
