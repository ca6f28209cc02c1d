"""A run is resolved once at the edge: its settings are checked once per `train`, its train split read once."""

from __future__ import annotations

import pytest

from grpo_kit.cli import main
from grpo_kit.tasks import Task


@pytest.fixture
def counted(monkeypatch):
    """Count calls to check_settings (wherever the pipeline could call it) and train-split reads."""
    import grpo_kit.runs.spec
    import grpo_kit.training.checks
    import grpo_kit.training.trainer

    counts = {"check_settings": 0, "train_split": 0}
    real_check, real_load = grpo_kit.training.checks.check_settings, Task.load

    def check(*args, **kwargs):
        counts["check_settings"] += 1
        return real_check(*args, **kwargs)

    def load(self, split="test", **kwargs):
        counts["train_split"] += split == "train"
        return real_load(self, split, **kwargs)

    for module in (grpo_kit.training.checks, grpo_kit.runs.spec, grpo_kit.training.trainer):
        monkeypatch.setattr(module, "check_settings", check)
    monkeypatch.setattr(Task, "load", load)
    return counts


def test_train_checks_its_settings_once_and_reads_the_train_split_once_then_once_from_the_cache(counted, tmp_path,
                                                                                              monkeypatch):
    monkeypatch.chdir(tmp_path)
    # sum3's 2,100 one-line train rows: the tokenizer, the warm start and the prompt-length check each go over a whole
    # train split, and GSM8K's 7,473 long ones cost this test about 23 CPU seconds more
    args = ["train", "--preset", "cpu-tiny", "--task", "sum3", "--max-steps", "1", "--train-size", "16",
            "--warm-steps", "2", "--per_device_train_batch_size", "8", "--max_completion_length", "8"]
    assert main([*args, "--run-dir", str(tmp_path / "a")]) == 0 and (tmp_path / "a" / "model").is_dir()
    # The tiny policy's warm start reads the train split too, once, to build itself: the run reads it once more.
    assert counted == {"check_settings": 1, "train_split": 2}
    counted.update(check_settings=0, train_split=0)
    assert main([*args, "--run-dir", str(tmp_path / "b")]) == 0  # the tiny policy now comes from its cache
    assert counted == {"check_settings": 1, "train_split": 1}


def test_train_trains_the_policy_the_baseline_measured_or_refuses_before_loading(tmp_path, capsys, monkeypatch):
    """Another --warm-steps built a new warm start and trained 213 s before eval refused; without
    --warm-steps, train began a 300-step warm start instead of the baseline's."""
    import dataclasses
    import json

    from grpo_kit.policy.source import PolicySource
    from grpo_kit.policy.warm_start import WarmStart
    from grpo_kit.runs.spec import RunSpec
    from grpo_kit.tasks import get_task
    from grpo_kit.training.presets import get_preset

    task, preset = get_task("sum3"), get_preset("cpu-tiny")
    warm = WarmStart(steps=20)
    measured = PolicySource.of(None, task, seed=preset.seed, warm=warm, cache_dir=str(tmp_path / "cache"))
    run = tmp_path / "run"
    run.mkdir()
    (run / "eval_settings.json").write_text(json.dumps({
        "task": "sum3", "base_model": measured.name, "warm": dataclasses.asdict(warm), "tiny_spec": None,
        "cache_dir": str(tmp_path / "cache")}))
    spec = RunSpec.resolve("cpu-tiny", "sum3", run_dir=run)  # no policy option: the baseline's
    assert spec.policy.name == measured.name and spec.policy.tiny.warm.steps == 20

    import grpo_kit.policy.source as source

    monkeypatch.setattr(source.PolicySource, "load", lambda *a, **k: pytest.fail("a model loaded"))
    capsys.readouterr()
    assert main(["train", "--preset", "cpu-tiny", "--task", "sum3", "--run-dir", str(run), "--warm-steps", "30"]) == 2
    err = capsys.readouterr().err
    assert f"the baseline in {run} measured {measured.name}, and this would train tiny:" in err
    assert "--warm-steps 20" in err and len(err.strip().splitlines()) == 1


def test_a_resume_takes_from_the_record_what_the_call_leaves_out_and_says_which_in_order(tmp_path, caplog):
    """The six settings a resume may take from ``train_settings.json`` (rewards, questions, held-out evaluation) are
    taken by name where the call leaves them ``None``, kept where it gives them, and said in one line, in order."""
    import json
    import logging

    from grpo_kit.runs.spec import RunSpec
    from grpo_kit.training.presets import get_preset, recipe_yaml

    run, cache = tmp_path / "run", str(tmp_path / "cache")
    first = RunSpec.resolve("cpu-tiny", "sum3", rewards={"strict_format_reward_func": 2.0}, run_dir=run,
                            train_size=16, eval_steps=2, eval_size=4, eval_max_new_tokens=12, seed=3, cache_dir=cache)
    (run / "train_settings.json").write_text(json.dumps({
        "task": "sum3", "identity": first.identity(), "heldout": first.heldout(), **first.rewards.to_record()}))
    # the plan recipe.yaml records comes first (resuming from a recipe's name: its steps and checkpoints are the run's)
    (run / "recipe.yaml").write_text(recipe_yaml(get_preset(first.preset, max_steps=7, save_steps=3)))
    with caplog.at_level(logging.INFO, logger="grpo_kit"):
        resumed = RunSpec.resolve("cpu-tiny", "sum3", run_dir=run, resume=True, cache_dir=cache)
    assert (resumed.train_size, resumed.seed, resumed.eval_size, resumed.eval_steps, resumed.eval_max_new_tokens) \
        == (16, 3, 4, 2, 12)
    assert (resumed.preset.max_steps, resumed.preset.save_steps) == (7, 3)
    assert resumed.rewards.names == first.rewards.names and resumed.rewards.weights == first.rewards.weights
    assert resumed.validation["question"] == first.validation["question"]  # the same seed held out the same ones
    said = [r.getMessage() for r in caplog.records if "record it: " in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("resuming as recipe.yaml and train_settings.json record it: "
                                                 "max_steps 7; save_steps 3; ")  # then the recipe's other plan fields
    assert said[0].endswith("; rewards strict_format_reward_func=2; train_size 16; data_seed 3; eval_size 4; "
                            "eval_steps 2; eval_max_new_tokens 12 (the options of the same names change them)")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="grpo_kit"):  # what the call gives is its own, and not said
        given = RunSpec.resolve("cpu-tiny", "sum3", run_dir=run, resume=True, cache_dir=cache, train_size=16,
                                eval_max_new_tokens=12, rewards={"strict_format_reward_func": 2.0}, max_steps=9)
    assert (given.preset.max_steps, given.preset.save_steps, given.seed, given.eval_size, given.eval_steps) == \
        (9, 3, 3, 4, 2)
    said = [r.getMessage().split("record it: ")[1] for r in caplog.records if "record it: " in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("save_steps 3; ") and "max_steps" not in said[0]
    assert said[0].endswith("; data_seed 3; eval_size 4; eval_steps 2 (the options of the same names change them)")
