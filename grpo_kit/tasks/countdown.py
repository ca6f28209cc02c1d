"""Countdown (the TinyZero / oat task): puzzles, a solver, a safe evaluator, the reward, the rules.

A puzzle is 3 or 4 integers ``nums`` and an integer ``target``; a solution is an arithmetic
expression with ``+ - * /`` and parentheses that uses each number exactly once and equals the
target. Completions put the expression inside ``<answer>`` tags.

The expression is evaluated by :func:`safe_eval`, which walks Python's AST and admits numbers,
the four operators, unary minus and parentheses only, within bounded length and depth; it never
calls ``eval`` (TinyZero did). Arithmetic is exact (``fractions.Fraction``), so ``1/3*3`` is 1.

Both rules read the expression in ``<answer>`` (strict: only in the exact layout; flexible: TinyZero's
last ``<answer>``) and check that it reaches the target using each number once; the headline metric is
strict accuracy (declared in ``builtin/countdown.yaml``). The bundled puzzles are TinyZero's
``Countdown-Tasks-3to4`` rows (``data_files/countdown/SOURCE.md``).
"""

from __future__ import annotations

import ast
import functools
import itertools
import math
import operator
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from grpo_kit.tasks.answer_format import SYSTEM_PROMPT, Example, ExtractionRule, completion_text, strictly
from grpo_kit.tasks.data import build_prompt, check_rows, numbered, task_rows
from grpo_kit.tasks.rewards import RewardFunc, column, describe, texts

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = ["MAX_DEPTH", "MAX_LENGTH", "RULES", "CountdownSolution", "countdown_answer", "countdown_question",
           "countdown_reward", "countdown_reward_func", "countdown_score", "demonstration", "load_countdown",
           "make_puzzles", "numbers_in", "safe_eval", "solve", "tokenizer_texts"]

#: Longest expression :func:`safe_eval` reads, in characters (a 4-number answer needs about 20).
MAX_LENGTH = 200
#: Deepest nesting of operations :func:`safe_eval` reads.
MAX_DEPTH = 32

_PLAIN = re.compile(r"[0-9.+\-*/()\s]*")
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def _parse(expression: Any) -> ast.expr:
    if not isinstance(expression, str):
        raise ValueError(f"an expression must be a string, got {type(expression).__name__}")
    if len(expression) > MAX_LENGTH:
        raise ValueError(f"expression longer than {MAX_LENGTH} characters")
    if not _PLAIN.fullmatch(expression):
        # Python's grammar would also read 0xa, 0o12, 1_0, 1e1 and 1j as numbers; a Countdown answer writes them
        # as plain decimals
        raise ValueError("only plain decimal numbers, + - * / and parentheses are allowed")
    try:
        return ast.parse(expression.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise ValueError(f"not an arithmetic expression: {e.__class__.__name__}") from None


def _exact(node: ast.expr, depth: int = 0) -> Fraction:
    if depth > MAX_DEPTH:
        raise ValueError(f"expression nested deeper than {MAX_DEPTH}")
    # _PLAIN admits plain decimals only, and MAX_LENGTH keeps them below 1e200: every number is finite
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _exact(node.left, depth + 1), _exact(node.right, depth + 1)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ValueError("division by zero")
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _exact(node.operand, depth + 1)
        return -value if isinstance(node.op, ast.USub) else value
    raise ValueError(f"only numbers, + - * / and parentheses are allowed, not {type(node).__name__}")


def safe_eval(expression: str) -> float:
    """Evaluate an arithmetic expression of numbers, ``+ - * /``, unary minus and parentheses.

    Args:
        expression: e.g. ``"(79 - 60) + 17"``; at most :data:`MAX_LENGTH` characters and
            :data:`MAX_DEPTH` levels of nesting.

    Returns:
        The value as a ``float``, computed exactly with fractions and rounded once at the end.

    Raises:
        ValueError: anything outside that grammar (names, attributes, calls, ``**``, ``%``,
            ``//``, comparisons, strings, ...), too long or too deep, division by zero, a value
            beyond a float's range (``1e308*1e308``), or not a string; never another exception.
            Checked on the syntax tree before any arithmetic, so hostile input fails fast.

    >>> safe_eval("(79 - 60) + 17")
    36.0
    >>> safe_eval("1/3*3")
    1.0
    >>> safe_eval("2**10")
    Traceback (most recent call last):
    ...
    ValueError: only numbers, + - * / and parentheses are allowed, not BinOp
    """
    value = _exact(_parse(expression))
    try:
        return float(value)
    except OverflowError:
        raise ValueError("the value is beyond a float's range") from None


def numbers_in(expression: str) -> list[int | float]:
    """The number literals of an expression in reading order (raises ``ValueError`` like :func:`safe_eval`).

    >>> numbers_in("(79 - 60) + 17")
    [79, 60, 17]
    """
    tree = _parse(expression)
    _exact(tree)  # the grammar check
    constants = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Constant)), key=lambda n: n.col_offset)
    return [n.value for n in constants]


