"""GSM8K loading (bundled, local files, Hub call), prompts and seeded slices."""

from __future__ import annotations

import json

import pytest

from grpo_kit.tasks.answer_format import SYSTEM_PROMPT
from grpo_kit.tasks.data import build_prompt, drop_long_prompts, take_slice
from grpo_kit.tasks.gsm8k import load_gsm8k


def test_bundled_splits_have_the_published_sizes_and_columns():
    train, test = load_gsm8k("train"), load_gsm8k("test")
    assert (len(train), len(test)) == (7473, 1319)
    assert set(test.column_names) == {"question", "solution", "answer", "prompt"}
    row = train[0]
    assert row["answer"] == "72"
    assert row["prompt"] == [{"role": "system", "content": SYSTEM_PROMPT},
                             {"role": "user", "content": row["question"]}]


def test_gold_answers_have_commas_removed():
    answers = load_gsm8k("train")["answer"]
    assert not any("," in a for a in answers)
    assert all(a.lstrip("-").replace(".", "", 1).isdigit() for a in answers)


def test_system_prompt_is_the_notebooks():
    assert SYSTEM_PROMPT.startswith("Respond in the following format:\n<reasoning>\n...\n</reasoning>\n<answer>\n")
    assert SYSTEM_PROMPT.endswith("You must put your reasoning between the <reasoning> tags and answer "
                                  "between the <answer> tags.")


def test_local_jsonl_file_and_folder(tmp_path):
    rows = [{"question": "1+1?", "answer": "1+1=2\n#### 2"}, {"question": "big?", "answer": "#### 1,000"}]
    (tmp_path / "test.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    by_folder = load_gsm8k("test", source=str(tmp_path))
    by_file = load_gsm8k("test", source=str(tmp_path / "test.jsonl"))
    assert by_folder["answer"] == by_file["answer"] == ["2", "1000"]


@pytest.mark.parametrize("rows, message", [
    ([{"question": "q"}], "'answer' is missing; GSM8K rows need a 'question' and an 'answer'"),
    ([{"question": "q", "answer": "no final line"}], "no '#### N'"),
])
def test_bad_rows_are_named(tmp_path, rows, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(ValueError, match=message):
        load_gsm8k("test", source=str(path))


def test_bad_split_and_missing_path():
    with pytest.raises(ValueError, match="unknown GSM8K split"):
        load_gsm8k("validation")
    with pytest.raises(ValueError, match="no GSM8K file"):
        load_gsm8k("test", source="/nonexistent/gsm8k")


def test_hub_source_calls_load_dataset_with_the_official_id(monkeypatch):
    calls = []

    def fake_load_dataset(name, config, split):
        calls.append((name, config, split))
        return [{"question": "q", "answer": "#### 5"}]

    import datasets

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    assert load_gsm8k("test", source="hub")["answer"] == ["5"]
    assert calls == [("openai/gsm8k", "main", "test")]


def test_bundled_source_never_touches_the_hub(monkeypatch):
    import datasets

    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("network used"))
    load_gsm8k("test")


def test_take_slice_is_seeded_nested_and_checked():
    test = load_gsm8k("test")
    half = take_slice(test, fraction=0.5, seed=3)
    assert len(half) == 659
    assert take_slice(test, n=20, seed=3)["question"] == half["question"][:20]
    assert take_slice(test, n=20, seed=3)["question"] == take_slice(test, n=20, seed=3)["question"]
    assert take_slice(test, n=20, seed=4)["question"] != half["question"][:20]
    assert len(set(half["question"])) == len(half)
    assert len(take_slice(test)) == len(test)
    for kwargs in [dict(n=0), dict(n=2000), dict(fraction=0.0), dict(fraction=1.5), dict(n=1, fraction=0.5)]:
        with pytest.raises(ValueError):
            take_slice(test, **kwargs)


def test_build_prompt_custom_system():
    assert build_prompt("q", "sys")[0] == {"role": "system", "content": "sys"}


def test_drop_long_prompts(tiny_policy):
    _, tokenizer = tiny_policy
    test = load_gsm8k("test").select(range(50))
    kept = drop_long_prompts(test, tokenizer, 10_000)
    assert len(kept) == 50
    assert len(drop_long_prompts(test, tokenizer, 5)) == 0
