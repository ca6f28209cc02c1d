"""A task declared in a YAML file: the answer types' rules and rewards, the checks on bad input (each names the file
and the line or field, before any model loads), the digest a run folder records."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from grpo_kit.cli import main
from grpo_kit.tasks import BUILTIN_REWARDS, get_task, load_task
from grpo_kit.tasks.answer_types import answer_type, choice_letter, normalize_text
from grpo_kit.tasks.task_file import check_digest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "capitals"
STRICT = "<reasoning>\n{}\n</reasoning>\n<answer>\n{}\n</answer>"


def _write(folder: Path, yaml: str, train: list | str | bytes | None = None, test: list | str | bytes | None = None
           ) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train.jsonl", train), ("test.jsonl", test)):
        if rows is None:
            continue
        path = folder / name
        if isinstance(rows, bytes):
            path.write_bytes(rows)
        else:
            path.write_text(rows if isinstance(rows, str) else "".join(json.dumps(r) + "\n" for r in rows),
                            encoding="utf-8")
    (folder / "task.yaml").write_text(yaml, encoding="utf-8")
    return folder / "task.yaml"


BASIC = "train: train.jsonl\ntest: test.jsonl\nquestion: q\nanswer: a\nanswer_type: {}\n"


def _rows(answers: list, prefix: str = "Q") -> list[dict]:
    return [{"q": f"{prefix} {i}?", "a": a} for i, a in enumerate(answers)]


def test_the_example_task_file_loads_as_a_task_by_path():
    task = get_task(str(EXAMPLE / "task.yaml"))
    assert task.name == "capitals" and task.splits == ("train", "test") and task.trains
    assert task.ref == str((EXAMPLE / "task.yaml").resolve())
    assert task.reward_set().names == ["text_correctness_reward_func", "strict_format_reward_func",
                                       "xmlcount_reward_func"]
    assert task.reward_set().weights == [2.0, 0.5, 0.5]
    assert task.validation_size == 10 and task.headline == "text_correctness_reward_func"
    test = task.load("test")
    assert len(test) == 20 and test[0]["prompt"][1]["content"] == test[0]["question"]
    assert set(task.digest) == {str(EXAMPLE.resolve() / n) for n in ("task.yaml", "train.jsonl", "test.jsonl")}
    # the tiny policy's warm start: answer-only demonstrations
    assert task.extras["demonstration"](test[0], "equations") == ("", test[0]["answer"])


@pytest.mark.parametrize("written", ["sixty-five", "sixty\u2010five", "sixty\u2013five", "Sixty five", "sixty_five",
                                     "sixty/five", "sixty - five"])
def test_word_joiners_separate_words_in_text_answers(written):
    # lm-evaluation-harness's ignore_punctuation deletes the hyphen ("sixtyfive"): a joiner stands for a space
    kind = answer_type("text")
    assert kind.same(kind.flexible(f"so\n#### {written}"), "Sixty-five")
    assert BUILTIN_REWARDS["text_correctness_reward_func"](completions=[f"<answer>{written}</answer>"] * 2,
                                                           answer=["sixty five", "sixtyfive"]) == [1.0, 0.0]
    assert normalize_text(f"two hundred and {written}") == "two hundred and sixty five"
    assert normalize_text("sixty\u00adfive") == "sixtyfive"  # a soft hyphen is invisible: it joins


def test_text_answers_compare_normalised_and_the_rules_differ_in_layout():
    kind = answer_type("text")
    assert normalize_text(" The  Hague! ") == "the hague"
    assert kind.strict(STRICT.format("x", "the hague.")) == "the hague"
    assert kind.strict("<answer>The Hague</answer>") is None  # not the strict layout
    assert kind.flexible("<answer>The Hague</answer>") == "the hague"
    assert kind.flexible("thinking\n#### The Hague") == "the hague"
    assert kind.flexible("I think it is\nThe Hague") == "the hague"
    assert kind.same("the hague", "The Hague") and not kind.same("hague", "The Hague")
    reward = BUILTIN_REWARDS["text_correctness_reward_func"]
    # without tags the whole completion is the answer (extract_xml_answer, as the blog post's hard correctness)
    assert reward(completions=["<answer>the HAGUE</answer>", "<answer>Rotterdam</answer>", "The Hague", "it is Hague"],
                  answer=["The Hague"] * 4) == [1.0, 0.0, 1.0, 0.0]


def test_number_answers_compare_as_numbers():
    kind = answer_type("number")
    assert kind.gold("$1,200.0") == "1200" and kind.gold("twelve") is None and kind.gold("12 apples") is None
    assert kind.strict(STRICT.format("x", "1200.00")) == "1200"
    assert kind.flexible("so 3 + 4 = 7") == "7"
    assert kind.same("1200", "1200.0")
    assert kind.reward == "soft_correctness_reward_func"


def test_choice_answers_read_one_letter_among_the_options():
    kind = answer_type("choice", "ABC")
    assert [choice_letter(s) for s in ("B", "(c)", "A. Paris", "Paris")] == ["B", "C", "A", None]
    assert kind.strict(STRICT.format("x", "(B) Paris")) == "B"
    assert kind.strict(STRICT.format("x", "D")) is None  # not an option
    assert kind.flexible("A cat thinks the answer is (C).") == "C"
    assert kind.flexible("no letter here") is None
    assert kind.gold("b") == "B" and kind.gold("D") is None
    reward = BUILTIN_REWARDS["choice_correctness_reward_func"]
    assert reward(completions=["<answer>(B)</answer>", "<answer>C</answer>", "Because"],
                  answer=["B"] * 3) == [1.0, 0.0, 0.0]


def test_math_answers_are_checked_with_math_verify():
    kind = answer_type("math")
    assert kind.flexible("so \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert kind.same("0.5", "\\frac{1}{2}") and not kind.same("0.4", "\\frac{1}{2}")
    assert kind.reward == "math_verify_reward_func"


def test_a_task_file_of_each_answer_type_scores_completions(tmp_path):
    from grpo_kit.evaluation.scoring import score

    path = _write(tmp_path, BASIC.format("choice") + "choices: AB\n", _rows(["A", "B"]), _rows(["B"], "T"))
    task = load_task(path)
    records = score(task.load("test"), [[STRICT.format("x", "B"), "hmm (A)"]], task=task)
    assert [(r["strict_correct"], r["flexible_correct"]) for r in records] == [(1.0, 1.0), (0.0, 0.0)]
    assert records[0]["choice_correctness_reward_func"] == 1.0


# --- bad input: one clear error naming the file and the line or field ---------------------------------------------


def _error(path: Path) -> str:
    with pytest.raises(ValueError) as e:
        load_task(path)
    return str(e.value)


def test_a_row_without_the_answer_field_names_file_and_line(tmp_path):
    path = _write(tmp_path, BASIC.format("text"), _rows(["x"]), [{"q": "a?", "a": "b"}, {"q": "c?"}])
    assert f"{tmp_path / 'test.jsonl'}:2: 'a' is missing" in _error(path)


@pytest.mark.parametrize("value", [None, "", "  "])
def test_an_empty_or_null_answer_names_file_and_line(tmp_path, value):
    path = _write(tmp_path, BASIC.format("text"), [{"q": "a?", "a": "b"}, {"q": "c?", "a": value}], _rows(["x"]))
    assert f"{tmp_path / 'train.jsonl'}:2" in _error(path)


def test_an_answer_not_of_the_type_names_file_and_line(tmp_path):
    path = _write(tmp_path, BASIC.format("number"), _rows(["3"]), _rows(["4", "four"]))
    message = _error(path)
    assert f"{tmp_path / 'test.jsonl'}:2" in message and "not a number" in message


def test_an_unknown_answer_type_names_the_field(tmp_path):
    path = _write(tmp_path, BASIC.format("float"), _rows(["3"]), _rows(["4"]))
    assert "answer_type 'float' is not one of number, text, math, choice" in _error(path)


def test_a_missing_field_of_the_task_file_is_named(tmp_path):
    path = _write(tmp_path, "test: test.jsonl\nquestion: q\nanswer_type: text\n", None, _rows(["4"]))
    assert "field 'answer' is missing" in _error(path)
    path = _write(tmp_path, BASIC.format("text") + "answr: a\n", _rows(["3"]), _rows(["4"]))
    assert "unknown field 'answr'" in _error(path)


def test_a_missing_data_file_is_named(tmp_path):
    path = _write(tmp_path, BASIC.format("text"), None, _rows(["4"]))
    message = _error(path)
    assert "train: no data file at" in message and str(tmp_path / "train.jsonl") in message


def test_a_line_that_is_not_utf8_names_file_and_line(tmp_path):
    path = _write(tmp_path, BASIC.format("text"), _rows(["3"]), b'{"q": "a?", "a": "b"}\n{"q": "\xff?", "a": "c"}\n')
    message = _error(path)
    assert f"{tmp_path / 'test.jsonl'}:2 is not UTF-8" in message


def test_a_line_that_is_not_json_names_file_and_line(tmp_path):
    path = _write(tmp_path, BASIC.format("text"), '{"q": "a?", "a": "b"}\n\n{"q": "c?", a: 1}\n', _rows(["4"]))
    assert f"{tmp_path / 'train.jsonl'}:3 is not a JSON line" in _error(path)


def test_a_task_file_that_is_not_yaml_names_the_line(tmp_path):
    path = _write(tmp_path, "train: train.jsonl\ntest: [test.jsonl\nquestion: q\n", _rows(["3"]), _rows(["4"]))
    message = _error(path)
    assert message.startswith(f"{path}:") and "is not YAML" in message
    path.write_text("just a sentence\n", encoding="utf-8")
    assert "is not a YAML mapping" in _error(path)


def test_a_question_in_both_splits_is_warned_with_the_count(tmp_path, caplog):
    path = _write(tmp_path, BASIC.format("text"), _rows(["a", "b", "c"]), _rows(["a", "b"]) + _rows(["z"], "T"))
    with caplog.at_level(logging.WARNING, logger="grpo_kit"):
        load_task(path)
    assert "2 of 3 test questions are also in the train split" in caplog.text


def test_an_unknown_reward_in_the_task_file_is_named(tmp_path):
    path = _write(tmp_path, BASIC.format("text") + "rewards: {text_correctnes: 1}\n", _rows(["3"]), _rows(["4"]))
    assert "rewards: unknown reward 'text_correctnes'" in _error(path)


@pytest.mark.parametrize("command", [["eval", "--before", "--run-dir", "{run}", "--preset", "cpu-tiny"],
                                     ["train", "--run-dir", "{run}", "--preset", "cpu-tiny"],
                                     ["demo", "--runs-dir", "{run}"]])
def test_the_command_line_exits_2_with_one_line_before_any_model_loads(tmp_path, capsys, command):
    path = _write(tmp_path, BASIC.format("number"), _rows(["3"]), _rows(["4", None]))
    argv = [part.format(run=tmp_path / "run") for part in command] + ["--task", str(path)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1 and "Traceback" not in err
    assert f"{tmp_path / 'test.jsonl'}:2" in err


# --- the run folder records the task file and its data -----------------------------------------------------------


def test_changed_data_is_refused_naming_the_file(tmp_path):
    folder = tmp_path / "capitals"
    shutil.copytree(EXAMPLE, folder)
    task = load_task(folder / "task.yaml")
    recorded = dict(task.digest)
    assert get_task(str(folder / "task.yaml"), digest=recorded) is task  # unchanged: the same task, read once
    with (folder / "train.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps({"question": "What is the capital of Chad?", "answer": "N'Djamena"}) + "\n")
    with pytest.raises(ValueError, match=r"train\.jsonl changed"):
        get_task(str(folder / "task.yaml"), digest=recorded)
    check_digest(get_task("gsm8k"), recorded)  # a task of the kit's own records no files


@pytest.mark.slow
def test_eval_before_then_after_on_the_example_with_the_tiny_policy(tmp_path, capsys):
    """A new user's path: a JSONL of string answers, ``eval --before`` with the tiny policy, then every later command
    finds the task in the run folder; changed data is refused with the file's name."""
    folder = tmp_path / "capitals"
    shutil.copytree(EXAMPLE, folder)
    run = tmp_path / "my run"
    tiny = ["--warm-steps", "3", "--cache-dir", str(tmp_path / "cache")]
    assert main(["eval", "--before", "--run-dir", str(run), "--task", str(folder / "task.yaml"), "--preset",
                 "cpu-tiny", "--eval-size", "4", "--max-new-tokens", "8", *tiny]) == 0
    out = capsys.readouterr()
    assert "Text correctness" in out.out
    # case 20: the next commands can be pasted into a shell, a folder with a space included
    assert f"next: python -m grpo_kit train --run-dir '{run}', then python -m grpo_kit eval --run-dir '{run}'" \
        in out.err
    settings = json.loads((run / "eval_settings.json").read_text())
    assert settings["task"] == str((folder / "task.yaml").resolve())
    assert set(settings["task_digest"]) == {str(folder.resolve() / n) for n in ("task.yaml", "train.jsonl",
                                                                                "test.jsonl")}
    records = [json.loads(line) for line in (run / "baseline.jsonl").read_text().splitlines()]
    assert len(records) == 4 and records[0]["task"] == "capitals"
    (folder / "test.jsonl").write_text((folder / "test.jsonl").read_text().replace("Canberra", "Sydney"))
    assert main(["train", "--run-dir", str(run), "--preset", "cpu-tiny", "--max-steps", "1", *tiny]) == 2
    err = capsys.readouterr().err
    assert "test.jsonl changed" in err and len(err.strip().splitlines()) == 1


