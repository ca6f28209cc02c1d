"""Reward functions and answer extraction: the blog post's examples, the issue's edge cases, both forms."""

from __future__ import annotations

import contextlib
import io
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grpo_kit
from grpo_kit import (
    correctness_reward_func,
    extract_final_answer,
    extract_xml_answer,
    int_reward_func,
    soft_correctness_reward_func,
    soft_format_reward_func,
    strict_format_reward_func,
    xmlcount_reward_func,
)
from grpo_kit.evaluation.scoring import score
from grpo_kit.evaluation.summary import summarize
from grpo_kit.tasks import BUILTIN_REWARDS, RewardSet, get_task
from grpo_kit.tasks.gsm8k import extract_hash_answer
from grpo_kit.tasks.rewards import SEED_REWARDS, Reward

# A post-training sample from the blog post "LLM Reinforcement Learning with GRPO" (2025-03-03; Ursula's salary),
# a well-formed multi-line completion.
URSULA = (
    "<reasoning>\nTo find Ursula's annual salary, first, we need to calculate her daily income, then her "
    "monthly income, and finally her yearly income. \nDaily income is 8.50 * 8 = 68, monthly income is "
    "68 * 20 = 1360,  annually her income would come out as 1360 * 12 = 16320 \n</reasoning>\n"
    "<answer>\n16320\n</answer>"
)


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def both_forms(func, texts, **kwargs):
    """Call a reward on the standard and the conversational form; they must agree."""
    plain = func(prompts=[None] * len(texts), completions=texts, **kwargs)
    conversational = func(prompts=[None] * len(texts), completions=[chat(t) for t in texts], **kwargs)
    assert plain == conversational
    assert all(isinstance(v, float) for v in plain)
    return plain


def test_extract_xml_answer_is_the_notebooks_rule():
    assert extract_xml_answer(URSULA) == "16320"
    assert extract_xml_answer("<answer> 7 ") == "7"
    assert extract_xml_answer("no tags at all") == "no tags at all"
    assert extract_xml_answer("<answer>1</answer><answer>2</answer>") == "2"


def test_extract_hash_answer():
    assert extract_hash_answer("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72") == "72"
    assert extract_hash_answer("a\n#### 1,000") == "1000"
    assert extract_hash_answer("#### 1 #### 2") == "2"
    assert extract_hash_answer("no final line") is None


@pytest.mark.parametrize("text, expected", [
    ("<answer>\n$1,200.50\n</answer>", "1200.50"),
    ("<answer>96%</answer>", "96"),
    ("<answer>72 units</answer>", "72"),
    ("<answer>$27</answer>", "27"),
    ("<answer>-3</answer>", "-3"),
    ("<answer>-$5</answer>", "-5"),
    ("<answer>about 3 or 4</answer>", "3"),
    ("<answer>none</answer>", None),
])
def test_extract_final_answer(text, expected):
    assert extract_final_answer(text) == expected


def test_correctness_is_an_exact_string_compare():
    texts = [URSULA, URSULA.replace("16320", "16320.0"), URSULA.replace("16320", "16,320"), "16320"]
    assert both_forms(correctness_reward_func, texts, answer=["16320"] * 4) == [1.0, 0.0, 0.0, 1.0]


@pytest.mark.parametrize("given_answer, score", [
    ("1200", 1.0), ("1200.0", 1.0), ("$1,200", 1.0), ("1200 units", 1.0), ("1,200.00", 1.0),
    ("1201", 0.0), ("-1200", 0.0), ("", 0.0), ("twelve hundred", 0.0),
])
def test_soft_correctness_compares_numbers(given_answer, score):
    text = f"<reasoning>\nx\n</reasoning>\n<answer>\n{given_answer}\n</answer>"
    assert both_forms(soft_correctness_reward_func, [text], answer=["1200"]) == [score]


def test_soft_correctness_keeps_the_sign():
    texts = ["<answer>3</answer>", "<answer>-3</answer>"]
    assert both_forms(soft_correctness_reward_func, texts, answer=["-3", "-3"]) == [0.0, 1.0]


@pytest.mark.parametrize("answer, score", [
    ("-3", 0.5), ("42", 0.5), ("+7", 0.5), ("3.5", 0.0), ("1,000", 0.0), ("12 apples", 0.0), ("", 0.0),
])
def test_int_reward(answer, score):
    assert both_forms(int_reward_func, [f"<answer>\n{answer}\n</answer>"]) == [score]


def test_strict_format_accepts_multiline_reasoning_and_trailing_newlines():
    texts = [URSULA, URSULA + "\n", URSULA + "\n\n", URSULA + " trailing", " " + URSULA,
             URSULA.replace("<reasoning>\n", "<reasoning>"),
             "<reasoning>\na\n</reasoning>\n\n<answer>\n1\n</answer>"]
    assert both_forms(strict_format_reward_func, texts) == [0.5, 0.5, 0.5, 0.0, 0.0, 0.0, 0.0]


