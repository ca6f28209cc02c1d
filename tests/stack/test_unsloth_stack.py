"""The Unsloth route against the real unsloth 2026.10.9 and trl 1.15.0 (CPU).

Unsloth is imported first, at collection, as the kit's GPU path does, and its TRL patch runs as
on a GPU: `import unsloth` calls ``PatchFastRL(FastLanguageModel=FastLlamaModel)``
(unsloth/models/llama.py), which under ``UNSLOTH_ALLOW_CPU=1`` returns before rewriting TRL
(unsloth/models/rl.py, ``PatchFastRL``); the fixture runs it again with the flag off, so ``from trl
import GRPOTrainer`` is the generated ``UnslothGRPOTrainer`` a GPU run trains with.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from grpo_kit.policy.loading import UNSLOTH_PATCHES, import_unsloth

from .conftest import hide_vllm_from_unsloth, length_reward

VLLM_HIDDEN = hide_vllm_from_unsloth()  # on a CPU without AVX-512 Unsloth's vLLM probe would die (conftest.py)
IMPORTED_BEFORE = [name for name in UNSLOTH_PATCHES if name in sys.modules]
import_unsloth()  # before anything imports transformers, TRL or peft

import pytest  # noqa: E402
import torch  # noqa: E402

from grpo_kit.tasks import RewardSet, get_task  # noqa: E402
from grpo_kit.training.algorithms import ALGORITHMS  # noqa: E402
from grpo_kit.training.checks import check_settings  # noqa: E402
from grpo_kit.training.groups import GroupsKept, keep_groups, read_groups, trl_completions_settings  # noqa: E402
from grpo_kit.training.presets import PRESETS, get_preset  # noqa: E402
from grpo_kit.training.trainer import build_trainer, grpo_config, is_unsloth_trainer  # noqa: E402

GSM8K = get_task("gsm8k")
FORMAT_AND_LENGTH = RewardSet(["strict_format_reward_func", length_reward])


def _patch_trl_as_on_a_gpu() -> None:
    from unsloth.models.llama import FastLlamaModel
    from unsloth.models.rl import PatchFastRL

    os.environ["UNSLOTH_ALLOW_CPU"] = "0"
    try:
        PatchFastRL(FastLanguageModel=FastLlamaModel)
    finally:
        os.environ["UNSLOTH_ALLOW_CPU"] = "1"


_patch_trl_as_on_a_gpu()


def _cpu(preset):
    """The preset as it can be validated on a CPU: no mixed precision (GRPOConfig checks for a GPU)."""
    return get_preset(preset, bf16=False, fp16=False)


def _unsloth_lora(model, rank=8):
    """A LoRA on ``model`` as Unsloth's ``get_peft_model`` leaves it: a peft model with Unsloth's
    ``for_training`` / ``for_inference`` bound. ``FastLanguageModel.from_pretrained``, which would add them,
    needs CUDA (see test_unsloths_loader_needs_cuda_at_one_call)."""
    import functools

    from peft import LoraConfig, get_peft_model
    from unsloth import FastLanguageModel

    peft_model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=rank, task_type="CAUSAL_LM",
                                                  target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                                  "up_proj", "down_proj"]))
    peft_model.for_training = functools.partial(FastLanguageModel.for_training, peft_model)
    peft_model.for_inference = functools.partial(FastLanguageModel.for_inference, peft_model)
    return peft_model


def test_unsloth_came_first_and_trl_trainer_is_unsloths():
    from trl import GRPOConfig, GRPOTrainer

    assert IMPORTED_BEFORE == []
    assert is_unsloth_trainer(GRPOTrainer)
    # Unsloth's generated config subclasses TRL's and takes its name (for pickling); a flag marks it
    assert getattr(GRPOConfig, "_unsloth_patched_rl_config", False)
    generated = Path(os.environ.get("UNSLOTH_COMPILE_LOCATION", "unsloth_compiled_cache")) / "UnslothGRPOTrainer.py"
    assert "if False:" in generated.read_text()  # where TRL's `if peft_config is not None:` stood
    # where this CPU cannot run vllm._C (conftest.py), Unsloth found no vLLM and loaded none of its kernels
    if VLLM_HIDDEN:
        assert sys.modules["vllm"] is None and not any(name.startswith("vllm.") for name in sys.modules)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_presets_config_builds_under_unsloths_config(name, tmp_path):
    preset = _cpu(PRESETS[name])
    config = grpo_config(preset, str(tmp_path), GSM8K.reward_set())
    assert getattr(type(config), "_unsloth_patched_rl_config", False) and hasattr(config, "unsloth_num_chunks")
    assert (config.per_device_train_batch_size, config.num_generations, config.max_completion_length,
            config.learning_rate, config.optim, config.max_steps, config.save_steps) == \
        (preset.per_device_train_batch_size, preset.num_generations, preset.max_completion_length,
         preset.learning_rate, preset.optim, preset.max_steps, preset.save_steps)
    assert config.reward_weights == [1.0] * len(GSM8K.rewards)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_algorithm_builds_under_unsloths_config_with_trl_1_15(name, tmp_path):
    preset = get_preset(_cpu(PRESETS["a100"]), algorithm=name)
    if name == "vespo":  # with vLLM, TRL's trainer takes VESPO only with a token-level correction: refused before
        with pytest.raises(ValueError, match="vllm_importance_sampling_mode"):
            check_settings(preset, GSM8K.reward_set())
        preset = get_preset(preset, vllm_importance_sampling_mode="token_truncate")
    config = grpo_config(preset, str(tmp_path), GSM8K.reward_set())
    for field, value in ALGORITHMS[name].fields.items():
        assert getattr(config, field) == value, (name, field)


def test_the_presets_values_reach_unsloths_trainer(tiny_policy, gsm8k_train_small, tmp_path):
    model, tokenizer = tiny_policy
    preset = get_preset(_cpu(PRESETS["a100"]), use_cpu=True, gradient_checkpointing=False)
    mix = {"strict_format_reward_func": 1.0, "correctness_reward_func": 2.0, "xmlcount_reward_func": 0.0}
    trainer = build_trainer(_unsloth_lora(model), tokenizer, gsm8k_train_small, preset, RewardSet(mix),
                            str(tmp_path))
    assert type(trainer).__name__ == "UnslothGRPOTrainer"
    args = trainer.args
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps, args.num_generations,
            args.max_completion_length, args.learning_rate, args.optim, args.temperature, args.beta) == \
        (8, 2, 8, 256, 5e-6, "paged_adamw_8bit", 1.0, 0.04)
    # GRPO as trl 0.15 ran it (the blog post's notebook): per-sequence averaging, k3 KL, sampling at 0.9
    assert (args.loss_type, args.scale_rewards, args.use_bias_correction_kl, args.generation_kwargs) == \
        ("grpo", "group", False, {"temperature": 0.9})
    assert args.reward_weights == [1.0, 2.0, 0.0] and args.lr_scheduler_type == "cosine"
    assert [f.__name__ for f in trainer.reward_funcs] == list(mix)


def test_the_lora_route_trains_only_the_adapter(tiny_policy, gsm8k_train_small, tmp_path):
    model, tokenizer = tiny_policy
    preset = get_preset(_cpu(PRESETS["a100"]), use_cpu=True, gradient_checkpointing=False)
    trainer = build_trainer(_unsloth_lora(model), tokenizer, gsm8k_train_small, preset, FORMAT_AND_LENGTH,
                            str(tmp_path))
    trainable = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert hasattr(trainer.model, "peft_config") and trainable and all("lora_" in n for n in trainable)


def test_full_finetuning_through_unsloths_trainer_trains_every_weight(tiny_policy, gsm8k_train_small, tmp_path):
    model, tokenizer = tiny_policy
    preset = get_preset(_cpu(PRESETS["a100"]), use_peft=False, fast_inference=False, use_cpu=True,
                        gradient_checkpointing=False)
    trainer = build_trainer(model, tokenizer, gsm8k_train_small, preset, FORMAT_AND_LENGTH, str(tmp_path))
    assert all(p.requires_grad for p in trainer.model.parameters())


def test_a_plain_trl_lora_route_after_unsloth_is_refused_not_silently_changed(tiny_policy, gsm8k_train_small,
                                                                               tmp_path):
    model, tokenizer = tiny_policy
    with pytest.raises(ValueError, match="Unsloth was imported in this process"):
        build_trainer(model, tokenizer, gsm8k_train_small, "cpu-tiny", FORMAT_AND_LENGTH, str(tmp_path),
                      use_peft=True, lora_r=8)
    assert not any(p.requires_grad is False for p in model.parameters())  # nothing was wrapped or frozen


# Never asks for vLLM: the model has no vllm_engine, so Unsloth's trainer generates through transformers, and what
# Unsloth generated at import is the same with vLLM hidden (only its OnlineDPO trainer's imports differ).
@pytest.mark.same_without_vllm
def test_unsloths_trainer_runs_grpo_steps_and_moves_the_adapter(tiny_policy, gsm8k_train_small, tmp_path):
    model, tokenizer = tiny_policy
    preset = get_preset(_cpu(PRESETS["a100"]), use_cpu=True, gradient_checkpointing=False, max_steps=2,
                        per_device_train_batch_size=4, num_generations=4, gradient_accumulation_steps=1,
                        max_completion_length=8, learning_rate=0.05, lr_scheduler_type="constant", warmup_steps=0,
                        optim="adamw_torch", save_steps=100, max_prompt_tokens=200)
    preset = get_preset(preset, **trl_completions_settings())  # what a run keeps
    lora = _unsloth_lora(model)
    before = {n: p.detach().clone() for n, p in lora.named_parameters() if p.requires_grad}
    keep = keep_groups(tmp_path / "groups", GroupsKept(), FORMAT_AND_LENGTH.names, FORMAT_AND_LENGTH.weights, 4)
    trainer = build_trainer(lora, tokenizer, gsm8k_train_small, preset, FORMAT_AND_LENGTH, str(tmp_path),
                            callbacks=[keep])
    trainer.args.disable_tqdm = True
    trainer.train()
    after = dict(trainer.model.named_parameters())
    moved = sum(not torch.equal(p, after[n].detach()) for n, p in before.items())
    assert moved == len(before), f"{moved} of {len(before)} adapter tensors changed"
    rewards = {row["step"]: row["reward"] for row in trainer.state.log_history if "reward" in row}
    assert list(rewards) == [1, 2]
    # Unsloth's generated trainer writes trl 1.15.0's completion log, which the run folder keeps per step
    groups = read_groups(tmp_path / "groups")
    assert groups.groupby("step").size().to_dict() == {1: 4, 2: 4}
    assert {"reward/strict_format_reward_func", "reward/length_reward", "advantage"} <= set(groups.columns)
    for step, rows in groups.groupby("step"):
        assert rows["total"].mean() == pytest.approx(rewards[step], abs=1e-5)


def test_unsloths_loader_needs_cuda_at_one_call(tiny_policy_files):
    """What a CPU cannot run: FastLanguageModel.from_pretrained reads the GPU's properties
    (unsloth/device_type.py get_device_stats -> torch.cuda.get_device_properties(0))."""
    import traceback

    from unsloth import FastLanguageModel

    with pytest.raises((AssertionError, RuntimeError)) as failure:
        FastLanguageModel.from_pretrained(str(tiny_policy_files), max_seq_length=512, load_in_4bit=False,
                                          fast_inference=False, dtype=torch.float32, use_gradient_checkpointing=False)
    frames = [frame.name for frame in traceback.extract_tb(failure.value.__traceback__)]
    assert "get_device_stats" in frames and "get_device_properties" in frames
    from grpo_kit.policy.loading import load_unsloth_policy

    with pytest.raises(RuntimeError, match="needs an NVIDIA GPU"):
        load_unsloth_policy(str(tiny_policy_files))


def test_the_recipes_loading_keys_are_named_arguments_of_unsloths_loader():
    """What the kit passes FastLanguageModel.from_pretrained and get_peft_model (a recipe setting every ModelConfig
    key Unsloth takes) are arguments of the pinned Unsloth's own signatures, not swallowed by their **kwargs: all
    but use_dora, which get_peft_model hands to peft's LoraConfig, where it is a field."""
    import dataclasses
    import inspect

    from peft import LoraConfig
    from unsloth import FastLanguageModel

    from grpo_kit.policy.loading import unsloth_load_kwargs, unsloth_peft_kwargs

    recipe = get_preset("a100", fast_inference=False, lora_dropout=0.1, use_rslora=True, use_dora=True,
                        lora_modules_to_save=["lm_head"], lora_target_parameters=["mlp.experts.gate_up_proj"],
                        model_revision="v2", dtype="float32", trust_remote_code=True)
    loaded = unsloth_load_kwargs(recipe.model, recipe.loading)
    assert set(loaded) <= set(inspect.signature(FastLanguageModel.from_pretrained).parameters)
    assert loaded["dtype"] is torch.float32 and loaded["revision"] == "v2" and loaded["trust_remote_code"]
    adapter = unsloth_peft_kwargs(recipe.loading)
    assert set(adapter) - {"use_dora"} <= set(inspect.signature(FastLanguageModel.get_peft_model).parameters)
    assert "use_dora" in {f.name for f in dataclasses.fields(LoraConfig)}
    assert (adapter["lora_dropout"], adapter["use_rslora"], adapter["use_dora"], adapter["modules_to_save"],
            adapter["target_parameters"]) == (0.1, True, True, ["lm_head"], ["mlp.experts.gate_up_proj"])