def test_csv_and_parquet_data_files_load_like_jsonl(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "train.csv").write_text('q,a\n"Capital of Peru, please?",Lima\nCapital of Chad?,N\'Djamena\n',
                                        encoding="utf-8")
    pq.write_table(pa.Table.from_pylist([{"q": "Capital of Mali?", "a": "Bamako"}]), tmp_path / "test.parquet")
    (tmp_path / "task.yaml").write_text("train: train.csv\ntest: test.parquet\nquestion: q\nanswer: a\n"
                                        "answer_type: text\n", encoding="utf-8")
    task = load_task(tmp_path / "task.yaml")
    assert task.load("train")["question"] == ["Capital of Peru, please?", "Capital of Chad?"]
    assert task.load("test")["answer"] == ["Bamako"] and task.name == "task"
    (tmp_path / "train.csv").write_text("q,a\nCapital of Peru?,\n", encoding="utf-8")
    assert f"{tmp_path / 'train.csv'}:2: 'a' is ''" in _error(tmp_path / "task.yaml")


# --- numbers read as written or refused, duplicate keys refused, BOMs read -------------------------------


def test_numbers_are_read_as_written_or_refused_never_cut_short(tmp_path):
    """Cases 3 and 17: "1,5" was read as 1, "12,34,567" as 12; "1.5e-07", "2e3", "−3" were refused as gold answers;
    1e300 became the float's 301 digits."""
    kind = answer_type("number")
    assert [kind.gold(g) for g in ("1,5", "1,00", "12,34,567", "1.5e-07", "2e3", "\u22123", "1e+300")] == [
        None, None, "1234567", "0.00000015", "2000", "-3", "1" + "0" * 300]
    assert kind.strict(STRICT.format("x", "12,34,567")) == "1234567"
    assert kind.strict(STRICT.format("x", "1,5")) is None  # not read as 1
    assert kind.flexible("so it is 1,00") is None and kind.flexible("so it is 2e3") == "2000"
    path = _write(tmp_path, BASIC.format("number"), [{"q": "a?", "a": 1e300}, {"q": "b?", "a": 1.5e-07}],
                  [{"q": "c?", "a": "2e3"}, {"q": "d?", "a": "1,5"}])
    message = _error(path)
    assert f"{tmp_path / 'test.jsonl'}:2: 'a' is '1,5', not a number as written" in message
    (tmp_path / "test.jsonl").write_text(json.dumps({"q": "c?", "a": "\u22123"}) + "\n", encoding="utf-8")
    task = load_task(path)
    assert task.load("train")["answer"] == ["1" + "0" * 300, "0.00000015"] and task.load("test")["answer"] == ["-3"]


