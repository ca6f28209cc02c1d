"""An export checked against a run's trained policy (:func:`verify_export`): the runtime that will serve it
(transformers for a merged model, llama.cpp through llama-cpp-python for GGUF) answers the same held-out questions,
greedily, as the trained policy in the run folder, and is held to a rule by its type:

- a merged model in float32 must give identical completions, and (in the trained policy's dtype) its weights
  must equal the trained policy merged in memory;
- a GGUF in f32 / f16 / bf16, or a merged model in another dtype, must give at least
  :data:`IDENTICAL_THRESHOLDS` of identical completions;
- a quantized GGUF must agree on at least :data:`AGREEMENT_THRESHOLDS` of the questions' flexible answers, and
  its flexible accuracy must not be significantly lower (exact McNemar test, p < 0.05).

The result, :class:`Verification`, carries the numbers, the verdict, the first question where the two differ and the
SHA-256 of every file of the export (so an upload can tell it is the checked artefact).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_kit.evaluation.scoring import evaluate
from grpo_kit.runs.export_formats import FORMATS
from grpo_kit.runs.export_reference import Reference, load_reference, open_trained_run
from grpo_kit.system.files import sha256_file

__all__ = ["AGREEMENT_THRESHOLDS", "DEFAULT_AGREEMENT", "IDENTICAL_THRESHOLDS", "Verification", "check_questions",
           "file_hashes", "verify_export"]

#: Share of identical greedy completions an unquantized export must reach, by type. Measured on the kit's
#: warm-started tiny policy (benchmarks/export.py, 32 GSM8K test questions, 64-token completions): the float32
#: merge, and GGUF f32, f16 and bf16 each gave 32/32; q8_0 30/32, q4_k_m 28/32, q4_0 26/32. The thresholds sit
#: below that (one or more questions of slack for another CPU's kernels, more for bf16's 8-bit mantissa). Merged
#: float16 / bfloat16 (a GPU run's base dtype) take the GGUF type's threshold; they are not measured here. Long
#: completions of a large model diverge sooner: ``threshold=`` (``--threshold``) sets another, stated in the card.
IDENTICAL_THRESHOLDS = {"float32": 1.0, "f32": 0.9, "f16": 0.875, "bf16": 0.75, "float16": 0.875, "bfloat16": 0.75}
#: Share of questions on which a quantized GGUF gives the trained policy's flexible answer, by type (else
#: :data:`DEFAULT_AGREEMENT`); measured as above: q8_0 100%, q4_k_m 97%, q4_0 91%.
AGREEMENT_THRESHOLDS = {"q8_0": 0.9}
DEFAULT_AGREEMENT = 0.75
_SIGNIFICANT = 0.05


@dataclass
class Verification:
    """The check of one export against a run's trained policy.

    Attributes:
        export: the checked folder's or ``.gguf`` file's name; ``kind``: ``"merged"`` or ``"gguf"``; ``dtype``: the
            merged model's dtype or the GGUF's type.
        questions: held-out questions asked (greedy); ``identical``: how many completions were identical.
        agreement: share of questions with the same flexible answer (two completions without one agree only when
            identical); ``accuracy_trained`` /
            ``accuracy_export``: flexible accuracy; ``mcnemar_p``: exact McNemar test on its flips.
        weights: for a merged export in the trained dtype, ``{"max_abs_diff", "differing", "missing"}``.
        rule: what had to hold; ``passed``; ``first_difference``: the first question where the completions
            differ (``question``, ``trained``, ``export``), ``None`` when none do.
        files: SHA-256 of each file of the export, at verification time.
        run, step, model_digest: the run folder checked against (relative to the folder holding
            ``verification.json``: nothing of this machine goes to the Hub with it), the step its model was trained
            to and the trained weights' digest (``finished.json``) at verification time.
    """

    export: str
    kind: str
    dtype: str
    questions: int
    identical: int
    agreement: float
    accuracy_trained: float
    accuracy_export: float
    mcnemar_p: float
    rule: str
    passed: bool
    weights: dict[str, Any] | None = None
    first_difference: dict[str, str] | None = None
    files: dict[str, str] = field(default_factory=dict)
    run: str | None = None
    step: int | None = None
    model_digest: str | None = None

    @property
    def identical_share(self) -> float:
        return self.identical / self.questions

    def summary(self) -> str:
        """One paragraph: the numbers and the verdict."""
        text = (f"{self.kind} export ({self.dtype}) against the trained policy on {self.questions} held-out questions "
                f"(greedy): {self.identical}/{self.questions} identical completions ({self.identical_share:.0%}), "
                f"flexible answers agree on {self.agreement:.0%}, flexible accuracy {self.accuracy_trained:.3f} -> "
                f"{self.accuracy_export:.3f} (exact McNemar p = {self.mcnemar_p:.3g})")
        if self.weights is not None:
            text += f", weights max |diff| {self.weights['max_abs_diff']:.3g}"
        return f"{text}. Rule: {self.rule}. {'PASSED' if self.passed else 'REFUSED'}."

    def side_by_side(self) -> str:
        """The first differing question, the trained policy's completion beside the export's."""
        if self.first_difference is None:
            return "(every completion is identical)"
        d = self.first_difference
        return (f"first differing question: {d['question']!r}\n--- trained policy ---\n{d['trained']}\n"
                f"--- export ---\n{d['export']}")


def file_hashes(folder: Path) -> dict[str, str]:
    """The SHA-256 of each file of an export folder by name, but its ``README.md`` and ``verification.json`` (written
    after the check)."""
    return {p.name: sha256_file(p) for p in sorted(folder.iterdir())
            if p.is_file() and p.name not in ("README.md", "verification.json")}


def check_questions(questions: Any, threshold: Any) -> None:
    """Refuse a check's settings before any work.

    Raises:
        ValueError: ``questions`` not a whole number >= 1, or ``threshold`` (``None``: the type's) not in [0, 1].
    """
    if isinstance(questions, bool) or not isinstance(questions, int) or questions < 1:
        raise ValueError(f"questions must be a whole number >= 1, got {questions!r}")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                  or not 0 <= threshold <= 1):
        raise ValueError(f"threshold must be a share in [0, 1], got {threshold!r}")


def verify_export(export: str | Path, against: str | Path, questions: int = 32, reference: Reference | None = None,
                  threshold: float | None = None, trust_remote_code: bool = False) -> Verification:
    """Check an export against a run's trained policy: the serving runtime's greedy answers to held-out questions.

    Works on an export made anywhere (this kit, Unsloth's ``save_pretrained_merged``, by hand): a folder
    with ``config.json`` is loaded with transformers, a ``.gguf`` file (or a folder holding one) with
    llama.cpp. The questions are the first ``questions`` of the run's baseline slice of the task's test split
    (seeded as ``eval_settings.json`` says), with its completion budget. The rules are in the module docstring.

    Args:
        export: the export folder or ``.gguf`` file.
        against: the run folder (``model/``, ``train_settings.json``).
        questions: held-out questions to ask (default 32).
        reference: the trained policy's answers already computed
            (:func:`grpo_kit.runs.export_reference.load_reference`; :func:`grpo_kit.runs.export.export` passes them);
            its models are released before the export loads.
        threshold: replaces the type's threshold (:data:`IDENTICAL_THRESHOLDS`, :data:`AGREEMENT_THRESHOLDS`), in
            [0, 1]; a float32 merged export must still be identical.
        trust_remote_code: the run's task file may import and run Python of its own
            (:func:`grpo_kit.tasks.task_file.check_task_code`).

    Returns:
        :class:`Verification` (``passed`` says the verdict; nothing is raised for a failed check).

    Raises:
        FileNotFoundError: no export, no run folder or no trained model in it.
        ValueError: ``questions`` below 1; a folder that is neither a transformers model nor holds one GGUF.
    """
    check_questions(questions, threshold)
    export = Path(export)
    if not export.exists():
        raise FileNotFoundError(f"no export at {export}")
    fmt = next((f for f in FORMATS.values() if f.found(export) is not None), None)
    if fmt is None:
        raise ValueError(f"{export} is neither a transformers model folder (config.json) nor a .gguf file (or a "
                         "folder holding exactly one)")
    fmt.check_tools(verifying=True)  # before any model loads
    run, settings = open_trained_run(against)
    ref = reference or load_reference(run, settings, questions, trust_remote_code)
    digest = run.check_model()
    from grpo_kit.evaluation.compare import flips
    from grpo_kit.evaluation.stats import mcnemar_exact

    backend, dtype, weights = fmt.open(fmt.found(export), ref)
    before, after = ref.records, evaluate(backend, ref.rows, ref.sampling, task=ref.task).records
    # Bytes that end inside a UTF-8 character are spelled U+FFFD by one decoder and dropped by another: the same
    # tokens, two spellings. Compared without the replacement character.
    same = [a["completion"].replace("\ufffd", "") == b["completion"].replace("\ufffd", "")
            for a, b in zip(before, after)]
    # The same flexible answer; two completions that both give none agree only when they are the same text (a
    # policy that never answers would otherwise agree with anything that never answers).
    agree = [a["flexible_answer"] == b["flexible_answer"] and (a["flexible_answer"] is not None or s)
             for a, b, s in zip(before, after, same)]
    right = [[r["flexible_correct"] > 0 for r in records] for records in (before, after)]
    n = len(before)
    acc_before, acc_after, p = sum(right[0]) / n, sum(right[1]) / n, mcnemar_exact(*flips(*right))
    rule, passed = _verdict(sum(same) / n, sum(agree) / n, acc_before, acc_after, p, quantized=fmt.quantizes,
                            dtype=dtype, weights=weights, threshold=threshold, quantized_base=ref.quantized_base)
    difference = next(({"question": a["question"], "trained": a["completion"], "export": b["completion"]}
                       for a, b, s in zip(before, after, same) if not s), None)
    files = file_hashes(export) if export.is_dir() else {export.name: sha256_file(export)}
    beside = export if export.is_dir() else export.parent  # where verification.json goes
    return Verification(export=export.name, kind=fmt.name, dtype=dtype, questions=n, identical=sum(same),
                        agreement=sum(agree) / n, accuracy_trained=acc_before, accuracy_export=acc_after, mcnemar_p=p,
                        rule=rule, passed=passed, weights=weights, first_difference=difference, files=files,
                        run=os.path.relpath(run.path.resolve(), beside.resolve()), step=run.finished_step(),
                        model_digest=digest)


def _verdict(identical: float, agreement: float, acc_before: float, acc_after: float, p: float, *, quantized: bool,
             dtype: str, weights: dict[str, Any] | None, threshold: float | None, quantized_base: bool
             ) -> tuple[str, bool]:
    """``(the rule an export is held to, whether it passed)``, from its shares of identical completions and agreeing
    flexible answers, both accuracies with their McNemar ``p``, and what it is (the module docstring's rules)."""
    # trained on a 4-bit base, exported from its 16-bit original (not the same weights), or a quantized GGUF
    if quantized_base or quantized and dtype not in IDENTICAL_THRESHOLDS:
        need = threshold if threshold is not None else DEFAULT_AGREEMENT if quantized_base else \
            AGREEMENT_THRESHOLDS.get(dtype, DEFAULT_AGREEMENT)
        rule = (f"flexible answers agree on >= {need:.0%} and flexible accuracy not significantly lower (McNemar p "
                f">= {_SIGNIFICANT})" + (": the trained policy ran on a 4-bit base, the export on its 16-bit "
                                         "original" if quantized_base else ""))
        return rule, agreement >= need and not (acc_after < acc_before and p < _SIGNIFICANT)
    exact = dtype == "float32"  # a merged export in float32 (a GGUF's types are f32, f16, ...)
    need = 1.0 if exact else threshold if threshold is not None else IDENTICAL_THRESHOLDS.get(dtype, 1.0)
    rule, passed = f">= {need:.0%} identical completions", identical >= need
    if weights is not None and exact:  # a 16-bit merge done elsewhere may round differently: reported only
        rule += " and every tensor equal to the trained policy's merge"
        passed = passed and not weights["differing"] and not weights["missing"]
    return rule, passed
