"""Bad input never costs a run or corrupts a table: each case with its test.

Settings are rejected before any model or tokenizer loads, with the value to change; data loaders
name the file and line; rewards read gold answers of any sensible type, run in linear time and
read digits one way; a before/after table pairs only the same questions.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_kit.cli import main
from grpo_kit.evaluation.compare import compare
from grpo_kit.evaluation.scoring import EvalResult, score
from grpo_kit.policy.generation import Generation, Sampling
from grpo_kit.system.files import write_json
from grpo_kit.tasks import RewardSet, get_task
from grpo_kit.tasks.countdown import countdown_reward_func, countdown_score, load_countdown, safe_eval
from grpo_kit.tasks.data import take_slice
from grpo_kit.tasks.gsm8k import load_gsm8k
from grpo_kit.tasks.math500 import load_math500
from grpo_kit.tasks.math_verify import math_verify_reward_func
from grpo_kit.tasks.numbers import normalize_number, parse_number
from grpo_kit.tasks.rewards import (
    SEED_REWARDS,
    correctness_reward_func,
    int_reward_func,
    soft_correctness_reward_func,
)
from grpo_kit.training.checks import check_settings
from grpo_kit.training.presets import get_preset

ROOT = Path(__file__).resolve().parents[2]

# --- settings: each rejected before anything loads, naming the value and its range --------------------

BAD_SETTINGS = [
    (dict(learning_rate=0), "learning_rate = 0.0 cannot work: set it to a number in (0, 1]"),
    (dict(learning_rate=-1e-5), "learning_rate = -1e-05"),
    (dict(learning_rate=math.nan), "learning_rate = nan"),
    (dict(learning_rate=10.0), "learning_rate = 10.0"),
    (dict(per_device_train_batch_size=0), "per_device_train_batch_size = 0"),
    (dict(gradient_accumulation_steps=0), "gradient_accumulation_steps = 0"),
    (dict(temperature=0), "temperature = 0.0 cannot work: set it to a number in [0.01, 100]"),
    (dict(temperature=-1.0), "temperature = -1.0"),
    (dict(lora_r=0), "lora_r = 0"),
    (dict(lora_r=-8), "lora_r = -8"),
    (dict(vllm_gpu_memory_utilization=0), "vllm_gpu_memory_utilization = 0"),
    (dict(vllm_gpu_memory_utilization=1.5),
     "vllm_gpu_memory_utilization = 1.5 cannot work: set it to a share in (0, 1]"),
    (dict(beta=-0.1), "beta = -0.1"),
    (dict(warmup_steps=-0.1), "warmup_steps = -0.1 cannot work"),
    (dict(rewards={"xmlcount_reward_func": 0.0, "strict_format_reward_func": 0.0}), "every reward weight is 0"),
    (dict(max_steps="ten"), "recipe key max_steps: invalid int value: 'ten'"),
    (dict(max_steps=2.5), "recipe key max_steps: invalid int value: '2.5'"),
    (dict(nosuch=1), "unknown recipe key 'nosuch'"),
    (dict(num_generations=1, per_device_train_batch_size=4), "num_generations = 1"),
    (dict(save_steps=0), "save_steps = 0"),
]


@pytest.mark.parametrize("overrides, message", BAD_SETTINGS, ids=[str(o) for o, _ in BAD_SETTINGS])
def test_bad_settings_are_rejected_before_anything_loads(overrides, message):
    overrides = dict(overrides)
    rewards = overrides.pop("rewards", SEED_REWARDS)  # the rewards are the run's, not a preset field
    with pytest.raises(ValueError, match=re.escape(message)):
        check_settings(get_preset("cpu-tiny", **overrides), RewardSet(rewards))


def test_take_slice_wants_a_whole_number():
    test = load_gsm8k("test")
    with pytest.raises(ValueError, match="n must be a whole number of rows between 1 and 1319 .*, got 5.5"):
        take_slice(test, n=5.5)


# --- data files: empty, null fields, rows that are not objects, non-integer Countdown numbers ---------


@pytest.mark.parametrize("loader, lines, message", [
    (load_gsm8k, [], "holds no rows"),
    (load_gsm8k, ['{"question": null, "answer": "#### 2"}'], r"bad.jsonl:1: 'question' is None"),
    (load_gsm8k, ['{"question": "", "answer": "#### 2"}'], r"bad.jsonl:1: 'question' is ''"),
    (load_gsm8k, ['{"question": "q", "answer": "#### 1"}', '["q", "#### 2"]'], r"bad.jsonl:2 holds a JSON list"),
    (load_gsm8k, ['{"question": "q", "answer": "#### 1"}', "", "7"], r"bad.jsonl:3 holds a JSON int"),
    (load_gsm8k, ['{"question": 12, "answer": "#### 2"}'], r"bad.jsonl:1: 'question' is a int"),
    (load_gsm8k, ["{not json"], r"bad.jsonl:1 is not a JSON line"),
    (load_countdown, ['{"nums": [1.5, 2, 3], "target": 7}'], r"bad.jsonl:1: Countdown nums must be whole numbers"),
    (load_countdown, ['{"nums": [1, 2, 3], "target": 6.5}'], r"bad.jsonl:1: Countdown target must be whole"),
    (load_countdown, ['{"nums": null, "target": 6}'], r"'nums' is None"),
    (load_math500, ['{"problem": "p"}'], r"bad.jsonl:1: 'answer' is missing"),
])
def test_data_files_are_checked_with_file_and_line(tmp_path, loader, lines, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines))
    with pytest.raises(ValueError, match=message):
        loader("test", source=str(path))


def test_countdown_numbers_written_as_integral_floats_are_read_as_integers(tmp_path):
    path = tmp_path / "ok.jsonl"
    path.write_text('{"nums": [1.0, 2, 3], "target": 6.0}\n')
    row = load_countdown("test", source=str(path))[0]
    assert row["nums"] == [1, 2, 3] and row["target"] == 6 and "[1, 2, 3]" in row["question"]


# --- rewards: gold answers as numbers, mismatched lengths, digits, overflow ------------------------------


def test_gold_answers_may_be_numbers():
    completions = ["<answer>\n7\n</answer>", "<answer>\n2.5\n</answer>", "<answer>\n8\n</answer>"]
    for answer in ([7, 2.5, 7], ["7", "2.5", "7"], [7.0, 2.5, 7.0]):
        assert correctness_reward_func(completions=completions, answer=answer) == [1.0, 1.0, 0.0]
        assert soft_correctness_reward_func(completions=completions, answer=answer) == [1.0, 1.0, 0.0]
    assert math_verify_reward_func(completions=completions[:1], answer=[7]) == [1.0]
    assert correctness_reward_func(completions=completions[:1], answer=[True]) == [0.0]  # not a number


def test_trl_passes_numeric_gold_columns_and_the_rewards_read_them(tiny_policy, tmp_path):
    from datasets import Dataset

    from grpo_kit.training.trainer import build_trainer

    seen = []

    def recorder(completions, answer, **kwargs):
        seen.append(list(answer))
        return correctness_reward_func(completions=["<answer>\n7\n</answer>"] * len(answer), answer=answer)

    model, tokenizer = tiny_policy
    rows = [{"prompt": [{"role": "user", "content": f"{i}+7?"}], "answer": 7} for i in range(8)]
    trainer = build_trainer(model, tokenizer, Dataset.from_list(rows), "cpu-tiny",
                            [recorder, "correctness_reward_func"], str(tmp_path), max_steps=1,
                            per_device_train_batch_size=8, num_generations=4, max_completion_length=4)
    trainer.args.disable_tqdm = True
    trainer.train()
    assert seen and all(value == 7 and isinstance(value, int) for value in seen[0])
    assert trainer.state.log_history[0]["rewards/recorder/mean"] == 1.0


def test_a_column_the_rewards_cannot_read_is_refused_before_training(tiny_policy, tmp_path):
    from datasets import Dataset

    from grpo_kit.training.trainer import build_trainer

    model, tokenizer = tiny_policy
    rows = [{"prompt": [{"role": "user", "content": "x"}], "answer": [7]} for _ in range(8)]
    with pytest.raises(ValueError, match="column 'answer' holds List"):
        build_trainer(model, tokenizer, Dataset.from_list(rows), "cpu-tiny", ["correctness_reward_func"],
                      str(tmp_path))


@pytest.mark.parametrize("func, column", [(correctness_reward_func, "answer"),
                                          (soft_correctness_reward_func, "answer"),
                                          (math_verify_reward_func, "answer"),
                                          (countdown_reward_func, "nums")])
def test_mismatched_column_lengths_raise(func, column):
    kwargs = {"answer": ["1", "2"], "nums": [[1, 2]] * 2, "target": [3] * 2}
    kwargs[column] = kwargs[column][:1]
    with pytest.raises(ValueError, match=f"3 completions but 1 entries in the '{column}' column"):
        func(completions=["a", "b", "c"], **{k: v + v[:1] if k != column else v for k, v in kwargs.items()})


@pytest.mark.parametrize("digits", ["٣", "３", "३"])
def test_unicode_digits_are_read_the_same_way_everywhere_as_no_number(digits):
    text = f"<reasoning>\nx\n</reasoning>\n<answer>\n{digits}\n</answer>"
    assert correctness_reward_func(completions=[text], answer=["3"]) == [0.0]
    assert soft_correctness_reward_func(completions=[text], answer=["3"]) == [0.0]
    assert int_reward_func(completions=[text]) == [0.0]
    assert all(rule.extract(text) is None for rule in get_task("gsm8k").rules.values())  # GSM8K's strict, flexible
    assert parse_number(digits) is None and normalize_number(digits) is None


def test_safe_eval_raises_only_value_error_on_overflow():
    with pytest.raises(ValueError, match="plain decimal numbers"):  # an exponent is not a Countdown number
        safe_eval("1e308*1e308")
    assert countdown_score("<answer>1e308*1e308</answer>", [1, 2], 3) == 0.1  # formatted, not a solution


def test_every_reward_and_rule_is_linear_on_adversarial_completions():
    """The 100 KiB version of benchmarks/reward_worst_case.py: each function under 50 ms on every input."""
    from benchmarks.reward_worst_case import worst_case

    worst = worst_case(100 * 1024, repeat=2)
    slow = {name: f"{seconds * 1000:.0f} ms ({label})" for name, (seconds, label) in worst.items() if seconds > 0.05}
    assert not slow, slow


# --- math-verify: start-up not charged, no __main__ guard needed, loud when checks time out ---------------


def test_importing_math_verify_is_not_charged_to_a_check(tmp_path):
    from grpo_kit.tasks.math_verify import MathVerifier

    verifier = MathVerifier(timeout_s=0.5)  # less than importing sympy and math-verify takes
    assert verifier("\\frac{1}{2}", "0.5") is True and verifier.timeouts == 0


def test_a_training_script_without_a_main_guard_works(tmp_path):
    script = tmp_path / "train_without_guard.py"
    script.write_text("print('script body ran')\n"
                      "from grpo_kit.tasks.math_verify import math_verify_reward\n"
                      "reward = math_verify_reward(timeout_s=1)\n"
                      "print(reward(completions=['<answer>0.5</answer>', '<answer>3</answer>'], "
                      "answer=['\\\\frac{1}{2}', '2']))\n")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path,
                            timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("script body ran") == 1 and "[1.0, 0.0]" in result.stdout


def slow_check(gold, prediction):
    """Outlives any timeout on "hang"."""
    import time

    if prediction == "hang":
        time.sleep(60)
    return gold == prediction


def test_a_run_where_many_checks_time_out_warns_loudly(capsys):
    from grpo_kit.system.logs import configure_logging
    from grpo_kit.tasks import math_verify

    configure_logging()  # as the command line and the notebooks do: the kit's log on standard error
    verifier = math_verify.MathVerifier(timeout_s=0.5, check=slow_check)
    answers = ["hang"] * 5 + ["1"] * (math_verify._WARN_AFTER_CHECKS - 5)  # 25% time out
    with pytest.warns(RuntimeWarning, match="training on zeros"):
        results = [verifier("1", answer) for answer in answers]
    assert results == [False] * 5 + [True] * 15 and verifier.timeouts == 5
    assert "[grpo_kit] WARNING: math-verify: 5 of 20 checks timed out" in capsys.readouterr().err


# --- pairing: ids, the recorded base, the order of writes -------------------------------------------------


def _evaluation(rows):
    records = score(rows, [[Generation("<answer>\n1\n</answer>", 3, False)] for _ in rows])
    return EvalResult(records=records, summary=None, sampling=Sampling(), wall_s=0.0)


def test_compare_pairs_by_question_and_refuses_different_questions():
    test = load_gsm8k("test")
    a, b = take_slice(test, n=50, seed=0), take_slice(test, n=50, seed=1)
    shared = len(set(a["question"]) & set(b["question"]))
    with pytest.raises(ValueError, match=f"{shared} match, {50 - shared} only before"):
        compare(_evaluation(list(a)), _evaluation(list(b)))
    rows = list(a)
    table = compare(_evaluation(rows), _evaluation(rows[::-1]))  # the same questions in another order pair
    assert table.set_index("metric").loc["Hard correctness", "delta"] == 0


def test_the_plan_is_written_only_after_the_baseline_finished(tiny_policy, tmp_path):
    from grpo_kit.policy.generation import TransformersBackend
    from grpo_kit.runs.folder import RunFolder
    from grpo_kit.runs.measure import EvalPlan, measure_before
    from grpo_kit.tasks import get_task

    class Dies(TransformersBackend):
        def generate(self, *args, **kwargs):
            raise RuntimeError("out of memory")

    plan = EvalPlan(task=get_task("gsm8k"), preset=get_preset("cpu-tiny"), slice={"n": 4}, max_new_tokens=4)
    run = RunFolder(tmp_path / "run")
    backend = Dies(*tiny_policy, progress=False)
    backend.route = "transformers"
    with pytest.raises(RuntimeError):
        measure_before(plan, run, backend)
    assert not run.eval_settings.exists()
    backend = TransformersBackend(*tiny_policy, progress=False)
    backend.route = "transformers"
    measure_before(plan, run, backend)
    settings = json.loads(run.eval_settings.read_text())
    assert settings["base_fingerprint"] and settings["task"] == "gsm8k" and settings["route"] == "transformers"


@pytest.mark.parametrize("field, value, label", [("base_model", "other/model", "base model"),
                                                  ("task", "countdown", "task"),
                                                  ("system_prompt", "Answer briefly.", "system prompt"),
                                                  ("base_fingerprint", "0000000000000000", "base weights")])
def test_a_model_trained_from_something_else_is_refused(tmp_path, capsys, field, value, label):
    from grpo_kit.runs.folder import RunFolder

    run = RunFolder(tmp_path / "run")
    measured = {"base_model": "tiny:tiny-policy-1", "base_fingerprint": "1234567890abcdef", "task": "gsm8k",
                "system_prompt": "Respond in the following format", "route": "transformers"}
    write_json(run.eval_settings, measured)
    write_json(run.train_settings, {**measured, field: value})
    assert main(["eval", "--run-dir", str(run.path)]) == 2
    err = capsys.readouterr().err
    assert f"{label}: baseline" in err and str(measured[field]) in err and str(value) in err
    assert "not trained from what the baseline measured" in err


# --- the command line checks its arguments before any work -------------------------------------------------


@pytest.mark.parametrize("args, message", [
    (["demo", "--warm-steps", "-1"], "--warm-steps: must be 1 or more"),
    (["demo", "--train-size", "0"], "--train-size: must be 1 or more"),
    (["train", "--preset", "cpu-tiny", "--learning_rate", "0"], "learning_rate = 0.0 cannot work"),
    (["train", "--preset", "cpu-tiny", "--nosuch", "1"], "unknown recipe key --nosuch"),
    (["train", "--preset", "cpu-tiny", "--rewards", "typo_reward"], "unknown reward 'typo_reward'"),
    (["train", "--preset", "cpu-tiny", "--set", "max_steps"], "--set is gone: write each recipe key in TRL's form"),
    (["train", "--preset", "cpu-tiny", "--set", "max_steps=5"], "--set is gone: write --max_steps 5"),
    # in today's names: the advice works (it said --lora_rank 8, itself refused)
    (["train", "--preset", "cpu-tiny", "--set", "lora_rank=8"], "--set is gone: write --use_peft true --lora_r 8"),
    (["train", "--preset", "cpu-tiny", "--set", "warmup_ratio=2"], "--set is gone; recipe key --warmup_ratio is gone: "
                                                                  "removed in transformers 5: write --warmup_steps"),
    (["train", "--preset", "cpu-tiny", "--overwrite_output_dir", "--vllm_device", "auto"],
     "recipe key --overwrite_output_dir is gone: removed in transformers 5: drop it (a run folder is never overwritten;"
     " --resume continues one); recipe key --vllm_device is gone: removed from TRL's GRPOConfig"),
    (["eval", "--before", "--preset", "cpu-tiny", "--eval-size", "5000", "--run-dir", "{tmp}/x"],
     "--eval-size 5000 (eval_size): the test split of gsm8k holds"),
])
def test_the_command_line_rejects_bad_arguments_before_any_work(args, message, capsys, tmp_path):
    assert main([a.replace("{tmp}", str(tmp_path)) for a in args]) == 2
    assert message in capsys.readouterr().err or pytest.fail(capsys.readouterr().err)


def test_an_unwritable_runs_dir_is_a_clear_error(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as a user who can write anywhere")
        assert main(["demo", "--runs-dir", str(locked / "runs"), "--cache-dir", str(tmp_path / "c")]) == 2
        assert "cannot write the run folder" in capsys.readouterr().err
    finally:
        locked.chmod(0o700)


def test_an_unwritable_runs_dir_is_a_clear_error_even_as_root(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["demo", "--runs-dir", str(blocker / "runs"), "--cache-dir", str(tmp_path / "c")]) == 2
    assert "cannot write the run folder" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_a_baseline_is_reused_with_the_same_settings_and_never_replaced_silently(tiny_policy, tmp_path, capsys):
    import dataclasses

    from grpo_kit.policy.generation import TransformersBackend
    from grpo_kit.runs.folder import RunFolder
    from grpo_kit.runs.measure import EvalPlan, measure_before
    from grpo_kit.tasks import get_task

    class Counting(TransformersBackend):
        calls = 0

        def generate(self, *args, **kwargs):
            Counting.calls += 1
            return super().generate(*args, **kwargs)

    plan = EvalPlan(task=get_task("gsm8k"), preset=get_preset("cpu-tiny"), slice={"n": 4}, max_new_tokens=4)
    run = RunFolder(tmp_path / "run")
    backend = Counting(*tiny_policy, progress=False)
    backend.route = "transformers"
    first = measure_before(plan, run, backend)
    baseline, calls, written = run.baseline.read_bytes(), Counting.calls, run.baseline.stat().st_mtime_ns
    run.report.write_text("the report made against this baseline")
    again = measure_before(dataclasses.replace(plan, batch_size=7), run, backend)  # same settings: reused
    assert Counting.calls == calls and again["greedy"].records == first["greedy"].records
    assert run.baseline.stat().st_mtime_ns == written  # not measured or written again
    with pytest.raises(ValueError, match="task: 'gsm8k' -> 'countdown'.*--replace-baseline"):
        measure_before(dataclasses.replace(plan, task=get_task("countdown")), run, backend)
    assert main(["eval", "--before", "--preset", "cpu-tiny", "--eval-size", "3", "--max-new-tokens", "4",
                 "--run-dir", str(run.path)]) == 2
    err = capsys.readouterr().err
    assert "already holds a baseline measured with other settings" in err and "slice: {'n': 4} -> {'n': 3}" in err
    assert "Traceback" not in err and run.baseline.read_bytes() == baseline and run.report.is_file()
    measure_before(dataclasses.replace(plan, slice={"n": 3}), run, backend, replace=True)  # on purpose
    assert json.loads(run.eval_settings.read_text())["slice"] == {"n": 3} and not run.report.exists()


@pytest.mark.parametrize("args, message", [
    (["export", "{tmp}/run", "--quant", "q8_0"], "add --format gguf"),
    (["export", "{tmp}/run", "--format", "gguf", "--quant", ""], "quant must be one of"),
    (["plan", "--preset", "a100", "--launch", "single", "--gpus", "3"], "--launch single runs one process"),
    (["plan", "--preset", "a100", "--model_name_or_path", "/nonexistent"],
     "is neither an existing folder nor a Hub id"),
])
def test_what_export_and_plan_used_to_ignore_is_refused(args, message, capsys, tmp_path):
    assert main([a.replace("{tmp}", str(tmp_path)) for a in args]) == 2
    said = capsys.readouterr()
    err = said.err + said.out  # plan lists what it refuses among its problems
    assert message in err and "Traceback" not in err, err


def test_a_baseline_of_an_evaluation_only_task_does_not_suggest_training(tiny_policy_files, tmp_path, caplog):
    import logging

    with caplog.at_level(logging.INFO, logger="grpo_kit"):
        assert main(["eval", "--before", "--task", "math500", "--model_name_or_path", str(tiny_policy_files),
                     "--eval-size", "2", "--max-new-tokens", "4", "--backend", "transformers", "--run-dir",
                     str(tmp_path / "run")]) == 0
    assert "math500 has no train split" in caplog.text and "grpo_kit train" not in caplog.text


def test_a_chart_of_many_runs_stays_readable():
    import matplotlib.pyplot as plt
    import pandas as pd

    from grpo_kit.evaluation.plots import MAX_CHART_INCHES, plot_runs

    metrics = pd.DataFrame([{"run": f"run-{r}", "metric": f"metric {m}", "value": 0.5, "low": 0.4, "high": 0.6,
                             "max": 1.0} for r in range(13) for m in range(8)])
    fig = plot_runs(metrics)
    assert fig.get_size_inches()[0] <= MAX_CHART_INCHES
    plt.close(fig)


def test_ctrl_c_and_a_full_disk_end_any_command_in_one_line(monkeypatch, tmp_path, capsys):
    """A full disk during eval gave an OSError traceback; Ctrl-C 31-55 frames."""
    import errno

    import grpo_kit.cli as cli

    def interrupted(args):
        raise KeyboardInterrupt

    def disk_full(args):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "run" / "baseline.jsonl"))

    for func, code, says in ((interrupted, 130, "interrupted: eval stopped; what it finished is kept"),
                             (disk_full, 1, f"error: No space left on device ({tmp_path / 'run' / 'baseline.jsonl'}): "
                                            "free space there and run the command again")):
        monkeypatch.setattr(cli, "_eval", func)
        assert main(["eval", "--before", "--run-dir", str(tmp_path / "run")]) == code
        err = capsys.readouterr().err
        assert err.startswith(says) and err.count("\n") == 1 and "Traceback" not in err, err


def test_ctrl_c_during_training_prints_one_line_and_resume_goes_on(tiny_policy_files, tmp_path):
    """As a user meets it: SIGINT (Ctrl-C) while a train command runs."""
    import signal

    # sum3's one-line questions: before its first step a run checks every train prompt's length (GSM8K's 7,473: about
    # 2 CPU seconds)
    command = [sys.executable, "-m", "grpo_kit", "train", "--preset", "cpu-tiny", "--task", "sum3",
               "--model_name_or_path", str(tiny_policy_files), "--run-dir", str(tmp_path / "run"), "--max-steps", "500",
               "--train-size", "16", "--rewards", "xmlcount_reward_func", "--per_device_train_batch_size", "8",
               "--max_completion_length", "8"]
    # As in a terminal: a shell without job control starts background commands with SIGINT ignored, and Python
    # keeps an ignored SIGINT ignored, so a test run started that way would see no Ctrl-C at all.
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                             env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)},
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    for line in child.stdout:
        seen.append(line)
        if "step 1/500" in line:  # 500 steps of a tenth of a second: still training when a busy machine reads this
            child.send_signal(signal.SIGINT)
            break
    seen.extend(child.stdout)
    assert child.wait(timeout=120) == 130, "".join(seen)[-3000:]
    out = "".join(seen)
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out[-3000:]
    assert out.strip().splitlines()[-1].startswith("interrupted: train stopped"), out[-3000:]


def test_a_refused_first_baseline_leaves_no_run_folder_and_names_the_option(tmp_path, capsys):
    """--eval-size 100000 said "n must be between 1 and 20" without naming the option, and
    left an empty run folder behind; eval after training created a mistyped folder."""
    run = tmp_path / "run"
    example = ROOT / "examples" / "capitals" / "task.yaml"
    assert main(["eval", "--before", "--run-dir", str(run), "--task", str(example), "--preset", "cpu-tiny",
                 "--eval-size", "100000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --eval-size 100000 (eval_size): the test split of capitals holds")
    assert "Traceback" not in err
    assert not run.exists()
    assert main(["eval", "--run-dir", str(tmp_path / "typo")]) == 2
    assert "no run folder at" in capsys.readouterr().err and not (tmp_path / "typo").exists()


def test_a_refused_first_baseline_removes_the_parent_folders_it_created(tmp_path, capsys, monkeypatch):
    """Case 13 of issue 44: a refused `eval --before --run-dir a/b/c` left a/b/ behind."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kept").mkdir()
    for run_dir in ("a/b/c", "kept/b/c"):
        assert main(["eval", "--before", "--run-dir", run_dir, "--eval-size", "100000"]) == 2
        assert "--eval-size 100000" in capsys.readouterr().err
        assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"] and not any((tmp_path / "kept").iterdir())


