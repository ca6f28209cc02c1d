"""The before/after report: the greedy table with intervals, flips and McNemar tests, the headline test, sampled
metrics, diagnostics and the alarms raised while training, as markdown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from grpo_kit.evaluation.compare import compare_markdown, intervals_markdown
from grpo_kit.evaluation.scoring import EvalResult
from grpo_kit.system.logs import counted

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["BeforeAfter", "alarms_markdown", "format_only_sentence", "report_markdown"]


@dataclass
class BeforeAfter:
    """One policy measured before and after training on the same questions.

    Attributes:
        before, after: the greedy evaluations.
        table: :func:`grpo_kit.evaluation.compare.compare` of the two.
        before_sampled, after_sampled: the sampled evaluations, when there were samples.
        samples, temperature: how many samples per question, at which temperature (0: none).
        alarms: what the run raised while training (reward hacking, stale vLLM weights).
    """

    before: EvalResult
    after: EvalResult
    table: pd.DataFrame
    before_sampled: EvalResult | None = None
    after_sampled: EvalResult | None = None
    samples: int = 0
    temperature: float = 0.0
    alarms: list[dict[str, Any]] = field(default_factory=list)


def alarms_markdown(alarms: list[dict[str, Any]]) -> str:
    """The alarms raised while training, one bullet each (``"None raised."`` when there were none)."""
    if not alarms:
        return "None raised."
    lines = []
    for a in alarms:
        if a.get("kind") == "reward_hacking":
            lines.append(f"- **Reward hacking** at step {a['step']}: training reward {a['reward_before']:.3f} -> "
                         f"{a['reward_after']:.3f} while {a.get('split', 'held-out')} {a['rule']} accuracy fell "
                         f"{a['accuracy_before']:.3f} -> {a['accuracy_after']:.3f} ({a['right_to_wrong']} "
                         f"right->wrong, {a['wrong_to_right']} wrong->right, McNemar p = {a['mcnemar_p']:.2g})")
        elif a.get("kind") == "reward_never_judged":
            lines.append(f"- **Reward never judged**: {a['reward']} returned no number for any of the "
                         f"{counted(a['completions'], 'completion')} of training (None for every one"
                         + (f", or raised {a['raised']} times" if a.get("raised") else "") + "), up to step "
                         f"{a['step']}: it taught nothing")
        else:
            lines.append(f"- **Stale vLLM weights** at step {a['step']}: mean log-probability gap "
                         f"{a['mean_logp_gap']:.3f} nats per token (threshold {a['threshold']:g})")
    return "\n".join(lines)


def format_only_sentence(table: pd.DataFrame) -> str:
    """The report's sentence on the part of the strict-accuracy gain due to the answer format alone
    (:func:`grpo_kit.evaluation.compare.compare`'s ``format_only_gain``, which lies between 0 and the strict gain), with
    a leading space; empty when the table has no strict and flexible accuracy."""
    if "format_only_gain" not in table.attrs:
        return ""
    a = table.attrs
    if a["strict_gain"] <= 0:
        return f" Strict accuracy did not rise ({a['strict_gain']:+.3f}), so none of it is format only."
    return (f" Of the strict-accuracy gain of {a['strict_gain']:+.3f}, {a['format_only_gain']:+.3f} is format only "
            f"(flexible accuracy, which reads the answer anywhere, changed {a['flexible_gain']:+.3f}); "
            f"{a['format_only_questions']} of the {counted(a['strict_wrong_to_right'], 'question')} strict match "
            "turned wrong->right were already right by flexible extract.")


def report_markdown(measured: BeforeAfter, title: str, notes: str = "", settings: dict[str, Any] | None = None,
                    wall: dict[str, float] | None = None, versions: dict[str, str] | None = None,
                    algorithm: str = "") -> str:
    """The before/after report: the greedy table, the headline test, sampled metrics, diagnostics, alarms.

    Args:
        measured: the two evaluations and their comparison (:func:`grpo_kit.runs.measure.measure_after`'s result).
        title: the first heading.
        notes: a paragraph under "What this shows" (the demo's caveats).
        settings, wall, versions: extra sections, as ``name: value`` bullets.
        algorithm: the GRPO variant and its fields as markdown (an "Algorithm" section; the run folder's
            ``train_settings.json`` records it).
    """
    import pandas as pd

    table, hard = measured.table, measured.table.attrs
    headline = hard["label"]
    lines = [f"# {title}", "",
             f"{measured.before.task.name}, before and after GRPO, on the same {len(measured.before.correct())} "
             "questions (paired by question id). Values with 95% bootstrap intervals over questions; deltas with "
             "paired intervals; exact McNemar tests on the flips. Strict accuracy reads the answer only from a "
             "completion in the exact answer format, flexible accuracy from anywhere in it (lm-evaluation-harness's "
             "strict-match and flexible-extract). The last row adds the reward rows with weight 1 each; the weighted "
             "total GRPO trained on (TRL's `reward`) weights them as the run's rewards do.", "", "## Greedy", "",
             compare_markdown(table), "",
             f"{headline}: {hard['wrong_to_right']} wrong->right, {hard['right_to_wrong']} right->wrong, exact "
             f"McNemar p = {hard['mcnemar_p']:.3g}." + format_only_sentence(table), ""]
    if measured.before_sampled is not None and measured.after_sampled is not None:
        lines += [f"## Sampled ({measured.samples} per question, temperature {measured.temperature})", "",
                  intervals_markdown({"before": measured.before_sampled.sampled(),
                                      "after": measured.after_sampled.sampled()}), ""]
    diag = pd.DataFrame({"before": measured.before.diagnostics(), "after": measured.after.diagnostics()})
    lines += ["## Diagnostics (greedy completions)", "", diag.to_markdown(floatfmt=".3f"), "",
              "## Alarms during training", "", alarms_markdown(measured.alarms), ""]
    if notes:
        lines += ["## What this shows", "", notes, ""]
    if algorithm:
        lines += ["## Algorithm", "", algorithm, ""]
    for heading, values, fmt in (("Settings", settings, "{}"), ("Wall times (s)", wall, "{:.1f}"),
                                 ("Versions", versions, "{}")):
        if values:
            lines += [f"## {heading}", "", *[f"- {k}: {fmt.format(v)}" for k, v in values.items()], ""]
    return "\n".join(lines)