def test_soft_format_accepts_multiline_and_loose_spacing():
    texts = [URSULA, "<reasoning>a\nb</reasoning><answer>1</answer>", "<reasoning>a</reasoning>\n\n <answer>1</answer>",
             "<answer>1</answer>", "x <reasoning>a</reasoning><answer>1</answer>"]
    assert both_forms(soft_format_reward_func, texts) == [0.5, 0.5, 0.5, 0.0, 0.0]


def test_xmlcount():
    perfect = "<reasoning>\nx\n</reasoning>\n<answer>\n4\n</answer>"
    texts = [perfect, perfect + "\n", perfect + "\n\n  ", perfect + "\nabc", "<reasoning>\nx", "", perfect + perfect]
    assert both_forms(xmlcount_reward_func, texts) == [0.5, 0.5, 0.5, 0.497, 0.125, 0.0, 0.0]


def test_seed_table_rewards_on_the_blog_posts_sample():
    scores = {name: BUILTIN_REWARDS[name](prompts=[None], completions=[chat(URSULA)], answer=["16320"])[0]
              for name in SEED_REWARDS}
    # the blog post's sample earns every maximum
    assert scores == {name: Reward.of(BUILTIN_REWARDS[name]).max_value for name in SEED_REWARDS}
    assert [Reward.of(BUILTIN_REWARDS[name]).max_value for name in SEED_REWARDS] == [0.5, 0.5, 0.5, 0.5, 1.0, 1.0]


def test_reward_sets_and_errors():
    assert list(SEED_REWARDS) == [f.__name__ for f in RewardSet(list(SEED_REWARDS)).funcs]
    with pytest.raises(ValueError, match="unknown reward 'typo'"):
        RewardSet(["typo"])
    with pytest.raises(ValueError, match="no reward functions"):
        RewardSet([])
    with pytest.raises(ValueError, match="every reward weight is 0"):
        RewardSet({"int_reward_func": 0.0, "xmlcount_reward_func": 0.0})


def test_a_users_own_reward_passes_through_and_is_added_to_no_table():
    def length_reward_func(prompts=None, completions=None, **kwargs):
        return [float(len(c)) for c in completions]

    before = dict(BUILTIN_REWARDS)
    rewards = RewardSet(["int_reward_func", length_reward_func])
    assert rewards.funcs == [int_reward_func, length_reward_func] and rewards.names[1] == "length_reward_func"
    assert "length_reward_func" not in BUILTIN_REWARDS and dict(BUILTIN_REWARDS) == before
    with pytest.raises(TypeError):
        BUILTIN_REWARDS["length_reward_func"] = length_reward_func  # read-only: users never register
    with pytest.raises(ValueError, match="unknown reward 'length_reward_func'"):
        RewardSet(["length_reward_func"])  # known by object, never by name
    described = Reward.of(length_reward_func)
    assert (described.label, described.binary, described.columns) == ("length_reward_func", False, ())
    assert math.isnan(described.max_value)  # an undescribed function's maximum is unknown


def test_names_are_importable_from_the_package():
    for name in ["extract_xml_answer", "extract_final_answer", "SYSTEM_PROMPT", "BUILTIN_REWARDS", "Reward",
                 "RewardSet", "SEED_REWARDS", *SEED_REWARDS]:
        assert hasattr(grpo_kit, name)
    for name in SEED_REWARDS:
        assert getattr(grpo_kit, name) is BUILTIN_REWARDS[name]


def test_accuracy_of_extracted_answers_against_golds():
    """Plain accuracy of answers against golds is the hard-correctness row of the evaluation table."""
    golds, given = ["1", "2", "3", "4"], ["1", "2", "0", "4"]
    examples = [{"prompt": [{"role": "user", "content": f"q{i}"}], "answer": g} for i, g in enumerate(golds)]
    records = score(examples, [[f"<answer>\n{a}\n</answer>"] for a in given])
    assert [r["extracted"] for r in records] == given
    assert summarize(records, get_task("gsm8k")).loc["Hard correctness", "value"] == 0.75
    with pytest.raises(ValueError):
        score(examples[:1], [])  # answers and golds must pair up
    with pytest.raises(ValueError, match="no records"):
        summarize([], get_task("gsm8k"))  # nothing to take the accuracy of


odd_completions = st.one_of(
    st.text(),
    st.lists(st.fixed_dictionaries({"role": st.sampled_from(["assistant", "user"]),
                                    "content": st.one_of(st.text(), st.none(), st.integers())}), max_size=3),
    st.none(),
    st.integers(),
    st.builds(lambda a, b: f"<reasoning>\n{a}\n</reasoning>\n<answer>\n{b}\n</answer>{a}", st.text(), st.text()),
)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), completions=st.lists(odd_completions, max_size=5))
def test_rewards_never_raise_and_return_one_float_per_completion(data, completions):
    golds = st.one_of(st.text(), st.none(), st.integers(), st.floats(), st.lists(st.integers(), max_size=2))
    answer = data.draw(st.lists(golds, min_size=len(completions), max_size=len(completions)))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        for func in BUILTIN_REWARDS.values():
            values = func(prompts=[None] * len(completions), completions=completions, answer=answer,
                          completion_ids=None, trainer_state=None)
            assert len(values) == len(completions)
            # None (skip the sample) only where math-verify cannot parse the gold answer
            assert all(isinstance(v, float) or v is None and func.__name__.startswith("math_verify") for v in values)
    assert printed.getvalue() == ""