def test_a_validation_size_out_of_range_names_where_it_came_from(tmp_path, capsys):
    """Case 13 of issue 44: `train --eval-size 100000` named validation_size, not the option typed."""
    task = Path(__file__).resolve().parents[2] / "examples" / "capitals" / "task.yaml"
    assert main(["train", "--task", str(task), "--run-dir", str(tmp_path / "run"), "--eval_strategy", "steps",
                 "--eval_steps", "2", "--eval-size", "100000"]) == 2
    assert capsys.readouterr().err == ("error: --eval-size 100000 (notebook 03: eval_size) must be between 1 and 59 "
                                       "(the train split's distinct questions less one), got 100000\n")


@pytest.mark.parametrize("args, message", [
    (["--temperature", "-1", "--samples", "2"], "temperature (--temperature) must be a finite number above 0 (sampling "
                                                "divides the logits by it), got -1.0"),
    (["--temperature", "nan", "--samples", "2"], "temperature (--temperature) must be a finite number above 0 "
                                                 "(sampling divides the logits by it), got nan"),
    (["--temperature", "0.9"], "--temperature 0.9 sets the sampled completions' temperature, and none are asked for "
                               "(greedy only): add --samples K, or drop --temperature"),
    (["--max-new-tokens", "100000000"], "max_new_tokens (--max-new-tokens) 100000000 does not fit the policy's context "
                                        "window of 1024 tokens (the tiny policy's max_positions), which holds the "
                                        "prompt too: give fewer, e.g. --max-new-tokens 512"),
])
def test_every_generation_setting_eval_records_is_range_checked(args, message, tmp_path, capsys):
    """S5 of issue 57: --temperature -1, --temperature nan and --max-new-tokens 100000000 were accepted and recorded
    in eval_settings.json."""
    run = tmp_path / "run"
    assert main(["eval", "--before", "--preset", "cpu-tiny", "--eval-size", "2", "--run-dir", str(run), *args]) == 2
    assert capsys.readouterr().err == f"error: {message}\n"
    assert not run.exists()


