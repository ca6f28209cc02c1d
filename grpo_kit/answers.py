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
    "is_soft_format",
    "is_strict_format",
    "normalize_number",
    "numbers_equal",
    "parse_number",
    "strict_answer",
]

# A number: optional sign and `$`, thousands groups, optional decimals and `%`. The sign may stand
# before or after the `$` ("-$5" and "$-5" both give -5). Digits are ASCII only (re.ASCII): a
# completion writing '٣' or '３' states no number to any reward or rule (the gold answers are ASCII,
# and hard correctness, a string compare, never matched them; Python's \d and float() would).
_NUMBER = re.compile(r"(-?)\$?(-?)(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?%?", re.ASCII)
_NUMBER_PREFIX = 3  # "-$-" at most stands before a number's first digit
_DIGIT = re.compile(r"\d", re.ASCII)
_DIGITS = "0123456789"
#: Longest number the flexible rule reads, in characters (a longer digit run is read from its end).
MAX_NUMBER_CHARS = 4096
_INTEGER_LITERAL = re.compile(r"[+-]?\d+", re.ASCII)
# A reasoning closer, whitespace, an answer opener: a literal prefix, and the whitespace runs after
# different closers do not overlap, so a search is linear.
_SOFT_JOIN = re.compile(r"</reasoning>\s*<answer>")
# The seed's strict layout `^<reasoning>\n.*?\n</reasoning>\n<answer>\n.*?\n</answer>\n*$` (re.DOTALL, so the
# reasoning spans lines: unsloth #1761; `\n*$` admits trailing newlines: seed 002), checked by string
# search in linear time: the regular expression backtracks quadratically on crafted completions
# (44 s for 340 KB).
_STRICT_OPEN, _STRICT_MIDDLE, _STRICT_CLOSE = "<reasoning>\n", "\n</reasoning>\n<answer>\n", "\n</answer>"


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
    digit = _DIGIT.search(text)  # a fast scan first: the number pattern is slow on long digit-free text
    if digit is None:
        return None
    match = _NUMBER.search(text, max(0, digit.start() - _NUMBER_PREFIX))
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
    if not (a.isascii() and b.isascii()):  # float() reads '٣' as 3; no rule reads it as a number
        return False
    try:
        return float(a) == float(b)
    except ValueError:
        return False


def is_strict_format(text: str) -> bool:
    """Whether ``text`` is exactly reasoning then answer, each tag on its own line (seed 002's layout).

    The same completions as ``^<reasoning>\\n.*?\\n</reasoning>\\n<answer>\\n.*?\\n</answer>\\n*$`` with
    ``re.DOTALL``, decided in linear time.

    >>> is_strict_format("<reasoning>\\na\\nb\\n</reasoning>\\n<answer>\\n4\\n</answer>\\n")
    True
    >>> is_strict_format("<reasoning>a</reasoning><answer>4</answer>")
    False
    """
    if not text.startswith(_STRICT_OPEN):
        return False
    body = text.rstrip("\n")
    if not body.endswith(_STRICT_CLOSE):
        return False
    # The first `.*?` may be empty, so the middle may start right after the opening; the earliest middle
    # leaves the most room for the answer, which may be empty too.
    middle = text.find(_STRICT_MIDDLE, len(_STRICT_OPEN))
    return middle >= 0 and middle + len(_STRICT_MIDDLE) <= len(body) - len(_STRICT_CLOSE)


def is_soft_format(text: str) -> bool:
    """Whether ``text`` starts with a reasoning block followed by an answer block (seed 002's soft layout).

    The same completions as ``re.match(r"<reasoning>.*?</reasoning>\\s*<answer>.*?</answer>", text,
    re.DOTALL)``, decided in linear time (the expression backtracks quadratically: 20 s on 200 KB).

    >>> is_soft_format("<reasoning>a\\nb</reasoning> <answer>4</answer> more"), is_soft_format("4")
    (True, False)
    """
    if not text.startswith("<reasoning>"):
        return False
    last_close = text.rfind("</answer>")
    if last_close < 0:
        return False
    # The earliest closer followed by an answer opener leaves the most room for the answer.
    join = _SOFT_JOIN.search(text, len("<reasoning>"))
    return join is not None and join.end() <= last_close


def normalize_number(text: str | None) -> str | None:
    """Canonical form of a numeric string, so equal numbers compare equal as strings.

    Exact (no rounding to a working precision); a number beyond :data:`MAX_NUMBER_CHARS` digits
    either side of the point, or not written in ASCII, is not read (``None``).

    >>> [normalize_number(s) for s in ["1200.50", "1200.0", "0012", "-0", "1e3", "x", None]]
    ['1200.5', '1200', '12', '0', '1000', None, None]
    >>> normalize_number("12345678901234567890123456789.5"), normalize_number("1" * 5000)
    ('12345678901234567890123456789.5', None)
    """
    from decimal import Decimal, InvalidOperation, localcontext

    if text is None or not text.isascii():  # Decimal() reads '٣' as 3; no rule reads it as a number
        return None
    try:
        value = Decimal(text)
    except InvalidOperation:
        return None
    if not value.is_finite() or abs(value.adjusted()) > MAX_NUMBER_CHARS or \
            len(value.as_tuple().digits) > MAX_NUMBER_CHARS:
        return None
    with localcontext() as context:
        context.prec = 2 * MAX_NUMBER_CHARS + 2  # room for every digit: normalize() must not round
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

    Linear time: the last digit is found first, and numbers are read from at most
    :data:`MAX_NUMBER_CHARS` characters before it.

    >>> flexible_answer("3 + 4 = 7, so the answer is 7.")
    '7'
    >>> flexible_answer("<answer>\\n$1,200\\n</answer>")
    '1200'
    """
    last_digit = max(text.rfind(d) for d in _DIGITS)
    if last_digit < 0:
        return None
    start = max(0, last_digit - MAX_NUMBER_CHARS)
    matches = list(_NUMBER.finditer(text, start, last_digit + 2))  # a "%" may follow the last digit
    return normalize_number(_number_text(matches[-1])) if matches else None


#: Named answer-extraction rules, reported side by side (as lm-evaluation-harness's filters).
EXTRACTION_RULES = {"strict": strict_answer, "flexible": flexible_answer}
