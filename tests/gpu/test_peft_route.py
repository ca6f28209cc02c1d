"""Plain transformers + peft LoRA GRPO on a GPU (no Unsloth in this process)."""

from __future__ import annotations

from grpo_kit.policy.loading import check_adapter_trained, load_policy
from grpo_kit.training.presets import get_preset
from grpo_kit.training.trainer import build_trainer, save_policy

from .conftest import format_and_length, small_run


def test_transformers_peft_grpo_on_gpu(random_llama, gsm8k_small, tmp_path):
    model, tokenizer = load_policy(random_llama, dtype="bfloat16", device_map="auto")
    preset = get_preset("a100", use_unsloth=False, load_in_4bit=False, fast_inference=False, use_peft=True, lora_r=8,
                        lora_alpha=16, optim="adamw_torch", learning_rate=1e-4, **small_run())
    trainer = build_trainer(model, tokenizer, gsm8k_small, preset, format_and_length(), str(tmp_path / "out"))
    assert hasattr(trainer.model, "peft_config")
    trainer.train()
    check_adapter_trained(save_policy(trainer, tokenizer, tmp_path / "adapter"))