def test_numbers_written_without_a_whole_part_with_a_bare_point_or_a_plus_are_read_as_written(tmp_path):
    """Case 17 of issue 44: gold numbers ".5", "5." and "+7" were refused."""
    kind = answer_type("number")
    assert [kind.gold(g) for g in (".5", "5.", "+7", "-.25", "+$3")] == ["0.5", "5", "7", "-0.25", "3"]
    assert kind.strict(STRICT.format("x", ".5")) == "0.5" and kind.flexible("it is +7.") == "7"
    assert kind.same(kind.strict(STRICT.format("x", "0.50")), ".5")
    path = _write(tmp_path, BASIC.format("number"), _rows([".5", "5."]), _rows(["+7"]))
    task = load_task(path)
    assert task.load("train")["answer"] == ["0.5", "5"] and task.load("test")["answer"] == ["7"]


def test_a_text_answer_that_is_a_number_is_compared_as_a_number():
    """Case 6 of issue 44: answer_type text scored "-5" equal to "5" and "3.14" equal to "314"."""
    kind = answer_type("text")
    reward = BUILTIN_REWARDS["text_correctness_reward_func"]
    for gold, written, same in (("-5", "5", False), ("3.14", "314", False), ("-5", "\u22125", True),
                                ("3.14", "3.140", True), ("1,200", "1200", True), ("The Hague", "the hague.", True)):
        assert kind.same(kind.strict(STRICT.format("x", written)), gold) is same, (gold, written)
        assert kind.same(kind.flexible(f"so\n#### {written}"), gold) is same, (gold, written)
        assert reward(completions=[f"<answer>{written}</answer>"], answer=[gold]) == [float(same)]


