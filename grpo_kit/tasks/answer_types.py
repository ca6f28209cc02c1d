"""Answer types a task file can declare (``answer_type``): how a gold answer is read and checked, each type with its
``strict`` and ``flexible`` extraction rules and its correctness reward.

- ``number``: compared as numbers (:mod:`grpo_kit.tasks.numbers`); strict reads the first number inside
  ``<answer>`` of a completion in the strict layout, flexible the last number anywhere (lm-evaluation-harness's
  flexible-extract for GSM8K). Reward: ``soft_correctness_reward_func``.
- ``text``: compared as normalised strings (:func:`normalize_text`): Unicode composed (NFC) with ligatures read as
  their letters, case folded and surrounding whitespace ignored, word
  joiners (hyphens, dashes, underscores, slashes) read as the spaces they stand for, the rest of ASCII punctuation
  removed, inner whitespace runs made one space (lm-evaluation-harness's ``exact_match`` with ``ignore_case`` and
  ``ignore_punctuation``, which would delete the joiners: "thirty-eight" would read "thirtyeight"). An answer that is
  exactly one number as written is compared as that number (:func:`text_answer`): removing its punctuation would
  make "-5" equal "5" and "3.14" equal "314".
  Strict reads ``<answer>`` of a strictly formatted completion; flexible the ``<answer>`` however it is written,
  else the text after the last ``####``, else the last non-empty line. Reward: ``text_correctness_reward_func``.
- ``math``: checked with math-verify (:mod:`grpo_kit.tasks.math_verify`); strict reads ``<answer>`` of a strictly
  formatted completion, flexible the last ``\\boxed{...}``, else ``<answer>``, else the text after ``####``.
  Reward: ``math_verify_reward_func``.
- ``choice``: one letter among the options (``choices``, default ``ABCD``); strict reads the letter of ``<answer>``
  (``B``, ``(B)``, ``B.`` or ``B) text``) of a strictly formatted completion, flexible that letter however the
  completion is written, else after ``####``, else the last ``(X)`` or standalone option letter. Reward:
  ``choice_correctness_reward_func``.

Every function here runs in linear time on any text and never raises on a completion.
"""

from __future__ import annotations

import functools
import re
import string
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

from grpo_kit.tasks.answer_format import extract_final_answer, extract_xml_answer, strictly, visible
from grpo_kit.tasks.numbers import exact_number, last_number, normalize_number
from grpo_kit.tasks.rewards import describe, per_answer

__all__ = ["ANSWER_TYPES", "MAX_BOXED_CHARS", "WORD_JOINERS", "AnswerType", "answer_type",
           "choice_correctness_reward_func", "choice_letter", "last_boxed", "normalize_text",
           "text_answer", "text_correctness_reward_func"]

#: Characters that join words ("thirty-eight", "well_known", "either/or"): read as a space, so "thirty-eight" and
#: "thirty eight" compare equal. Hyphen-minus, underscore and slash, and Unicode's hyphens and dashes (U+2010 to U+2015,
#: U+2212 minus); the soft hyphen (U+00AD) and word joiner (U+2060) are invisible, so they join without a space
#: (:func:`grpo_kit.tasks.answer_format.visible` drops them).
WORD_JOINERS = "-_/\u2010\u2011\u2012\u2013\u2014\u2015\u2212"
_PUNCTUATION = str.maketrans({**dict.fromkeys(string.punctuation), **dict.fromkeys(WORD_JOINERS, " ")})
_SPACES = re.compile(r"\s+")
_BOXED_OPEN = re.compile(r"\\boxed\s*\{")
#: Longest ``\\boxed{...}`` content read, in characters.
MAX_BOXED_CHARS = 4096
# A letter answer: "B", "(B)", "B.", "B)", "B: text", "B. text"; not "A and B" or "a cat" (words, not one option).
_LETTER = re.compile(r"\(?([A-Za-z])\)?(?:[.):]|$)")
_PAREN_LETTER = re.compile(r"\(([A-Z])\)")
_LONE_LETTER = re.compile(r"(?<![A-Za-z])([A-Z])(?![A-Za-z])")


@functools.cache
def _letters() -> tuple[dict[int, str], frozenset[str]]:
    """``str.translate``'s table of the ligatures and font variants of letters, each to those letters (``ﬁ`` ->
    ``fi``, ``𝑥`` -> ``x``): the characters of Unicode's planes 0 and 1 (where every one of them lies) whose
    compatibility mapping is ``<compat>`` or ``<font>`` and gives letters. Superscripts, fractions, circled and
    full-width forms are left alone: ``x²`` is not ``x2``, and a full-width digit states no number
    (:mod:`grpo_kit.tasks.numbers`). Built once (about 0.1 s), at the first text that is not ASCII, with the set of
    those characters (a text holding none is not translated: ``frozenset.isdisjoint`` scans it in C)."""
    table = {}
    for code in range(0x80, 0x20000):
        char = chr(code)
        if unicodedata.decomposition(char).startswith(("<compat>", "<font>")):
            folded = unicodedata.normalize("NFKC", char)
            if folded.isalpha():
                table[code] = folded
    return table, frozenset(map(chr, table))