# The linear-time parsers decide exactly what the notebook's regular expressions decide (which backtrack
# quadratically on crafted completions: benchmarks/reward_worst_case.py).
_FRAGMENTS = ["<reasoning>", "</reasoning>", "<answer>", "</answer>", "<reasoning>\n", "\n</reasoning>\n<answer>\n",
              "\n</answer>", "\n", " ", "\t", "x", "1", "23", "-", "$", ",", ".", "%", "\\boxed", "{", "}", "e",
              "\u2212", "+"]
_STRICT = re.compile(r"^<reasoning>\n.*?\n</reasoning>\n<answer>\n.*?\n</answer>\n*$", re.DOTALL)
_SOFT = re.compile(r"<reasoning>.*?</reasoning>\s*<answer>.*?</answer>", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
# a digit run with its commas is one number, read only when they group thousands or lakhs; an exponent is part of it
_NUMBER = re.compile(r"([-\u2212\u2013+]?)\$?([-\u2212\u2013+]?)(?:(\d+(?:,\d+)*)(\.\d*)?|(\.\d+))"
                     r"([eE][\-\u2212\u2013+]?\d+)?%?", re.ASCII)


def _boxed_reference(text):
    starts = [m.end() for m in re.finditer(r"\\boxed\s*\{", text)]
    if not starts:
        return None
    depth, start = 1, starts[-1]
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i].strip()
    return None


@settings(max_examples=400, deadline=None)
@given(text=st.lists(st.sampled_from(_FRAGMENTS), max_size=24).map("".join))
def test_linear_parsers_decide_what_the_regular_expressions_decide(text):
    from grpo_kit.tasks.answer_format import is_soft_format, is_strict_format
    from grpo_kit.tasks.countdown import countdown_answer
    from grpo_kit.tasks.math500 import last_boxed
    from grpo_kit.tasks.numbers import _number_text, last_number, normalize_number, parse_number

    assert is_strict_format(text) == (_STRICT.match(text) is not None)
    assert is_soft_format(text) == (_SOFT.match(text) is not None)
    found = _ANSWER.findall(text)
    assert countdown_answer(text) == (found[-1].strip() if found else None)
    numbers = list(_NUMBER.finditer(text))
    assert parse_number(text) == (_number_text(numbers[0]) if numbers else None)
    last = _number_text(numbers[-1]) if numbers else None
    assert last_number(text) == (normalize_number(last) if last is not None else None)
    assert last_boxed(text) == _boxed_reference(text)


# --- rewards as users write them: numpy numbers, arguments edited in place, sys.exit ---------------------------


def _rows():
    return [{"prompt": [{"role": "user", "content": "q"}], "answer": "3"},
            {"prompt": [{"role": "user", "content": "q"}], "answer": "4"}]


def test_numpy_rewards_are_read_as_trl_reads_them():
    import numpy as np

    from grpo_kit.tasks.reward_registry import probe
    from grpo_kit.tasks.rewards import guarded

    def scalar_f32(completions, **kwargs):
        return [np.float32(0.5)] * len(completions)

    def scalar_i64(completions, **kwargs):
        return [np.int64(1)] * len(completions)

    def array(completions, **kwargs):
        return np.ones(len(completions))

    rewards = RewardSet([scalar_f32, scalar_i64, array])
    probe(rewards, _rows(), ["<answer>3</answer>", "<answer>4</answer>"])  # accepted: no ValueError
    chats = [[{"role": "assistant", "content": "x"}]] * 2
    assert guarded(scalar_f32)(completions=chats) == [0.5, 0.5]
    assert guarded(scalar_i64)(completions=chats) == [1.0, 1.0]
    assert guarded(array)(completions=chats) == [1.0, 1.0]
    assert guarded(lambda completions, **kw: [1e30, -2.0])(completions=chats) == [None, -2.0]


def test_a_reward_editing_completions_in_place_cannot_break_the_next_one_and_sys_exit_is_named():
    from grpo_kit.tasks.reward_registry import probe
    from grpo_kit.tasks.rewards import guarded

    def vandal(completions, **kwargs):
        completions.clear()
        return [1.0, 1.0]

    def reader(completions, **kwargs):
        return [float(len(c[0]["content"])) for c in completions]

    probe(RewardSet([vandal, reader]), _rows(), ["ab", "cde"])  # reader is not blamed for vandal's edit
    chats = [[{"role": "assistant", "content": "ab"}], [{"role": "assistant", "content": "cde"}]]
    assert guarded(vandal)(completions=chats) == [1.0, 1.0] and guarded(reader)(completions=chats) == [2.0, 3.0]

    def quits(completions, **kwargs):
        import sys

        sys.exit(3)

    with pytest.raises(ValueError, match="reward quits raised SystemExit: 3"):
        probe(RewardSet([quits]), _rows(), ["a", "b"])
