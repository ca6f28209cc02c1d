"""Several trained runs in one paired table: metrics with intervals, every comparison with flips, exact McNemar
and Holm-adjusted p-values, the settings that differ, and refusals when the runs do not share a baseline.

The run folders are written here from scored completions (no model): what is tested is the pairing and the
statistics, which the notebooks' and demo's real runs then use.
"""

from __future__ import annotations

import json
import random

import pytest

from grpo_kit.evaluation.compare import compare_runs_results
from grpo_kit.evaluation.scoring import EvalResult, score
from grpo_kit.evaluation.stats import mcnemar_exact
from grpo_kit.runs.compare import compare_runs
from grpo_kit.runs.folder import RunFolder
from grpo_kit.runs.measure import evaluated_with
from grpo_kit.tasks import get_task
from grpo_kit.tasks.answer_format import render
from grpo_kit.tasks.data import take_slice

N = 60


@pytest.fixture(scope="module")
def questions():
    return list(take_slice(get_task("gsm8k").load("test"), n=N, seed=0))


def completions(questions, right, seed):
    """One greedy completion per question: right (gold answer in the strict layout) for the chosen share."""
    rng = random.Random(seed)
    return [[render("work", q["answer"]) if rng.random() < right else render("work", "-1")] for q in questions]


def _from_records(records, task):
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp()) / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return EvalResult.from_jsonl(path, task=task)


def write_run(folder, questions, baseline_seed, right, seed, preset=None, settings=None):
    folder.mkdir(parents=True)
    eval_settings = {"task": "gsm8k", "slice": {"n": N}, "seed": 0, "questions": N, "base_model": "tiny",
                     "base_fingerprint": "abc", "system_prompt": "S", "max_new_tokens": 64, "samples": 0,
                     "temperature": 0.7, "route": "transformers", "warm": None, "tiny_spec": None, **(settings or {})}
    (folder / "eval_settings.json").write_text(json.dumps(eval_settings))
    task = get_task("gsm8k")
    for name, (share, s) in {"baseline.jsonl": (0.3, baseline_seed), "trained.jsonl": (right, seed)}.items():
        records = score(questions, completions(questions, share, s), task=task)
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in records))
    preset = {"name": "cpu-tiny", "learning_rate": 3e-5, "beta": 0.0, **(preset or {})}
    (folder / "train_settings.json").write_text(json.dumps({
        "identity": {"preset": preset, "rewards": {"correctness_reward_func": 1.0}}, "train_questions": 100,
        "max_steps": 10, "algorithm": {"name": "trl_default", "paper": "p", "fields": {"beta": preset["beta"]},
                                       "overridden": []}}))
    run = RunFolder(folder)  # what train and eval record: the trained weights' digest, then the results' step
    (folder / "model").mkdir()
    (folder / "model" / "model.safetensors").write_text(f"the weights of {folder.name}")
    run.mark_finished(10)
    run.mark_evaluated(10, run.check_model(), evaluated_with(eval_settings))
    return folder


