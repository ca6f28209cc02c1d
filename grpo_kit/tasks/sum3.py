"""Sum of three digits: a seeded synthetic task on which the reward decides what GRPO teaches.

Every question asks for ``a+b+c`` with single digits ``a, b, c`` (1000 triples); a seeded shuffle puts 700 in
the train split and the other 300 in the test split, so held-out questions are triples never trained on. It
exists to show on a CPU the effect reinforcement learning with verifiable rewards is known for: raising pass@1
towards pass@k by choosing, among the ways the policy already answers, the one that is right.

Declared in ``builtin/sum3.yaml``; this module generates its rows and holds its rules and demonstrations.

Its warm start (:func:`demonstration`) shows every train triple three times, in the answer format each time:
once with the working (``a+b=s1`` then ``s1+c=s``), twice as a one-line "sloppy" answer that drops the carry
(``a+b+c=`` the ones digit of the sum, wrong whenever the sum is 10 or more, and a guess on unseen triples). The
warm-started tiny policy then starts most answers the sloppy way, so greedy decoding is sloppy and mostly wrong
with a margin (at one worked answer per sloppy one, greedy sat on a knife edge that any drift in training tipped
over), while among 8 samples one is usually worked and right. A correctness reward pays for the worked style; a
format-only reward set pays both styles alike.

The system prompt is one short line (``SYSTEM``), not the blog post's: the prompt is most of each sequence the
tiny policy trains on, and a short one halves the warm start's and GRPO's time on a CPU.

Rules: ``strict`` is the number inside ``<answer>`` of a completion in the strict layout, ``flexible`` the last
number anywhere (the same as GSM8K's), compared with the gold sum as integers.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from grpo_kit.tasks.answer_format import Example, ExtractionRule, extract_xml_answer, strictly
from grpo_kit.tasks.data import build_prompt
from grpo_kit.tasks.numbers import last_number, normalize_number

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = ["RULES", "SLOPPY_PER_WORKED", "SYSTEM", "TRAIN_TRIPLES", "demonstration", "load_sum3", "sloppy",
           "tokenizer_texts", "triples", "worked"]

#: Triples in the train split (the rest, 1000 - 700, are the test split).
TRAIN_TRIPLES = 700
PHRASE = "What is {a}+{b}+{c}?"
SYSTEM = "Reply with <reasoning> and <answer> tags."
#: Sloppy demonstrations per worked one in the train split (the warm start's mix of the two styles).
SLOPPY_PER_WORKED = 2


def triples(seed: int = 0) -> dict[str, list[tuple[int, int, int]]]:
    """Every triple of digits, shuffled with ``seed`` and split: ``{"train": 700, "test": 300}``, disjoint.

    >>> split = triples()
    >>> len(split["train"]), len(split["test"]), len(set(split["train"]) & set(split["test"]))
    (700, 300, 0)
    """
    every = [(a, b, c) for a in range(10) for b in range(10) for c in range(10)]
    random.Random(seed).shuffle(every)
    return {"train": every[:TRAIN_TRIPLES], "test": every[TRAIN_TRIPLES:]}


def worked(a: int, b: int, c: int) -> tuple[str, str]:
    """The worked demonstration ``(reasoning, answer)``: two additions, then the sum.

    >>> worked(7, 8, 9)
    ('7+8=15\\n15+9=24', '24')
    """
    return f"{a}+{b}={a + b}\n{a + b}+{c}={a + b + c}", str(a + b + c)


def sloppy(a: int, b: int, c: int) -> tuple[str, str]:
    """The sloppy demonstration: one line that keeps only the ones digit of the sum (right only below 10).

    >>> sloppy(7, 8, 9)
    ('7+8+9=4', '4')
    """
    ones = (a + b + c) % 10
    return f"{a}+{b}+{c}={ones}", str(ones)


def _row(a: int, b: int, c: int, style: str) -> dict[str, Any]:
    question = PHRASE.format(a=a, b=b, c=c)
    return {"question": question, "answer": str(a + b + c), "a": a, "b": b, "c": c, "style": style,
            "prompt": build_prompt(question, SYSTEM)}


def load_sum3(split: str = "test", seed: int = 0) -> Dataset:
    """The split as a ``datasets.Dataset``: ``question``, ``answer`` (the sum, the column the correctness rewards
    read), ``a``, ``b``, ``c``, ``style`` (the warm start's demonstration of the row) and ``prompt``. The train split
    holds each of its 700 triples once with ``style`` ``"worked"`` and :data:`SLOPPY_PER_WORKED` times ``"sloppy"``;
    the test split each of its 300 once (``style`` ``"worked"``, unused).

    Raises:
        ValueError: an unknown split.
    """
    from datasets import Dataset

    if split not in ("train", "test"):
        raise ValueError(f"sum3 has the splits 'train' and 'test', not {split!r}")
    chosen = triples(seed)[split]
    styles = ("worked",) + ("sloppy",) * SLOPPY_PER_WORKED if split == "train" else ("worked",)
    return Dataset.from_list([_row(a, b, c, style) for a, b, c in chosen for style in styles])


def _right(answer: str, example: Example) -> bool:
    return answer == str(example["answer"])


#: The two rules ``builtin/sum3.yaml`` names: the number inside ``<answer>`` of a completion in the strict layout, or
#: the last number anywhere (as GSM8K's), compared with the gold sum.
RULES = {"strict": ExtractionRule(strictly(lambda text: normalize_number(extract_xml_answer(text))), _right),
         "flexible": ExtractionRule(last_number, _right)}


def demonstration(example: Example, style: str = "equations") -> tuple[str, str]:  # noqa: ARG001
    """A train row's warm-start target: :func:`sloppy` or :func:`worked`, as its ``style`` column says.

    >>> demonstration({"a": 7, "b": 8, "c": 9, "style": "sloppy"})
    ('7+8+9=4', '4')
    """
    args = (example["a"], example["b"], example["c"])
    return sloppy(*args) if example["style"] == "sloppy" else worked(*args)


def tokenizer_texts(dataset: Dataset) -> list[str]:
    """What the tiny policy's tokenizer is trained on: the system prompt, the questions, the demonstrations' lines."""
    texts = [SYSTEM] * 50 + list(dataset["question"])
    return texts + [line for row in dataset for line in demonstration(row)[0].splitlines()]