def test_a_models_context_window_is_read_from_its_config_without_loading_it(tmp_path):
    from grpo_kit.runs.measure import EvalPlan

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "max_position_embeddings": 2048}))
    plan = EvalPlan(task=get_task("gsm8k"), preset=get_preset("cpu-tiny"), model=str(tmp_path), max_new_tokens=2048)
    with pytest.raises(ValueError, match=f"context window of 2048 tokens \\({tmp_path}'s max_position_embeddings\\)"):
        plan.check_context()
    EvalPlan(task=get_task("gsm8k"), preset=get_preset("cpu-tiny"), model=str(tmp_path), max_new_tokens=2047
             ).check_context()


def test_ctrl_c_before_the_first_checkpoint_promises_no_checkpoint(monkeypatch, tmp_path, capsys):
    """Ctrl-C before the first checkpoint promised "the newest complete checkpoint", of which there was none."""
    import grpo_kit.cli as cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_train", interrupted)
    assert main(["train", "--preset", "cpu-tiny", "--run-dir", str(tmp_path / "run")]) == 130
    assert capsys.readouterr().err == ("interrupted: train stopped; what it finished is kept (no checkpoint was saved "
                                       f"yet in {tmp_path / 'run' / 'checkpoints'}: run the same command again to "
                                       "start over)\n")