def test_a_choice_answer_of_two_letters_is_not_read_as_the_first():
    """Case 5: "A and B" was read as "A"."""
    kind = answer_type("choice")
    assert kind.gold("A and B") is None and choice_letter("a cat") is None
    assert kind.strict(STRICT.format("x", "A and B")) is None and kind.strict(STRICT.format("x", "B. Paris")) == "B"


@pytest.mark.parametrize("case", ["yaml", "json", "csv header", "csv cells"])
def test_a_key_given_twice_or_a_cell_too_many_is_refused_naming_the_line(tmp_path, case):
    """Case 4: a second 'answer:' in the task file won silently (every gold answer became the question); so did
    duplicate JSON keys and CSV headers, and extra CSV cells were dropped."""
    if case == "yaml":
        path = _write(tmp_path, BASIC.format("text") + "answer: q\n", _rows(["x"]), _rows(["y"]))
        assert _error(path) == f"{path}:6: the key 'answer' is given twice (only the last would be read): keep one"
        return
    if case == "json":
        path = _write(tmp_path, BASIC.format("text"), _rows(["x"]), '{"q": "a?", "a": "b"}\n{"q": "c?", "a": "d", '
                                                                   '"a": "e"}\n')
        assert _error(path) == (f"{tmp_path / 'test.jsonl'}:2: the key 'a' is given twice in one object (JSON keeps "
                                "only the last): keep one")
        return
    text = "q,a,a\nCapital of Peru?,Lima,x\n" if case == "csv header" else "q,a\nCapital of Peru?,Lima,Cusco\n"
    (tmp_path / "test.csv").write_text(text, encoding="utf-8")
    (tmp_path / "task.yaml").write_text("test: test.csv\nquestion: q\nanswer: a\nanswer_type: text\n")
    message = _error(tmp_path / "task.yaml")
    assert (f"{tmp_path / 'test.csv'}:1: the header names the column 'a' twice" in message if case == "csv header"
            else f"{tmp_path / 'test.csv'}:2 has 3 cells and the header 2" in message)


def test_a_byte_order_mark_is_read_and_a_blank_question_refused(tmp_path):
    """Cases 15 and 21: Excel's "CSV UTF-8" (with a BOM) said 'question' is missing; a JSONL with a BOM was refused;
    a question of only whitespace was accepted."""
    (tmp_path / "test.csv").write_bytes("\ufeffq,a\nCapital of Peru?,Lima\n".encode())
    (tmp_path / "train.jsonl").write_bytes("\ufeff".encode() + json.dumps({"q": "Capital of Chad?", "a": "N"}).encode()
                                           + b"\n")
    (tmp_path / "task.yaml").write_text("train: train.jsonl\ntest: test.csv\nquestion: q\nanswer: a\n"
                                        "answer_type: text\n")
    task = load_task(tmp_path / "task.yaml")
    assert task.load("test")["question"] == ["Capital of Peru?"] and task.load("train")["answer"] == ["N"]
    path = _write(tmp_path / "blank", BASIC.format("text"), _rows(["x"]), [{"q": " \n\t", "a": "b"}])
    assert f"{tmp_path / 'blank' / 'test.jsonl'}:1: 'q' is ' \\n\\t'" in _error(path)