def normalize_text(text: str | None) -> str | None:
    """A text answer in the form compared: invisible characters dropped
    (:func:`grpo_kit.tasks.answer_format.visible`), composed as Unicode's NFC composes it (a decomposed ``é`` is the
    ``é`` it renders), ligatures and font variants of letters made those letters (:func:`_letters`), case folded
    (``str.casefold``: Unicode's caseless match, ``ß`` as ``ss``), word joiners (:data:`WORD_JOINERS`) made spaces,
    the rest of ASCII punctuation removed (lm-evaluation-harness's ``ignore_punctuation``: ``string.punctuation``),
    whitespace runs one space, stripped (``None`` and a text that normalises to nothing give ``None``). Not NFKC
    whole: it would make ``x²`` read ``x2`` and ``½`` read ``1⁄2``, different answers made equal.

    >>> normalize_text("  Paris. "), normalize_text("New  York!"), normalize_text("?!")
    ('paris', 'new york', None)
    >>> normalize_text("Two hundred and sixty-five") == normalize_text("two hundred and sixty five")
    True
    >>> normalize_text("O'Brien"), normalize_text("Guinea\u2013Bissau")
    ('obrien', 'guinea bissau')
    >>> normalize_text("Caf\u0065\u0301") == normalize_text("Caf\u00e9")
    True
    >>> normalize_text("\ufb01sh"), normalize_text("x\u00b2")
    ('fish', 'x²')
    """
    if text is None:
        return None
    text = visible(text)
    if not text.isascii():
        text = unicodedata.normalize("NFC", text)
        table, foldable = _letters()
        if not foldable.isdisjoint(text):
            text = text.translate(table)
    return _SPACES.sub(" ", text.casefold().translate(_PUNCTUATION)).strip() or None


def text_answer(text: str | None) -> str | None:
    """A ``text`` answer in the form compared: exactly one number as written
    (:func:`grpo_kit.tasks.numbers.exact_number`: ``"-5"``, ``"3.14"``, ``"1,200"``) in its canonical form, so that it
    compares as a number; any other text in :func:`normalize_text`'s form (``None`` when nothing is left).

    >>> [text_answer(s) for s in ["-5", "5", "3.14", "314", "1,200", " Paris. ", "3.14 metres"]]
    ['-5', '5', '3.14', '314', '1200', 'paris', '314 metres']
    """
    return None if text is None else exact_number(text) or normalize_text(text)


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (braces matched within :data:`MAX_BOXED_CHARS`), or ``None``.

    >>> last_boxed("so \\\\boxed{1} then \\\\boxed{\\\\frac{1}{2}}")
    '\\\\frac{1}{2}'
    """
    found = list(_BOXED_OPEN.finditer(text))  # a literal start: one pass
    if not found:
        return None
    depth, start = 1, found[-1].end()
    for i in range(start, min(len(text), start + MAX_BOXED_CHARS)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i].strip()
    return None


def _stated(text: str) -> str | None:
    """What a completion states as its answer however it is written: the ``<answer>``'s content, else the first line
    after the last ``####`` (the warm start's plain style), else ``None``."""
    if "<answer>" in text:
        return extract_xml_answer(text)
    at = text.rfind("####")
    return None if at < 0 else text[at + 4:].strip().split("\n", 1)[0].strip() or None


def choice_letter(text: str | None) -> str | None:
    """The option letter an answer states (``"B"``, ``"(b)"``, ``"B. Paris"``), upper case; ``None`` when it does not
    start with one, or states more than one ("A and B").

    >>> [choice_letter(s) for s in ["B", "(c)", "D. Paris", "A: yes", "Paris", "A and B", None]]
    ['B', 'C', 'D', 'A', None, None, None]
    """
    match = _LETTER.match(text.strip()) if text else None
    return match.group(1).upper() if match else None


@describe("Text correctness", 1.0, columns=("answer",))
def text_correctness_reward_func(prompts=None, completions=None, answer=None, **kwargs) -> list[float]:
    """Text correctness: 1.0 when the text inside ``<answer>`` equals the gold answer once both are normalised
    (:func:`text_answer`: case, punctuation, whitespace; a number as a number).

    >>> text_correctness_reward_func(completions=["<answer>\\n paris.\\n</answer>", "<answer>Lyon</answer>"],
    ...                              answer=["Paris", "Paris"])
    [1.0, 0.0]
    >>> text_correctness_reward_func(completions=["<answer>5</answer>", "<answer>314</answer>"], answer=["-5", "3.14"])
    [0.0, 0.0]
    """
    return per_answer(completions, answer,
                      lambda t, gold: float(text_answer(extract_xml_answer(t)) == text_answer(gold) is not None))


