"""Generation during training: which engine each route uses, transformers' continuous batching on the CPU, and the
settings it refuses (grpo_kit.training.generators)."""

from __future__ import annotations

import pytest
import torch

from grpo_kit.tasks import RewardSet, get_task
from grpo_kit.training.checks import check_settings
from grpo_kit.training.generators import PrecisionKept, generator
from grpo_kit.training.plan import format_plan, make_plan
from grpo_kit.training.presets import get_preset
from grpo_kit.training.trainer import build_trainer

GSM8K = get_task("gsm8k")
#: The paged KV cache's size on a CPU (the kit refuses continuous batching there without one): 16 blocks of 256 tokens,
#: twice what 8 completions of up to 208 tokens take.
SIZES = {"num_blocks": 16, "max_batch_tokens": 512}
STEP = dict(per_device_train_batch_size=8, num_generations=4, max_completion_length=8, learning_rate=0.1,
            save_steps=100, use_peft=True, lora_r=4, lora_alpha=8, use_transformers_continuous_batching=True,
            transformers_continuous_batching_config=SIZES)


def continuous_batching_steps(model, tokenizer, data, output_dir, monkeypatch, steps=2, **overrides):
    """``steps`` GRPO steps of a LoRA on ``model`` generating through transformers' ``generate_batch``.

    Returns:
        ``(trainer, adapter before training, texts)``: ``texts`` holds, per ``generate_batch`` call, its tokens
        decoded and the completions the rewards were given, in order.
    """
    from transformers.generation.continuous_batching import ContinuousMixin

    texts = []
    generate_batch = ContinuousMixin.generate_batch

    def recorded(self, inputs, *args, **kwargs):
        outputs = generate_batch(self, inputs, *args, **kwargs)
        texts.append({"decoded": tokenizer.batch_decode([o.generated_tokens for o in outputs.values()],
                                                        skip_special_tokens=True), "scored": []})
        return outputs

    def length(completions, **kwargs):
        texts[-1]["scored"] += [c[0]["content"] for c in completions]
        return [float(len(c[0]["content"])) for c in completions]

    monkeypatch.setattr(ContinuousMixin, "generate_batch", recorded)
    trainer = build_trainer(model, tokenizer, data, "cpu-tiny", RewardSet(["strict_format_reward_func", length]),
                            str(output_dir), **{**STEP, "max_steps": steps, **overrides})
    trainer.args.disable_tqdm = True
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    return trainer, before, texts


def test_a_lora_trains_generating_through_continuous_batching_on_the_cpu(tiny_policy, gsm8k_train_small, tmp_path,
                                                                        monkeypatch):
    model, tokenizer = tiny_policy
    trainer, before, texts = continuous_batching_steps(model, tokenizer, gsm8k_train_small.select(range(16)),
                                                       tmp_path, monkeypatch)
    trainer.train()
    trained_through_continuous_batching(trainer, before, texts)


def trained_through_continuous_batching(trainer, before, texts, steps=2):
    """Checks of :func:`continuous_batching_steps`' steps (the stack suite runs one on trl 1.15.0 too)."""
    assert any(isinstance(c, PrecisionKept) for c in trainer.callback_handler.callbacks)
    after = dict(trainer.model.named_parameters())
    # step 1 moves lora_B (zero at the start, so lora_A has no gradient yet), step 2 lora_A as well
    still = [n for n, p in before.items() if torch.equal(p, after[n].detach())]
    assert still == ([] if steps > 1 else [n for n in before if "lora_A" in n])
    assert all("lora_" in n and after[n].dtype == torch.float32 for n in before)
    assert len(texts) == steps  # one generate_batch per step: its completions are the ones scored, as text
    for call in texts:
        assert call["scored"] == call["decoded"] and len(call["decoded"]) == 8
    assert any(text.strip() for call in texts for text in call["decoded"])


def test_the_precision_check_stops_the_step_trls_bf16_cast_would_round(tiny_policy, gsm8k_train_small, tmp_path,
                                                                      monkeypatch):
    """What check_generator refuses, built without the check: TRL casts the whole policy to bfloat16 before
    generate_batch, and the step stops before its optimizer update."""
    model, tokenizer = tiny_policy
    trainer, before, _ = continuous_batching_steps(model, tokenizer, gsm8k_train_small.select(range(8)), tmp_path,
                                                   monkeypatch, steps=1, bf16=True, check=False)
    with pytest.raises(RuntimeError, match=r"step 1: \d+ trained weights went from torch.float32 to torch.bfloat16"):
        trainer.train()
    after = dict(trainer.model.named_parameters())  # cast (rounded) by TRL, and no update applied
    assert trainer.state.global_step == 0 and not trainer.optimizer.state
    assert all(torch.equal(p.to(torch.bfloat16), after[n].detach()) for n, p in before.items())


@pytest.mark.parametrize("overrides, message", [
    ({"use_transformers_continuous_batching": False}, "without use_transformers_continuous_batching"),
    ({"transformers_continuous_batching_config": {"num_block": 4}}, "ContinuousBatchingConfig refuses it"),
    ({"transformers_continuous_batching_config": "use_cuda_graph"}, "is not a mapping"),
    ({"use_vllm": True, "use_cpu": False}, "TRL generates with vLLM when it is on"),
    ({"use_unsloth": True}, "Unsloth's attention does not read the paged KV cache"),
    ({"bf16": True}, "float32 LoRA adapter included"),
    ({"use_peft": False, "fp16": True}, "casts the whole policy to float16 .* float32 master weights"),
    ({"repetition_penalty": 1.1}, "drops RepetitionPenaltyLogitsProcessor"),
    ({"generation_kwargs": {"min_new_tokens": 4}}, "drops MinNewTokensLengthLogitsProcessor"),
    ({"transformers_continuous_batching_config": {"use_cuda_graph": True}},
     r'set transformers_continuous_batching_config \{"use_cuda_graph": true, "num_blocks": 8, "max_batch_tokens"'),
])
def test_continuous_batching_settings_that_cannot_work_are_refused_before_loading(overrides, message):
    preset = get_preset("cpu-tiny", **{**STEP, **overrides})
    with pytest.raises(ValueError, match=message):
        check_settings(preset, GSM8K.reward_set())


def test_a_full_fine_tuning_in_float32_keeps_its_weights_and_may_use_it():
    check_settings(get_preset("cpu-tiny", **{**STEP, "use_peft": False}), GSM8K.reward_set())


@pytest.mark.parametrize("name, overrides, engine", [
    ("a100", {}, "vLLM: Unsloth's colocated engine"), ("a100", {"fast_inference": False}, "Unsloth's generate"),
    ("full-80gb", {}, "vLLM: TRL's, colocate"), ("cpu-tiny", {}, "transformers generate")])
def test_each_route_names_its_generator(name, overrides, engine):
    assert generator(get_preset(name, **overrides))["name"].startswith(engine)


def test_plan_says_the_generator_with_its_basis():
    plan = make_plan("cpu-tiny", overrides=STEP)
    assert plan.generator == generator(get_preset("cpu-tiny", **STEP)) and not plan.problems
    text = format_plan(plan)
    assert "generation: transformers continuous batching (generate_batch, paged attention; no CUDA graphs on a CPU)" \
        in text and "'num_blocks': 16" in text