def test_a_hub_dataset_while_offline_is_one_line_naming_the_task_file_at_once(tmp_path, monkeypatch):
    """Case 16: offline, 12 lines of retries over 24 s, then a message without the task file."""
    import socket
    import time

    import datasets

    path = tmp_path / "task.yaml"
    path.write_text("hub: {path: owner/name}\nquestion: q\nanswer: a\nanswer_type: text\n", encoding="utf-8")

    def unreachable(*args, **kwargs):
        raise OSError(-2, "Name or service not known")

    monkeypatch.setattr(socket, "create_connection", unreachable)
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("load_dataset would retry for 30 s"))
    start = time.perf_counter()
    message = _error(path)
    assert time.perf_counter() - start < 5
    assert message.startswith(f"{path}: hub: owner/name is downloaded from the Hub, and the Hugging Face Hub "
                              "(https://huggingface.co) cannot be reached (Name or service not known)")
    assert "HF_HUB_OFFLINE=1" in message

    from huggingface_hub import constants

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'owner/name' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets, "load_dataset", offline)
    assert _error(path).startswith(f"{path}: hub: cannot load owner/name split 'test': Couldn't reach 'owner/name'")


def test_a_moved_task_file_is_named_as_the_run_folders_not_as_a_missing_option(tmp_path, capsys):
    """Case 19: a moved task file said "give the path of a YAML task file", though eval and export take no --task."""
    moved = tmp_path / "gone" / "task.yaml"
    run = tmp_path / "run"
    run.mkdir()
    (run / "eval_settings.json").write_text(json.dumps({"task": str(moved), "task_digest": {str(moved): "00"},
                                                        "samples": 4, "slice": {"n": 2}, "seed": 0,
                                                        "max_new_tokens": 8, "temperature": 0.7,
                                                        "preset": "cpu-tiny"}))
    for command in (["reward-check", str(run)], ["train", "--run-dir", str(run)]):  # case 13 of issue 44: train too
        assert main(command) == 2
        err = capsys.readouterr().err
        assert f"the task file {moved}, which this run folder was measured and trained on, is no longer there" in err
        assert "give the path" not in err


def test_the_kits_own_tasks_are_task_files_read_by_the_same_loader_and_recorded_by_name():
    from grpo_kit.tasks import BUILTIN_TASKS, TASKS

    assert list(BUILTIN_TASKS) == list(TASKS) == ["gsm8k", "countdown", "math500", "sum3"]
    for name, path in BUILTIN_TASKS.items():
        task = load_task(path, builtin=True)
        assert task.name == name and task.ref == name and task.digest is None  # a run folder records the name
        assert (task.rewards, task.metrics, task.headline) == (TASKS[name].rewards, TASKS[name].metrics,
                                                                TASKS[name].headline)
        assert get_task(task.ref) is TASKS[name]
    assert load_task(BUILTIN_TASKS["gsm8k"]).ref == str(BUILTIN_TASKS["gsm8k"])  # read as a user's: by its path
    assert TASKS["countdown"].gold({"target": 36, "nums": [79, 17, 60]}) == "36 from [79, 17, 60]"
    assert "demonstration" not in TASKS["math500"].extras and TASKS["sum3"].extras["warm_xml_share"] == 1.0


def test_a_task_file_may_name_its_loader_and_rules_in_python(tmp_path):
    (tmp_path / "my_rows.py").write_text(
        "from datasets import Dataset\n"
        "from grpo_kit.tasks import ExtractionRule\n"
        "def load(split, **kwargs):\n"
        "    return Dataset.from_list([{'question': 'Say yes', 'answer': 'yes', 'prompt': [{'role': 'user', "
        "'content': 'Say yes'}]}])\n"
        "RULES = {rule: ExtractionRule(lambda text: text.strip() or None, lambda a, ex: a == ex['answer'])\n"
        "         for rule in ('strict', 'flexible')}\n", encoding="utf-8")
    path = _write(tmp_path, "loader: my_rows:load\nsplits: [test]\nrules: my_rows:RULES\n"
                            "rewards: [xmlcount_reward_func]\nmetrics: [xmlcount_reward_func]\n"
                            "headline: strict_correct\n")
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        task = load_task(path, trust_remote_code=True)
        assert task.splits == ("test",) and not task.trains and task.rules["strict"].extract(" yes ") == "yes"
        assert task.load("test")[0]["answer"] == "yes" and set(task.digest) == {str(path.resolve())}
        bad = _write(tmp_path / "bad", "loader: my_rows:nowhere\nsplits: [test]\nrules: my_rows:RULES\n"
                                       "rewards: [xmlcount_reward_func]\n")
        with pytest.raises(ValueError, match=r"task.yaml: loader: 'my_rows:nowhere': module 'my_rows' has no "
                                             "'nowhere'"):
            load_task(bad, trust_remote_code=True)
        with pytest.raises(ValueError, match="field 'answer_type' is missing"):
            load_task(_write(tmp_path / "no_rules", "loader: my_rows:load\nrewards: [xmlcount_reward_func]\n"),
                      trust_remote_code=True)
    finally:
        sys.path.remove(str(tmp_path))


TRUSTED_KEYS = ("loader: payload:load\nsplits: [test]\nanswer_type: text\n", "rules: payload:RULES\n",
                "demonstration: payload:show\n", "tokenizer_texts: os:listdir\n")