def countdown_answer(text: str) -> str | None:
    """TinyZero's extraction: the stripped text inside the last ``<answer>...</answer>``; ``None`` without one.

    The last of the non-overlapping matches of ``<answer>(.*?)</answer>`` (``re.DOTALL``) read left to
    right, found by string search in linear time (the expression takes seconds on crafted text: 7.4 s
    for 80 KB of unclosed ``<answer>`` tags).

    >>> countdown_answer("<reasoning>\\n79-60=19\\n</reasoning>\\n<answer>\\n79 - 60 + 17\\n</answer>")
    '79 - 60 + 17'
    >>> countdown_answer("<answer>1</answer><answer>2</answer><answer>3"), countdown_answer("79 - 60 + 17")
    ('2', None)
    """
    found, position = None, 0
    while (start := text.find("<answer>", position)) >= 0:
        end = text.find("</answer>", start + len("<answer>"))
        if end < 0:  # no later <answer> can close either
            break
        found, position = text[start + len("<answer>"):end], end + len("</answer>")
    return found.strip() if found is not None else None


def countdown_score(completion: Any, nums: Sequence[int], target: float, format_score: float = 0.1,
                    score: float = 1.0) -> float:
    """TinyZero's Countdown reward for one completion (never raises).

    ``0`` without an ``<answer>``; ``format_score`` when there is one but the numbers are not
    each of ``nums`` used exactly once (as integer literals), the expression is outside :func:`safe_eval`'s grammar,
    or its value is not the target; ``score`` when it equals ``target`` within 1e-5.

    Args:
        completion: a ``str`` or a list of chat messages (TRL's two forms).
        nums: the puzzle's numbers.
        target: the puzzle's target.
        format_score, score: TinyZero's 0.1 and 1.0.

    >>> countdown_score("<answer>(79 - 60) + 17</answer>", [79, 17, 60], 36)
    1.0
    >>> countdown_score("<answer>79 + 17</answer>", [79, 17, 60], 36)
    0.1
    >>> countdown_score("79 - 60 + 17", [79, 17, 60], 36)
    0.0
    """
    try:
        answer = countdown_answer(completion_text(completion))
        if answer is None:
            return 0.0
        try:
            used = numbers_in(answer)
            value = safe_eval(answer)
        except ValueError:
            return format_score
        if isinstance(nums, (str, bytes)):  # a malformed column, not a list of numbers
            return 0.0
        if any(type(n) is not int for n in used) or sorted(used) != sorted(int(n) for n in nums):
            return format_score  # each given integer exactly once ("17.0" is not the integer 17)
        return score if abs(value - float(target)) < 1e-5 else format_score
    except Exception:  # a reward never raises: malformed nums or target count as no answer
        return 0.0


@dataclass(frozen=True)
class CountdownSolution:
    """A solution: the expression and its steps (``"79-60=19"``, one per operation)."""

    expression: str
    steps: tuple[str, ...]


