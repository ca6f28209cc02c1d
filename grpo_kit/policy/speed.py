"""How long a GPU takes for the kit's work: a GRPO step, or generating completions. One source of GPU time for
``python -m grpo_kit plan`` (:mod:`grpo_kit.training.cost`), ``train``'s announcement and the evaluation's on a GPU
(:class:`grpo_kit.policy.generation.TransformersBackend`); on a CPU the kit's own measured rates apply instead
(:mod:`grpo_kit.system.progress`).

Decoding reads every weight once a token, so a GRPO step (mostly generation: on one H200, 18.1 of the 19.5 s of a
steady step of ``a100``'s shape through TRL + peft generated its completions) and a generation are taken to last as
long as a reference, scaled by the completion tokens (every completion taken to its budget, so an upper bound where
completions stop early), the model's parameters, and the inverse of the card's memory bandwidth
(:data:`grpo_kit.policy.devices.CARDS`). Each way of generating has its references (:data:`STEPS`); the one nearest
in parameters is taken:

- ``vllm`` (Unsloth's ``fast_inference`` or TRL's ``use_vllm``): the blog post's own figure for its recipe (``a100``)
  on one A100, 250 steps in about 2 hours; the post does not say which A100 (the 40 GB card's bandwidth is taken,
  the slower of the two), and the kit has not measured vLLM on a GPU yet. For generation alone, that step's 4,096
  completion tokens over its 28.8 s: a lower bound on vLLM's rate, since the step also trained.
- ``unsloth`` (Unsloth without ``fast_inference``: what an Unsloth recipe runs where the runtime has no vLLM):
  ``a100`` as shipped but for ``fast_inference`` (4-bit, LoRA rank 32, Unsloth's own ``generate``) at
  Llama-3.1-8B's shape on one H200: 6.97 s a step after the first, 5.74 s of it generating 4,096 tokens.
- ``transformers`` (TRL + peft, or full fine-tuning, without vLLM): ``a100``'s shape through TRL + peft (bf16 LoRA
  rank 32) on one H200, 19.5 s a step after the first, 18.1 s of it generating 4,096 tokens; and ``full-80gb``'s
  (Qwen2.5-1.5B, every weight trained), 17.6 s a step after the first, 17.1 s of it generating 8,192 tokens.

The last two measured by the GPU proof of 2026-11-29 with random weights (``benchmarks/results/gpu-2026-11-29``, docs/
development/benchmarks.md). The first step is longer (Unsloth's 67.8 s, compiling; TRL + peft's 34.5 s) and is not in
the estimate: a few minutes over a run's hours at most.

The scaling is a model, not a measurement. Decoding on that H200 was bound by kernel launches, not by memory: plain
``generate`` ran at 3.9% of the card's memory-bound limit, Unsloth's at 3.9% (4-bit) and 20% (16-bit). So a smaller
model than the nearest reference takes longer than its parameters say, and a card slower than the reference's is
taken to be bound by its bandwidth, which is the upper bound where it is still bound by launches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from grpo_kit.policy.devices import CARDS, Gpu

__all__ = ["ROUTES", "Reference", "STEPS", "generation_seconds", "reference", "route_words", "step_seconds"]

#: The ways of generating a time is estimated for (the module docstring).
ROUTES = ("vllm", "unsloth", "transformers")
#: Llama-3.1-8B's parameters (``model.num_parameters()``, the GPU proof's row): the references' model.
_REFERENCE_PARAMETERS = 8_030_261_248


@dataclass(frozen=True)
class Reference:
    """A GRPO step whose length is known: what it was, its seconds, the completion tokens one process generated in it
    (at most), the seconds of that generation, the model's parameters and the card (a key of :data:`CARDS`)."""

    what: str
    seconds: float
    tokens: int
    generation_seconds: float
    parameters: int
    card: str


def _measured(what: str, seconds: float, tokens: int, generation_seconds: float, parameters: int) -> Reference:
    """A steady step the GPU proof of 2026-11-29 measured on one H200 (``what``: the route and shape, and where), its
    numbers written once: its description says them from its fields."""
    return Reference(f"{what}: {seconds:.3g} s a step after the first, {generation_seconds:.3g} s of it "
                     "generating (measured by the GPU proof, benchmarks/results/gpu-2026-11-29)", seconds, tokens,
                     generation_seconds, parameters, "h200-141gb")


