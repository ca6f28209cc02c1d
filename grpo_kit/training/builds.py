"""What ``train`` builds from a recipe on its route, as ``python -m grpo_kit plan`` shows it.

The LoRA adapter (:func:`adapter`), what each process's ``from_pretrained`` gets and through which loader
(:func:`process_loading`), the ``GRPOConfig`` as Unsloth's generated trainer changes it
(:func:`unsloth_changes`), vLLM's settings (:func:`vllm_settings`), which temperature applies (:func:`sampling`) and
what a runtime without vLLM does (:func:`without_vllm`). :func:`grpo_kit.training.plan.make_plan` gathers them.
"""

from __future__ import annotations

from typing import Any

from grpo_kit.policy.devices import Gpu, Launch, placement
from grpo_kit.policy.loading import transformers_load_kwargs, unsloth_load_kwargs, unsloth_peft_kwargs
from grpo_kit.training.presets import PRESETS, Recipe  # noqa: F401 (PRESETS: doctests)

__all__ = ["adapter", "process_loading", "sampling", "unsloth_changes", "vllm_settings", "without_vllm"]


def adapter(preset: Recipe) -> dict[str, Any] | None:
    """The LoRA adapter ``train`` adds, as it builds it: TRL's ``LoraConfig`` (:func:`grpo_kit.training.trainer.
    peft_config`) on the transformers route, Unsloth's ``get_peft_model`` arguments
    (:func:`grpo_kit.policy.loading.unsloth_peft_kwargs`) on Unsloth's; ``None`` for full fine-tuning."""
    from grpo_kit.training.trainer import peft_config

    if preset.lora_rank is None:
        return None
    if preset.use_unsloth:
        return {"built_by": "unsloth FastLanguageModel.get_peft_model", **unsloth_peft_kwargs(preset.loading)}
    config = peft_config(preset)
    shown = ("r", "lora_alpha", "lora_dropout", "target_modules", "target_parameters", "modules_to_save", "use_rslora",
             "use_dora", "bias", "task_type", "revision")
    values = {k: sorted(v) if isinstance(v, set) else v for k, v in vars(config).items() if k in shown}
    return {"built_by": "peft LoraConfig from trl.get_peft_config", **values}


def process_loading(preset: Recipe, launch: Launch, gpu: Gpu | None) -> dict[str, Any]:
    """How one training process of ``launch`` loads the policy on ``gpu`` (``None``: no GPU).

    Returns:
        ``{"rank": int, **from_pretrained keys, "loader": str}``: on the transformers route the process's placement
        (:func:`grpo_kit.policy.devices.placement`) with the recipe's keys over it
        (:func:`grpo_kit.policy.loading.transformers_load_kwargs`); Unsloth places the model itself and takes the
        recipe's keys it reads (:func:`grpo_kit.policy.loading.unsloth_load_kwargs`). ``loader`` says in words how the
        policy loads: through Unsloth (its own placement and dtype), or transformers (+ peft).
    """
    placed = placement(preset.lora_rank is None, launch, gpu)
    if preset.use_unsloth:
        read = unsloth_load_kwargs(preset.model or "", preset.loading)
        keys = {**placed, **{k: read[k] for k in ("revision", "trust_remote_code", "dtype") if k in read}}
        loader = "unsloth, " + ("4-bit NF4 base" if preset.load_in_4bit else "16-bit base") + \
            (", colocated vLLM sharing the weights" if preset.fast_inference else "")
    else:
        keys = transformers_load_kwargs(preset.loading, placed)
        loader = "transformers" + (" + peft LoRA" if preset.lora_rank is not None else "")
    return {"rank": launch.rank, **keys, "loader": loader}


