"""Getting an answer out of a completion or a GSM8K solution.

Parsing lives here and scoring lives in :mod:`grpo_kit.rewards`, so the reward functions
and the evaluation read answers the same way (the parse/score split of `verifiers`).
The extraction rules are seed 002's (``../shared/seeds/002_*.txt``), with its fixes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "EXTRACTION_RULES",
    "completion_text",
    "extract_final_answer",
    "extract_hash_answer",
    "extract_xml_answer",
    "flexible_answer",
    "is_integer_literal",
    "is_strict_format",
    "normalize_number",
    "numbers_equal",
    "parse_number",
    "strict_answer",
]

# First number in a string: optional sign and `$`, thousands groups, optional decimals and `%`.
# The sign may stand before or after the `$` ("-$5" and "$-5" both give -5).
_NUMBER = re.compile(r"(-?)\$?(-?)(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?%?")
_INTEGER_LITERAL = re.compile(r"[+-]?\d+")
# The seed's strict layout; re.DOTALL lets the reasoning span lines (unsloth #1761), `\n*$`
# admits trailing newlines (seed 002).
_STRICT_FORMAT = re.compile(r"^<reasoning>\n.*?\n</reasoning>\n<answer>\n.*?\n</answer>\n*$", re.DOTALL)


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
    assistant = [m for m in messages if m.get("role") == "assistant"]
    chosen = assistant or messages
    content = chosen[-1].get("content") if chosen else None
    return content if isinstance(content, str) else ""


def extract_xml_answer(text: str) -> str:
    """Return the text between the last ``<answer>`` and the next ``</answer>``, stripped.

    This is the Unsloth notebook's (and seed 002's) rule, kept as is: with no tags the
    whole text comes back stripped, so hard correctness on an untagged completion compares
    the whole completion with the gold answer.

    Args:
        text: a completion's text.

    Returns:
        ``text.split("<answer>")[-1].split("</answer>")[0].strip()``.

    >>> extract_xml_answer("<reasoning>\\n2+2\\n</reasoning>\\n<answer>\\n4\\n</answer>")
    '4'
    >>> extract_xml_answer("  no tags  ")
    'no tags'
    """
    return text.split("<answer>")[-1].split("</answer>")[0].strip()


def extract_hash_answer(solution: str) -> str | None:
    """Return the final answer of a GSM8K worked solution: the text after the last ``####``.

    Args:
        solution: GSM8K's ``answer`` field (worked solution ending in ``#### N``).

    Returns:
        The stripped text after the last ``####`` with thousands commas removed
        (``"#### 1,000"`` gives ``"1000"``), or ``None`` when there is no ``####``.

    >>> extract_hash_answer("48/2 = 24\\n#### 1,024")
    '1024'
    >>> extract_hash_answer("no marker") is None
    True
    """
    if "####" not in solution:
        return None
    return solution.split("####")[-1].strip().replace(",", "")


def parse_number(text: str) -> str | None:
    """Return the first number in ``text`` as a plain numeric string.

    The sign is kept; ``$``, ``%`` and thousands commas are dropped. The seed's own regex
    dropped the sign and returned ``"0"`` when nothing matched; here ``"-3"`` stays ``"-3"``
    and no number gives ``None``.

    Args:
        text: any text.

    Returns:
        E.g. ``"1200.50"`` for ``"$1,200.50"``, or ``None`` when ``text`` holds no digit.

    >>> parse_number("$1,200.50 in total")
    '1200.50'
    >>> parse_number("it is -3 degrees")
    '-3'
    >>> parse_number("96%")
    '96'
    >>> parse_number("none") is None
    True
    """
    match = _NUMBER.search(text)
    return None if match is None else _number_text(match)


def _number_text(match: re.Match) -> str:
    sign = "-" if (match.group(1) or match.group(2)) else ""
    return sign + match.group(3).replace(",", "") + (match.group(4) or "")


def extract_final_answer(text: str) -> str | None:
    """Return the first number inside a completion's ``<answer>`` tags (seed 002's soft rule).

    Args:
        text: a completion's text.

    Returns:
        :func:`parse_number` of :func:`extract_xml_answer` (``"$1,200.50"`` gives
        ``"1200.50"``), or ``None`` when the answer holds no number.

    >>> extract_final_answer("<answer>\\n$1,200.50\\n</answer>")
    '1200.50'
    >>> extract_final_answer("<answer>\\n72 units\\n</answer>")
    '72'
    >>> extract_final_answer("<answer>\\nunknown\\n</answer>") is None
    True
    """
    return parse_number(extract_xml_answer(text))


def is_integer_literal(text: str) -> bool:
    """Whether ``text`` is exactly an integer literal: optional sign, then digits only.

    >>> [is_integer_literal(s) for s in ["-3", "42", "3.5", "1,000", "12 apples", ""]]
    [True, True, False, False, False, False]
    """
    return _INTEGER_LITERAL.fullmatch(text) is not None


def numbers_equal(a: str | None, b: str | None) -> bool:
    """Whether two numeric strings denote the same number (``"1200.0"`` equals ``"1200"``).

    Either side ``None`` or not a number gives ``False``. Compared as floats, so the
    tolerance is float equality (GSM8K answers are integers well inside float precision).

    >>> numbers_equal("1200.0", "1200"), numbers_equal("3", "-3"), numbers_equal(None, "1")
    (True, False, False)
    """
    if a is None or b is None:
        return False
    try:
        return float(a) == float(b)
    except ValueError:
        return False


def is_strict_format(text: str) -> bool:
    """Whether ``text`` is exactly reasoning then answer, each tag on its own line (seed 002's regex).

    >>> is_strict_format("<reasoning>\\na\\nb\\n</reasoning>\\n<answer>\\n4\\n</answer>\\n")
    True
    >>> is_strict_format("<reasoning>a</reasoning><answer>4</answer>")
    False
    """
    return _STRICT_FORMAT.match(text) is not None


def normalize_number(text: str | None) -> str | None:
    """Canonical form of a numeric string, so equal numbers compare equal as strings.

    >>> [normalize_number(s) for s in ["1200.50", "1200.0", "0012", "-0", "1e3", "x", None]]
    ['1200.5', '1200', '12', '0', '1000', None, None]
    """
    from decimal import Decimal, InvalidOperation

    if text is None:
        return None
    try:
        value = Decimal(text)
    except InvalidOperation:
        return None
    if not value.is_finite():
        return None
    out = format(value.normalize(), "f")
    return "0" if out in ("-0", "0") else out


def strict_answer(text: str) -> str | None:
    """The ``strict`` rule: the number inside ``<answer>`` of a strictly formatted completion.

    Returns:
        The normalised first number of the answer block, or ``None`` when the completion is not
        in the strict format or its answer holds no number.

    >>> strict_answer("<reasoning>\\nx\\n</reasoning>\\n<answer>\\n$1,200.0\\n</answer>")
    '1200'
    >>> strict_answer("The answer is 1200.") is None
    True
    """
    return normalize_number(extract_final_answer(text)) if is_strict_format(text) else None


def flexible_answer(text: str) -> str | None:
    """The ``flexible`` rule: the last number anywhere in the completion (lm-evaluation-harness's
    flexible-extract for GSM8K), normalised; ``None`` when there is none.

    >>> flexible_answer("3 + 4 = 7, so the answer is 7.")
    '7'
    >>> flexible_answer("<answer>\\n$1,200\\n</answer>")
    '1200'
    """
    matches = list(_NUMBER.finditer(text))
    if not matches:
        return None
    return normalize_number(_number_text(matches[-1]))


#: Named answer-extraction rules, reported side by side (as lm-evaluation-harness's filters).
EXTRACTION_RULES = {"strict": strict_answer, "flexible": flexible_answer}
