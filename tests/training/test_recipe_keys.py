"""Every key a recipe or a command line can set is read or refused: each field of TRL's GRPOConfig and ModelConfig,
of trl grpo's and open-r1's script arguments and of the kit's own keys, set to a value other than its default,
reaches what it configures (the GRPOConfig train builds, the LoRA config, the loader's arguments, the kit's own
readers) or is refused, before anything loads, in one line naming it."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from grpo_kit.cli import main
from grpo_kit.policy.loading import transformers_load_kwargs, unsloth_load_kwargs, unsloth_peft_kwargs
from grpo_kit.tasks import get_task
from grpo_kit.training.algorithms import get_algorithm
from grpo_kit.training.checks import check_settings
from grpo_kit.training.plan import run_rewards
from grpo_kit.training.presets import _KIT_READS, Recipe, _defaults, _parser, get_preset
from grpo_kit.training.trainer import grpo_config, peft_config

REWARDS = get_task("gsm8k").reward_set()
#: The recipes each field is set in: cpu-tiny as LoRA on the transformers route with a named model, and the blog
#: post's a100 recipe (Unsloth, 4-bit, colocated vLLM) for the keys Unsloth's loader takes.
ROUTES = {"transformers": ("cpu-tiny", {"use_peft": True, "model_name_or_path": "Qwen/Qwen2.5-0.5B-Instruct"}),
          "unsloth": ("a100", {"bf16": False})}
#: Values for fields whose automatic other value (:func:`_other`) is not one TRL or the kit takes.
VALUES: dict[str, Any] = {
    "output_dir": "elsewhere", "per_device_train_batch_size": 16, "max_steps": 7, "lr_scheduler_type": "cosine",
    "lr_scheduler_kwargs": {"num_cycles": 0.4}, "optim": "adamw_torch", "optim_args": "betas=(0.9,0.95)",
    "optim_target_modules": ["attn"], "gradient_checkpointing_kwargs": {"use_reentrant": False},
    "torch_compile_backend": "inductor", "torch_compile_mode": "default", "liger_kernel_config": {"rope": True},
    "logging_steps": 2, "report_to": ["wandb"], "run_name": "mine", "project": "mine", "save_steps": 5,
    "save_total_limit": 2, "hub_token": "hf_x", "hub_model_id": "me/model", "hub_revision": "dev",
    "accelerator_config": {"split_batches": False}, "parallelism_config": None, "dataloader_prefetch_factor": 2,
    "dataloader_num_workers": 1, "ddp_backend": "gloo", "fsdp": "full_shard", "fsdp_config": {"version": 2},
    "deepspeed": {"zero_optimization": {"stage": 2}}, "debug": ["underflow_overflow"], "local_rank": 0,
    "model_init_kwargs": {"low_cpu_mem_usage": True}, "num_generations": 4, "max_completion_length": 32,
    "pad_to_multiple_of": 8, "generation_batch_size": 64, "steps_per_generation": 2, "top_k": 5,
    "generation_kwargs": {"temperature": 0.7}, "chat_template_kwargs": {"enable_thinking": False},
    "cache_implementation": "dynamic", "vllm_mode": "server", "vllm_model_impl": "transformers",
    "vllm_structured_outputs_regex": "<answer>.*</answer>", "vllm_server_base_url": "http://localhost:8000",
    "vllm_server_host": "localhost", "epsilon_high": 0.28, "importance_sampling_level": "sequence",
    "multi_objective_aggregation": "normalize_then_sum", "scale_rewards": "batch", "loss_type": "grpo",
    "vllm_importance_sampling_mode": "token_truncate", "log_completions_hub_repo": "me/completions",
    "transformers_continuous_batching_config": {"max_batch_tokens": 256}, "num_completions_to_print": 2,
    "vllm_max_model_length": 1024, "max_tool_calling_iterations": 3, "top_entropy_quantile": 0.2,
    "delta": 1.5, "off_policy_mask_threshold": 0.5, "vllm_importance_sampling_clip_min": 0.5,
    "vllm_importance_sampling_cap": 2.0, "min_p": 0.1, "data_seed": 7, "seed": 7, "eval_steps": 3,
    "model_revision": "v2", "dtype": "bfloat16", "attn_implementation": "sdpa", "lora_r": 4,
    "lora_target_modules": ["q_proj", "v_proj"], "lora_target_parameters": ["mlp.experts.gate_up_proj"],
    "lora_modules_to_save": ["lm_head"], "lora_task_type": "SEQ_CLS", "bnb_4bit_quant_type": "fp4",
    "bnb_4bit_quant_storage": "uint8", "algorithm": "gspo", "max_seq_length": 640, "max_prompt_tokens": 128,
    "dataset_answer_column": "answer", "answer_type": "number", "datasets": [{"path": "openai/gsm8k"}],
    "dataset_name": "openai/gsm8k", "dataset_config": "main", "dataset_train_split": "training",
    "dataset_test_split": "testing", "reward_model_name_or_path": "me/reward-model",
    "reward_funcs": ["correctness_reward_func", "xmlcount_reward_func"], "reward_weights": [2.0, 0.5],
    "dataset_prompt_column": "problem", "system_prompt": "Answer in <answer> tags.", "name": "another",
    "description": "mine", "model_name_or_path": "Qwen/Qwen2.5-1.5B-Instruct", "vllm_gpu_memory_utilization": 0.5,
    "temperature": 0.7, "learning_rate": 2e-5,
}
#: Keys set with others they are read with.
WITH = {"dataloader_prefetch_factor": {"dataloader_num_workers": 1}, "sync_ref_model": {"beta": 0.04},
        "log_completions_hub_repo": {"log_completions": True}, "use_vllm": {"use_cpu": False},
        "eval_steps": {"eval_strategy": "steps"}, "per_device_eval_batch_size": {"eval_strategy": "steps"},
        "eval_on_start": {"eval_strategy": "steps"}, "reward_weights": {"reward_funcs": VALUES["reward_funcs"]},
        **{k: {"dataset_name": "openai/gsm8k"} for k in ("dataset_config", "dataset_train_split", "dataset_test_split",
                                                          "dataset_prompt_column", "system_prompt",
                                                          "dataset_answer_column", "answer_type")}}


#: GRPOConfig keys a CPU test process cannot build a config with: what the machine has (a GPU, DeepSpeed) or the
#: launch is (its process group); train builds the config with them where they apply.
MACHINE = ("bf16", "fp16", "tf32", "deepspeed", "fsdp", "fsdp_config", "ddp_backend")
#: What TRL's config makes of a value given (transformers' TrainingArguments.__post_init__).
BUILT = {"include_num_input_tokens_seen": {True: "all"}}


def _loads(route: str) -> Callable[[Recipe], dict[str, Any]]:
    """What the policy's ``from_pretrained`` gets on a route."""
    if route == "unsloth":
        return lambda r: unsloth_load_kwargs(r.model, r.loading)
    return lambda r: transformers_load_kwargs(r.loading, {"dtype": "float32", "device_map": None})