def test_three_runs_give_one_paired_table_with_holm_adjusted_p_values(tmp_path, questions):
    dirs = [write_run(tmp_path / "a", questions, 0, 0.9, 1, preset={"learning_rate": 1e-5}),
            write_run(tmp_path / "b", questions, 0, 0.35, 2, preset={"beta": 0.04}),
            write_run(tmp_path / "c", questions, 0, 0.3, 0)]  # c's trained records equal the baseline's
    report = compare_runs(dirs, out_dir=tmp_path / "out")
    pairs = report.comparison.pairs
    headline = pairs[pairs["key"] == "strict_correct"]
    assert [(r["a"], r["b"]) for r in headline.to_dict("records")] == [
        ("baseline", "a"), ("baseline", "b"), ("baseline", "c"), ("a", "b"), ("a", "c"), ("b", "c")]
    for r in headline.to_dict("records"):
        assert r["mcnemar_p"] == pytest.approx(mcnemar_exact(r["wrong_to_right"], r["right_to_wrong"]))
        assert r["mcnemar_p"] <= r["holm_p"] <= 1
    smallest = headline.sort_values("mcnemar_p").iloc[0]
    assert smallest["holm_p"] == pytest.approx(min(1.0, 6 * smallest["mcnemar_p"]))  # Holm's first step: m * p
    base_c = headline[(headline["a"] == "baseline") & (headline["b"] == "c")].iloc[0]
    assert (base_c["wrong_to_right"], base_c["right_to_wrong"], base_c["mcnemar_p"]) == (0, 0, 1.0)
    base_a = headline[(headline["a"] == "baseline") & (headline["b"] == "a")].iloc[0]
    assert base_a["delta"] > 0.4 and base_a["delta_low"] > 0 and base_a["holm_p"] < 0.01
    assert set(report.differences) == {"learning_rate", "beta"}
    assert report.differences["beta"] == {"a": 0.0, "b": 0.04, "c": 0.0}
    text = report.markdown
    assert text.index("## Settings that differ") < text.index("| comparison |")
    assert "| baseline -> a | Strict accuracy |" in text and "Holm p" in text
    for name in ("runs_comparison.md", "runs_metrics.csv", "runs_pairs.csv", "runs_comparison.png"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    metrics = report.comparison.metrics
    row = metrics[(metrics["run"] == "a") & (metrics["key"] == "strict_correct")].iloc[0]
    assert row["low"] <= row["value"] <= row["high"]


def test_runs_whose_baselines_differ_are_refused_naming_what_differs(tmp_path, questions):
    a = write_run(tmp_path / "a", questions, 0, 0.9, 1)
    b = write_run(tmp_path / "b", questions, 0, 0.5, 2, settings={"base_fingerprint": "other", "max_new_tokens": 32})
    with pytest.raises(ValueError, match=r"(?s)base weights \(base_fingerprint\): a 'abc', b 'other'.*"
                                         r"completion budget"):
        compare_runs([a, b])
    c = write_run(tmp_path / "c", questions, 5, 0.5, 2)  # same settings, but another baseline
    with pytest.raises(ValueError, match="baseline records: c's baseline.jsonl"):
        compare_runs([a, c])
    with pytest.raises(ValueError, match="given twice"):
        compare_runs([a, a])


def test_a_run_not_yet_evaluated_after_training_names_the_step(tmp_path, questions):
    a = write_run(tmp_path / "a", questions, 0, 0.9, 1)
    b = write_run(tmp_path / "b", questions, 0, 0.5, 2)
    (b / "trained.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match="04_post_training_eval"):
        compare_runs([a, b])


def test_compare_cli_prints_the_table(tmp_path, questions, capsys):
    from grpo_kit.cli import main

    a = write_run(tmp_path / "a", questions, 0, 0.9, 1)
    b = write_run(tmp_path / "b", questions, 0, 0.5, 2, preset={"beta": 0.04})
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    assert "| beta | 0.0 | 0.04 |" in out and "| a -> b |" in out
    assert (tmp_path / "cmp" / "runs_comparison.png").is_file()


def test_results_of_other_questions_are_refused_naming_the_run(questions):
    task = get_task("gsm8k")
    baseline = _from_records(score(questions, completions(questions, 0.3, 0), task=task), task)
    other = _from_records(score(questions[:-1], completions(questions[:-1], 0.3, 0), task=task), task)
    with pytest.raises(ValueError, match="run 'short': before and after are not the same questions"):
        compare_runs_results(baseline, {"short": other})


def test_a_shared_baseline_lets_runs_compare_and_a_missing_one_names_the_step(tmp_path, questions):
    from grpo_kit.runs.compare import share_baseline

    a = write_run(tmp_path / "a", questions, 0, 0.9, 1)
    b = write_run(tmp_path / "b", questions, 7, 0.5, 2)  # its own baseline: refused until it shares a's
    (b / "baseline_sampled.jsonl").write_text("stale\n")  # a sampled baseline a does not have
    with pytest.raises(ValueError, match="baseline records"):
        compare_runs([a, b])
    folders = share_baseline(a, [a, b, tmp_path / "c"])
    assert [f.path for f in folders] == [a, b, tmp_path / "c"]
    for name in ("baseline.jsonl", "eval_settings.json"):
        assert (b / name).read_bytes() == (a / name).read_bytes() == (tmp_path / "c" / name).read_bytes()
    assert not (b / "baseline_sampled.jsonl").exists()
    assert compare_runs([a, b]).comparison.questions == N
    with pytest.raises(FileNotFoundError, match="02_baseline_eval"):
        share_baseline(tmp_path / "empty", [b])


def test_the_compare_demo_refuses_bad_input_before_any_model_loads(tmp_path):
    from grpo_kit.cli import main
    from grpo_kit.demo import CompareDemoConfig, compare_tasks, run_compare_demo

    assert compare_tasks() and all(get_task(t).extras["compare_rewards"] for t in compare_tasks())
    assert "gsm8k" not in compare_tasks()
    with pytest.raises(ValueError, match="names no reward sets to compare"):
        run_compare_demo(CompareDemoConfig(task="gsm8k", runs_dir=str(tmp_path)))
    with pytest.raises(ValueError, match="give distinct names among"):
        run_compare_demo(CompareDemoConfig(variants=("nope",), runs_dir=str(tmp_path)))
    with pytest.raises(ValueError, match="one folder name"):
        CompareDemoConfig(name="../x")
    assert main(["compare-demo", "--task", "gsm8k"]) == 2  # argparse refuses a task without reward sets
    assert not list(tmp_path.iterdir())  # nothing was written


def test_results_not_of_the_model_a_run_holds_now_are_refused_and_nothing_is_created(tmp_path, questions, capsys):
    import shutil

    from grpo_kit.cli import main

    a = write_run(tmp_path / "a", questions, 0, 0.9, 1)
    b = write_run(tmp_path / "b", questions, 0, 0.5, 2)
    extended = RunFolder(b)  # trained further after its evaluation: step 10 -> 20
    (b / "model" / "model.safetensors").write_text("the weights of b after 20 steps")
    extended.mark_finished(20)
    with pytest.raises(ValueError, match="b: .*evaluation after training is of step 10, and the model is now at step "
                                         "20.*eval --run-dir .* again"):
        compare_runs([a, b])
    c = write_run(tmp_path / "c", questions, 0, 0.5, 2)
    records = (c / "trained.jsonl").read_text()  # records generated elsewhere (another budget) put in its place
    (c / "trained.jsonl").write_text(records.replace('"completion": "', '"completion": "x'))
    with pytest.raises(ValueError, match="trained.jsonl is not the file the evaluation after training wrote"):
        compare_runs([a, c])
    d = write_run(tmp_path / "d", questions, 0, 0.5, 2)
    (d / "evaluated.json").write_text(json.dumps({**json.loads((d / "evaluated.json").read_text()),
                                                  "max_new_tokens": 12}))
    with pytest.raises(ValueError, match="used max_new_tokens = 12 where the baseline used 64"):
        compare_runs([a, d])
    copy = tmp_path / "copy"
    shutil.copytree(a, copy)
    with pytest.raises(ValueError, match="a and copy hold the same trained weights"):
        compare_runs([a, copy])
    for args, message in ((["compare", str(a), str(tmp_path / "typo")], "no run folder at"),
                          (["compare", str(a), str(d), "--out", str(tmp_path / "a" / "trained.jsonl")], "is a file"),
                          (["compare", str(a), str(d), "--names", "x|y", "z"], "without '|'")):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err
    assert not (tmp_path / "typo").exists()


def test_compare_takes_the_run_folders_locks(tmp_path, questions):
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    from grpo_kit.runs.folder import RunFolderBusy

    a = write_run(tmp_path / "a", questions, 0, 0.9, 1)
    b = write_run(tmp_path / "b", questions, 0, 0.5, 2)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from grpo_kit.runs.folder import RunFolder
        with RunFolder({str(b)!r}).lock("train"):
            print("holding", flush=True)
            time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(RunFolderBusy, match=f"being written by process {holder.pid}"):
            compare_runs([a, b])
    finally:
        holder.kill()
        holder.wait()


def test_compare_out_never_overwrites_a_users_files_or_writes_into_a_run_folder(tmp_path, questions, capsys):
    """--out under export --out's rules: new, empty, or a previous comparison; no run folder."""
    from grpo_kit.cli import main

    a = write_run(tmp_path / "a", questions, 0, 0.9, 1)
    b = write_run(tmp_path / "b", questions, 0, 0.5, 2, preset={"beta": 0.04})
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "runs_comparison.md").write_text("my own notes")
    model_before = sorted(p.name for p in (a / "model").iterdir())
    for out, says in ((mine, "holds files that are not a comparison compare wrote (runs_comparison.md)"),
                      (a / "model", f"lies inside the run folder {a.resolve()} (its model)"),
                      (b, f"is the run folder {b.resolve()}")):
        capsys.readouterr()
        assert main(["compare", str(a), str(b), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert says in err and "choose a new or empty folder" in err and len(err.strip().splitlines()) == 1
    assert (mine / "runs_comparison.md").read_text() == "my own notes"
    assert sorted(p.name for p in (a / "model").iterdir()) == model_before
    assert not (b / "runs_comparison.md").exists()
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "cmp")]) == 0
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "cmp")]) == 0  # its own comparison, replaced
    both = tmp_path / "both"
    c, d = write_run(both / "c", questions, 0, 0.9, 1), write_run(both / "d", questions, 0, 0.5, 2)
    assert main(["compare", str(c), str(d), "--out", str(both)]) == 0  # a folder holding only the runs compared


def test_a_comparison_holds_each_side_on_the_scale_of_its_interval(questions):
    """A right/wrong reward worth 0.5 (strict format): a_value, b_value and delta are means of the metric, as in the
    metrics table, so the delta lies in its paired interval."""
    task = get_task("gsm8k")

    def formatted(share, seed):  # the gold answer, in the strict layout for about ``share`` of the questions
        rng = random.Random(seed)
        return [[render("work", q["answer"]) if rng.random() < share else f"it is {q['answer']}"] for q in questions]

    baseline = _from_records(score(questions, formatted(0.3, 0), task=task), task)
    after = _from_records(score(questions, formatted(0.8, 1), task=task), task)
    result = compare_runs_results(baseline, {"a": after})
    pair = result.pairs.set_index("key").loc["strict_format_reward_func"]
    values = result.metrics.set_index(["run", "key"])["value"]
    assert pair["a_value"] == values["baseline", "strict_format_reward_func"] < 0.5
    assert pair["b_value"] == values["a", "strict_format_reward_func"]
    assert pair["delta_low"] <= pair["delta"] == pair["b_value"] - pair["a_value"] <= pair["delta_high"]
