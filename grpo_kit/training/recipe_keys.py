"""What becomes of a recipe key that is not simply passed on to TRL's ``GRPOConfig``.

Every key a recipe or a command line gives is read or refused, never accepted and ignored:

- :data:`RENAMED`: a name TRL, transformers or the kit used before for the same setting (``torch_dtype`` is TRL's
  ``dtype`` now) is read under today's name, and said in one line.
- :data:`STALE`: a key they removed, or one of open-r1's own script, is named with what to write instead.
- :func:`unread`: a value the kit would not act on (TRL's own evaluation, a checkpoint strategy other than steps, a
  LoRA option Unsloth cannot take, ...) is named with why and what to write.

:func:`grpo_kit.training.presets.get_preset` gathers all of a recipe's in one message, so an old recipe (open-r1's
``recipes/*/grpo/config_demo.yaml``) is put right in one pass. What the kit reads of a ``GRPOConfig``,
``ModelConfig`` and script key is in docs/how-to/presets.md.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["DATA_KEYS", "RENAMED", "STALE", "read_keys", "refusals", "renamed_argv", "unread"]


def _below_one(value: Any) -> bool:
    try:
        return 0 <= float(value) < 1
    except (TypeError, ValueError):
        return False


def _one_config(value: Any) -> dict[str, Any] | None:
    names = value if isinstance(value, (list, tuple)) else [value]
    return {"dataset_config": names[0]} if len(names) == 1 and isinstance(names[0], str) else None


def _lora_rank(value: Any) -> dict[str, Any]:
    none = value is None or str(value).lower() in ("none", "null")
    return {"use_peft": False} if none else {"use_peft": True, "lora_r": value}


#: Old names read as today's: each gives today's keys and values for the value given, or ``None`` for a value they
#: cannot say (the key is then refused with its :data:`STALE` text). warmup_ratio: transformers 5 reads a
#: ``warmup_steps`` below 1 as the share of the steps.
RENAMED: dict[str, Callable[[Any], dict[str, Any] | None]] = {
    "torch_dtype": lambda v: {"dtype": v},
    "warmup_ratio": lambda v: {"warmup_steps": v} if _below_one(v) else None,
    "dataset_configs": _one_config,
    "hub_model_revision": lambda v: {"hub_revision": v},
    "wandb_log_unique_prompts": lambda v: {"log_unique_prompts": v},
    "model": lambda v: {"model_name_or_path": v},
    "gpu_memory_utilization": lambda v: {"vllm_gpu_memory_utilization": v},
    "lora_rank": _lora_rank,
}

_WANDB = "open-r1's; wandb reads it from the environment: write it in the recipe's env: block (env: {{{}: ...}})"
_OPEN_R1 = "a key of open-r1's own script ({}), which trl grpo and the kit do not have: drop it"
#: Keys TRL, transformers or the kit removed, and open-r1's own: what to write instead.
STALE: dict[str, str] = {
    "max_prompt_length": "removed from TRL's GRPOConfig in 0.28: set {max_prompt_tokens} (the kit drops longer "
                         "prompts from the data set rather than cutting them)",
    "overwrite_output_dir": "removed in transformers 5: drop it (a run folder is never overwritten; --resume "
                            "continues one)",
    "vllm_device": "removed from TRL's GRPOConfig: its vLLM runs on the training GPUs ({vllm_mode} colocate) or as a "
                   "server on GPUs of its own ({vllm_mode} server, trl vllm-serve): drop it",
    "warmup_ratio": "removed in transformers 5: write {warmup_steps} (below 1 a share of the steps, e.g. 0.1; from 1 "
                    "a number of steps)",
    "dataset_configs": "write {dataset_config} NAME: the kit trains on one configuration of one data set",
    "num_processes": "the launcher decides: accelerate launch --num_processes N (configs/accelerate/*.yaml)",
    "extra": "write its GRPOConfig keys themselves",
    "chat_template": "open-r1's; the kit formats prompts with the tokenizer's own chat template: save the tokenizer "
                     "with yours (tokenizer.chat_template = ...; save_pretrained) beside the model and name that "
                     "folder with {model_name_or_path}",
    "wandb_project": _WANDB.format("WANDB_PROJECT"),
    "wandb_entity": _WANDB.format("WANDB_ENTITY"),
    "wandb_run_group": _WANDB.format("WANDB_RUN_GROUP"),
    "dataset_mixture": "open-r1's mixture of data sets: the kit trains on one task; name one data set with "
                       "{dataset_name}, or give a task file with --task",
    **{key: _OPEN_R1.format("its Hub revision callbacks") for key in (
        "callbacks", "overwrite_hub_revision", "push_to_hub_revision")},
    "benchmarks": _OPEN_R1.format("its evaluation after training; python -m grpo_kit eval measures the trained "
                                  "policy"),
    **{key: _OPEN_R1.format("a parameter of its own rewards: cosine, repetition, code execution, soft overlong")
       for key in ("cosine_min_value_wrong", "cosine_max_value_wrong", "cosine_min_value_correct",
                   "cosine_max_value_correct", "cosine_max_len", "repetition_n_grams", "repetition_max_penalty",
                   "code_language", "code_eval_test_batch_size", "code_eval_scoring_mode", "code_provider",
                   "ioi_provider", "e2b_router_url", "morph_router_url", "parallel_code_exec_per_proc",
                   "max_completion_len", "soft_punish_cache")},
}


def _spelled(text: str, dash: str) -> str:
    """``{key}`` in a text of :data:`STALE` spelled as the place the key was given in spells keys (``key`` or
    ``--key``)."""
    return re.sub(r"(?<!{){(\w+)}(?!})", dash + r"\1", text).replace("{{", "{").replace("}}", "}")


def read_keys(values: Mapping[str, Any], known: Sequence[str]) -> tuple[dict[str, Any], list[str], list[str]]:
    """``values`` (a recipe file's keys, or a call's) as today's keys (the command line's: :func:`renamed_argv`).

    Args:
        values: the keys given, with their values as given.
        known: every key a recipe can hold (TRL's parser's).

    Returns:
        ``(values, notices, problems)``: the keys read (renamed ones under today's name), what was renamed (for one
        line of notice), and one clause per key refused (gone, or unknown with the closest known key).
    """
    read: dict[str, Any] = {}
    notices, problems = [], []
    for key, value in values.items():
        now = RENAMED[key](value) if key in RENAMED else None
        if now is not None:
            if clash := [k for k in now if k in values]:
                problems.append(f"recipe keys {key!r} and {clash[0]!r} say the same: keep {clash[0]!r}")
                continue
            read.update(now)
            notices.append(f"{key} as {' and '.join(now)}")
        elif key in known:
            read[key] = value
        else:
            problems += refusals([key], known)
    return read, notices, problems


def refusals(keys: Sequence[str], known: Sequence[str], dash: str = "") -> list[str]:
    """One clause for each of ``keys`` (none of them a key ``known`` or :data:`RENAMED` reads): a key that is gone
    (:data:`STALE`) with what to write instead, else an unknown key with the closest known one."""
    found = []
    for key in keys:
        spelled = dash + key if dash else repr(key)
        if key in STALE:
            found.append(f"recipe key {spelled} is gone: " + _spelled(STALE[key], dash))
        else:
            close = difflib.get_close_matches(key, known, n=1)
            found.append(f"unknown recipe key {spelled}" + (f" (did you mean {dash}{close[0]}?)" if close else ""))
    return found


def renamed_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``argv`` (TRL's command-line form) with each old key of :data:`RENAMED` written as today's (``--torch_dtype
    bfloat16`` as ``--dtype bfloat16``), and the notices; other tokens as they are (a value today's keys cannot say
    is left for the parser to refuse as the old key)."""
    out, notices, i = [], [], 0
    while i < len(argv):
        token = argv[i]
        option, eq, value = token.partition("=")
        key = option[2:].replace("-", "_") if option.startswith("--") else ""
        if key not in RENAMED:
            out.append(token)
            i += 1
            continue
        taken = [value] if eq else []
        i += 1
        while not eq and i < len(argv) and not argv[i].startswith("--"):
            taken.append(argv[i])
            i += 1
        now = RENAMED[key](taken[0] if len(taken) == 1 else taken)
        if now is None:
            out += [token, *([] if eq else taken)]
            continue
        for new, given in now.items():
            out += [f"--{new}", *(given if isinstance(given, list) else [str(given).lower() if isinstance(given, bool)
                                                                          else str(given)])]
        notices.append(f"--{key} as {' and '.join('--' + k for k in now)}")
    return out, notices


