"""What a recipe costs besides GPU memory (:mod:`grpo_kit.training.memory`): hours of training, what it downloads
and the disk it fills. Estimates, each returned with the assumptions it rests on; ``python -m grpo_kit plan`` prints
them.

Hours: a GRPO step is mostly generation (on one H200, 25.6 of the 29.6 s of ``a100``'s first step through TRL +
peft generated the completions: ``benchmarks/results/gpu-2026-11-27``), so a step is taken to last as long as a
reference step, scaled by the completion tokens each process generates per step (every completion taken to its
``max_completion_length``), the model's parameters, and the inverse of the card's memory bandwidth (decoding reads
every weight for each token). Two references, one per way of generating:

- with vLLM: the blog post's own figure for its recipe (``a100``) on one A100, 250 steps in about 2 hours; the kit
  has not measured vLLM on a GPU yet, and the post does not say which A100 (the 40 GB card's bandwidth is taken,
  the slower of the two);
- through transformers (no vLLM: a runtime whose torch no vLLM release pins, ``doctor --install-plan``): ``a100``'s
  shape through TRL + peft on one H200, 29.6 s for its first step (the GPU proof of 2026-11-27).

Neither reference was taken on the card planned for unless it is that card, and the scaling is a model, not a
measurement.

Download and disk: the weights' bytes from the model's shape (:class:`grpo_kit.policy.shapes.ModelShape`): 16-bit
weights, or under Unsloth's ``load_in_4bit`` its pre-quantized 4-bit copy, which Unsloth loads in place of the
16-bit name (unsloth 2026.10.7, ``unsloth/models/loader_utils.py``; NF4 as in the memory estimate). A checkpoint holds
the trainable weights in float32 and the optimizer's moments (8 bytes a trainable parameter, 2 with an 8-bit
optimizer), ``save_total_limit`` of them at once; ``model/`` the trainable weights again; a merged export the whole
model in 16 bits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grpo_kit.policy.devices import Gpu
from grpo_kit.policy.shapes import ModelShape, model_shape
from grpo_kit.training.memory import NF4_BYTES
from grpo_kit.training.presets import Recipe

__all__ = ["BANDWIDTH_GBS", "REFERENCES", "StepReference", "estimate_disk", "estimate_hours"]

_GB = 1e9

#: Memory bandwidth by card name (``torch.cuda.get_device_properties(0).name``), GB/s: NVIDIA's data sheets (A100
#: SXM4 40 and 80 GB, H100 SXM5 80 GB, H200 SXM, L4, T4).
BANDWIDTH_GBS: dict[str, float] = {
    "NVIDIA A100-SXM4-40GB": 1555, "NVIDIA A100-SXM4-80GB": 2039, "NVIDIA H100 80GB HBM3": 3350,
    "NVIDIA H200": 4800, "NVIDIA L4": 300, "Tesla T4": 320,
}


@dataclass(frozen=True)
class StepReference:
    """A GRPO step whose length is known: what it was, its seconds, the completion tokens one process generated in it
    (at most), the model it trained and the card it ran on."""

    what: str
    seconds: float
    tokens: int
    model: str
    card: str

    @property
    def parameters(self) -> int:
        """The reference model's parameters."""
        return model_shape(self.model).parameters


_A100_MODEL = "unsloth/Meta-Llama-3.1-8B-Instruct"
#: The step lengths the estimate scales from, by whether vLLM generates (module docstring).
REFERENCES: dict[bool, StepReference] = {
    True: StepReference("the blog post's own figure for its recipe (a100) on one A100: 250 steps in about 2 hours "
                        "(not measured by the kit)", 7200 / 250, 8 * 2 * 256, _A100_MODEL, "NVIDIA A100-SXM4-40GB"),
    False: StepReference("a100's shape through TRL + peft on one H200, generation through transformers: 29.6 s for "
                         "its first step (measured, benchmarks/results/gpu-2026-11-27)", 29.61, 8 * 2 * 256,
                         _A100_MODEL, "NVIDIA H200"),
}


def estimate_hours(preset: Recipe, shape: ModelShape, gpu: Gpu, steps: int, vllm: bool) -> dict[str, Any]:
    """Hours to train ``steps`` steps of ``preset`` on ``gpu``, an estimate (see the module docstring).

    Args:
        preset: the recipe (its completions per step and their length).
        shape: its model's shape.
        gpu: the card each process trains on.
        steps: the steps left to train.
        vllm: whether vLLM generates (Unsloth's ``fast_inference`` or TRL's ``use_vllm``; ``False``: what a runtime
            without vLLM does).

    Returns:
        ``{"hours", "seconds_per_step", "basis"}``: hours to 0.1 and whole seconds, as ``plan`` prints them (an
        estimate has no more digits); the basis says which reference and which ratios.

    >>> from grpo_kit.policy.devices import card
    >>> from grpo_kit.training.presets import PRESETS
    >>> a100 = PRESETS["a100"]
    >>> round(estimate_hours(a100, model_shape(a100.model), card("a100-40gb"), 250, vllm=True)["hours"], 1)
    2.0
    """
    ref = REFERENCES[vllm]
    tokens = preset.per_device_train_batch_size * preset.gradient_accumulation_steps * preset.max_completion_length
    bandwidth, ref_bandwidth = BANDWIDTH_GBS.get(gpu.name), BANDWIDTH_GBS[ref.card]
    card_ratio = ref_bandwidth / bandwidth if bandwidth else 1.0
    seconds = ref.seconds * tokens / ref.tokens * shape.parameters / ref.parameters * card_ratio
    card_words = (f"memory bandwidth {bandwidth:,.0f} against {ref_bandwidth:,.0f} GB/s" if bandwidth else
                  f"{gpu.name}'s memory bandwidth unknown to the kit, so none")
    basis = (f"scaled from {ref.what} by completion tokens per step and process ({tokens:,} against {ref.tokens:,}), "
             f"parameters ({shape.parameters / 1e9:.2f}B against {ref.parameters / 1e9:.2f}B) and {card_words}")
    return {"hours": round(seconds * steps / 3600, 1), "seconds_per_step": round(seconds), "basis": basis}


def estimate_disk(preset: Recipe, shape: ModelShape) -> dict[str, Any]:
    """What a run of ``preset`` downloads and writes, in GB (10**9 bytes) to 0.1 (``checkpoint`` and ``model`` to
    0.01), as ``plan`` prints them, an estimate (see the module docstring).

    Returns:
        ``{"download", "download_what", "checkpoint", "checkpoints", "model", "merged_export", "base_for_merge",
        "total"}``: the weights downloaded and what they are; one checkpoint and the ``save_total_limit`` kept;
        ``model/``; the merged 16-bit export, and the 16-bit base an Unsloth 4-bit run downloads to merge into
        (``export --base`` saves it where a copy is at hand); all of them added.

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
