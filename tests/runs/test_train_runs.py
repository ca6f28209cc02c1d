"""Runs that survive and tell the truth: `python -m grpo_kit train`, checkpoints, resume after SIGKILL,
extending a finished run, refusing another run's folder, held-out accuracy in the log history.

The runs train the small random policy of conftest (``--model <folder>``) on sum3's one-line questions: what is
checked here is the same on any task, and a run on GSM8K first reads all 7,473 of its train questions and checks each
prompt's length (about 3 CPU seconds a run). 6 GRPO steps of 8 completions, a checkpoint every 2 steps, through the
kit's command line: in a subprocess only where a test kills it (``_train_killed``); everywhere else in this process
(``_train_here``, under the umask a shell gives, 0022), sparing a Python that imports torch and TRL again (about 9 CPU
seconds each): the uninterrupted run every test copies, the runs that resume, extend or fail, and the run paid by
misbehaving rewards. What the kit is doing (each step, held-out accuracy, "resuming from") is logged to standard
error as ``[grpo_kit] ...``.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from grpo_kit.cli import main
from grpo_kit.training.checkpoints import checkpoints, is_complete, latest_complete
from grpo_kit.training.groups import read_groups

ROOT = Path(__file__).resolve().parents[2]


def _train_args(model: Path, run_dir: Path, *extra: str) -> list[str]:
    return ["train", "--preset", "cpu-tiny", "--task", "sum3", "--run-dir", str(run_dir), "--train-size", "32",
            "--rewards", "strict_format_reward_func", "xmlcount_reward_func", "--eval-size", "6", *extra,
            "--model_name_or_path", str(model), "--max-steps", "6", "--save-steps", "2",
            "--per_device_train_batch_size", "8", "--max_completion_length", "12", "--learning_rate", "0.02",
            "--lr_scheduler_type", "cosine", "--eval_strategy", "steps", "--eval_steps", "2"]


def _train_killed(args: list[str], kill_at: str) -> str:
    """Run `python -m grpo_kit train ...` and SIGKILL it as soon as ``kill_at`` is logged (the log goes to standard
    error, read here together with standard output); returns what it wrote until then."""
    child = subprocess.Popen([sys.executable, "-m", "grpo_kit", *args], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                             umask=0o022)
    seen = []
    for line in child.stdout:
        seen.append(line)
        if kill_at in line:
            child.send_signal(signal.SIGKILL)
            break
    child.wait(timeout=60)
    return "".join(seen)


def _train_here(args: list[str]) -> subprocess.CompletedProcess:
    """`python -m grpo_kit ARGS` in this process, under umask 0022, with what it wrote to standard output and error
    (the kit's log included: its handler writes to whatever ``sys.stderr`` is) captured."""
    out, err, mask = io.StringIO(), io.StringIO(), os.umask(0o022)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(args)
    finally:
        os.umask(mask)
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def _rewards_by_step(history: list[dict]) -> dict[int, float]:
    steps = [row["step"] for row in history if "reward" in row]
    assert len(steps) == len(set(steps)), f"a step was logged twice: {steps}"
    return {row["step"]: row["reward"] for row in history if "reward" in row}


@pytest.fixture(scope="module")
def uninterrupted(tiny_policy_files, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("runs") / "straight"
    result = _train_here(_train_args(tiny_policy_files, run_dir))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return run_dir, result.stderr  # the kit's log


def test_train_writes_the_run_folder_with_checkpoints(uninterrupted):
    run_dir, out = uninterrupted
    assert [p.name for p in checkpoints(run_dir / "checkpoints")] == ["checkpoint-2", "checkpoint-4", "checkpoint-6"]
    assert all(is_complete(p) for p in checkpoints(run_dir / "checkpoints"))
    for name in ("model", "log_history.json", "training_curves.png", "train_settings.json"):
        assert (run_dir / name).exists(), name
    assert "[grpo_kit] step 6/6: reward" in out and "held-out strict accuracy" in out
    # issue 44 case 18: safetensors writes weights 0600; under umask 0022 a team sharing the folder reads them all
    closed = [str(p) for p in run_dir.rglob("*") if p.is_file() and p.stat().st_mode & 0o044 != 0o044]
    assert not closed, closed
    history = json.loads((run_dir / "log_history.json").read_text())
    assert sorted(_rewards_by_step(history)) == [1, 2, 3, 4, 5, 6]
    evals = [row for row in history if "eval/strict_accuracy" in row]
    assert [row["step"] for row in evals] == [0, 2, 4, 6]
    for row in evals:
        for key in ("strict", "flexible"):
            low, value, high = (row[f"eval/{key}_accuracy_ci_low"], row[f"eval/{key}_accuracy"],
                                row[f"eval/{key}_accuracy_ci_high"])
            assert 0 <= low <= value <= high <= 1
    assert sorted(p.name for p in (run_dir / "heldout").iterdir()) == [f"step-{s:06d}.jsonl" for s in (0, 2, 4, 6)]
    from grpo_kit.evaluation.plots import training_curves

    curves = training_curves(history)  # the curves drawn into training_curves.png, beside the rewards
    assert curves["eval/strict_accuracy"][0] == [0, 2, 4, 6] and "eval/flexible_accuracy_ci_high" in curves
    # What the policy generated: one group of 8 completions a step, TRL's rewards and advantages, TRL's copy gone
    groups = read_groups(run_dir / "groups")
    assert groups.groupby("step").size().to_dict() == {s: 8 for s in range(1, 7)}
    assert not list((run_dir / "checkpoints" / "completions").iterdir())
    rewards = {row["step"]: row["reward"] for row in history if "reward" in row}
    for step, rows in groups.groupby("step"):
        assert rows["total"].mean() == pytest.approx(rewards[step], abs=1e-5)  # TRL's logged mean reward
        assert rows["total"].to_numpy() == pytest.approx(rows["reward/strict_format_reward_func"].to_numpy()
                                                          + rows["reward/xmlcount_reward_func"].to_numpy())
        assert abs(rows["advantage"].sum()) < 1e-4 and rows["prompt"].nunique() == 1


def test_a_killed_run_resumes_and_matches_an_uninterrupted_one(uninterrupted, tiny_policy_files, tmp_path):
    straight, _ = uninterrupted
    run_dir = tmp_path / "killed"
    out = _train_killed(_train_args(tiny_policy_files, run_dir), kill_at="step 3/6")
    assert "step 3/6" in out and not (run_dir / "model").exists()  # killed before the end
    found = latest_complete(run_dir / "checkpoints")
    assert found is not None and found.name in ("checkpoint-2", "checkpoint-4")

    # without --max-steps, --save-steps and --train-size a resume ran the preset's 100 steps with
    # checkpoints every 10; it keeps the recorded plan, and says so
    args = _train_args(tiny_policy_files, run_dir, "--resume")
    for option in ("--max-steps", "--save-steps", "--train-size"):
        del args[args.index(option):args.index(option) + 2]
    result = _train_here(args)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "resuming as recipe.yaml and train_settings.json record it: max_steps 6; save_steps 2" in result.stderr
    assert "train_size 32" in result.stderr
    assert f"[grpo_kit] resuming from {found}" in result.stderr
    history = json.loads((run_dir / "log_history.json").read_text())
    resumed, expected = _rewards_by_step(history), _rewards_by_step(json.loads((straight / "log_history.json")
                                                                                .read_text()))
    assert sorted(resumed) == [1, 2, 3, 4, 5, 6]
    assert [row["step"] for row in history if "eval/strict_accuracy" in row] == [0, 2, 4, 6]
    # The CPU run is deterministic (the RNG states travel in the checkpoint): same rewards, same weights.
    assert resumed == pytest.approx(expected, abs=1e-6)
    a, b = load_file(straight / "model" / "model.safetensors"), load_file(run_dir / "model" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # The groups kept survive the kill: the killed run's steps after its checkpoint are replaced by the resumed ones
    pd.testing.assert_frame_equal(read_groups(run_dir / "groups"), read_groups(straight / "groups"))


def test_extending_a_finished_run_trains_the_added_steps_on_the_longer_schedule(uninterrupted, tiny_policy_files,
                                                                                 tmp_path, capsys):
    """A resume refused for other rewards prints the command that continues the run as recorded; that command, run
    as printed, extends the run with its recorded rewards, validation questions and evaluation cadence, and says
    so (issue 46: the user had to retype --rewards and --eval-steps)."""
    import shlex
    import shutil

    run_dir = tmp_path / "extended"
    shutil.copytree(uninterrupted[0], run_dir)
    refused = ["train", "--run-dir", str(run_dir), "--resume", "--max-steps", "8", "--rewards",
               "correctness_reward_func"]
    assert main(refused) == 2
    err = capsys.readouterr().err
    assert "rewards: {'strict_format_reward_func': 1.0, 'xmlcount_reward_func': 1.0} -> {'correctness_reward_func'" \
        in err
    printed = err.split("To continue it as recorded: ")[1].split(" (notebook 03")[0]
    # the model is the recipe's (recipe.yaml records --model_name_or_path), so the command needs only the length
    assert printed == f"python -m grpo_kit train --run-dir {run_dir} --resume --max_steps 8"
    result = _train_here(shlex.split(printed)[3:])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "[grpo_kit] resuming from" in result.stderr and "checkpoint-6" in result.stderr
    assert "resuming as recipe.yaml and train_settings.json record it: rewards strict_format_reward_func=1 " \
           "xmlcount_reward_func=1; train_size 32; data_seed 0; eval_size 6" in result.stderr, result.stderr[-3000:]
    assert "missing keys" not in result.stderr  # the tied lm_head.weight, loaded with the embedding
    history = json.loads((run_dir / "log_history.json").read_text())
    assert sorted(_rewards_by_step(history)) == list(range(1, 9))
    assert [row["step"] for row in history if "eval/strict_accuracy" in row] == [0, 2, 4, 6, 8]
    lr = {row["step"]: row["learning_rate"] for row in history if "learning_rate" in row}
    peak = 0.02
    # The learning rate logged at step s is the one step s trained with: the schedule after s - 1 steps.
    # Steps 1-6 followed the 6-step cosine; steps 7-8 follow the cosine of an 8-step run, not 0 and not the peak.
    assert lr[6] == pytest.approx(peak * 0.5 * (1 + math.cos(math.pi * 5 / 6)), rel=1e-6)
    for step in (7, 8):
        assert lr[step] == pytest.approx(peak * 0.5 * (1 + math.cos(math.pi * (step - 1) / 8)), rel=1e-6)
    assert json.loads((run_dir / "train_settings.json").read_text())["max_steps"] == 8


def test_a_run_folder_of_another_run_is_refused(uninterrupted, tiny_policy_files, capsys):
    run_dir, _ = uninterrupted
    args = _train_args(tiny_policy_files, run_dir, "--resume")
    changed = args[:args.index("--rewards") + 1] + ["correctness_reward_func"] + args[args.index("--rewards") + 3:]
    assert main(changed) == 2
    err = capsys.readouterr().err
    assert "holds checkpoints of a different run" in err and "rewards:" in err
    args[args.index("--learning_rate") + 1] = "0.01"
    assert main(args) == 2
    assert "preset.learning_rate: 0.02 -> 0.01" in capsys.readouterr().err
    assert main(_train_args(tiny_policy_files, run_dir)) == 2  # checkpoints there and no --resume
    assert "pass --resume" in capsys.readouterr().err


def test_an_interrupted_checkpoint_is_skipped_on_resume(tmp_path):
    from safetensors.torch import save_file

    folder = tmp_path / "checkpoints"
    for step in (2, 4):
        ckpt = folder / f"checkpoint-{step}"
        ckpt.mkdir(parents=True)
        save_file({"w": torch.zeros(4)}, ckpt / "model.safetensors")
        for name in ("optimizer.pt", "scheduler.pt"):
            (ckpt / name).write_bytes(b"x")
        (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    torn = folder / "checkpoint-6"  # killed while writing: the weights are there, the state is not
    torn.mkdir()
    save_file({"w": torch.zeros(4)}, torn / "model.safetensors")
    assert latest_complete(folder).name == "checkpoint-4"
    (torn / "trainer_state.json").write_text('{"global_step": 6, "log_hist')  # cut mid-write
    assert latest_complete(folder).name == "checkpoint-4"
    (torn / "trainer_state.json").write_text(json.dumps({"global_step": 6}))
    for name in ("optimizer.pt", "scheduler.pt"):
        (torn / name).write_bytes(b"x")
    assert latest_complete(folder).name == "checkpoint-6"
    weights = (torn / "model.safetensors").read_bytes()
    (torn / "model.safetensors").write_bytes(weights[:-3])  # the weights cut short: not complete
    assert latest_complete(folder).name == "checkpoint-4"


# --- a finished run stays finished; a resume never goes backwards or starts over silently -------------


def _copy(run_dir: Path, tmp_path: Path) -> Path:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    return copy


def test_resuming_a_finished_run_trains_nothing_and_a_shorter_one_is_refused(uninterrupted, tiny_policy_files,
                                                                             tmp_path, capsys):
    run_dir = _copy(uninterrupted[0], tmp_path)
    history = (run_dir / "log_history.json").read_bytes()
    weights = (run_dir / "model" / "model.safetensors").read_bytes()
    assert json.loads((run_dir / "finished.json").read_text())["step"] == 6
    assert main(_train_args(tiny_policy_files, run_dir, "--resume")) == 0
    assert "finished at step 6 of 6: nothing to train" in capsys.readouterr().err
    assert (run_dir / "log_history.json").read_bytes() == history  # no step 7
    assert (run_dir / "model" / "model.safetensors").read_bytes() == weights
    args = _train_args(tiny_policy_files, run_dir, "--resume")
    args[args.index("--max-steps") + 1] = "4"
    assert main(args) == 2
    assert "has trained 6 steps, more than --max_steps 4: a run cannot be shortened" in capsys.readouterr().err


def test_a_resume_without_a_recipe_trains_on_with_the_one_the_run_folder_recorded(uninterrupted, tiny_policy_files,
                                                                                tmp_path, capsys):
    """The run folder keeps the resolved recipe (recipe.yaml, TRL's keys, the command line's values in it); `train
    --resume` without --preset or recipe keys reads it, and the run is the same run (no 'different run' refusal)."""
    from grpo_kit.training.presets import get_preset

    run_dir = _copy(uninterrupted[0], tmp_path)
    recipe = get_preset(run_dir / "recipe.yaml")
    assert (recipe.name, recipe.learning_rate, recipe.max_completion_length) == ("cpu-tiny", 0.02, 12)
    args = _train_args(tiny_policy_files, run_dir, "--resume")
    args = args[:args.index("--model_name_or_path")]  # the kit's options only
    del args[args.index("--preset"):args.index("--preset") + 2]
    assert main(args) == 0
    assert "finished at step 6 of 6: nothing to train" in capsys.readouterr().err


def test_a_run_killed_during_its_final_save_finishes_it_on_resume_without_another_step(uninterrupted,
                                                                                       tiny_policy_files, tmp_path):
    run_dir = _copy(uninterrupted[0], tmp_path)
    (run_dir / "finished.json").unlink()
    (run_dir / "model" / "config.json").write_text("")  # torn by the kill
    (run_dir / "log_history.json").unlink()
    result = _train_here(_train_args(tiny_policy_files, run_dir, "--resume"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "checkpoint-6 is the last step: finishing the save of the model, without training" in result.stderr
    assert "step 7" not in result.stderr
    assert sorted(_rewards_by_step(json.loads((run_dir / "log_history.json").read_text()))) == [1, 2, 3, 4, 5, 6]
    a = load_file(run_dir / "model" / "model.safetensors")
    b = load_file(run_dir / "checkpoints" / "checkpoint-6" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert json.loads((run_dir / "model" / "config.json").read_text())["model_type"]
    assert json.loads((run_dir / "finished.json").read_text())["step"] == 6


def test_a_resume_with_other_training_questions_is_refused(uninterrupted, tiny_policy_files, capsys):
    run_dir, _ = uninterrupted
    for option, value, recorded in (("--train-size", "16", "train_size: 32 -> 16"),
                                    ("--data_seed", "5", "seed: 0 -> 5")):
        args = _train_args(tiny_policy_files, run_dir, "--resume")
        if option in args:
            args[args.index(option) + 1] = value
        else:
            args += [option, value]
        assert main(args) == 2
        assert recorded in capsys.readouterr().err


def test_a_full_disk_during_a_save_is_named_and_the_torn_checkpoint_set_aside(uninterrupted, tiny_policy_files,
                                                                              tmp_path, monkeypatch, capsys):
    """F1 of issue 57: a full disk during a checkpoint save printed torch's "[enforce fail at inline_container.cc:672]
    ... unexpected pos", never that the disk was full; once space was freed, --resume found no complete checkpoint
    and asked the user to delete the torn one by hand. torch.save raises here what it raised on a full tmpfs (a test
    cannot fill a disk), with the disk's free space said to be 1 MiB."""
    import shutil

    import grpo_kit.system.files as files

    run_dir = _copy(uninterrupted[0], tmp_path)
    (run_dir / "finished.json").unlink()
    shutil.rmtree(run_dir / "model")
    for ckpt in checkpoints(run_dir / "checkpoints")[1:]:
        shutil.rmtree(ckpt)  # killed after checkpoint-2

    def full_disk(*args, **kwargs):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")

    monkeypatch.setattr(torch, "save", full_disk)
    monkeypatch.setattr(files, "_free_bytes", lambda folder: 1 << 20)
    assert main(_train_args(tiny_policy_files, run_dir, "--resume")) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (f"error: the disk is full (1.0 MiB free) while training saved checkpoint-4 (RuntimeError: [enforce "
                   f"fail at inline_container.cc:672] . unexpected pos 704 vs 598) ({run_dir / 'checkpoints'}): free "
                   f"space there, then run python -m grpo_kit train --run-dir {run_dir} --resume: a torn checkpoint is "
                   "set aside and training continues from the newest whole one; every file is written whole or not "
                   "at all, so nothing half-written is trusted"), err
    torn = run_dir / "checkpoints" / "checkpoint-4"
    assert torn.is_dir() and not is_complete(torn)
    monkeypatch.undo()
    result = _train_here(_train_args(tiny_policy_files, run_dir, "--resume"))  # space freed: the command it named
    assert result.returncode == 0, result.stderr[-3000:]
    assert (f"set aside checkpoint-4 in {run_dir / 'checkpoints' / 'torn'} (not complete: the save was cut short by a "
            "kill or a full disk); training continues from checkpoint-2, the newest whole checkpoint") in result.stderr
    assert sorted(p.name for p in (run_dir / "checkpoints" / "torn").iterdir()) == ["checkpoint-4"]
    assert json.loads((run_dir / "finished.json").read_text())["step"] == 6 and is_complete(torn)


def test_the_step_0_evaluation_survives_a_kill_before_the_first_checkpoint(uninterrupted, tiny_policy_files,
                                                                           tmp_path):
    import shutil

    run_dir = _copy(uninterrupted[0], tmp_path)
    step0 = [row for row in json.loads((run_dir / "log_history.json").read_text()) if row.get("step") == 0][0]
    for name in ("checkpoints", "model"):
        shutil.rmtree(run_dir / name)
    for name in ("log_history.json", "finished.json"):
        (run_dir / name).unlink()
    for path in (run_dir / "heldout").glob("step-*.jsonl"):
        if path.name != "step-000000.jsonl":
            path.unlink()
    args = _train_args(tiny_policy_files, run_dir, "--resume")
    args[args.index("--max-steps") + 1] = "2"
    result = _train_here(args)
    assert result.returncode == 0, result.stderr[-3000:]
    history = json.loads((run_dir / "log_history.json").read_text())
    rows = [row for row in history if "eval/strict_accuracy" in row]
    assert [row["step"] for row in rows] == [0, 2]
    assert rows[0]["eval/flexible_accuracy"] == step0["eval/flexible_accuracy"]


def _snapshot(run_dir: Path) -> dict[str, bytes]:
    names = ["finished.json", "train_settings.json", "log_history.json", "model/model.safetensors"]
    return {name: (run_dir / name).read_bytes() for name in names}


def test_a_finished_run_whose_checkpoints_were_pruned_is_never_trained_again_from_scratch(uninterrupted,
                                                                                          tiny_policy_files,
                                                                                          tmp_path, capsys):
    import shutil

    run_dir = _copy(uninterrupted[0], tmp_path)
    shutil.rmtree(run_dir / "checkpoints")
    before = _snapshot(run_dir)
    assert main(_train_args(tiny_policy_files, run_dir)) == 2  # without --resume
    err = capsys.readouterr().err
    assert "holds a trained model (model/, finished at step 6)" in err and "Traceback" not in err
    args = _train_args(tiny_policy_files, run_dir, "--resume")
    args[args.index("--max-steps") + 1] = "8"
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "finished at step 6, but no complete checkpoint of that step" in err and "train a new run folder" in err
    assert _snapshot(run_dir) == before


def test_a_truncated_checkpoint_is_not_complete_and_the_finished_run_stays_usable(uninterrupted, tiny_policy_files,
                                                                                  tmp_path, capsys):
    from grpo_kit.runs.folder import RunFolder

    run_dir = _copy(uninterrupted[0], tmp_path)
    weights = run_dir / "checkpoints" / "checkpoint-6" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # cut short by a full disk
    assert not is_complete(weights.parent) and is_complete(run_dir / "checkpoints" / "checkpoint-4")
    before = _snapshot(run_dir)
    args = _train_args(tiny_policy_files, run_dir, "--resume")
    args[args.index("--max-steps") + 1] = "8"
    assert main(args) == 2
    assert "no complete checkpoint of that step" in capsys.readouterr().err
    assert _snapshot(run_dir) == before and RunFolder(run_dir).check_model() is not None


def test_a_resume_whose_checkpoint_does_not_load_changes_nothing_in_the_finished_run(uninterrupted, tiny_policy_files,
                                                                                      tmp_path):
    """A checkpoint whole on disk that does not fit the model (one tensor of another shape): the load fails, and
    finished.json, max_steps and the held-out records are as they were."""
    from safetensors.torch import save_file

    from grpo_kit.training.checkpoints import FINGERPRINT, weights_fingerprint

    run_dir = _copy(uninterrupted[0], tmp_path)
    weights = run_dir / "checkpoints" / "checkpoint-6" / "model.safetensors"
    tensors = load_file(weights)
    name = next(iter(tensors))
    tensors[name] = torch.zeros(3, 5)
    save_file(tensors, weights, metadata={"format": "pt"})
    fingerprint = weights.parent / FINGERPRINT  # as if training had saved these weights: the load is what fails
    fingerprint.write_text(json.dumps(weights_fingerprint(weights.parent)))
    before = _snapshot(run_dir)
    heldout = sorted(p.name for p in (run_dir / "heldout").iterdir())
    args = _train_args(tiny_policy_files, run_dir, "--resume")
    args[args.index("--max-steps") + 1] = "8"
    result = _train_here(args)
    assert result.returncode != 0 and "size mismatch" in result.stderr
    assert _snapshot(run_dir) == before and sorted(p.name for p in (run_dir / "heldout").iterdir()) == heldout


def test_a_checkpoint_whose_weights_were_replaced_is_refused_naming_the_file(uninterrupted, tiny_policy_files,
                                                                              tmp_path, capsys):
    """Whole weights (header and size right) that are not the ones training saved: another checkpoint's."""
    import shutil

    from grpo_kit.training.checkpoints import FINGERPRINT

    run_dir = _copy(uninterrupted[0], tmp_path)
    newest = run_dir / "checkpoints" / "checkpoint-6"
    assert json.loads((newest / FINGERPRINT).read_text())["model.safetensors"]
    shutil.copy(run_dir / "checkpoints" / "checkpoint-4" / "model.safetensors", newest / "model.safetensors")
    before = _snapshot(run_dir)
    args = _train_args(tiny_policy_files, run_dir, "--resume")
    args[args.index("--max-steps") + 1] = "8"
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{newest / 'model.safetensors'} is not the file training saved" in err and "Traceback" not in err
    assert _snapshot(run_dir) == before


# --- rewards that misbehave: none ends training ---------------------------------------------------------------------

MISBEHAVING = """\
import math
import time

import numpy as np


def odd_reward(completions, **kwargs):
    return [[None, math.nan, math.inf, 1.0][i % 4] for i in range(len(completions))]


def judges_nothing(completions, **kwargs):
    return [None] * len(completions)


def huge(completions, **kwargs):
    return [[1e30, 1e300, 1.0][i % 3] for i in range(len(completions))]


def numpy_reward(completions, **kwargs):
    return np.array([len(c[0]['content']) % 3 for c in completions], dtype=np.float32)


def raises_at_step_2(completions, trainer_state=None, **kwargs):
    if trainer_state is not None and trainer_state.global_step >= 1:
        return {}['missing']
    return [0.0] * len(completions)


def vandal(completions, answer, **kwargs):
    answer.clear()
    return [0.0] * len(completions)


def slow(completions, **kwargs):
    time.sleep(1.2)
    return [0.0] * len(completions)
"""


@pytest.fixture(scope="module")
def misbehaving_run(tiny_policy_files, tmp_path_factory):
    """Two GRPO steps (no held-out evaluation) paid by every misbehaving reward above at once, beside the kit's
    correctness reward, in one `python -m grpo_kit train` (run in this process, the rewards' module on its path): the
    tests below each check what one of them must not do. Returns the run folder and the kit's log."""
    folder = tmp_path_factory.mktemp("misbehaving")
    (folder / "mine.py").write_text(MISBEHAVING)
    args = _train_args(tiny_policy_files, folder / "run")
    start = args.index("--rewards") + 1
    args[start:start + 2] = ["mine:odd_reward", "mine:judges_nothing", "mine:huge", "mine:numpy_reward",
                             "mine:raises_at_step_2", "mine:vandal", "correctness_reward_func", "mine:slow"]
    args[args.index("--max-steps") + 1] = "2"
    args = args[:args.index("--eval_strategy")]
    sys.path.insert(0, str(folder))
    try:
        result = _train_here(args)
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("mine", None)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "[grpo_kit] step 2/2: reward" in result.stderr
    return folder / "run", result.stderr


def test_a_reward_returning_none_nan_or_inf_does_not_crash_a_run(misbehaving_run):
    run_dir, err = misbehaving_run
    assert "reward odd_reward: returned nan for completion 1, which is not a finite number" in err
    assert "returned inf for completion 2" in err
    assert "[grpo_kit] step 1/2: reward" in err and "[grpo_kit] step 2/2: reward" in err


def test_a_reward_judging_nothing_huge_or_numpy_trains_and_the_run_finishes(misbehaving_run):
    """A reward that returns None for every completion (its step mean is None), one returning 1e30 (finite for Python,
    inf once TRL squares it in float32) and one returning numpy numbers: the run trains, draws its curves and
    writes finished.json."""
    run_dir, err = misbehaving_run
    assert "reward huge: returned 1e+30 for completion 0, which is not a finite number within 1e+15" in err
    assert "reward numpy_reward" not in err
    assert json.loads((run_dir / "finished.json").read_text())["step"] == 2
    assert (run_dir / "training_curves.png").is_file()


def test_a_reward_that_raises_edits_a_column_never_judges_or_is_slow_never_ends_training(misbehaving_run):
    """A KeyError at step 2 ended the run with a traceback; a reward clearing the 'answer'
    column ended it blaming the data; a reward judging nothing trained to the end with no alarm; a slow one
    slowed every step without a word."""
    run_dir, err = misbehaving_run
    assert "Traceback" not in err
    assert "reward raises_at_step_2 raised KeyError: 'missing' at step 2: treated as 'cannot judge'" in err
    assert err.count("reward raises_at_step_2 raised") == 1
    assert "entries in the 'answer' column" not in err
    assert "step 1: reward slow took 1." in err and "step 2: reward slow took 1." in err
    assert "ALARM: reward judges_nothing judged none of the" in err
    finished = json.loads((run_dir / "finished.json").read_text())
    assert [a["reward"] for a in finished["alarms"]] == ["judges_nothing"]
    assert [a["kind"] for a in map(json.loads, (run_dir / "alarms.jsonl").read_text().splitlines())] == [
        "reward_never_judged"]
    from grpo_kit.evaluation.report import alarms_markdown

    assert "**Reward never judged**: judges_nothing returned no number" in alarms_markdown(finished["alarms"])