#: ``GRPOConfig`` keys only TRL's own evaluation reads (``Trainer.evaluate``), which the kit leaves out: it measures
#: held-out accuracy itself (``eval_strategy steps``, ``eval_steps``).
_TRL_EVALUATION = ("batch_eval_metrics", "bf16_full_eval", "fp16_full_eval", "eval_accumulation_steps", "eval_delay",
                   "eval_do_concat_batches", "eval_use_gather_object", "include_for_metrics", "metric_for_best_model",
                   "greater_is_better", "load_best_model_at_end", "prediction_loss_only", "num_generations_eval",
                   "label_names", "do_predict")
#: Keys whose every value but the default is refused, with why and what to write.
_NOT_READ = {
    **{key: "read only by TRL's own evaluation (Trainer.evaluate), which the kit does not run: its held-out accuracy "
            "is eval_strategy steps with eval_steps N (validation questions from the train split): drop it"
       for key in _TRL_EVALUATION},
    "do_eval": "transformers' Trainer never reads it: held-out accuracy during training is eval_strategy steps "
               "with eval_steps N: write those, or drop do_eval",
    "resume_from_checkpoint": "python -m grpo_kit train --run-dir RUN --resume continues a run folder from its newest "
                              "complete checkpoint (notebook 03: resume = True): drop it",
    "train_sampling_strategy": "TRL's GRPOTrainer draws each prompt num_generations times with its own sampler "
                               "(RepeatSampler), which does not read it: drop it",
    "length_column_name": "read only with train_sampling_strategy, which TRL's GRPOTrainer replaces with its own "
                          "sampler: drop it",
    "label_smoothing_factor": "GRPO's loss has no labels to smooth: drop it",
    "dataset_streaming": "the task reads its splits whole (a validation split and a seeded sample are carved from "
                         "them): drop it",
    "streaming": "the task reads its splits whole: drop it",
    "test_split_size": "splits TRL's data set mixture (datasets), which the kit does not read: drop it",
    "ignore_bias_buffers": "read by TRL's DPO script only (trl grpo does not read it either): drop it",
    "datasets": "TRL's mixture of data sets: the kit trains on one task; name one data set with dataset_name, or "
                "give a task file with --task",
    "reward_model_name_or_path": "the kit trains with reward functions, not a reward model: name them with "
                                 "reward_funcs or --rewards",
    "load_in_8bit": "8-bit loading is not one of the kit's routes: load_in_4bit with use_unsloth (QLoRA), or a "
                    "16-bit base",
    "lora_task_type": "GRPO trains a causal language model: lora_task_type CAUSAL_LM (the default)",
}