def unsloth_changes(preset: Recipe, kwargs: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """What Unsloth's generated trainer makes of the ``GRPOConfig`` the kit passes, field by field.

    unsloth 2026.10.7, ``unsloth/models/rl.py``: the generated config defaults
    ``vllm_importance_sampling_correction`` to ``False`` (unless the recipe sets it); and where the
    model carries Unsloth's vLLM engine (``fast_inference``), the generated ``__init__`` sets ``use_vllm = True``,
    ``vllm_mode = "colocate"`` and turns ``top_k`` 0 (TRL's default, "no top-k") or ``None`` into -1 (vLLM's word
    for the same), whatever the config said.

    Args:
        preset: the recipe (only Unsloth routes change anything).
        kwargs: what the kit passes (:meth:`grpo_kit.training.presets.Recipe.grpo_kwargs`).

    Returns:
        ``{field: (passed, effective)}`` (``passed`` is ``None`` where the kit leaves TRL's default).

    >>> sorted(unsloth_changes(PRESETS["a100"], {"use_vllm": False}))
    ['top_k', 'use_vllm', 'vllm_importance_sampling_correction', 'vllm_mode']
    >>> unsloth_changes(PRESETS["multi-gpu-lora"], {})
    {}
    """
    if not preset.use_unsloth:
        return {}
    changes: dict[str, tuple[Any, Any]] = {}
    if "vllm_importance_sampling_correction" not in kwargs:
        changes["vllm_importance_sampling_correction"] = (None, False)
    if preset.fast_inference:
        for field, effective in (("use_vllm", True), ("vllm_mode", "colocate")):
            if kwargs.get(field) != effective:
                changes[field] = (kwargs.get(field), effective)
        if kwargs.get("top_k") in (None, 0):
            changes["top_k"] = (kwargs.get("top_k"), -1)
    return changes


def vllm_settings(preset: Recipe, model: str | None) -> dict[str, Any] | None:
    """vLLM's settings for a run of ``preset`` on ``model`` (``None``: the kit's tiny policy); ``None`` where the recipe
    does not generate with vLLM.

    Returns:
        ``{"mode": "colocate" | "server", "engine": "unsloth" | "trl", "max_model_len": int,
        "gpu_memory_utilization": float | None}`` (``None`` for a server, which keeps a GPU of its own), and for a
        server ``"command"`` (:func:`grpo_kit.policy.vllm.server_command`, to start it) and ``"why_no_share"``.
    """
    if not (preset.fast_inference or preset.use_vllm):
        return None
    mode = "colocate" if preset.fast_inference else preset.vllm_mode
    settings = {"mode": mode, "engine": "unsloth" if preset.fast_inference else "trl",
                "max_model_len": preset.vllm_max_model_len,
                "gpu_memory_utilization": preset.vllm_gpu_memory_utilization if mode == "colocate" else None}
    if mode == "server":
        from grpo_kit.policy.vllm import server_command

        settings["command"] = server_command(model or "<model>", preset.vllm_server_host, preset.vllm_server_port,
                                             preset.vllm_max_model_len)
        settings["why_no_share"] = ("the server runs on a GPU of its own, started by you: vLLM serve's own "
                                    "--gpu-memory-utilization (0.9 by default) applies there")
    return settings


def sampling(preset: Recipe) -> str:
    """Which temperature the completions are sampled at, and which the loss scores them at, in words."""
    sampled, scored = preset.sampling_temperature, preset.temperature
    if sampled == scored:
        return f"temperature {scored:g}: TRL samples at it and divides the logits by it for the loss"
    return (f"sampled at temperature {sampled:g} (generation_kwargs, which TRL applies over temperature when it "
            f"samples); the loss divides the logits by temperature {scored:g}")


def without_vllm(preset: Recipe) -> str | None:
    """What a run of ``preset`` does on a runtime without vLLM (``None``: the recipe does not generate with it)."""
    if preset.use_unsloth and preset.fast_inference:
        return ("Unsloth trains and evaluates with fast_inference=False, generating with Unsloth's own generate "
                "(train and eval say so in one line); the time estimate without vLLM applies")
    if preset.use_vllm:
        return ("TRL refuses to start (use_vllm=True needs vLLM): install the vLLM doctor --install-plan names, or "
                "set use_vllm false to generate through transformers")
    return None
