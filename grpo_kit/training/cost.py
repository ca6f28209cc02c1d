"""What a recipe costs besides GPU memory (:mod:`grpo_kit.training.memory`): hours of training, what it downloads
and the disk it fills. Estimates, each returned with the assumptions it rests on; ``python -m grpo_kit plan`` prints
them.

Hours: a step's seconds from :func:`grpo_kit.policy.speed.step_seconds` (the kit's one source of GPU time: a reference
step scaled by completion tokens, parameters and memory bandwidth) for the route the run takes, times the steps
(:func:`estimate_hours`); :func:`estimate_time` gives them for the route with vLLM and the one a runtime without vLLM
gets, which of the two applies on this machine, and where a run is longer than a Colab session, the shipped recipe
made for the card (:func:`grpo_kit.training.presets.preset_for_device`) and its hours.

Download and disk: the weights' bytes from the model's shape (:class:`grpo_kit.policy.shapes.ModelShape`): 16-bit
weights, or under Unsloth's ``load_in_4bit`` its pre-quantized 4-bit copy, which Unsloth loads in place of the
16-bit name (unsloth 2026.10.7, ``unsloth/models/loader_utils.py``; NF4 as in the memory estimate). A checkpoint holds
the trainable weights in float32 and the optimizer's moments (8 bytes a trainable parameter, 2 with an 8-bit
optimizer), ``save_total_limit`` of them at once; ``model/`` the trainable weights again; a merged export the whole
model in 16 bits.
"""

from __future__ import annotations

from typing import Any

from grpo_kit.policy.devices import Gpu
from grpo_kit.policy.shapes import ModelShape, model_shape
from grpo_kit.policy.speed import route_words, step_seconds
from grpo_kit.system.logs import counted
from grpo_kit.training.memory import NF4_BYTES
from grpo_kit.training.presets import PRESETS, Recipe, preset_for_device

__all__ = ["SESSION_HOURS", "estimate_disk", "estimate_hours", "estimate_time", "routes_of", "time_lines"]

_GB = 1e9
#: The longest a Colab session runs (Colab's FAQ, research.google.com/colaboratory/faq.html: "at most 12 hours" on
#: the free tier; paid tiers may run longer but promise no length): a run planned longer is said so, with the
#: shipped recipe made for the card.
SESSION_HOURS = 12.0


def estimate_hours(preset: Recipe, shape: ModelShape, gpu: Gpu, steps: int, route: str) -> dict[str, Any]:
    """Hours to train ``steps`` steps of ``preset`` on ``gpu`` by ``route``, an estimate
    (:func:`grpo_kit.policy.speed.step_seconds`).

    Args:
        preset: the recipe (its completions per step and their length).
        shape: its model's shape.
        gpu: the card each process trains on.
        steps: the steps left to train.
        route: how the completions are generated (:data:`grpo_kit.policy.speed.ROUTES`): ``"vllm"``, ``"unsloth"``
            (Unsloth without vLLM) or ``"transformers"``.

    Returns:
        ``{"route", "hours", "seconds_per_step", "basis"}``: hours to 0.1 and whole seconds, as ``plan`` prints them
        (an estimate has no more digits); the basis says which reference and which ratios.

    >>> from grpo_kit.policy.devices import card
    >>> from grpo_kit.policy.shapes import model_shape
    >>> from grpo_kit.training.presets import PRESETS
    >>> a100 = PRESETS["a100"]
    >>> estimate_hours(a100, model_shape(a100.model), card("a100-40gb"), 250, "vllm")["hours"]
    2.0
    """
    tokens = preset.per_device_train_batch_size * preset.gradient_accumulation_steps * preset.max_completion_length
    seconds, basis = step_seconds(route, tokens, shape.parameters, gpu)
    return {"route": route, "hours": round(seconds * steps / 3600, 1), "seconds_per_step": round(seconds),
            "basis": basis}


def estimate_disk(preset: Recipe, shape: ModelShape) -> dict[str, Any]:
    """What a run of ``preset`` downloads and writes, in GB (10**9 bytes) to 0.1 (``checkpoint`` and ``model`` to
    0.01), as ``plan`` prints them, an estimate (see the module docstring).

    Returns:
        ``{"download", "download_what", "checkpoint", "checkpoints", "model", "merged_export", "base_for_merge",
        "total"}``: the weights downloaded and what they are; one checkpoint and the ``save_total_limit`` kept;
        ``model/``; the merged 16-bit export, and the 16-bit base an Unsloth 4-bit run downloads to merge into
        (``export --base`` saves it where a copy is at hand); all of them added.

    >>> from grpo_kit.policy.shapes import model_shape
    >>> from grpo_kit.training.presets import PRESETS
    >>> disk = estimate_disk(PRESETS["a100"], model_shape(PRESETS["a100"].model))
    >>> round(disk["download"], 1), round(disk["merged_export"], 1)
    (5.7, 16.1)
    """
    half = 2 * shape.parameters
    four_bit = preset.use_unsloth and preset.load_in_4bit
    download, what = (shape.linear_parameters * NF4_BYTES + 2 * (shape.parameters - shape.linear_parameters),
                      "Unsloth's pre-quantized 4-bit copy, loaded in place of the 16-bit name") if four_bit else \
        (half, "16-bit weights")
    trainable = shape.parameters if preset.lora_rank is None else \
        shape.lora_parameters(preset.lora_rank, preset.loading.lora_target_modules)
    moments = 2 if "8bit" in preset.optim else 8
    checkpoint = trainable * (4 + moments)
    gb = {"download": download / _GB, "checkpoint": checkpoint / _GB,
          "checkpoints": checkpoint * (preset.save_total_limit or 1) / _GB, "model": trainable * 4 / _GB,
          "merged_export": half / _GB, "base_for_merge": half / _GB if four_bit else 0.0}
    # to the digits plan prints: a tenth of a GB, a hundredth for the small checkpoint and model/
    return {**{k: round(v, 2 if k in ("checkpoint", "model") else 1) for k, v in gb.items()}, "download_what": what,
            "total": round(sum(gb.values()) - gb["checkpoint"], 1)}