@pytest.mark.parametrize("code", TRUSTED_KEYS)
def test_a_task_files_own_python_runs_only_when_the_user_says_so(tmp_path, monkeypatch, capsys, code):
    """Case 1: a downloaded task file's loader module ran at import; `loader: os:system` ran a shell command."""
    (tmp_path / "payload.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n", encoding="utf-8")
    data = "" if code.startswith("loader") else BASIC.format("text")
    path = _write(tmp_path, data + code, train=_rows(["a", "b"]), test=_rows(["c"]))
    monkeypatch.chdir(tmp_path)  # the module sits in the folder the command runs in, as in a downloaded folder
    monkeypatch.syspath_prepend(str(tmp_path))
    key, ref = code.split("\n")[0].split(": ")
    for command in (["eval", "--before", "--task", str(path), "--run-dir", str(tmp_path / "run")],
                    ["train", "--task", str(path), "--run-dir", str(tmp_path / "run2")],
                    ["demo", "--task", str(path), "--runs-dir", str(tmp_path / "runs")]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"error: {path} names Python that loading it would import and "
                                                         f"run ({key}: {ref}; ")
        assert "nothing was imported" in err and "--trust-task-code" in err and "trust_remote_code=True" in err
    assert "payload: " + str(tmp_path / "payload.py") in err or key == "tokenizer_texts"
    assert not (tmp_path / "ran").exists() and not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match="names Python that loading it would import"):
        get_task(str(path))
    # the file cannot trust itself
    (tmp_path / "own.yaml").write_text(data + code + "trust_remote_code: true\n", encoding="utf-8")
    with pytest.raises(ValueError, match="a task file cannot trust its own code"):
        get_task(str(tmp_path / "own.yaml"), trust_remote_code=True)


def test_trusted_task_code_is_imported_and_the_kits_own_modules_need_nothing(tmp_path, monkeypatch):
    (tmp_path / "payload.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n"
                                         "def show(row, style):\n    return ('', row['answer'])\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    path = _write(tmp_path, BASIC.format("text") + "demonstration: payload:show\n", train=_rows(["a"]),
                  test=_rows(["b"]))
    task = get_task(str(path), trust_remote_code=True)
    assert (tmp_path / "ran").exists() and task.extras["demonstration"]({"answer": "b"}, "x") == ("", "b")
    kit = _write(tmp_path / "kit", BASIC.format("number") + "demonstration: grpo_kit.tasks.gsm8k:demonstration\n",
                 train=_rows([1]), test=_rows([2]))
    assert load_task(kit).extras["demonstration"] is not None  # the kit's own modules are not code of the file's


def test_one_field_named_for_the_question_and_the_answer_is_refused(tmp_path):
    """Case 5 of issue 44: `answer:` naming the question's own field was accepted: every gold answer was the
    question."""
    path = _write(tmp_path, "train: train.jsonl\ntest: test.jsonl\nquestion: q\nanswer: q\nanswer_type: text\n",
                  _rows(["a"]), _rows(["b"]))
    assert _error(path) == f"{path}: question and answer both name the data field 'q': name the field that holds " \
                           "the answer"


@pytest.mark.parametrize("gold, message", [
    ("'{nope}'", "gold '{nope}' cannot be filled from a row (KeyError: 'nope'): name the row's fields, which are "
                 "question, answer, prompt"),
    ("5", "field 'gold' must be a template over a row's fields, e.g. '{answer}'"),
    ("'{'", "gold '{' is not a template (Single '{' encountered in format string)"),
    ("'{0} of {answer}'", "gold '{0} of {answer}' numbers its fields: name them"),
])
def test_a_gold_template_the_rows_cannot_fill_is_refused_when_the_file_loads(tmp_path, gold, message):
    """Case 8 of issue 44: `gold: '{nope}'` raised KeyError after the warm start; `gold: 5` AttributeError."""
    path = _write(tmp_path, BASIC.format("text") + f"gold: {gold}\n", _rows(["a"]), _rows(["b"]))
    assert _error(path).startswith(f"{path}: {message}")


LOADERS = """\
import datasets
def rows(split, **kwargs):
    return datasets.Dataset.from_list([{"question": "q", "answer": "a", "prompt": [{"role": "user", "content": "q"}]}])
def a_list(split, **kwargs):
    return [1, 2]
def no_prompt(split, **kwargs):
    return datasets.Dataset.from_list([{"question": "q", "answer": "a"}])
def breaks(split, **kwargs):
    return {}[split]
"""