#: The steps each route's estimate scales from, the one nearest in parameters taken (the module docstring): each a
#: steady step (the second; the first compiles or warms up).
STEPS: dict[str, tuple[Reference, ...]] = {
    "vllm": (Reference("the blog post's own figure for its recipe (a100) on one A100: 250 steps in about 2 hours (not "
                       "measured by the kit)", 7200 / 250, 16 * 256, 7200 / 250, _REFERENCE_PARAMETERS, "a100-40gb"),),
    "unsloth": (_measured("a100 without fast_inference (Unsloth 4-bit LoRA r32, its own generate) on one H200",
                          6.974, 16 * 256, 5.74, _REFERENCE_PARAMETERS),),
    "transformers": (
        _measured("a100's shape through TRL + peft on one H200, generation through transformers", 19.476, 16 * 256,
                  18.07, _REFERENCE_PARAMETERS),
        _measured("full-80gb's shape (Qwen2.5-1.5B, full fine-tuning) on one H200, generation through transformers",
                  17.553, 16 * 512, 17.12, 1_543_714_304),
    ),
}


def reference(route: str, parameters: float) -> Reference:
    """The step of :data:`STEPS` a ``parameters`` model's estimate on ``route`` scales from: the route's nearest in
    parameters (by their ratio).

    Raises:
        ValueError: an unknown route.

    >>> reference("transformers", 3.09e9).parameters, reference("transformers", 7e9).parameters
    (1543714304, 8030261248)
    """
    if route not in ROUTES:
        raise ValueError(f"unknown route {route!r}: one of {', '.join(ROUTES)}")
    return min(STEPS[route], key=lambda ref: abs(math.log(max(parameters, 1) / ref.parameters)))


def route_words(route: str) -> str:
    """A route in words, as the announcements and ``plan`` say it.

    >>> route_words("unsloth")
    'Unsloth, generating with its own generate'
    """
    return {"vllm": "vLLM generating", "unsloth": "Unsloth, generating with its own generate",
            "transformers": "generation through transformers"}[route]


def _scale(route: str, tokens: float, parameters: float, gpu: Gpu) -> tuple[Reference, float, str]:
    """The route's reference, the factor from it to ``tokens`` of a ``parameters`` model on ``gpu``, and that factor's
    basis in words."""
    ref = reference(route, parameters)
    ref_bandwidth = CARDS[ref.card].bandwidth_gbs
    ratio = ref_bandwidth / gpu.bandwidth_gbs if gpu.bandwidth_gbs else 1.0
    card = (f"memory bandwidth {gpu.bandwidth_gbs:,.0f} against {ref_bandwidth:,.0f} GB/s" if gpu.bandwidth_gbs else
            f"{gpu.name}'s memory bandwidth unknown to the kit, so none")
    basis = (f"completion tokens ({tokens:,.0f} against {ref.tokens:,}), parameters ({parameters / 1e9:.2f}B against "
             f"{ref.parameters / 1e9:.2f}B) and {card}")
    return ref, tokens / ref.tokens * parameters / ref.parameters * ratio, basis


def step_seconds(route: str, tokens: float, parameters: float, gpu: Gpu) -> tuple[float, str]:
    """Seconds a GRPO step takes on ``gpu``, an estimate (see the module docstring).

    Args:
        route: one of :data:`ROUTES`: how the completions are generated.
        tokens: completion tokens one process generates in a step (completions a step times their budget).
        parameters: the model's parameters.
        gpu: the card (its ``bandwidth_gbs``).

    Returns:
        ``(seconds, basis)``: the basis names the reference and the ratios.

    Raises:
        ValueError: an unknown route.

    >>> round(step_seconds("vllm", 4096, 8_030_261_248, CARDS["a100-40gb"])[0], 1)
    28.8
    """
    ref, factor, ratios = _scale(route, tokens, parameters, gpu)
    return ref.seconds * factor, f"scaled from {ref.what}, by {ratios}"


def generation_seconds(route: str, tokens: float, parameters: float, gpu: Gpu) -> tuple[float, str]:
    """Seconds generating ``tokens`` completion tokens takes on ``gpu`` (at most: a completion that stops early takes
    less), an estimate from the same references as :func:`step_seconds`, at the rate they generated.

    Args:
        route: one of :data:`ROUTES`.
        tokens: completion tokens in all (questions x samples x ``max_new_tokens``).
        parameters: the model's parameters.
        gpu: the card.

    Returns:
        ``(seconds, basis)``.

    Raises:
        ValueError: an unknown route.

    >>> round(generation_seconds("transformers", 660 * 256, 8_030_261_248, CARDS["a100-40gb"])[0] / 60)
    38
    """
    ref, factor, ratios = _scale(route, tokens, parameters, gpu)
    rate = ref.tokens / ref.generation_seconds
    bound = " (at least: that step also trained)" if route == "vllm" else ""
    return ref.generation_seconds * factor, f"scaled from {rate:,.0f} tokens a second{bound} in {ref.what}, by {ratios}"
