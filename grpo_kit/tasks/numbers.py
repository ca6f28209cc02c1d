"""Numbers in text: how the kit reads, normalises and compares them (answers, gold answers, rewards).

Digits are ASCII only: a completion writing '٣' or '３' states no number to any reward or rule (the
gold answers are ASCII, and a string compare never matched them; Python's ``\\d`` and ``float()`` would).
Every function here runs in linear time on any text, however long or hostile.
"""

from __future__ import annotations

import re

__all__ = ["MAX_NUMBER_CHARS", "exact_number", "is_integer_literal", "last_number", "normalize_number",
           "numbers_equal", "parse_number"]

# A number: optional sign and `$`, thousands groups, optional decimals and `%`. The sign may stand
# before or after the `$` ("-$5" and "$-5" both give -5); a plus sign is read as written ("+7" is 7). A minus is the
# hyphen-minus, the minus sign U+2212 or the en dash U+2013, which typesetting and chat models write for it: read as
# "+3" they would score -3 as 3. Decimals may stand without a whole part (".5" is 0.5) and a point without decimals
# ("5." is 5), as people write them.
_MINUS = "-\u2212\u2013"
# Digits with commas are one number, read only when the commas group thousands ("1,234,567") or follow the Indian
# lakh grouping ("12,34,567"); otherwise ("1,5", "1,00": a decimal comma, or a list) the number is not read at all,
# rather than cut short at the first comma. An exponent ("1.5e-07", "2e3") is part of the number.
_NUMBER = re.compile(rf"([{_MINUS}+]?)\$?([{_MINUS}+]?)(?:(\d+(?:,\d+)*)(\.\d*)?|(\.\d+))([eE][{_MINUS}+]?\d+)?%?",
                     re.ASCII)
_GROUPED = re.compile(r"\d{1,3}(?:,\d{3})+|\d{1,2}(?:,\d{2})*,\d{3}", re.ASCII)
_NUMBER_PREFIX = 4  # "-$-." at most stands before a number's first digit
_DIGIT = re.compile(r"\d", re.ASCII)
_DIGITS = "0123456789"
#: Longest number read, in characters (a longer digit run is read from its end).
MAX_NUMBER_CHARS = 4096
_INTEGER_LITERAL = re.compile(r"[+-]?\d+", re.ASCII)


def parse_number(text: str) -> str | None:
    """Return the first number in ``text`` as a plain numeric string.

    The sign is kept; ``$``, ``%`` and thousands commas are dropped (the Indian grouping "12,34,567" too); an
    exponent is kept. The regex of the blog post's notebook dropped the sign and returned ``"0"`` when nothing
    matched; here ``"-3"`` stays ``"-3"`` and no number gives ``None``. A first number whose commas group nothing
    ("1,5": a decimal comma, or a list) is not read (``None``) rather than read as its first digits.

    Args:
        text: any text.

    Returns:
        E.g. ``"1200.50"`` for ``"$1,200.50"``, or ``None`` when ``text`` holds no digit.

    >>> parse_number("$1,200.50 in total")
    '1200.50'
    >>> parse_number("it is -3 degrees")
    '-3'
    >>> parse_number("it is \u22123 degrees"), parse_number("it is \u20133 degrees")  # minus sign, en dash
    ('-3', '-3')
    >>> parse_number("96%"), parse_number("12,34,567"), parse_number("1.5e-07")
    ('96', '1234567', '1.5e-07')
    >>> parse_number("about .5 of it"), parse_number("it is 5."), parse_number("+7 degrees")
    ('0.5', '5', '7')
    >>> parse_number("1,5") is None, parse_number("1,00") is None
    (True, True)
    >>> parse_number("none") is None
    True
    """
    digit = _DIGIT.search(text)  # a fast scan first: the number pattern is slow on long digit-free text
    if digit is None:
        return None
    match = _NUMBER.search(text, max(0, digit.start() - _NUMBER_PREFIX))
    return None if match is None else _number_text(match)


def _number_text(match: re.Match) -> str | None:
    """The number ``match`` holds as plain text; ``None`` when its commas are not a grouping (see ``_NUMBER``)."""
    digits = match.group(3) or "0"  # ".5"
    if "," in digits and not _GROUPED.fullmatch(digits):
        return None
    sign = "-" if any(s and s in _MINUS for s in match.group(1, 2)) else ""
    decimals = match.group(4) or match.group(5) or ""
    exponent = (match.group(6) or "").translate(_ASCII_MINUS)
    return sign + digits.replace(",", "") + (decimals if decimals != "." else "") + exponent


_ASCII_MINUS = str.maketrans({"\u2212": "-", "\u2013": "-"})


def exact_number(text: str) -> str | None:
    """``text`` read as exactly one number, in canonical form (:func:`normalize_number`); ``None`` when it is not one
    number as written: words around it, commas that group nothing ("1,5": write 1.5 or 15), two numbers.

    What a gold answer of type ``number`` must be. The forms :func:`parse_number` reads in completions are read here
    too: a sign (a plus; the minus sign U+2212 and the en dash too), ``$``, thousands or lakh commas, decimals (with or
    without a whole part), an exponent, ``%``.

    >>> [exact_number(s) for s in ["$1,200.0", "\u22123", "1.5e-07", "2e3", "12,34,567", " 7 "]]
    ['1200', '-3', '0.00000015', '2000', '1234567', '7']
    >>> [exact_number(s) for s in [".5", "5.", "+7", "-.5"]]
    ['0.5', '5', '7', '-0.5']
    >>> [exact_number(s) for s in ["1,5", "1,00", "12 apples", "3 4", "x"]]
    [None, None, None, None, None]
    """
    match = _NUMBER.fullmatch(text.strip())
    return normalize_number(_number_text(match) if match is not None else None)


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
    if a is None or b is None or not (a.isascii() and b.isascii()):  # float() reads '٣' as 3; no rule reads it so
        return False
    try:
        return float(a) == float(b)
    except ValueError:
        return False


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
    if len(text) < 19 and _INTEGER_LITERAL.fullmatch(text):  # most answers: exact as an int, and 5x faster
        return str(int(text))
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


def last_number(text: str) -> str | None:
    """The last number anywhere in ``text``, normalised (:func:`normalize_number`); ``None`` when there is none.

    What lm-evaluation-harness's flexible-extract filter reads for GSM8K (the last match of
    ``(-?[$0-9.,]{2,})|(-?[0-9]+)``); compared as numbers, ``18.00`` equals ``18`` here, not there.

    Linear time: the last digit is found first, and numbers are read from at most
    :data:`MAX_NUMBER_CHARS` characters before it.

    >>> last_number("3 + 4 = 7, so the answer is 7.")
    '7'
    >>> last_number("<answer>\\n$1,200\\n</answer>")
    '1200'
    """
    last_digit = max(text.rfind(d) for d in _DIGITS)
    if last_digit < 0:
        return None
    start = max(0, last_digit - MAX_NUMBER_CHARS)
    matches = list(_NUMBER.finditer(text, start, last_digit + 2))  # a "%" may follow the last digit
    return normalize_number(_number_text(matches[-1]) if matches else None)