def _adapter(route: str, name: str) -> Callable[[Recipe], Any]:
    """The adapter setting ``name`` (peft's ``LoraConfig`` on the transformers route, Unsloth's ``get_peft_model``
    argument on its own)."""
    if route == "unsloth":
        return lambda r: unsloth_peft_kwargs(r.loading).get(name)
    return lambda r: getattr(peft_config(r), name)


def readers(route: str) -> dict[str, Callable[[Recipe], Any]]:
    """Where the kit reads each key that does not reach ``GRPOConfig`` as it is, on ``route``: the value found there
    (compared with the value given)."""
    lora = {"lora_r": "r", "lora_alpha": "lora_alpha", "lora_dropout": "lora_dropout", "use_rslora": "use_rslora",
            "use_dora": "use_dora", "lora_target_modules": "target_modules",
            "lora_target_parameters": "target_parameters", "lora_modules_to_save": "modules_to_save"}
    loader = {"model_revision": "revision", "dtype": "dtype", "attn_implementation": "attn_implementation",
              "trust_remote_code": "trust_remote_code"}
    data = {"dataset_config": "name", "dataset_train_split": "train_split", "dataset_test_split": "test_split"}
    return {
        **{key: (lambda r, f=_adapter(route, name): _listed(f(r))) for key, name in lora.items()},
        **{key: (lambda r, arg=arg: _loads(route)(r)[arg]) for key, arg in loader.items()},
        "model_init_kwargs": lambda r: {"low_cpu_mem_usage": _loads(route)(r)["low_cpu_mem_usage"]},
        "use_peft": lambda r: r.lora_rank is not None and (r.use_unsloth or peft_config(r) is not None),
        "model_name_or_path": lambda r: r.model,
        "load_in_4bit": lambda r: r.loading.load_in_4bit and _loads(route)(r)["load_in_4bit"],
        # Unsloth's 4-bit loader always nests its quantization (unsloth/models/llama.py): true is what it does
        "use_bnb_nested_quant": lambda r: r.use_unsloth and _loads(route)(r)["load_in_4bit"],
        "use_unsloth": lambda r: r.loading.use_unsloth, "fast_inference": lambda r: r.loading.fast_inference,
        "max_seq_length": lambda r: _loads("unsloth")(r)["max_seq_length"],
        "max_prompt_tokens": lambda r: r.max_prompt_tokens,  # runs/train.py: drop_long_prompts
        "description": lambda r: r.description,
        "output_dir": lambda r: _said(r, "run folder: output_dir ").removesuffix(" (unless --run-dir names one)"),
        "algorithm": lambda r: next(n for n in (r.algorithm,) if get_algorithm(n).fields.items()
                                    <= r.grpo_kwargs("out", REWARDS.weights).items()),
        "eval_strategy": lambda r: r.eval_strategy_name, "eval_steps": lambda r: r.eval_steps,
        "eval_on_start": lambda r: "eval_strategy steps" in _said(r, "held-out accuracy every "),
        "per_device_eval_batch_size": lambda r: r.heldout_batch_size,
        "dataset_name": lambda r: r.data_task()["hub"]["path"],
        **{key: (lambda r, name=name: r.data_task()["hub"][name]) for key, name in data.items()},
        "dataset_prompt_column": lambda r: r.data_task()["question"],
        "dataset_answer_column": lambda r: r.data_task()["answer"],
        "answer_type": lambda r: r.data_task()["answer_type"],
        "system_prompt": lambda r: r.data_task()["system_prompt"],
        "reward_funcs": lambda r: list(run_rewards(r)),
        "reward_weights": lambda r: r.grpo_kwargs("out", list(run_rewards(r).values()))["reward_weights"],
    }