def solve(nums: Sequence[int], target: int) -> CountdownSolution | None:
    """Find an expression that uses every number of ``nums`` exactly once and equals ``target``.

    Exhaustive search with exact fractions: repeatedly replace two numbers by their sum,
    difference (both orders), product or quotient (both orders, non-zero divisor); the first
    solution found is returned. A 4-number puzzle takes milliseconds.

    Returns:
        :class:`CountdownSolution`, or ``None`` when the puzzle has no solution.

    >>> solve([79, 17, 60], 36).expression
    '(17+79)-60'
    >>> solve([1, 1], 5) is None
    True
    """
    goal = Fraction(target)
    goal_pair = (goal.numerator, goal.denominator)
    seen: set[tuple[tuple[int, int], ...]] = set()

    # A value is a reduced fraction held as two ints (numerator, denominator > 0): Fraction's own arithmetic was
    # three quarters of the time of solving the 10,000 train puzzles, which the tokenizer texts, the warm start and
    # notebook 01 each do. A step is written out only for the solution found.
    def search(items: list[tuple[int, int, str, tuple]]) -> CountdownSolution | None:
        if len(items) == 1:
            n, d, text, steps = items[0]
            if (n, d) != goal_pair:
                return None
            written = tuple(f"{Fraction(an, ad)}{symbol}{Fraction(bn, bd)}={Fraction(vn, vd)}"
                            for an, ad, symbol, bn, bd, vn, vd in steps)
            # an expression the search built is wrapped in one pair of parentheses, its last operation's
            return CountdownSolution(text[1:-1] if steps else text, written)
        key = tuple(sorted((n, d) for n, d, _, _ in items))
        if key in seen:  # the same multiset of values was already searched
            return None
        seen.add(key)
        for i, j in itertools.combinations(range(len(items)), 2):
            rest = [items[k] for k in range(len(items)) if k not in (i, j)]
            for (an, ad, ta, sa), (bn, bd, tb, sb) in ((items[i], items[j]), (items[j], items[i])):
                cross_a, cross_b = an * bd, bn * ad
                later = cross_a > cross_b or cross_a == cross_b and ta > tb  # (a, its text) after (b, its text)
                for symbol in "+-*/":
                    if symbol in "+*" and later or symbol == "/" and bn == 0:
                        continue  # + and * once per pair; no division by zero
                    if symbol == "+":
                        vn, vd = cross_a + cross_b, ad * bd
                    elif symbol == "-":
                        vn, vd = cross_a - cross_b, ad * bd
                    elif symbol == "*":
                        vn, vd = an * bn, ad * bd
                    else:
                        vn, vd = (an * bd, ad * bn) if bn > 0 else (-an * bd, -ad * bn)
                    g = math.gcd(vn, vd)
                    step = (an, ad, symbol, bn, bd, vn // g, vd // g)
                    found = search([*rest, (vn // g, vd // g, f"({ta}{symbol}{tb})", (*sa, *sb, step))])
                    if found is not None:
                        return found
        return None

    start = [Fraction(n) for n in nums]
    return search([(value.numerator, value.denominator, str(n), ()) for value, n in zip(start, nums)])


def make_puzzles(n: int, seed: int = 0, sizes: Sequence[int] = (3, 4), low: int = 1, high: int = 99,
                 target_range: tuple[int, int] = (10, 100)) -> list[dict[str, Any]]:
    """``n`` seeded, solvable puzzles in the shape of TinyZero's dataset (numbers 1-99, targets 10-100).

    Each candidate draws a size from ``sizes``, that many numbers from ``[low, high]`` and a
    target from ``target_range`` (inclusive); it is kept only when :func:`solve` finds a solution.

    Returns:
        ``list`` of ``{"nums": list[int], "target": int, "solution": str}``.

    Raises:
        ValueError: ``n < 0``, a size outside 2-6, or empty ranges.

    >>> [p["target"] for p in make_puzzles(3, seed=1)] == [p["target"] for p in make_puzzles(3, seed=1)]
    True
    """
    if n < 0 or not sizes or any(not 2 <= s <= 6 for s in sizes) or low > high or target_range[0] > target_range[1]:
        raise ValueError(f"need n >= 0, sizes in 2..6, low <= high and a non-empty target range; got n={n}, "
                         f"sizes={sizes}, low={low}, high={high}, target_range={target_range}")
    rng = random.Random(seed)
    puzzles = []
    while len(puzzles) < n:
        nums = [rng.randint(low, high) for _ in range(rng.choice(list(sizes)))]
        target = rng.randint(*target_range)
        solution = solve(nums, target)
        if solution is not None:
            puzzles.append({"nums": nums, "target": target, "solution": solution.expression})
    return puzzles


def _scores(completions: Any, nums: Any, target: Any, format_score: float, score: float) -> list[float]:
    found = texts(completions)
    puzzles = column(nums, len(found), "nums"), column(target, len(found), "target")
    return [0.0 if n is None or t is None else countdown_score(text, n, t, format_score, score)
            for text, n, t in zip(found, *puzzles)]


@describe("Countdown reward", 1.0, binary=False, columns=("nums", "target"))
def countdown_reward_func(prompts=None, completions=None, nums=None, target=None, **kwargs) -> list[float]:
    """TinyZero's Countdown reward (:func:`countdown_score`): 0 without ``<answer>``, 0.1 when it does not solve the
    puzzle, 1.0 when it uses each number of ``nums`` once and equals ``target`` (dataset columns ``nums``, ``target``).

    >>> countdown_reward_func(completions=["<answer>(79 - 60) + 17</answer>", "<answer>79 + 17</answer>", "36"],
    ...                       nums=[[79, 17, 60]] * 3, target=[36] * 3)
    [1.0, 0.1, 0.0]
    """
    return _scores(completions, nums, target, 0.1, 1.0)


def countdown_reward(format_score: float = 0.1, score: float = 1.0) -> RewardFunc:
    """A Countdown reward with other scores than TinyZero's (:func:`countdown_reward_func`).

    Args:
        format_score: for an ``<answer>`` that does not solve the puzzle (TinyZero: 0.1).
        score: for one that does (TinyZero: 1.0).

    Returns:
        A reward function ``(completions, nums, target, **kwargs) -> list[float]`` named e.g.
        ``countdown_reward_func_format0.2_score1``: a function of your own, passed as an object
        (:func:`countdown_reward_func` itself with TinyZero's scores).

    >>> countdown_reward(format_score=0.2).__name__
    'countdown_reward_func_format0.2_score1'
    """
    if (format_score, score) == (0.1, 1.0):
        return countdown_reward_func

    def reward(prompts=None, completions=None, nums=None, target=None, **kwargs) -> list[float]:
        return _scores(completions, nums, target, format_score, score)

    reward.__name__ = reward.__qualname__ = f"countdown_reward_func_format{format_score:g}_score{score:g}"
    reward.__doc__ = (f"Countdown: 0 without <answer>, {format_score:g} when it does not solve the puzzle, "
                      f"{score:g} when it equals the target (TinyZero).")
    return describe("Countdown reward", score, binary=False, columns=("nums", "target"))(reward)


def countdown_question(nums: list[int], target: int) -> str:
    """The user turn of a Countdown puzzle (TinyZero's wording, asking for the bare expression).

    >>> countdown_question([79, 17, 60], 36)[:56]
    'Using the numbers [79, 17, 60], create an equation that '
    """
    return (f"Using the numbers {list(nums)}, create an equation that equals {target}. You can use basic "
            "arithmetic operations (+, -, *, /) and each number can only be used once. Put only the expression, "
            "without '=', inside the answer tags.")


def _whole(value: Any, where: str, name: str) -> int:
    """A whole number from an int or an integral float (``3.0``); anything else is an error naming the row."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise ValueError(f"{where}: Countdown {name} must be whole numbers (the prompt states them and the reward "
                         f"uses them as they are), got {value!r}")
    return int(value)


def load_countdown(split: str = "test", source: str = "bundled", n: int = 1000, seed: int = 0,
                   system_prompt: str = SYSTEM_PROMPT) -> Dataset:
    """Load Countdown puzzles (TinyZero's task) as conversational prompts.

    Args:
        split: ``"train"`` (10,000 bundled puzzles) or ``"test"`` (1,024).
        source: ``"bundled"`` (TinyZero's ``Countdown-Tasks-3to4`` rows, offline; default),
            ``"generated"`` (``n`` fresh solvable puzzles from :func:`make_puzzles` with ``seed``; the
            split only salts the seed), or a path to JSONL rows with ``nums`` and ``target``.
        n, seed: the size and seed of a generated set.
        system_prompt: the system turn of every prompt.

    Returns:
        ``datasets.Dataset`` with columns ``nums`` (``list[int]``), ``target`` (``int``),
        ``question`` (the user turn) and ``prompt``. There is no ``answer`` column: Countdown
        has many right answers, checked by ``countdown_reward_func``.

    Raises:
        ValueError: unknown split, missing or empty file, or a row without ``nums``/``target`` or
            with a number that is not whole (``1.5``; the message names the file and line).
    """
    from datasets import Dataset

    fields = {"nums": (list,), "target": (int, float)}
    need = "Countdown rows need 'nums' (a list of whole numbers) and 'target' (a whole number)"
    if source == "generated" and split in ("train", "test"):
        puzzles = make_puzzles(n, seed=seed + (0 if split == "train" else 1_000_003))
        rows = check_rows(numbered(puzzles, "generated"), fields, need)
    else:
        rows = task_rows("countdown", "Countdown", split, source, fields, need)
    examples = []
    for where, row in rows:
        nums = [_whole(x, where, "nums") for x in row["nums"]]
        target = _whole(row["target"], where, "target")
        question = countdown_question(nums, target)
        examples.append({"nums": nums, "target": target, "question": question,
                         "prompt": build_prompt(question, system_prompt)})
    return Dataset.from_list(examples)


def _solves(answer: str, example: Example) -> bool:
    return countdown_score(f"<answer>{answer}</answer>", example["nums"], example["target"]) == 1.0


#: The two rules ``builtin/countdown.yaml`` names: the expression in ``<answer>`` (strict: only in the exact layout;
#: flexible: TinyZero's last ``<answer>``), right when it reaches the target using each number once.
RULES = {"strict": ExtractionRule(strictly(countdown_answer), _solves),
         "flexible": ExtractionRule(countdown_answer, _solves)}


@functools.cache
def _solved(nums: tuple[int, ...], target: int) -> tuple[str, str] | None:
    """Solver steps and expression, remembered: the tokenizer texts, the warm start and notebook 01
    each need all 10,000 train puzzles solved (once per process: a notebook's kernel, a test process)."""
    solution = solve(nums, target)
    return None if solution is None else ("\n".join(solution.steps), solution.expression)


def demonstration(example: Example, style: str = "equations") -> tuple[str, str] | None:  # noqa: ARG001
    """A puzzle's warm-start target: the solver's steps one per line, and its expression (``None``: unsolvable).

    >>> demonstration({"nums": [79, 17, 60], "target": 36})
    ('17+79=96\\n96-60=36', '(17+79)-60')
    """
    return _solved(tuple(example["nums"]), example["target"])


def tokenizer_texts(dataset: Dataset) -> list[str]:
    """What the tiny policy's tokenizer is trained on: the system prompt, the questions, the solved puzzles."""
    demos = [demonstration(row) for row in dataset]
    return [SYSTEM_PROMPT] * 50 + list(dataset["question"]) + [f"{s}\n{e}" for s, e in filter(None, demos)]