@describe("Choice correctness", 1.0, columns=("answer",))
def choice_correctness_reward_func(prompts=None, completions=None, answer=None, **kwargs) -> list[float]:
    """Choice correctness: 1.0 when the option letter inside ``<answer>`` (:func:`choice_letter`) is the gold letter.

    >>> choice_correctness_reward_func(completions=["<answer>(B)</answer>", "<answer>C</answer>"], answer=["B", "B"])
    [1.0, 0.0]
    """
    return per_answer(completions, answer,
                      lambda t, gold: float(choice_letter(extract_xml_answer(t)) == choice_letter(gold) is not None))


def _text_flexible(text: str) -> str | None:
    stated = _stated(text)
    lines = [line for line in text.strip().splitlines() if line.strip()] if stated is None else [stated]
    return text_answer(lines[-1]) if lines else None


def _math_flexible(text: str) -> str | None:
    return last_boxed(text) or _stated(text) or None


def _among(letter: str | None, letters: str) -> str | None:
    return letter if letter is not None and letter in letters else None


def _choice_flexible(choices: str) -> Callable[[str], str | None]:
    def read(text: str) -> str | None:
        if (stated := _stated(text)) is not None:
            letter = choice_letter(stated)
        else:
            found = [m.group(1) for m in _PAREN_LETTER.finditer(text) if m.group(1) in choices] or \
                    [m.group(1) for m in _LONE_LETTER.finditer(text) if m.group(1) in choices]
            letter = found[-1] if found else None
        return _among(letter, choices)

    return read


@dataclass(frozen=True)
class AnswerType:
    """One answer type: its rules and its correctness reward.

    Attributes:
        name: ``number``, ``text``, ``math`` or ``choice``.
        strict: ``text -> answer | None`` (only from a completion in the strict layout).
        flexible: ``text -> answer | None`` (however the completion is written).
        same: ``(read answer, gold answer) -> bool``.
        reward: the name of its correctness reward (a built-in reward).
        gold: ``gold text -> canonical gold | None`` (``None``: not an answer of this type; a bad row).
        needs: what a gold answer of this type must be, for the error message.
    """

    name: str
    strict: Callable[[str], str | None]
    flexible: Callable[[str], str | None]
    same: Callable[[str, str], bool]
    reward: str
    gold: Callable[[str], str | None]
    needs: str


def _math_gold(gold: str) -> str | None:
    from grpo_kit.tasks.math_verify import math_answer

    return math_answer(gold)


def _math_same(answer: str, gold: str) -> bool:
    from grpo_kit.tasks.math_verify import math_verifier

    return math_verifier()(gold, answer) is True


def answer_type(name: str, choices: str = "ABCD") -> AnswerType:
    """The :class:`AnswerType` called ``name`` (``choices``: the option letters of ``choice``).

    Raises:
        ValueError: an unknown name.

    >>> t = answer_type("text")
    >>> t.strict("<reasoning>\\nx\\n</reasoning>\\n<answer>\\nThe Hague\\n</answer>")
    'the hague'
    >>> t.flexible("so\\n#### the hague.")
    'the hague'
    """
    if name == "number":
        return AnswerType("number", strictly(lambda t: normalize_number(extract_final_answer(t))), last_number,
                          lambda a, g: a == normalize_number(g), "soft_correctness_reward_func", exact_number,
                          "a number as written (a point for decimals and commas only between thousands, as in "
                          "1,234.5; 2e3 is read too)")
    if name == "text":
        return AnswerType("text", strictly(lambda t: text_answer(extract_xml_answer(t))), _text_flexible,
                          lambda a, g: a == text_answer(g), "text_correctness_reward_func",
                          lambda g: g.strip() if normalize_text(g) is not None else None,
                          "text with at least one letter or digit")
    if name == "math":
        return AnswerType("math", strictly(lambda t: extract_xml_answer(t) or None), _math_flexible, _math_same,
                          "math_verify_reward_func", _math_gold,
                          "a LaTeX answer math-verify can read (its braces paired, e.g. \\frac{1}{2}) or a number")
    if name == "choice":
        return AnswerType("choice", strictly(lambda t: _among(choice_letter(extract_xml_answer(t)), choices)),
                          _choice_flexible(choices), lambda a, g: a == choice_letter(g),
                          "choice_correctness_reward_func", lambda g: _among(choice_letter(g), choices),
                          f"one option letter among {', '.join(choices)}")
    raise ValueError(f"unknown answer type {name!r}: choose one of {', '.join(ANSWER_TYPES)}")


#: The answer types a task file may declare.
ANSWER_TYPES = ("number", "text", "math", "choice")