def routes_of(preset: Recipe) -> tuple[str | None, str | None]:
    """How ``preset`` generates with vLLM and on a runtime without it, each a route of
    :data:`grpo_kit.policy.speed.ROUTES` (``None``: no such route). Unsloth's ``fast_inference`` turns off without
    vLLM (:func:`grpo_kit.policy.routes.usable_loading`); TRL's ``use_vllm`` refuses to start without it.

    >>> routes_of(PRESETS["a100"]), routes_of(PRESETS["multi-gpu-lora"]), routes_of(PRESETS["cpu-tiny"])
    (('vllm', 'unsloth'), ('vllm', None), (None, 'transformers'))
    """
    vllm = preset.fast_inference or preset.use_vllm
    without = "unsloth" if preset.use_unsloth else None if vllm else "transformers"
    return ("vllm" if vllm else None), without


def estimate_time(preset: Recipe, shape: ModelShape, gpu: Gpu, steps: int,
                  vllm_here: bool | None = None) -> dict[str, Any]:
    """The hours of ``steps`` steps of ``preset`` on ``gpu`` by each route it can take (:func:`routes_of`), which one
    applies here, and a note where one is longer than :data:`SESSION_HOURS`.

    Args:
        preset, shape, gpu, steps: as :func:`estimate_hours`.
        vllm_here: whether this machine has vLLM (``None``: planned for a card elsewhere, either may apply).

    Returns:
        ``{"steps", "with_vllm", "without_vllm"`` (:func:`estimate_hours` or ``None``), ``"applies"`` (``"with_vllm"``,
        ``"without_vllm"`` or ``None``), ``"session"`` (``None``, or a line: which estimate is longer than a Colab
        session, and the shipped recipe made for this card with its hours)``}``.
    """
    with_vllm, without = routes_of(preset)
    found = {"with_vllm": estimate_hours(preset, shape, gpu, steps, with_vllm) if with_vllm else None,
             "without_vllm": estimate_hours(preset, shape, gpu, steps, without) if without else None}
    applies = None if vllm_here is None else "with_vllm" if vllm_here and with_vllm else "without_vllm"
    long = [name for name, e in found.items() if e is not None and e["hours"] > SESSION_HOURS
            and applies in (None, name)]
    session = None
    if long:
        said = " and ".join(f"{name.replace('_', ' ').replace('vllm', 'vLLM')} ({found[name]['hours']:.1f} h)"
                            for name in long)
        session = (f"{said} is longer than one Colab session (at most {SESSION_HOURS:g} h): a run goes on across "
                   f"sessions with resume (a checkpoint every {preset.save_steps} steps)" + _smaller(preset, gpu, long))
    return {"steps": steps, **found, "applies": applies, "session": session}


def _smaller(preset: Recipe, gpu: Gpu, long: list[str]) -> str:
    """The shipped recipe made for ``gpu`` (:func:`grpo_kit.training.presets.preset_for_device`) with its hours on
    the routes in ``long``, where it is another recipe than ``preset``; else nothing."""
    name = preset_for_device(gpu)
    if name == preset.name:
        return ""
    other = PRESETS[name]
    routes = dict(zip(("with_vllm", "without_vllm"), routes_of(other), strict=True))
    hours = [f"{estimate_hours(other, model_shape(other.model), gpu, other.max_steps, routes[key])['hours']:.1f} h "
             + key.replace("_", " ").replace("vllm", "vLLM") for key in long if routes[key]]
    return (f"; the recipe made for {gpu.name}, preset {name} ({other.model}), takes about " + " and ".join(hours)
            + f" for its {other.max_steps} steps") if hours else ""


def time_lines(time: dict[str, Any] | None) -> list[str]:
    """:func:`estimate_time`'s result as ``plan`` prints it (``None``: the line that says why there is none)."""
    if time is None:
        return ["time: no estimate (it needs a card, --device CARD, and the model's config.json; on a CPU train "
                "announces its time when it starts)"]
    estimates = [(key, e) for key in ("with_vllm", "without_vllm") if (e := time[key]) is not None]
    said = [("with vLLM generating" if key == "with_vllm" else f"without vLLM ({route_words(e['route'])})")
            + f" about {e['hours']:.1f} h ({e['seconds_per_step']:.0f} s a step)"
            + (" (this runtime's route)" if time["applies"] == key else "") for key, e in estimates]
    lines = [f"time (estimate, not measured on this card) for {counted(time['steps'], 'step')}: " + "; ".join(said)]
    lines += [f"  basis: {e['basis']}" for _, e in estimates]
    return lines + ([f"  {time['session']}"] if time["session"] else [])