def test_unsloths_config_turns_off_the_metric_the_stale_weights_alarm_reads(tmp_path):
    """Unsloth's generated GRPOConfig defaults vllm_importance_sampling_correction to False
    (unsloth/models/rl.py), so TRL never logs the gap; the kit's plan says the alarm is not armed on that route."""
    from grpo_kit.training.callbacks import stale_weights_alarm

    config = grpo_config(_cpu(PRESETS["a100"]), str(tmp_path), GSM8K.reward_set())
    assert config.vllm_importance_sampling_correction is False
    assert stale_weights_alarm(PRESETS["a100"])["armed"] is False
    armed = get_preset(PRESETS["a100"], vllm_importance_sampling_correction=True)
    assert grpo_config(_cpu(armed), str(tmp_path), GSM8K.reward_set()).vllm_importance_sampling_correction
    assert stale_weights_alarm(armed)["armed"] is True


def test_plans_unsloth_changes_are_what_the_generated_trainer_does(tmp_path):
    """`plan` shows the GRPOConfig after Unsloth's changes (grpo_kit.training.builds.unsloth_changes): the generated
    trainer of the pinned Unsloth holds the same setters, and its config the same default."""
    from trl import GRPOConfig

    from grpo_kit.training.builds import unsloth_changes

    source = (Path(os.environ.get("UNSLOTH_COMPILE_LOCATION", "unsloth_compiled_cache"))
              / "UnslothGRPOTrainer.py").read_text()
    setter = source[source.index("if hasattr(model, 'vllm_engine') and hasattr(args, 'use_vllm'):"):][:2500]
    for line in ("args.use_vllm = True", "args.top_k = -1", "args.vllm_mode='colocate'"):
        assert line in setter, line
    changes = unsloth_changes(PRESETS["a100"], PRESETS["a100"].grpo_kwargs(str(tmp_path), GSM8K.reward_set().weights))
    assert changes["vllm_importance_sampling_correction"] == (None, GRPOConfig(
        output_dir=str(tmp_path), use_cpu=True).vllm_importance_sampling_correction)
    assert {field: new for field, (_, new) in changes.items()} == {
        "vllm_importance_sampling_correction": False, "use_vllm": True, "vllm_mode": "colocate", "top_k": -1}