@pytest.mark.parametrize("module, message", [
    ("builtins:len", "loader builtins:len returned int for split 'test', not a datasets.Dataset"),
    ("loaders:a_list", "loader loaders:a_list returned list for split 'test', not a datasets.Dataset"),
    ("loaders:no_prompt", "loader loaders:no_prompt returned split 'test' without a prompt column (it has question, "
                          "answer)"),
    ("loaders:breaks", "loader loaders:breaks raised KeyError reading split 'test': 'test': fix the loader"),
    ("loaders_syntax:rows", "loader: 'loaders_syntax:rows': importing 'loaders_syntax' failed with SyntaxError"),
    ("loaders_name:rows", "loader: 'loaders_name:rows': importing 'loaders_name' failed with NameError: name "
                          "'nowhere' is not defined at "),
    ("loaders_exit:rows", "loader: 'loaders_exit:rows': importing 'loaders_exit' failed with SystemExit: 0 at "),
    ("loaders_raise:rows", "loader: 'loaders_raise:rows': importing 'loaders_raise' failed with RuntimeError: no "
                           "data here at "),
])
def test_a_loader_or_module_that_fails_is_one_line_naming_the_file(tmp_path, monkeypatch, capsys, module, message):
    """Cases 9 and 16 of issue 44: a loader returning no dataset, a module with a SyntaxError, NameError or
    RuntimeError at import gave a traceback; one calling sys.exit(0) at import ended the command with 0, silent."""
    for name, source in (("loaders", LOADERS), ("loaders_syntax", "def f(:\n"), ("loaders_name", "x = nowhere\n"),
                         ("loaders_exit", "import sys\nsys.exit(0)\n"),
                         ("loaders_raise", "raise RuntimeError('no data here')\n")):
        (tmp_path / f"{name}.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    path = _write(tmp_path, f"loader: {module}\nsplits: test\nanswer_type: text\n")
    assert main(["eval", "--before", "--task", str(path), "--run-dir", str(tmp_path / "run"),
                 "--model_name_or_path", str(tmp_path), "--trust-task-code"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: {message}") and err.count("\n") == 1, err
    if "import" in message:  # the module's file and line
        assert f"{tmp_path / module.split(':')[0]}.py:{2 if 'exit' in module else 1};" in err
    assert not (tmp_path / "run").exists()


def test_splits_may_be_one_name_and_a_file_without_answer_type_names_what_it_lacks(tmp_path, monkeypatch):
    """Case 20 of issue 44: `splits: test` read as the splits t, e, s, t; a file with loader and rules but no
    answer_type or rewards was told about a `rewards` key it did not have."""
    (tmp_path / "loaders.py").write_text(LOADERS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    task = load_task(_write(tmp_path, "loader: loaders:rows\nsplits: test\nanswer_type: text\n"),
                     trust_remote_code=True)
    assert task.splits == ("test",) and task.load("test")[0]["answer"] == "a"
    path = _write(tmp_path / "b", "loader: grpo_kit.tasks.gsm8k:load_gsm8k\nsplits: [train]\nanswer_type: text\n")
    assert "field 'splits' must list the loader's split names, test among them" in _error(path)
    path = _write(tmp_path / "c", "loader: grpo_kit.tasks.gsm8k:load_gsm8k\nrules: grpo_kit.tasks.sum3:RULES\n")
    assert _error(path) == (f"{path}: without answer_type the task has no correctness reward to train with: add "
                            "rewards: {reward name: weight} (e.g. {xmlcount_reward_func: 1.0}), or an answer_type: "
                            "number, text, math, choice")


@pytest.mark.parametrize("blank", ["\u200b\u200b", "\u2060 \ufeff", "\u00ad"])
def test_a_question_or_answer_of_invisible_characters_is_refused(tmp_path, blank):
    """Case 13 of issue 44: a question or answer of zero-width spaces only was accepted."""
    path = _write(tmp_path, BASIC.format("text"), _rows(["a"]), [{"q": "Q?", "a": "b"}, {"q": blank, "a": "c"}])
    assert f"{tmp_path / 'test.jsonl'}:2: 'q' is {blank!r}" in _error(path)
    path = _write(tmp_path, BASIC.format("text"), _rows(["a", blank]), _rows(["b"]))
    assert f"{tmp_path / 'train.jsonl'}:2: 'a' is {blank!r}" in _error(path)
    assert normalize_text(f"Pa{blank.replace(' ', '')}ris") == "paris"  # nor do they tell answers apart


@pytest.mark.parametrize("line, message", [
    ('{"q": "What is \\ud800?", "a": "x"}', ":2 holds '\\ud800', half of a UTF-16 pair, which is no character"),
    ('{"q": "big?", "a": ' + "7" * 5000 + "}", ":2 holds a whole number of more than 4300 digits, which Python does "
                                               "not read: write it as text in quotes, or shorten it"),
    ('{"q": "c?", "a": "x", "extra": "one"}', ":2: field 'extra' is text ('one') where {first}:1 holds a number: give "
                                              "the field values of one kind in every row"),
])
def test_data_a_table_cannot_hold_is_named_with_file_and_line(tmp_path, line, message):
    """Case 16 of issue 44: a JSONL holding \\ud800, a 5,000-digit number (with Python's set_int_max_str_digits
    advice) and mixed types in an unused column were refused without the file or line."""
    test = tmp_path / "test.jsonl"
    path = _write(tmp_path, BASIC.format("text"), _rows(["a"]), json.dumps({"q": "b?", "a": "b", "extra": 1}) + "\n"
                  + line + "\n")
    assert _error(path).startswith(f"{test}{message.format(first=test)}")
    # numbers of a field written whole in one row and with decimals in another are one column of numbers
    rows = [{"q": f"q{i}?", "a": "x", "extra": 1 if i < 4500 else 2.5} for i in range(5000)]  # two batches
    assert load_task(_write(tmp_path / "numbers", BASIC.format("text"), _rows(["a"]), rows)).load("test")[-1][
        "extra"] == 2.5


def test_a_long_answer_that_is_no_number_is_shown_cut_in_its_one_line(tmp_path):
    """Case 16 of issue 44: a 5,000-digit gold number given as text was refused in one line of 5,230 characters;
    issue 57: as "not a number as written", where it is a number longer than the kit reads."""
    path = _write(tmp_path, BASIC.format("number"), _rows(["1"]), _rows(["9" * 5000]))
    error = _error(path)
    assert error.startswith(f"{tmp_path / 'test.jsonl'}:1: 'a' is '999") and "9999' (5000 characters), a number of " \
        "5,000 digits, longer than the 4,096 the kit reads and compares: give a shorter answer, or answer_type text " \
        "to compare it as text" in error and len(error.replace(str(tmp_path), "")) < 330, error  # paths vary


def test_a_yaml_merge_key_is_read_in_task_files_as_in_recipes(tmp_path):
    """Case 16 of issue 44: a merge key `<<:` worked in recipes and was refused in task files."""
    path = _write(tmp_path, "train: train.jsonl\ntest: test.jsonl\n<<: {question: q, answer: z}\nanswer: a\n"
                            "answer_type: text\n", _rows(["a"]), _rows(["b"]))
    assert load_task(path).load("test")[0]["answer"] == "b"  # the key beside it replaces the merged one
    twice = _write(tmp_path / "twice", "train: train.jsonl\ntest: test.jsonl\n<<: {question: q}\nanswer: a\n"
                                       "answer: b\nanswer_type: text\n", _rows(["a"]), _rows(["b"]))
    assert "the key 'answer' is given twice" in _error(twice)


# --- issue 57: what a task file holds is read when it loads, or refused in one line ------------------------------


@pytest.mark.parametrize("template, says", [
    ("{answer:>9999999999}", "gives the field 'answer' a format spec (':>9999999999')"),
    ("{answer!r}", "gives the field 'answer' a conversion ('!r')"),
    ("{answer.__class__}", "gives the field 'answer' an attribute or index"),
    ("{answer[0]}", "gives the field 'answer' an attribute or index"),
])
def test_a_gold_template_names_fields_only(template, says, tmp_path):
    """S6: `gold: '{answer:>9999999999}'` loaded and took 10 GB."""
    path = _write(tmp_path, BASIC.format("text") + f"gold: '{template}'\n", _rows(["a"]), _rows(["b"]))
    assert _error(path) == (f"{path}: gold {template!r} {says}: a gold template names fields only, as '{{field}}', "
                            "e.g. '{answer}', or '{target} from {nums}' (a brace meant as text written twice: '{{')")


def test_math_answers_are_read_by_math_verify_when_the_task_loads_naming_the_row(tmp_path):
    """S7: a `math` answer `\\frac{1}{2` (unbalanced) loaded, and no completion could ever be judged against it."""
    path = _write(tmp_path, BASIC.format("math"), _rows(["\\frac{1}{2}", "x^2 + 1", "\\$18.90", "72"]),
                  _rows(["\\sqrt{2}", "\\frac{1}{2"]))
    assert _error(path) == (f"{tmp_path / 'test.jsonl'}:2: 'a' is '\\\\frac{{1}}{{2', not a LaTeX answer math-verify "
                            "can read (its braces paired, e.g. \\frac{1}{2}) or a number (answer_type math in "
                            f"{path})")
    (tmp_path / "test.jsonl").write_text(json.dumps({"q": "Q?", "a": "}{"}) + "\n", encoding="utf-8")
    assert "test.jsonl:1: 'a' is '}{', not a LaTeX answer" in _error(path)
    (tmp_path / "test.jsonl").write_text(json.dumps({"q": "Q?", "a": "\\sqrt{2}"}) + "\n", encoding="utf-8")
    task = load_task(path)
    kind = answer_type("math")
    assert task.load("train")[2]["answer"] == "\\$18.90" and kind.same("18.90", "\\$18.90")  # an escaped dollar
    assert kind.same("\\frac{2}{4}", task.load("train")[0]["answer"])


def test_a_task_name_is_one_line(tmp_path):
    path = _write(tmp_path, BASIC.format("text") + "name: \"two\\nlines\"\n", _rows(["a"]), _rows(["b"]))
    assert _error(path) == (f"{path}: field 'name' must be a short name on one line, without '/' or control "
                            "characters (it names the run's folder, report and model card), got 'two\\nlines'")


def test_a_yaml_file_of_megabytes_is_refused_before_it_is_read(tmp_path):
    """A 16 MB recipe was read for 31.7 s in silence before anything was said."""
    path = tmp_path / "task.yaml"
    path.write_text("# padding\n" * 200_000, encoding="utf-8")
    assert _error(path) == (f"{path} holds 1.9 MiB, and a task file is a few kilobytes of keys (at most 1 MiB is "
                            "read): give the YAML file of keys; rows of data go in the data files it names")
    assert main(["plan", "--config", str(path)]) == 2


@pytest.mark.parametrize("gold, written", [("Café", "Cafe\u0301"), ("fish", "\ufb01sh"), ("Straße", "STRASSE"),
                                           ("x", "\U0001d465")])
def test_text_answers_compare_as_unicode_composes_and_folds_them(gold, written):
    """Text answers were compared without Unicode normalisation: a decomposed é, the ligature ﬁ."""
    kind = answer_type("text")
    assert kind.same(kind.flexible(f"#### {written}"), gold)


@pytest.mark.parametrize("gold, written", [("x2", "x\u00b2"), ("12", "\u00bd"), ("3", "\uff13")])
def test_text_answers_keep_what_nfkc_would_make_another_answer(gold, written):
    kind = answer_type("text")
    assert not kind.same(kind.flexible(f"#### {written}"), gold)
