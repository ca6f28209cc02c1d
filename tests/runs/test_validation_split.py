"""Accuracy during training is measured on validation questions carved from the train split (seeded, excluded from
the training prompts), never on test questions, for every task; the log and the curves name the split."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from grpo_kit.cli import main
from grpo_kit.runs.spec import RunSpec
from grpo_kit.tasks import TASKS, get_task
from grpo_kit.tasks.data import carve_validation
from grpo_kit.training.presets import get_preset

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "capitals"


def test_carving_is_seeded_and_keeps_every_copy_of_a_held_question_out_of_training():
    train = get_task("sum3").load("train")  # each question three times, in two styles
    rest, validation = carve_validation(train, 50, seed=0)
    held = set(validation["question"])
    assert len(held) == len(validation) == 50
    assert not held & set(rest["question"]) and len(rest) == len(train) - 3 * 50
    assert carve_validation(train, 50, seed=0)[1]["question"] == validation["question"]
    assert carve_validation(train, 50, seed=1)[1]["question"] != validation["question"]
    with pytest.raises(ValueError, match="validation_size must be between 1 and 699"):
        carve_validation(train, 700)


@pytest.mark.parametrize("name", [name for name, task in TASKS.items() if task.trains])
def test_the_run_spec_holds_out_validation_questions_and_no_test_question(name, tmp_path):
    task = get_task(name)
    spec = RunSpec.resolve(get_preset("cpu-tiny"), task, run_dir=tmp_path / "run", eval_steps=5, eval_size=20,
                           cache_dir=str(tmp_path / "cache"))
    validation = set(spec.validation["question"])
    assert len(validation) == spec.eval_size == 20
    assert not validation & set(spec.train_split["question"])  # excluded from the training prompts
    assert not validation & set(task.load("test")["question"])  # and none is a test question
    assert spec.identity()["validation_size"] == 20
    plain = RunSpec.resolve(get_preset("cpu-tiny"), task, run_dir=tmp_path / "run2", cache_dir=str(tmp_path / "c"))
    assert plain.validation is None and len(plain.train_split) == len(task.load("train"))


def test_a_task_files_validation_size_is_the_default(tmp_path):
    spec = RunSpec.resolve(get_preset("cpu-tiny"), str(EXAMPLE / "task.yaml"), run_dir=tmp_path / "run",
                           eval_steps=1, cache_dir=str(tmp_path / "cache"))
    assert len(spec.validation) == 10 and len(spec.train_split) == 50
    assert "on 10 questions held out of the train split (the task file's validation_size; --eval-size sets " \
           "another)" in spec.describe()[1]


def test_the_defaults_a_user_did_not_choose_are_said_where_they_apply(tmp_path):
    """Issue 46: a task file's evaluation took half its test split by default (20 of 40) and nothing said so."""
    from grpo_kit.runs.pipeline import baseline_plan

    gsm8k = get_task("gsm8k")
    spec = RunSpec.resolve(get_preset("cpu-tiny"), gsm8k, run_dir=tmp_path / "run", eval_steps=5,
                           cache_dir=str(tmp_path / "cache"))
    assert f"on 100 questions held out of the train split (the default: a fifth of the {len(gsm8k.load('train'))} " \
           "train questions, at most 100; --eval-size sets another)" in spec.describe()[1]
    given = RunSpec.resolve(get_preset("cpu-tiny"), gsm8k, run_dir=tmp_path / "run2", eval_steps=5, eval_size=20,
                            cache_dir=str(tmp_path / "cache"))
    assert "held out of the train split;" not in given.describe()[1] and "(" not in given.describe()[1]
    test = len(gsm8k.load("test"))
    half = baseline_plan(gsm8k, get_preset("cpu-tiny"))
    assert half.describe() == f"{test // 2} of the {test} test questions of gsm8k (a seeded share of 0.5, the " \
        "default (the blog post's half); --eval-size N or --eval-fraction F (notebook 02: eval_questions) chooses " \
        "another)"
    assert baseline_plan(gsm8k, get_preset("cpu-tiny"), eval_size=20).describe() == \
        f"20 of the {test} test questions of gsm8k (seed 0)"


@pytest.mark.slow
def test_training_measures_validation_questions_and_says_so(tmp_path, capsys):
    folder = tmp_path / "capitals"
    shutil.copytree(EXAMPLE, folder)
    run = tmp_path / "run"
    assert main(["train", "--run-dir", str(run), "--task", str(folder / "task.yaml"), "--preset", "cpu-tiny",
                 "--eval-max-new-tokens", "8", "--warm-steps", "3", "--cache-dir", str(tmp_path / "cache"),
                 "--max-steps", "1", "--eval_strategy", "steps", "--eval_steps", "1", "--num_generations", "2",
                 "--per_device_train_batch_size", "4", "--max_completion_length", "8"]) == 0
    test = {json.loads(line)["question"] for line in (folder / "test.jsonl").read_text().splitlines()}
    train = {json.loads(line)["question"] for line in (folder / "train.jsonl").read_text().splitlines()}
    for path in sorted((run / "heldout").glob("step-*.jsonl")):
        asked = {json.loads(line)["question"] for line in path.read_text().splitlines()}
        assert len(asked) == 10 and asked <= train and not asked & test
    assert len(list((run / "heldout").glob("step-*.jsonl"))) == 2  # step 0 and step 1
    err = capsys.readouterr().err
    assert "held-out strict accuracy" in err and "on 10 validation questions held out of the capitals train" in err
    settings = json.loads((run / "train_settings.json").read_text())
    assert settings["heldout"] == {"split": "validation", "carved_from": "train", "questions": 10, "seed": 0,
                                   "eval_steps": 1, "max_new_tokens": 8}
    assert settings["train_questions"] == 50
    assert "training questions: 50 of the 60 in capitals's train split; 10 held out for validation; all the rest " \
           "(--train-size N samples fewer)" in err