@pytest.mark.same_without_vllm  # it hides vLLM itself
def test_eval_before_and_after_of_an_unsloth_preset_without_vllm_take_unsloths_route(tiny_policy_files, tmp_path,
                                                                                       monkeypatch):
    """On a runtime without vLLM `train` turned fast_inference off, but `eval --before` and `eval` still
    asked Unsloth for it, and the real Unsloth raises "Please install vLLM before enabling `fast_inference`" (unsloth
    2026.10.7 models/loader.py, FastLanguageModel.from_pretrained, before anything else). With vLLM hidden, the
    kit's commands run the a100 preset's baseline, two GRPO steps and the evaluation after through Unsloth's real
    loader without fast_inference, and record that route. Unsloth's loader then reads the GPU's properties, which a
    CPU has not: there (and only there) the tiny policy stands in, loaded by transformers."""
    import functools

    from peft import LoraConfig, get_peft_model
    from unsloth import FastLanguageModel

    import grpo_kit.policy.loading
    from grpo_kit.cli import main
    from grpo_kit.policy.loading import load_policy
    from grpo_kit.runs.folder import RunFolder

    monkeypatch.setitem(sys.modules, "vllm", None)  # absent: importlib.util.find_spec("vllm") answers None
    monkeypatch.setattr(grpo_kit.policy.loading, "require_cuda", lambda what: None)
    real = FastLanguageModel.from_pretrained
    asked = []

    def from_pretrained(**kwargs):
        asked.append(kwargs["fast_inference"])
        try:
            return real(**kwargs)  # Unsloth's own check of vLLM comes first
        except ImportError:
            raise
        except Exception:  # then it reads the GPU (get_device_stats): a CPU has none
            model, tokenizer = load_policy(kwargs["model_name"], dtype="float32")
            return model, tokenizer

    def lora(model, r, lora_alpha, target_modules, **kwargs):
        peft_model = get_peft_model(model, LoraConfig(r=r, lora_alpha=lora_alpha, target_modules=target_modules,
                                                      task_type="CAUSAL_LM"))
        peft_model.for_training = functools.partial(FastLanguageModel.for_training, peft_model)
        peft_model.for_inference = functools.partial(FastLanguageModel.for_inference, peft_model)
        return peft_model

    monkeypatch.setattr(FastLanguageModel, "from_pretrained", from_pretrained)
    monkeypatch.setattr(FastLanguageModel, "get_peft_model", lora)
    run = tmp_path / "run"
    common = ["--run-dir", str(run)]
    cpu = ["--load_in_4bit", "false", "--bf16", "false", "--use_cpu", "true", "--gradient_checkpointing", "false",
           "--max_completion_length", "8", "--max_prompt_tokens", "200"]
    assert main(["eval", "--before", "--preset", "a100", "--model_name_or_path", str(tiny_policy_files), "--eval-size",
                 "4", "--max-new-tokens", "8", *cpu, *common]) == 0
    assert RunFolder(run).read_json(RunFolder(run).eval_settings, "eval --before")["route"] == "unsloth"
    assert main(["train", "--preset", "a100", "--model_name_or_path", str(tiny_policy_files), "--max_steps", "2",
                 "--save_steps", "2", "--train-size", "8", "--rewards", "tests.stack.conftest:length_reward", *cpu,
                 "--per_device_train_batch_size", "4", "--num_generations", "4", "--gradient_accumulation_steps", "1",
                 "--learning_rate", "0.05", "--optim", "adamw_torch", "--warmup_steps", "0", "--lr_scheduler_type",
                 "constant", *common]) == 0
    assert main(["eval", "--trust-task-code", *common]) == 0  # the run records its own reward, length_reward
    assert (run / "report.md").is_file() and asked and not any(asked)  # never fast_inference