def _listed(value: Any) -> Any:
    return sorted(value) if isinstance(value, (set, list, tuple)) else value


def _said(recipe: Recipe, start: str) -> str:
    """The line of :meth:`Recipe.taken` that starts with ``start``, without it."""
    return next((line[len(start):] for line in recipe.taken() if line.startswith(start)), "")


def _other(name: str, default: Any, action: Any) -> Any:
    """A value of the field other than its default: :data:`VALUES`, else one of its type."""
    if name in VALUES:
        return VALUES[name]
    if action.choices:
        return next(c for c in action.choices if c != _text(default))
    kind = getattr(action.type, "__name__", "")  # the parser wraps an optional field's type, keeping its name
    if kind == "string_to_bool":
        return not default if default is not None else True
    if kind == "int":
        return 3 if default in (None, -1) else default + 1
    if kind == "float":
        return 0.5 if not default else default / 2
    return ["x"] if action.nargs == "+" else "x"


def _text(value: Any) -> Any:
    return getattr(value, "value", value)


FIELDS = sorted({f.name for kind in _parser().dataclass_types for f in dataclasses.fields(kind)
                 if f.name in _defaults()})


def _verdict(route: str, name: str) -> tuple[str, str]:
    """``("refused", message)`` or ``("read", where)`` for the field ``name`` set to another value on ``route``;
    fails the test where it is neither."""
    preset, base = ROUTES[route]
    action = next(a for a in _parser()._actions if a.dest == name and a.nargs != 0)
    value = _other(name, _defaults()[name], action)
    try:
        recipe = get_preset(preset, **{**base, **WITH.get(name, {}), name: value})
        check_settings(recipe, REWARDS)
    except ValueError as e:
        assert name in str(e) and "\n" not in str(e), (name, str(e))
        return "refused", str(e)
    given = recipe.settings[name]
    reader = readers(route).get(name)
    if reader is not None:
        found = reader(recipe)
        assert _listed(found) == _listed(given), (name, given, found)
        return "read", "the kit"
    assert name not in _KIT_READS, name
    if name in MACHINE:  # TRL's config takes them only on the machine or under the launch they name
        assert recipe.grpo_kwargs("out", REWARDS.weights)[name] == given, name
        return "read", "GRPOConfig's arguments"
    config = grpo_config(recipe, "out", REWARDS)
    built = BUILT[name][given] if name in BUILT else given
    assert _holds(getattr(config, name), built), (name, given, getattr(config, name))
    return "read", "GRPOConfig"


