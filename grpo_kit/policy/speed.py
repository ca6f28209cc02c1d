"""How long a GPU takes for the kit's work: a GRPO step, or generating completions. One source of GPU time for
``python -m grpo_kit plan`` (:mod:`grpo_kit.training.cost`), ``train``'s announcement and the evaluation's on a GPU
(:class:`grpo_kit.policy.generation.TransformersBackend`); on a CPU the kit's own measured rates apply instead
(:mod:`grpo_kit.system.progress`).

Decoding reads every weight once a token, so a GRPO step (mostly generation: on one H200, 25.6 of the 29.6 s of
``a100``'s first step through TRL + peft generated its completions) and a generation are taken to last as long as a
reference, scaled by the completion tokens (every completion taken to its budget, so an upper bound where completions
stop early), the model's parameters, and the inverse of the card's memory bandwidth (:data:`grpo_kit.policy.devices.
CARDS`). One reference per way of generating, the route a runtime gets:

- ``vllm`` (Unsloth's ``fast_inference`` or TRL's ``use_vllm``): the blog post's own figure for its recipe (``a100``)
  on one A100, 250 steps in about 2 hours; the post does not say which A100 (the 40 GB card's bandwidth is taken,
  the slower of the two), and the kit has not measured vLLM on a GPU yet. For generation alone, that step's 4,096
  completion tokens over its 28.8 s: a lower bound on vLLM's rate, since the step also trained.
- ``transformers`` (TRL + peft, or full fine-tuning, without vLLM): ``a100``'s shape through TRL + peft on one H200,
  29.6 s for its first step, of which 25.6 s generating 4,096 tokens (160 tokens a second; the GPU proof of
  2026-11-27, ``benchmarks/results/gpu-2026-11-27``).
- ``unsloth`` (Unsloth without ``fast_inference``: what an Unsloth recipe runs where the runtime has no vLLM): no step
  of this route has been timed to its end (on the H200 the 8B step had generated within about 60 s and was still in
  its loss at 100 s, Unsloth's first-step warm-up included: about 97 s at 1.5B). Its generation goes through
  transformers too, so the ``transformers`` reference stands in, and its basis says so.

The scaling is a model, not a measurement: neither reference was taken on the card planned for unless it is that card.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_kit.policy.devices import CARDS, Gpu

__all__ = ["ROUTES", "Reference", "STEPS", "generation_seconds", "route_words", "step_seconds"]

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


#: The step each route's estimate scales from (the module docstring).
STEPS: dict[str, Reference] = {
    "vllm": Reference("the blog post's own figure for its recipe (a100) on one A100: 250 steps in about 2 hours (not "
                      "measured by the kit)", 7200 / 250, 8 * 2 * 256, 7200 / 250, _REFERENCE_PARAMETERS, "a100-40gb"),
    "transformers": Reference("a100's shape through TRL + peft on one H200, generation through transformers: 29.6 s "
                              "for its first step, 25.6 s of it generating (measured, benchmarks/results/"
                              "gpu-2026-11-27)", 29.61, 8 * 2 * 256, 25.56, _REFERENCE_PARAMETERS, "h200-141gb"),
}
_UNSLOTH_STAND_IN = ("the route that runs, Unsloth without fast_inference, has no step of its own timed yet, so its "
                     "generation (Unsloth's own generate) takes the TRL + peft step's place")


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
    if route not in ROUTES:
        raise ValueError(f"unknown route {route!r}: one of {', '.join(ROUTES)}")
    ref = STEPS["vllm" if route == "vllm" else "transformers"]
    ref_bandwidth = CARDS[ref.card].bandwidth_gbs
    ratio = ref_bandwidth / gpu.bandwidth_gbs if gpu.bandwidth_gbs else 1.0
    card = (f"memory bandwidth {gpu.bandwidth_gbs:,.0f} against {ref_bandwidth:,.0f} GB/s" if gpu.bandwidth_gbs else
            f"{gpu.name}'s memory bandwidth unknown to the kit, so none")
    basis = (f"completion tokens ({tokens:,.0f} against {ref.tokens:,}), parameters ({parameters / 1e9:.2f}B against "
             f"{ref.parameters / 1e9:.2f}B) and {card}" + (f"; {_UNSLOTH_STAND_IN}" if route == "unsloth" else ""))
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
    54
    """
    ref, factor, ratios = _scale(route, tokens, parameters, gpu)
    rate = ref.tokens / ref.generation_seconds
    bound = " (at least: that step also trained)" if route == "vllm" else ""
    return ref.generation_seconds * factor, f"scaled from {rate:,.0f} tokens a second{bound} in {ref.what}, by {ratios}"