_FRESH_PROCESS = """
import sys
if sys.argv[2] == "hide-vllm":  # as tests/stack/conftest.py does where this CPU cannot run vllm._C
    sys.modules["vllm"] = None
from grpo_kit.training import presets
presets.cuda_available = lambda: True  # a GPU machine as far as the kit's order of imports goes
from grpo_kit.cli import main
from grpo_kit.runs.spec import RunSpec
code = main(["plan", "--preset", "a100", "--device", "a100-80gb"])
print("plan exit", code, "unsloth first:", "unsloth" in sys.modules)
try:
    RunSpec.resolve("cpu-tiny", task=None, run_dir=sys.argv[1], argv=["--use-unsloth"])
except ValueError as refused:
    print("resolve refused:", str(refused).split(":")[0])
print("vLLM modules loaded:", sorted({name.split(".")[0] for name in sys.modules if name.startswith("vllm.")}))
"""


def test_an_unsloth_recipe_imports_unsloth_before_trls_parser_on_a_gpu(tmp_path):
    """On a GPU with Unsloth installed, `plan --preset a100`, `train` and the notebooks stopped with "transformers,
    trl, peft was imported before unsloth": reading a recipe builds TRL's parser (it imports TRL), and `make_plan`
    imported the trainer's callbacks, before the kit imported Unsloth. `use_unsloth` is now read as written, before
    any parser, and Unsloth imported first. A fresh process, since this one imported Unsloth at its top; the tiny
    policy's refusal of Unsloth comes after the recipe phase, so reaching it shows that phase passed. Where this
    CPU cannot run ``vllm._C``, the fresh process hides vLLM as this one did (``import unsloth`` would die there)."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", _FRESH_PROCESS, str(tmp_path / "run"),
                           "hide-vllm" if VLLM_HIDDEN else "-"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "UNSLOTH_ALLOW_CPU": "1"})
    assert "plan exit 0 unsloth first: True" in done.stdout, done.stdout + done.stderr[-3000:]
    assert "resolve refused: the kit's tiny offline policy loads through transformers, never Unsloth" in done.stdout, \
        done.stdout + done.stderr[-3000:]
    if VLLM_HIDDEN:
        assert "vLLM modules loaded: []" in done.stdout, done.stdout