def _holds(found: Any, given: Any) -> bool:
    """Whether what TRL built from a value holds it: the value itself, or (a mapping given) an object or mapping with
    its keys' values (TRL and transformers turn some mappings into their own config objects)."""
    if isinstance(given, dict) and not isinstance(found, dict):
        return all(_holds(getattr(found, k), v) for k, v in given.items())
    if isinstance(given, dict):
        return all(_holds(found.get(k), v) for k, v in given.items())
    if isinstance(found, (list, tuple)):
        return [_text(f) for f in found] == list(given)
    return _text(found) == _text(given)


@pytest.mark.parametrize("name", FIELDS)
def test_every_key_is_read_or_refused_on_the_transformers_route(name):
    _verdict("transformers", name)


#: ModelConfig's keys and the kit's loading keys, on the route Unsloth loads.
UNSLOTH_FIELDS = [f.name for f in dataclasses.fields(_parser().dataclass_types[1])] + [
    "trust_remote_code", "model_init_kwargs", "max_seq_length", "fast_inference"]


@pytest.mark.parametrize("name", UNSLOTH_FIELDS)
def test_every_loading_key_is_read_or_refused_on_the_unsloth_route(name):
    _verdict("unsloth", name)


def test_the_lora_keys_reach_the_saved_adapter(tmp_path, tiny_policy_files, monkeypatch):
    """`--use_peft true --lora_r 4 --lora_dropout 0.3 --use_rslora true` trained an adapter whose
    adapter_config.json said lora_dropout 0.0 and use_rslora false: the kit built LoraConfig(r, alpha, targets)."""
    monkeypatch.chdir(tmp_path)
    argv = ["--use_peft", "true", "--lora_r", "4", "--lora_alpha", "8", "--lora_dropout", "0.3", "--use_rslora",
            "true", "--lora_target_modules", "q_proj", "v_proj", "--model_name_or_path", str(tiny_policy_files),
            "--max_steps", "1", "--per_device_train_batch_size", "4", "--num_generations", "2",
            "--max_completion_length", "8"]
    assert main(["train", "--preset", "cpu-tiny", "--run-dir", "run", "--train-size", "8", "--groups-per-step", "0",
                 *argv]) == 0
    saved = json.loads((tmp_path / "run" / "model" / "adapter_config.json").read_text())
    assert (saved["r"], saved["lora_alpha"], saved["lora_dropout"], saved["use_rslora"]) == (4, 8, 0.3, True)
    assert sorted(saved["target_modules"]) == ["q_proj", "v_proj"]


def test_the_tiny_policy_refuses_a_models_loading_keys():
    recipe = get_preset("cpu-tiny", argv=["--attn_implementation", "sdpa", "--dtype", "bfloat16"])
    with pytest.raises(ValueError, match=re.escape("attn_implementation 'sdpa', dtype 'bfloat16': the kit's tiny "
                                                   "policy (no model_name_or_path) loads as it was built")):
        check_settings(recipe, REWARDS, tiny_policy=True)
    check_settings(get_preset("cpu-tiny", argv=["--dtype", "float32"]), REWARDS, tiny_policy=True)


def test_a_recipe_files_trust_remote_code_runs_model_code_only_when_the_command_says_so(tmp_path, capsys):
    """trust_remote_code reaches the model's from_pretrained (as trl grpo passes it), so a recipe file saying it would
    run the model repository's Python: as for the modules its reward_funcs name, the command line must say it too."""
    recipe = tmp_path / "remote.yaml"
    recipe.write_text("trust_remote_code: true\nmodel_name_or_path: Qwen/Qwen2.5-0.5B-Instruct\n")
    for command in (["train", "--config", str(recipe), "--run-dir", str(tmp_path / "run")],
                    ["eval", "--before", "--config", str(recipe), "--run-dir", str(tmp_path / "run")]):
        assert main(command) == 2
        assert "trust_remote_code true in the recipe would run the model repository's own Python" in \
            capsys.readouterr().err
    assert get_preset(recipe, argv=["--trust_remote_code", "true"]).loading.model_kwargs["trust_remote_code"]
