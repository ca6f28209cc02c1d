"""Named GRPO variants: each a documented bundle of TRL ``GRPOConfig`` fields, with the paper it comes from.

TRL runs every variant with one trainer; what differs is how the loss is aggregated (``loss_type``), whether a KL
term pulls towards the starting policy (``beta``), how advantages are scaled (``scale_rewards``), whether the
importance ratio is per token or per sequence (``importance_sampling_level``), the clipping range (``epsilon``,
``epsilon_high``), and which tokens count (``mask_truncated_completions``, ``top_entropy_quantile``). TRL's defaults
changed over time (trl 0.15: ``beta=0.04`` and per-sequence averaging; trl 1.15/1.16: ``loss_type="dapo"``,
``beta=0.0``), so every preset names its variant and sets these fields itself (:data:`ALGORITHM_FIELDS`), and
every run folder records them (:func:`algorithm_settings`).

Read against trl 1.15.0 and 1.16.0 (``trl/trainer/grpo_config.py`` and ``grpo_trainer.py``, identical in these
fields): ``GRPOConfig.__post_init__`` validates none of them; an unknown ``loss_type`` or
``importance_sampling_level`` fails only at the first loss computation, after the model loaded, and VESPO with
vLLM's importance-sampling correction in a ``*_mask``/``sequence_*`` mode is refused by the trainer's constructor.
:func:`check_algorithm` refuses all of these before anything loads.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

__all__ = ["ALGORITHMS", "ALGORITHM_FIELDS", "IMPORTANCE_SAMPLING_LEVELS", "LOSS_TYPES", "SCALE_REWARDS", "Algorithm",
           "algorithm_markdown", "algorithm_settings", "check_algorithm", "get_algorithm"]

log = logging.getLogger(__name__)

#: ``GRPOConfig.loss_type`` values trl 1.15.0 / 1.16.0 compute (``grpo_trainer.py``, ``_compute_loss``).
LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")
#: ``GRPOConfig.importance_sampling_level`` values.
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
#: ``GRPOConfig.scale_rewards`` values (TRL maps ``True`` to ``"group"`` and ``False`` to ``"none"``).
SCALE_REWARDS = ("group", "batch", "none")

#: The preset fields that make up the algorithm (each is the ``GRPOConfig`` field of the same name).
ALGORITHM_FIELDS = ("loss_type", "beta", "scale_rewards", "importance_sampling_level", "epsilon", "epsilon_high",
                    "num_iterations", "mask_truncated_completions", "top_entropy_quantile", "use_bias_correction_kl")


@dataclass(frozen=True)
class Algorithm:
    """One named variant.

    Attributes:
        name: what ``--algorithm`` / ``algorithm=`` takes.
        paper: the paper it comes from (title, arXiv id).
        summary: what it changes, in one or two sentences.
        fields: every field of :data:`ALGORITHM_FIELDS`, with its value for this variant.
    """

    name: str
    paper: str
    summary: str
    fields: dict[str, Any]


def _bundle(loss_type: str, beta: float = 0.0, scale_rewards: str = "group", importance_sampling_level: str = "token",
            epsilon: float = 0.2, epsilon_high: float | None = None, num_iterations: int = 1,
            mask_truncated_completions: bool = False, top_entropy_quantile: float = 1.0,
            use_bias_correction_kl: bool = True) -> dict[str, Any]:
    """All :data:`ALGORITHM_FIELDS`; the keyword defaults are trl 1.15/1.16's ``GRPOConfig`` defaults.

    ``epsilon_high=None`` means "equal to ``epsilon``" in TRL, and is written as that number: Unsloth's generated
    ``GRPOConfig`` (unsloth 2026.10.7, ``unsloth/models/rl.py``) replaces ``None`` by 0.28 whenever ``loss_type`` is
    given as ``"dapo"`` (and by 5.0 for ``"cispo"``), which would run another clipping range than recorded.
    """
    return {"loss_type": loss_type, "beta": beta, "scale_rewards": scale_rewards,
            "importance_sampling_level": importance_sampling_level, "epsilon": epsilon,
            "epsilon_high": epsilon if epsilon_high is None else epsilon_high,
            "num_iterations": num_iterations, "mask_truncated_completions": mask_truncated_completions,
            "top_entropy_quantile": top_entropy_quantile, "use_bias_correction_kl": use_bias_correction_kl}


#: Every named variant. Values follow TRL's paper index (``docs/source/paper_index.md``) and the papers.
ALGORITHMS: dict[str, Algorithm] = {a.name: a for a in (
    Algorithm("grpo", "DeepSeekMath (Shao et al. 2024, arXiv 2402.03300); as trl 0.15 ran it",
              "Each completion's token losses averaged over its own length, then over completions; advantages "
              "scaled by the group's standard deviation; KL to the starting policy with beta 0.04 (the k3 "
              "estimator, not reweighted by the importance ratio). trl 0.14-0.15's defaults, which the Unsloth "
              "GRPO notebooks of early 2025 ran.",
              _bundle("grpo", beta=0.04, use_bias_correction_kl=False)),
    Algorithm("trl_default", "TRL 1.15/1.16 GRPOConfig defaults (DAPO's token-level loss, no KL term)",
              "What trl's GRPOConfig() runs when nothing is set: token losses averaged over all tokens of the "
              "batch (loss_type 'dapo'), no KL term, symmetric clipping 0.2 (epsilon_high written as 0.2: "
              "Unsloth's config would turn an unset one into 0.28).",
              _bundle("dapo")),
    Algorithm("dr_grpo", "Understanding R1-Zero-Like Training: A Critical Perspective (Liu et al. 2025, arXiv "
                         "2503.20783)",
              "GRPO done right: token losses summed and divided by a constant (max_completion_length) instead of "
              "each completion's length, and advantages not divided by the group's standard deviation; no KL.",
              _bundle("dr_grpo", scale_rewards="none")),
    Algorithm("dapo", "DAPO: An Open-Source LLM Reinforcement Learning System at Scale (Yu et al. 2025, arXiv "
                      "2503.14476)",
              "Token-level loss over the whole batch, clip-higher (epsilon 0.2 low, 0.28 high), truncated "
              "completions masked out of the loss, no KL. (DAPO's dynamic sampling and overlong reward shaping "
              "are not GRPOConfig fields.)",
              _bundle("dapo", epsilon_high=0.28, mask_truncated_completions=True)),
    Algorithm("bnpo", "BNPO: Beta Normalization Policy Optimization (Xiao et al. 2025, arXiv 2506.02864)",
              "Token losses averaged over the tokens of the local batch (equal to 'grpo' at one completion per "
              "device); no KL.",
              _bundle("bnpo")),
    Algorithm("gspo", "Group Sequence Policy Optimization (Zheng et al. 2025, arXiv 2507.18071)",
              "One importance ratio per completion (the geometric mean of its token ratios), clipped in a narrow "
              "band (3e-4 low, 4e-4 high, the paper's section 5.1), per-sequence averaging, no KL.",
              _bundle("grpo", importance_sampling_level="sequence", epsilon=3e-4, epsilon_high=4e-4)),
    Algorithm("high_entropy", "Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective RL for LLM "
                              "Reasoning (Wang et al. 2025, arXiv 2506.01939)",
              "DAPO, with the policy loss kept only on the 20% of tokens of highest entropy.",
              _bundle("dapo", epsilon_high=0.28, mask_truncated_completions=True, top_entropy_quantile=0.2)),
    Algorithm("cispo", "MiniMax-M1 (MiniMax 2025, arXiv 2506.13585); epsilon_high 5.0 from The Art of Scaling RL "
                       "Compute for LLMs (arXiv 2510.13786)",
              "Clips the importance weights themselves (upper bound 5.0) rather than the advantage-weighted "
              "ratio, token losses over the batch; no KL.",
              _bundle("cispo", epsilon_high=5.0)),
    Algorithm("sapo", "Soft Adaptive Policy Optimization (Gao et al. 2025, arXiv 2511.20347)",
              "A smooth temperature-controlled gate instead of hard clipping (TRL's default gate temperatures).",
              _bundle("sapo")),
    Algorithm("luspo", "Length-Unbiased Sequence Policy Optimization (arXiv 2602.05261)",
              "GSPO's sequence-level ratio with each sequence's loss scaled by its length; clipping 2e-3 / 2.5e-3 "
              "(the paper's section 5.1).",
              _bundle("luspo", importance_sampling_level="sequence", epsilon=2e-3, epsilon_high=2.5e-3)),
    Algorithm("vespo", "VESPO: Variational Sequence-Level Soft Policy Optimization (arXiv 2602.10693)",
              "A smooth Gamma-shaped weight of the sequence-level importance ratio instead of clipping (TRL's "
              "default shape parameters); with vLLM's importance-sampling correction it needs a token_* mode.",
              _bundle("vespo")),
)}


def get_algorithm(name: str) -> Algorithm:
    """A variant by name.

    Raises:
        ValueError: an unknown name (the message lists the variants).

    >>> get_algorithm("dr_grpo").fields["scale_rewards"]
    'none'
    """
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}: choose from {', '.join(ALGORITHMS)} "
                         "(grpo_kit.training.algorithms), or set its fields one by one (--loss_type, --beta, ...)")
    return ALGORITHMS[name]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_algorithm(settings: Any) -> None:
    """Refuse algorithm settings TRL would reject late (after the model loaded) or never compute.

    Args:
        settings: a :class:`grpo_kit.training.presets.Recipe` (its :data:`ALGORITHM_FIELDS`, ``algorithm``,
            ``use_vllm``, ``fast_inference``, the vLLM importance-sampling keys and ``sync_ref_model``).

    Raises:
        ValueError: an unknown ``algorithm``, ``loss_type``, ``importance_sampling_level`` or ``scale_rewards``;
            ``epsilon`` not above 0 or ``epsilon_high`` below it; ``num_iterations`` < 1; ``top_entropy_quantile``
            outside [0, 1]; ``loss_type="luspo"`` with token-level ratios (TRL's documentation: it requires
            ``importance_sampling_level="sequence"``); ``loss_type="vespo"`` with vLLM and its importance-sampling
            correction in a mode other than ``token_truncate`` / ``token_mask`` (trl 1.15/1.16's trainer raises
            this); ``sync_ref_model`` with ``beta=0`` (no reference model to sync; the trainer raises).
    """
    get_algorithm(settings.algorithm)
    if settings.loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type = {settings.loss_type!r} is not a loss trl 1.15/1.16 computes: choose from "
                         f"{', '.join(LOSS_TYPES)} (GSPO is importance_sampling_level='sequence' with loss_type "
                         "'grpo': --algorithm gspo)")
    for key, choices in (("importance_sampling_level", IMPORTANCE_SAMPLING_LEVELS), ("scale_rewards", SCALE_REWARDS)):
        if getattr(settings, key) not in choices:
            raise ValueError(f"{key} = {getattr(settings, key)!r}: choose from {', '.join(choices)}")
    if not (_is_number(settings.epsilon) and settings.epsilon > 0):
        raise ValueError(f"epsilon = {settings.epsilon!r}: set a clipping range above 0 (TRL's default 0.2)")
    if settings.epsilon_high is not None and not (_is_number(settings.epsilon_high)
                                                  and settings.epsilon_high >= settings.epsilon):
        raise ValueError(f"epsilon_high = {settings.epsilon_high!r} must be None (= epsilon) or a number >= epsilon "
                         f"({settings.epsilon})")
    if settings.num_iterations < 1:  # a whole number: TRL's parser reads every recipe (presets.get_preset)
        raise ValueError(f"num_iterations = {settings.num_iterations!r}: a whole number >= 1 (updates per batch)")
    if not (_is_number(settings.top_entropy_quantile) and 0 <= settings.top_entropy_quantile <= 1):
        raise ValueError(f"top_entropy_quantile = {settings.top_entropy_quantile!r}: a share in [0, 1] (1 keeps "
                         "every token)")
    if settings.loss_type == "luspo" and settings.importance_sampling_level != "sequence":
        raise ValueError("loss_type 'luspo' scales GSPO's sequence-level loss and needs "
                         "importance_sampling_level='sequence' (--algorithm luspo sets both)")
    vllm = settings.use_vllm or settings.fast_inference
    mode = settings.vllm_importance_sampling_mode
    if (settings.loss_type == "vespo" and vllm and settings.vllm_importance_sampling_correction
            and mode not in ("token_truncate", "token_mask")):
        raise ValueError(f"loss_type 'vespo' with vLLM generation needs vllm_importance_sampling_mode 'token_truncate' "
                         f"or 'token_mask' (trl's trainer refuses {mode!r}): --vllm_importance_sampling_mode "
                         "token_truncate")
    if settings.sync_ref_model and settings.beta == 0:
        raise ValueError("sync_ref_model needs a reference model, and beta = 0 loads none: set beta > 0 or drop "
                         "sync_ref_model")
    if settings.importance_sampling_level == "sequence" and settings.loss_type in ("bnpo", "dr_grpo", "dapo", "cispo"):
        log.warning(f"importance_sampling_level='sequence' with loss_type {settings.loss_type!r} sums per-token terms, "
                    "weighting each sequence by its length; GSPO's setup is loss_type 'grpo' (--algorithm gspo)")


def algorithm_settings(settings: Any) -> dict[str, Any]:
    """The algorithm a preset runs, as a run folder records it: its name, paper and every field.

    ``"overridden"`` lists the fields that differ from the named variant's bundle (set on the command line or in the
    recipe).

    >>> from grpo_kit.training.presets import get_preset
    >>> algorithm_settings(get_preset("a100"))["fields"]["beta"]
    0.04
    """
    algorithm = get_algorithm(settings.algorithm)
    fields = {name: getattr(settings, name) for name in ALGORITHM_FIELDS}
    return {"name": algorithm.name, "paper": algorithm.paper, "fields": fields,
            "overridden": sorted(k for k, v in fields.items() if algorithm.fields[k] != v)}


def algorithm_markdown(recorded: dict[str, Any]) -> str:
    """The algorithm of :func:`algorithm_settings` as markdown bullets (the report and the model card).

    >>> print(algorithm_markdown({"name": "dr_grpo", "paper": "P", "fields": {"beta": 0.0}, "overridden": []}))
    - algorithm: dr_grpo (P)
    - beta: 0.0
    """
    lines = [f"- algorithm: {recorded['name']} ({recorded['paper']})"]
    if recorded.get("overridden"):
        lines[0] += f"; changed from the named variant: {', '.join(recorded['overridden'])}"
    lines += [f"- {k}: {v}" for k, v in recorded["fields"].items()]
    return "\n".join(lines)
