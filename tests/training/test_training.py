"""Presets, config errors before any model is loaded, and GRPO runs on the tiny policy."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from grpo_kit.tasks import BUILTIN_REWARDS, RewardSet, get_task
from grpo_kit.tasks.rewards import SEED_REWARDS
from grpo_kit.training.checks import check_settings
from grpo_kit.training.presets import PRESETS, get_preset
from grpo_kit.training.trainer import build_trainer, grpo_config

GSM8K = get_task("gsm8k")


def test_a100_preset_is_the_blog_posts_recipe(tmp_path):
    preset = PRESETS["a100"]
    assert (preset.lora_rank, preset.lora_alpha, preset.load_in_4bit, preset.use_unsloth) == (32, 32, True, True)
    assert set(preset.lora_target_modules) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                               "down_proj"}
    assert (preset.max_seq_length, preset.max_prompt_tokens, preset.max_completion_length) == (512, 256, 256)
    # the rewards belong to the task now: GSM8K trains with the blog post's six, weight 1 each
    assert GSM8K.rewards == SEED_REWARDS and GSM8K.reward_set().names == list(SEED_REWARDS)
    assert not hasattr(preset, "rewards") and "reward_weights" not in preset.settings
    config = grpo_config(get_preset("a100", bf16=False), str(tmp_path), GSM8K.reward_set())  # bf16 needs a GPU
    assert config.learning_rate == 5e-6
    assert (config.adam_beta1, config.adam_beta2, config.weight_decay) == (0.9, 0.99, 0.1)
    assert config.warmup_steps == 0.1
    assert config.lr_scheduler_type == "cosine"
    assert config.optim == "paged_adamw_8bit"
    assert (config.gradient_accumulation_steps, config.num_generations, config.max_grad_norm) == (2, 8, 0.1)
    assert (config.max_completion_length, config.max_steps, config.logging_steps) == (256, 250, 1)
    assert config.reward_weights == [1.0] * len(SEED_REWARDS)


def test_overrides_reach_grpo_config(tmp_path):
    weighted = RewardSet(SEED_REWARDS, [1, 2, 3, 4, 5, 6])
    config = grpo_config(get_preset("cpu-tiny", max_steps=7), str(tmp_path), weighted)
    assert config.max_steps == 7
    assert config.reward_weights == [1, 2, 3, 4, 5, 6]
    assert config.use_cpu
    with pytest.raises(ValueError, match="weigh them in one place"):
        grpo_config(get_preset("cpu-tiny", reward_weights=[1, 2, 3, 4, 5, 6]), str(tmp_path), GSM8K.reward_set())


@pytest.mark.parametrize("rewards, weights, overrides, message", [
    (SEED_REWARDS, None, dict(per_device_train_batch_size=12),
     "generation_batch_size .12. must be divisible by num_generations"),
    (SEED_REWARDS, None, dict(num_generations=1, per_device_train_batch_size=4), "num_generations = 1 cannot work"),
    (("typo_reward",), None, {}, "unknown reward 'typo_reward'"),
    (SEED_REWARDS, None, dict(max_prompt_length=256), "max_prompt_tokens"),
    (SEED_REWARDS, None, dict(learning_rat=1e-5), r"unknown recipe key 'learning_rat' \(did you mean learning_rate"),
    (SEED_REWARDS, (1.0,), {}, "one weight per reward"),
    (SEED_REWARDS, (0,) * len(SEED_REWARDS), {}, "every reward weight is 0"),
    (SEED_REWARDS, None, dict(max_completion_length=0), "max_completion_length = 0 cannot work"),
])
def test_bad_settings_raise_before_loading(rewards, weights, overrides, message):
    with pytest.raises(ValueError, match=message):
        check_settings(get_preset("cpu-tiny", **overrides), RewardSet(rewards, weights))


def test_unknown_preset():
    with pytest.raises(ValueError, match="unknown preset 'h100'"):
        get_preset("h100")


def test_dataset_columns_are_checked():
    preset = get_preset("cpu-tiny")
    with pytest.raises(ValueError, match=r"column\(s\) \['answer'\]"):
        check_settings(preset, GSM8K.reward_set(), ["prompt"])
    with pytest.raises(ValueError, match="no 'prompt' column"):
        check_settings(preset, GSM8K.reward_set(), ["question", "answer"])
    check_settings(preset, RewardSet(["strict_format_reward_func"]), ["prompt"])


def test_build_trainer_checks_before_touching_the_model(gsm8k_train_small, tmp_path):
    class Untouchable:
        def __getattr__(self, name):
            raise AssertionError("the model was touched")

    with pytest.raises(ValueError, match=r"column\(s\) \['answer'\]"):
        build_trainer(Untouchable(), Untouchable(), gsm8k_train_small.remove_columns(["answer"]), "cpu-tiny",
                      GSM8K.reward_set(), str(tmp_path))


def text_length_reward(completions, **kwargs):
    """Varies across a random policy's completions, so advantages are non-zero (the blog post's six are all 0)."""
    return [float(len(c[0]["content"])) for c in completions]


def _snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_grpo_trains_the_tiny_policy_and_logs_every_reward(tiny_policy, gsm8k_train_small, tmp_path, lora):
    model, tokenizer = tiny_policy
    overrides = dict(max_steps=2, per_device_train_batch_size=8, num_generations=4, max_completion_length=8,
                     learning_rate=0.1, save_steps=100)
    if lora:
        overrides.update(use_peft=True, lora_r=4, lora_alpha=8)
    data = gsm8k_train_small.select(range(16))
    trainer = build_trainer(model, tokenizer, data, "cpu-tiny", RewardSet([*SEED_REWARDS, text_length_reward]),
                            str(tmp_path), **overrides)
    before = _snapshot(trainer.model)
    assert (any("lora_" in n for n in before)) == lora
    trainer.train()
    after = dict(trainer.model.named_parameters())
    changed = [n for n, p in before.items() if not torch.equal(p, after[n].detach())]
    # Every trainable parameter moves (TRL's own test); with a zero-reward-variance batch nothing would.
    assert changed == list(before), f"unchanged: {sorted(set(before) - set(changed))[:5]}"
    logged = {k for row in trainer.state.log_history for k in row}
    assert {f"rewards/{name}/mean" for name in SEED_REWARDS} <= logged


def test_custom_reward_function_drops_in(tiny_policy, gsm8k_train_small, tmp_path):
    model, tokenizer = tiny_policy

    trainer = build_trainer(model, tokenizer, gsm8k_train_small.select(range(8)), "cpu-tiny",
                            RewardSet(["strict_format_reward_func", text_length_reward]), str(tmp_path), max_steps=1,
                            per_device_train_batch_size=4, num_generations=4, max_completion_length=6)
    trainer.train()
    logged = {k for row in trainer.state.log_history for k in row}
    assert {"rewards/text_length_reward/mean", "rewards/strict_format_reward_func/mean"} <= logged
    assert "text_length_reward" not in BUILTIN_REWARDS  # a user's function is passed, never registered


def test_setup_wandb_never_prompts_and_never_blocks(monkeypatch, capsys, kit_log_on_stderr):
    import io
    import os
    import socket
    import time

    from grpo_kit.training.tracking import setup_wandb

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    assert setup_wandb(None) == "none"
    assert setup_wandb("proj", "disabled") == "none"
    assert setup_wandb("proj") == "wandb"
    assert os.environ["WANDB_MODE"] == "offline" and os.environ["WANDB_PROJECT"] == "proj"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    start = time.perf_counter()
    assert setup_wandb("proj") == "wandb"  # online asked for (a key), the server unreachable: offline, quickly
    assert os.environ["WANDB_MODE"] == "offline" and time.perf_counter() - start < 10
    assert "[grpo_kit] WARNING: wandb: http://127.0.0.1:9 is not reachable" in capsys.readouterr().err
    monkeypatch.setattr(socket, "create_connection", lambda address, timeout: io.BytesIO())  # a server that answers
    setup_wandb("proj")
    assert os.environ["WANDB_MODE"] == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")  # the user's own choice is kept
    assert setup_wandb("proj") == "none" and os.environ["WANDB_MODE"] == "disabled"
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert setup_wandb("proj") == "wandb" and os.environ["WANDB_MODE"] == "offline"
    with pytest.raises(ValueError, match="unknown"):
        setup_wandb("proj", "sometimes")


def test_an_offline_wandb_run_is_finished_whole_and_named_with_its_sync_command(tmp_path):
    """Issue 57: with WANDB_MODE=offline nothing said where the run went or how to `wandb sync` it, and wandb's
    debug log ended in an uncaught HandleAbandonedError: transformers never finishes the run, and wandb's exit hook
    lost its service first. The kit finishes it once training is over (in a process of its own, as a train is)."""
    import os
    import subprocess
    import sys

    child = ("import wandb\n"
             "from grpo_kit.training.tracking import finish_wandb\n"
             "run = wandb.init(project='p')\n"
             "run.log({'reward': 1.0})\n"
             "print(finish_wandb())\n"
             "assert wandb.run is None and finish_wandb() is None\n"
             "mine = wandb.init(project='p')\n"  # a run the user opened before training stays theirs
             "assert finish_wandb(kept=mine.id) is None and wandb.run is mine\n"
             "mine.finish()\n")
    done = subprocess.run([sys.executable, "-c", child], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"})
    assert done.returncode == 0, done.stderr
    folder = done.stdout.split(" into ", 1)[1].split(" ", 1)[0]
    assert Path(folder).parent == tmp_path / "wandb" and Path(folder).name.startswith("offline-run-")
    assert done.stdout.strip() == (f"wandb: the run was logged offline into {folder} (nothing was sent): upload it "
                                   f"with `wandb sync {folder}`")
    assert "HandleAbandonedError" not in (tmp_path / "wandb" / "debug.log").read_text()


def test_saved_lora_adapter_loads_back_for_evaluation(tiny_policy, tiny_policy_files, gsm8k_train_small, tmp_path):
    from grpo_kit.policy.loading import load_policy
    from grpo_kit.training.trainer import save_policy

    model, tokenizer = tiny_policy
    trainer = build_trainer(model, tokenizer, gsm8k_train_small.select(range(8)), "cpu-tiny",
                            RewardSet([text_length_reward]), str(tmp_path / "out"), max_steps=1,
                            per_device_train_batch_size=4, num_generations=4, max_completion_length=6, use_peft=True,
                            lora_r=4, lora_alpha=8, learning_rate=0.1)
    trainer.train()
    path = save_policy(trainer, tokenizer, tmp_path / "model")
    assert (path / "adapter_config.json").is_file()
    loaded, loaded_tokenizer = load_policy(path, dtype="float32")
    ids = tokenizer("2+2", return_tensors="pt")
    trained_logits = trainer.model.eval()(**ids).logits  # eval: no LoRA dropout (TRL's default lora_dropout 0.05)
    assert torch.allclose(loaded(**ids).logits, trained_logits, atol=1e-5)
    base, _ = load_policy(tiny_policy_files, dtype="float32")
    assert not torch.allclose(base(**ids).logits, trained_logits, atol=1e-5)  # the adapter is not a no-op


def test_preset_tokenizer_of_the_tiny_policy_is_deterministic(tmp_path):
    from grpo_kit.policy.source import PolicySource

    preset = get_preset("cpu-tiny")
    # a warm start other than the demo's, whose policy ships with the kit (and so has its tokenizer cached)
    source = PolicySource.of(preset.model, GSM8K, seed=preset.seed, warm_steps=7, cache_dir=str(tmp_path))
    assert source.tiny is not None and not source.tiny.cached  # trained here, without building the policy
    a, b = source.tokenizer(), source.tokenizer()
    assert a.get_vocab() == b.get_vocab()
    assert not source.tiny.cached
    assert a.convert_tokens_to_ids("<answer>") != a.unk_token_id


def test_a_saved_tiny_policy_tokenizes_exactly_like_the_one_that_trained(tiny_policy_files, gsm8k_train_small):
    """transformers rebuilds a Qwen2 tokenizer's pre-tokenizer on load: it must match training's."""
    from grpo_kit.policy.loading import load_policy
    from grpo_kit.policy.tiny import build_tiny_policy
    from grpo_kit.tasks.gsm8k import tokenizer_texts
    from tests.conftest import SMALL_SPEC

    _, trained_with = build_tiny_policy(tokenizer_texts(gsm8k_train_small, system_copies=5), seed=0, spec=SMALL_SPEC)
    _, reloaded = load_policy(tiny_policy_files)
    for row in gsm8k_train_small.select(range(20)):
        text = trained_with.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
        text += "<reasoning>\n48/2=24 and 1,234.5\n</reasoning>\n<answer>\n72\n</answer>"
        assert trained_with(text)["input_ids"] == reloaded(text)["input_ids"]
        assert reloaded.decode(reloaded(text)["input_ids"]) == text


def test_reward_set_weights_reach_grpo_config(tmp_path):
    mix = RewardSet({"correctness_reward_func": 2.0, "xmlcount_reward_func": 0.0, text_length_reward: 0.5})
    preset = get_preset("cpu-tiny")
    config = grpo_config(preset, str(tmp_path), GSM8K.reward_set())
    assert config.reward_weights == [1.0] * len(SEED_REWARDS)
    assert grpo_config(preset, str(tmp_path), mix).reward_weights == [2.0, 0.0, 0.5]
    weighted = RewardSet(("int_reward_func", "strict_format_reward_func"), (3, 0))
    assert grpo_config(preset, str(tmp_path), weighted).reward_weights == [3.0, 0.0]
    mapping = RewardSet({"int_reward_func": 3, "strict_format_reward_func": 0})  # a {reward: weight} mapping
    assert grpo_config(preset, str(tmp_path), mapping).reward_weights == [3.0, 0.0]
    with pytest.raises(ValueError, match="one weight per reward"):
        RewardSet(["int_reward_func"], weighted.weights)
    with pytest.raises(ValueError, match="nums"):
        check_settings(preset, RewardSet(["countdown_reward_func"]), ["prompt", "answer"])


def test_metric_only_reward_is_logged_but_does_not_move_the_advantage(tiny_policy_files, gsm8k_train_small, tmp_path):
    """Weight 0: the same training as without the reward (same seed, same samples), yet its metric is logged."""
    from grpo_kit.policy.loading import load_policy

    def noise_reward(completions, **kwargs):
        return [float(hash(c[0]["content"]) % 97) for c in completions]

    runs = {}
    for name, mix in {"alone": RewardSet([text_length_reward]),
                      "with metric-only": RewardSet({text_length_reward: 1.0, noise_reward: 0.0})}.items():
        torch.manual_seed(0)
        model, tokenizer = load_policy(tiny_policy_files, dtype="float32")
        trainer = build_trainer(model, tokenizer, gsm8k_train_small.select(range(8)), "cpu-tiny", mix,
                                str(tmp_path / name.replace(" ", "-")), max_steps=2,
                                per_device_train_batch_size=4, num_generations=4, max_completion_length=6,
                                learning_rate=0.05)
        trainer.train()
        runs[name] = (trainer.model.state_dict(), {k for row in trainer.state.log_history for k in row})
    (alone, alone_logged), (mixed, mixed_logged) = runs["alone"], runs["with metric-only"]
    assert "rewards/noise_reward/mean" in mixed_logged and "rewards/noise_reward/mean" not in alone_logged
    assert all(torch.equal(alone[k], mixed[k]) for k in alone)
    moved = load_policy(tiny_policy_files, dtype="float32")[0].state_dict()
    assert not all(torch.equal(moved[k], alone[k]) for k in alone)  # training did move the weights


def test_an_adapter_trained_from_a_relative_path_loads_from_any_working_folder(tiny_policy_files, gsm8k_train_small,
                                                                              tmp_path, monkeypatch):
    """The tiny policy loads from ``.cache/...`` (relative); the saved adapter must name its base absolutely."""
    import json

    from grpo_kit.policy.loading import load_policy
    from grpo_kit.training.trainer import save_policy

    monkeypatch.chdir(tiny_policy_files.parent)
    model, tokenizer = load_policy(tiny_policy_files.name, dtype="float32")
    trainer = build_trainer(model, tokenizer, gsm8k_train_small.select(range(8)), "cpu-tiny",
                            RewardSet([text_length_reward]), str(tmp_path / "out"), max_steps=1,
                            per_device_train_batch_size=4, num_generations=4, max_completion_length=6, use_peft=True,
                            lora_r=4, lora_alpha=8, learning_rate=0.1)
    trainer.train()
    path = save_policy(trainer, tokenizer, tmp_path / "model")
    base = json.loads((path / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert base == str(tiny_policy_files.absolute())
    monkeypatch.chdir(tmp_path)
    load_policy(path, dtype="float32")  # from another working folder


def test_a_resume_does_not_warn_of_tied_weights_the_checkpoint_holds_once(tiny_policy):
    """Case 20 of issue 44: every resume printed transformers' "missing keys ['lm_head.weight']", though the tiny
    policy's head is its embedding's tensor and loads whole."""
    import logging

    from grpo_kit.training.checkpoints import TiedKeysLoaded

    model, _ = tiny_policy
    assert model.lm_head.weight is model.get_input_embeddings().weight  # tied: saved once
    tied = TiedKeysLoaded(model)

    def said(message):
        return tied.filter(logging.LogRecord("transformers.trainer", logging.WARNING, __file__, 1, message, (), None))

    assert not said("There were missing keys in the checkpoint model loaded: ['lm_head.weight'].")
    assert said("There were missing keys in the checkpoint model loaded: ['lm_head.weight', "
                "'model.norm.weight'].")  # a key that is not tied is still said
    assert said("There were unexpected keys in the checkpoint model loaded: ['x'].")
