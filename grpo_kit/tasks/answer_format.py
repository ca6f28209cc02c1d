"""The answer format, in one place: a ``<reasoning>`` block, then an ``<answer>`` block.

The system prompt that asks for it, the strict and soft layout checks, the tag count, the tags the
tiny policy's tokenizer keeps whole and the rendering of a demonstration all read the names here.
The format and its system prompt are those of Unsloth's Llama 3.1 (8B) GRPO notebook as the blog post
"LLM Reinforcement Learning with GRPO" (2025-03-03) used it, with the post's extra instruction line.
Parsing lives here and scoring in :mod:`grpo_kit.tasks.rewards`, so rewards and evaluation read a
completion the same way (the parse/score split of the ``verifiers`` library). Every check runs in
linear time on any text. An :class:`ExtractionRule` pairs a reader with a check against the task's example: each task
has a ``strict`` and a ``flexible`` one (:func:`strictly` makes the first from the second).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grpo_kit.tasks.numbers import parse_number

__all__ = ["ANSWER", "REASONING", "SYSTEM_PROMPT", "TAGS", "Example", "ExtractionRule", "completion_text",
           "extract_final_answer", "extract_xml_answer", "is_soft_format", "is_strict_format", "render", "strictly",
           "visible", "xml_count"]

def visible(text: str) -> str:
    """``text`` without the characters that show nothing: Unicode's format characters (category Cf: zero-width spaces
    and joiners, the soft hyphen, a byte order mark), which ``str.strip`` keeps, so a question of zero-width spaces
    would pass for text. Linear time.

    >>> visible("\u200b\u200b"), visible("Par\u00adis\u200b")
    ('', 'Paris')
    """
    if text.isascii():
        return text
    import unicodedata

    return "".join(c for c in text if unicodedata.category(c) != "Cf")


#: The two blocks of the format, by tag name.
REASONING, ANSWER = "reasoning", "answer"
_OPEN_R, _CLOSE_R, _OPEN_A, _CLOSE_A = f"<{REASONING}>", f"</{REASONING}>", f"<{ANSWER}>", f"</{ANSWER}>"
#: The four tags, in the order they are written (the tiny policy's tokenizer keeps each as one token).
TAGS = (_OPEN_R, _CLOSE_R, _OPEN_A, _CLOSE_A)

#: The system prompt: the notebook's format block plus the blog post's extra line, which lifted the
#: instruct model's baseline.
SYSTEM_PROMPT = f"""Respond in the following format:
{_OPEN_R}
...
{_CLOSE_R}
{_OPEN_A}
...
{_CLOSE_A}
You must put your reasoning between the {_OPEN_R} tags and answer between the {_OPEN_A} tags."""

# The strict layout `^<reasoning>\n.*?\n</reasoning>\n<answer>\n.*?\n</answer>\n*$` (re.DOTALL, so the
# reasoning spans lines: unsloth #1761; `\n*$` admits trailing newlines), checked by string search in linear
# time: the regular expression backtracks quadratically on crafted completions (44 s for 340 KB).
_STRICT_OPEN, _STRICT_MIDDLE, _STRICT_CLOSE = f"{_OPEN_R}\n", f"\n{_CLOSE_R}\n{_OPEN_A}\n", f"\n{_CLOSE_A}"
# A reasoning closer, whitespace, an answer opener: a literal prefix, and the whitespace runs after different
# closers do not overlap, so a search is linear.
_SOFT_JOIN = re.compile(re.escape(_CLOSE_R) + r"\s*" + re.escape(_OPEN_A))
# The tag count's four pieces, each with the newlines the strict layout puts around it.
_TAG_LINES = (f"{_OPEN_R}\n", f"\n{_CLOSE_R}\n", f"\n{_OPEN_A}\n", f"\n{_CLOSE_A}")


def completion_text(completion: str | Sequence[Mapping[str, Any]] | Any) -> str:
    """Return the text of one completion in either of TRL's two forms.

    Args:
        completion: a ``str`` (standard dataset) or a list of chat messages
            ``[{"role": "assistant", "content": str}, ...]`` (conversational dataset).
            For a message list the last assistant message's ``content`` is used (the last
            message when none has a role).

    Returns:
        The text; ``""`` for anything else (``None``, an empty list, a message with no
        content). Never raises, so a reward function built on it never raises.

    >>> completion_text("<answer>\\n4\\n</answer>")
    '<answer>\\n4\\n</answer>'
    >>> completion_text([{"role": "assistant", "content": "42"}])
    '42'
    >>> completion_text(None)
    ''
    """
    if isinstance(completion, str):
        return completion
    if not isinstance(completion, Sequence) or not completion:
        return ""
    messages = [m for m in completion if isinstance(m, Mapping)]
    chosen = [m for m in messages if m.get("role") == "assistant"] or messages
    content = chosen[-1].get("content") if chosen else None
    return content if isinstance(content, str) else ""


def extract_xml_answer(text: str) -> str:
    """Return the text between the last ``<answer>`` and the next ``</answer>``, stripped.

    The Unsloth notebook's rule, kept as is: with no tags the whole text comes back stripped, so
    hard correctness on an untagged completion compares the whole completion with the gold answer.

    Args:
        text: a completion's text.

    Returns:
        ``text.split("<answer>")[-1].split("</answer>")[0].strip()``.

    >>> extract_xml_answer("<reasoning>\\n2+2\\n</reasoning>\\n<answer>\\n4\\n</answer>")
    '4'
    >>> extract_xml_answer("  no tags  ")
    'no tags'
    """
    return text.split(_OPEN_A)[-1].split(_CLOSE_A)[0].strip()


def extract_final_answer(text: str) -> str | None:
    """Return the first number inside a completion's ``<answer>`` tags (the soft correctness rule).

    Args:
        text: a completion's text.

    Returns:
        :func:`grpo_kit.tasks.numbers.parse_number` of :func:`extract_xml_answer` (``"$1,200.50"``
        gives ``"1200.50"``), or ``None`` when the answer holds no number.

    >>> extract_final_answer("<answer>\\n$1,200.50\\n</answer>")
    '1200.50'
    >>> extract_final_answer("<answer>\\n72 units\\n</answer>")
    '72'
    >>> extract_final_answer("<answer>\\nunknown\\n</answer>") is None
    True
    """
    return parse_number(extract_xml_answer(text))


def is_strict_format(text: str) -> bool:
    """Whether ``text`` is exactly reasoning then answer, each tag on its own line.

    The same completions as ``^<reasoning>\\n.*?\\n</reasoning>\\n<answer>\\n.*?\\n</answer>\\n*$`` with
    ``re.DOTALL`` (the notebook's pattern lacked DOTALL: unsloth #1761), decided in linear time.

    >>> is_strict_format("<reasoning>\\na\\nb\\n</reasoning>\\n<answer>\\n4\\n</answer>\\n")
    True
    >>> is_strict_format("<reasoning>a</reasoning><answer>4</answer>")
    False
    """
    body = text.rstrip("\n")
    if not text.startswith(_STRICT_OPEN) or not body.endswith(_STRICT_CLOSE):
        return False
    # The first `.*?` may be empty, so the middle may start right after the opening; the earliest middle
    # leaves the most room for the answer, which may be empty too.
    middle = text.find(_STRICT_MIDDLE, len(_STRICT_OPEN))
    return middle >= 0 and middle + len(_STRICT_MIDDLE) <= len(body) - len(_STRICT_CLOSE)


def is_soft_format(text: str) -> bool:
    """Whether ``text`` starts with a reasoning block followed by an answer block.

    The same completions as ``re.match(r"<reasoning>.*?</reasoning>\\s*<answer>.*?</answer>", text,
    re.DOTALL)``, decided in linear time (the expression backtracks quadratically: 20 s on 200 KB).

    >>> is_soft_format("<reasoning>a\\nb</reasoning> <answer>4</answer> more"), is_soft_format("4")
    (True, False)
    """
    last_close = text.rfind(_CLOSE_A)
    if not text.startswith(_OPEN_R) or last_close < 0:
        return False
    # The earliest closer followed by an answer opener leaves the most room for the answer.
    join = _SOFT_JOIN.search(text, len(_OPEN_R))
    return join is not None and join.end() <= last_close


#: One row of a task's data, as its loader gives it (``question``, ``answer`` and the task's own columns).
Example = Mapping[str, Any]


@dataclass(frozen=True)
class ExtractionRule:
    """How one rule reads an answer (``extract(text) -> str | None``; ``None``: nothing to read) and
    checks it against an example (``correct(answer, example) -> bool``). Answers are strings, so
    equal answers vote together in maj@k."""

    extract: Callable[[str], str | None]
    correct: Callable[[str, Example], bool]


def strictly(extract: Callable[[str], str | None]) -> Callable[[str], str | None]:
    """``extract``, but only from a completion in the strict layout (else ``None``): the ``strict`` rule of a
    task built from its ``flexible`` one.

    >>> strictly(extract_xml_answer)("<answer>4</answer>") is None
    True
    """
    return lambda text: extract(text) if is_strict_format(text) else None


def xml_count(text: str) -> float:
    """Score one text for its tags: 0.125 per tag present exactly once, less a tail penalty.

    The tags are ``"<reasoning>\\n"``, ``"\\n</reasoning>\\n"``, ``"\\n<answer>\\n"`` and
    ``"\\n</answer>"``. When ``</answer>`` occurs, 0.001 is taken off per character after
    the last one, surrounding whitespace stripped, so a perfect completion scores exactly
    0.5 with or without a trailing newline (the notebook docked the newline itself).

    >>> xml_count("<reasoning>\\nx\\n</reasoning>\\n<answer>\\n4\\n</answer>\\n")
    0.5
    >>> xml_count("<reasoning>\\nx\\n</reasoning>\\n<answer>\\n4\\n</answer>\\nmore")
    0.496
    """
    score = sum(0.125 for tag in _TAG_LINES if text.count(tag) == 1)
    if _CLOSE_A in text:
        score -= 0.001 * len(text.split(_CLOSE_A)[-1].strip())
    return float(round(score, 6))


def render(reasoning: str, answer: str) -> str:
    """A completion in the strict layout (a demonstration for the warm start).

    >>> render("17+79=96\\n96-60=36", "(17+79)-60")
    '<reasoning>\\n17+79=96\\n96-60=36\\n</reasoning>\\n<answer>\\n(17+79)-60\\n</answer>'
    """
    return f"{_STRICT_OPEN}{reasoning}{_STRICT_MIDDLE}{answer}{_STRICT_CLOSE}"