#: The keys of a recipe's data set (``trl grpo``'s, open-r1's and the kit's): ``dataset_name`` and how it is read
#: (:meth:`grpo_kit.training.presets.Recipe.data_task`).
DATA_KEYS = ("dataset_name", "dataset_config", "dataset_train_split", "dataset_test_split", "dataset_prompt_column",
             "system_prompt", "dataset_answer_column", "answer_type")


def _text(value: Any) -> Any:
    """An enum value as its text (TRL's parser types some keys as transformers' enums)."""
    return getattr(value, "value", value)


def unread(recipe: Any, defaults: Mapping[str, Any]) -> list[str]:
    """The recipe's values the kit would not act on, one clause each (key, value, why, what to write).

    Args:
        recipe: the :class:`grpo_kit.training.presets.Recipe`, typed (this module sits below it).
        defaults: every key's default (TRL's parser's).
    """
    settings = recipe.settings
    given = {k: v for k, v in settings.items() if k in defaults and _text(v) != _text(defaults[k])}
    found = [f"{key} {_text(given[key])!r}: {why}" for key, why in _NOT_READ.items() if key in given]
    if (evaluation := _text(settings.get("eval_strategy", "no"))) != "steps":
        found += [f"{key} {_text(given[key])!r} with eval_strategy {evaluation}: the kit measures held-out accuracy "
                  "only with eval_strategy steps (every eval_steps N steps): add those, or drop it"
                  for key in ("per_device_eval_batch_size", "eval_on_start") if key in given]
    if settings.get("dataset_name") is None and (data := [k for k in DATA_KEYS[1:] if k in given]):
        found.append(f"{', '.join(data)} without dataset_name: they describe the recipe's data set: name it with "
                     "dataset_name, or drop them (--task names a task file)")
    strategy = _text(settings.get("save_strategy", "steps"))
    if strategy != "steps":
        found.append(f"save_strategy {strategy!r}: the kit saves a checkpoint every save_steps steps, so a killed "
                     "run loses at most that many (--resume): write save_strategy steps and save_steps N")
    return found + _loading_unread(recipe, given)


def _loading_unread(recipe: Any, given: Mapping[str, Any]) -> list[str]:
    """The model-loading and LoRA values the recipe's route cannot take (Unsloth, or the transformers route)."""
    found = []
    four_bit = recipe.use_unsloth and recipe.load_in_4bit
    unsloth_quantizes = {"bnb_4bit_quant_type": "nf4", "use_bnb_nested_quant": True, "bnb_4bit_quant_storage": None}
    for key, unsloth_value in unsloth_quantizes.items():
        if key in recipe.settings and (not four_bit and key in given or four_bit and
                                       recipe.settings[key] != unsloth_value):
            found.append(f"{key} {recipe.settings[key]!r}: " + (
                "Unsloth's 4-bit loader quantizes with its own settings (NF4, nested quantization, the model's "
                "dtype; unsloth/models/llama.py): drop it" if four_bit else
                "applies to 4-bit loading only (load_in_4bit with use_unsloth): drop it"))
    if not recipe.use_unsloth:
        return found
    why = {"attn_implementation": "Unsloth chooses the attention implementation itself (unsloth/models/llama.py drops "
                                  "the argument): drop it, or use_unsloth false to load with transformers",
           "model_init_kwargs": "Unsloth's loader takes its own arguments: drop it, or use_unsloth false to pass them "
                                "to transformers' from_pretrained"}
    found += [f"{key} {recipe.settings[key]!r}: {text}" for key, text in why.items() if key in given]
    if recipe.fast_inference and recipe.use_dora:
        found.append("use_dora true: Unsloth's colocated vLLM (fast_inference) serves the adapter as vLLM's LoRA, and "
                     "vLLM takes no DoRA (vllm/lora/peft_helper.py): fast_inference false, or drop use_dora")
    if recipe.lora_modules_to_save:
        allowed = ("lm_head", "embed_tokens")
        if recipe.fast_inference or any(m not in allowed and "norm" not in m for m in recipe.lora_modules_to_save):
            found.append(f"lora_modules_to_save {list(recipe.lora_modules_to_save)}: Unsloth trains only lm_head, "
                         "embed_tokens and normalisation layers in full, and none with fast_inference "
                         "(unsloth/models/llama.py, get_peft_model): drop it, or use_unsloth false")
    return found
