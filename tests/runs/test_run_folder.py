"""What a hostile user does to a run folder does not lose a run or leave it stuck: one writer per folder,
damaged files named with what to do, values read as written, and everything refused before a model loads.

Each test reproduces one numbered failure of the issue; the costly ones (training and resuming) are in
test_train_runs.py, beside the run they copy.
"""

from __future__ import annotations

import json
import math
import os
import select
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grpo_kit.cli import main
from grpo_kit.policy.warm_start import TinyPolicy, WarmStart
from grpo_kit.runs.folder import RunFolder, RunFolderBusy
from grpo_kit.system.files import write_json
from grpo_kit.tasks import RewardSet, get_task
from grpo_kit.tasks.countdown import safe_eval
from grpo_kit.tasks.reward_registry import probe
from grpo_kit.tasks.rewards import guarded
from grpo_kit.training.presets import get_preset

ROOT = Path(__file__).resolve().parents[2]
GSM8K = get_task("gsm8k")


# --- 4. one writer per run folder -------------------------------------------------------------------------------


def _hold_lock(folder: Path) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from grpo_kit.runs.folder import RunFolder
        with RunFolder({str(folder)!r}).lock("train"):
            print("holding", flush=True)
            time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert holder.stdout.readline().strip() == "holding"
    return holder


def test_a_second_writer_is_refused_naming_the_holder_and_a_dead_holders_lock_is_taken_over(tmp_path, capsys):
    holder = _hold_lock(tmp_path / "run")
    try:
        with pytest.raises(RunFolderBusy, match=f"being written by process {holder.pid} on .* \\(train, since "):
            with RunFolder(tmp_path / "run").lock("eval"):
                pass
        assert main(["train", "--preset", "cpu-tiny", "--run-dir", str(tmp_path / "run"), "--max-steps", "1",
                     "--cache-dir", str(tmp_path / "cache")]) == 2
        assert f"process {holder.pid}" in capsys.readouterr().err
        assert not (tmp_path / "run" / "train_settings.json").exists()  # nothing written by the second
    finally:
        holder.kill()  # SIGKILL: the holder cannot clean up
        holder.wait()
    with RunFolder(tmp_path / "run").lock("train") as run:  # the OS released the dead process's lock
        assert json.loads(run.lock_holder.read_text())["command"] == "train"


def test_the_lock_is_reentrant_in_one_process(tmp_path):
    run = RunFolder(tmp_path)
    with run.lock("demo"), run.lock("train"):
        assert json.loads(run.lock_holder.read_text())["command"] == "demo"
    assert not run.lock_holder.exists()


# --- 5 and 10-11. values read as written; everything refused before a model loads --------------------------------


@pytest.mark.parametrize("text, value", [("false", False), ("False", False), ("no", False), ("0", False),
                                         ("TRUE", True), ("yes", True), ("1", True), (True, True), (0, False)])
def test_booleans_are_read_as_written(text, value):
    """TRL's parser reads a boolean as the command line writes it; Python's 0 and True too."""
    assert get_preset("cpu-tiny", bf16=text).bf16 is value
    assert get_preset("cpu-tiny", gradient_checkpointing=text).gradient_checkpointing is value


@pytest.mark.parametrize("field, value, message", [
    ("bf16", "maybe", "recipe key bf16: Truthy value expected: got maybe"),
    ("max_steps", "2.5", "recipe key max_steps: invalid int value: '2.5'"),
    ("learning_rate", "fast", "recipe key learning_rate: invalid float value: 'fast'"),
    ("use_peft", "false", None),
])
def test_override_values_are_typed(field, value, message):
    """Overrides are read by TRL's parser as their key's type; a value it cannot read is refused in one line."""
    if message is None:
        assert get_preset("a100", **{field: value}).lora_rank is None
    else:
        with pytest.raises(ValueError, match=message):
            get_preset("a100", **{field: value})


def _module(tmp_path: Path, name: str, source: str) -> str:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    return name


@pytest.mark.parametrize("module, source, target, message", [
    ("rw_list", "LIST = [1, 2]\n", "LIST", "'rw_list' has a list, not a function, named 'LIST'"),
    ("rw_raises", "raise RuntimeError('no GPU here')\n", "f", "importing 'rw_raises' failed with RuntimeError: no GPU"),
    ("rw_syntax", "def f(:\n", "f", "importing 'rw_syntax' failed with SyntaxError"),
    ("rw_exits", "import sys\nsys.exit(3)\n", "f", "importing 'rw_exits' failed with SystemExit: 3"),
    ("rw_signature", "def f(x):\n    return [1.0]\n", "f", "reward f cannot take completions=..."),
    ("rw_strings", "def f(completions, **kw):\n    return ['1'] * len(completions)\n", "f",
     "reward f returned ['1', '1'] for 2 completions"),
    ("rw_short", "def f(completions, **kw):\n    return [1.0]\n", "f", "reward f returned [1.0] for 2 completions"),
    ("rw_bug", "def f(completions, **kw):\n    return [1 / 0]\n", "f", "reward f raised ZeroDivisionError"),
])
def test_a_users_reward_module_is_checked_before_anything_loads(module, source, target, message, tmp_path,
                                                                monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(tmp_path))
    _module(tmp_path, module, source)
    code = main(["train", "--preset", "cpu-tiny", "--run-dir", str(tmp_path / "run"), "--cache-dir",
                 str(tmp_path / "cache"), "--rewards", f"{module}:{target}"])
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert "Traceback" not in err and not (tmp_path / "cache").exists()  # no model was built


@pytest.mark.parametrize("args, message", [
    (["train", "--name", "x"], "name is the recipe's own name"),
    (["train", "--extra", "5"], "recipe key --extra is gone: write its GRPOConfig keys themselves"),
    (["train", "--seed", "None"], "recipe key seed: invalid int value: 'None'"),
    (["train", "--learning_rat", "1e-5"], "unknown recipe key --learning_rat (did you mean --learning_rate?)"),
    (["train", "--learning-rat", "1e-5"], "unknown recipe key --learning_rat (did you mean --learning_rate?)"),
    (["train", "--rewards", ":"], "write module:function"),
    (["train", "--optim", "bogus"], "recipe key optim: invalid choice: 'bogus' (choose from 'adamw_torch'"),
    (["train", "--lr_scheduler_type", "bogus"], "recipe key lr_scheduler_type: invalid choice: 'bogus'"),
    (["train", "--report_to", "bogus"], "report_to = 'bogus' is not a name"),
    (["train", "--lora_target_modules", "q_proj", "bogus"], "lora_target_modules holds ['bogus']"),
    (["train", "--model_name_or_path", "/nonexistent"], "neither an existing folder nor a Hub id"),
    (["train", "--temperature", "1e-320"], "temperature = 1e-320 cannot work"),
    (["train", "--seed", "99999999999999999999"], "seed = 99999999999999999999 cannot work"),
    (["train", "--use_unsloth", "true"], "tiny offline policy loads through transformers, never Unsloth"),
    (["eval", "--before", "--preset", "a100"], "use_unsloth needs an NVIDIA GPU"),
    (["eval", "--before", "--task", "math500"], "task 'math500' has none: give a model"),
    (["eval", "--samples", "4"], "--samples only applies to eval --before"),
    (["eval", "--task", "countdown", "--preset", "a100"], "--preset, --task only apply to eval --before"),
    (["demo", "--name", "../escape"], "must be one folder name"),
    (["demo", "--name", "/tmp/elsewhere"], "must be one folder name"),
])
def test_bad_arguments_are_refused_before_anything_loads(args, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if args[0] in ("train", "eval"):
        args = [*args, "--run-dir", str(tmp_path / "run")]
    if args[0] == "train" or "--before" in args:
        args += ["--cache-dir", str(tmp_path / "cache")]
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert not (tmp_path / "cache").exists() and not (tmp_path / "runs").exists()


def test_the_unsloth_route_on_a_cpu_is_refused_not_recorded(monkeypatch, tmp_path):
    from grpo_kit.runs.spec import RunSpec

    monkeypatch.delenv("UNSLOTH_ALLOW_CPU", raising=False)
    (tmp_path / "model").mkdir()
    with pytest.raises(ValueError, match="use_unsloth needs an NVIDIA GPU"):
        RunSpec.resolve("a100", model=tmp_path / "model", run_dir=tmp_path / "run")


# --- 6. rewards: None is "cannot judge"; NaN, inf, wrong lengths and types never crash a run -----------------------


def test_a_guarded_reward_turns_what_trl_cannot_use_into_none_with_a_warning(caplog):
    def odd(completions, **kwargs):
        return [1, None, math.nan, -math.inf, "0.5", True]

    with caplog.at_level("WARNING", logger="grpo_kit"):
        values = guarded(odd)(completions=["a"] * 6)
    assert values == [1.0, None, None, None, None, 1.0]
    assert "reward odd: returned nan for completion 2" in caplog.text and "completion 3" in caplog.text
    assert guarded(odd).__name__ == "odd"

    def short(completions, **kwargs):
        return [1.0]

    with caplog.at_level("WARNING", logger="grpo_kit"):
        assert guarded(short)(completions=["a", "b"]) == [None, None]
    assert "returned 1 for 2 completions" in caplog.text


def test_the_probe_calls_each_reward_as_trl_does():
    rows = [GSM8K.load("train")[i] for i in range(2)]
    probe(GSM8K.reward_set(), rows, ["<answer>1</answer>"] * 2)  # the built-ins pass

    def broken(prompts, completions, answer, **kwargs):
        return [float(a) for a in answer] + [0.0]

    with pytest.raises(ValueError, match="reward broken returned"):
        probe(RewardSet([broken]), rows, ["x", "y"])


# --- 3, 8. caches and run files: trusted only when whole; damage named with what to do ----------------------------


def test_a_warm_start_cache_torn_while_saving_is_not_trusted(tmp_path):
    tiny = TinyPolicy(GSM8K, WarmStart(steps=1), cache_dir=str(tmp_path))
    tiny.folder.mkdir(parents=True)
    (tiny.folder / "config.json").write_text("")  # killed while saving
    assert not tiny.cached


@pytest.mark.parametrize("name, content, message", [
    ("eval_settings.json", '{"task": "gsm8k", "sl', "eval_settings.json is damaged"),
    ("eval_settings.json", '{"task": "gsm8k"}', "is damaged or was edited (no route"),
    ("train_settings.json", "[]", "train_settings.json is damaged or was edited"),
])
def test_damaged_settings_name_the_file_and_what_to_rerun(name, content, message, tmp_path, capsys):
    run = RunFolder(tmp_path / "run")
    good = {"eval_settings.json": {"task": "gsm8k", "slice": {"n": 4}, "seed": 0, "max_new_tokens": 8, "samples": 0,
                                   "temperature": 0.7, "preset": "cpu-tiny", "route": "transformers",
                                   "base_model": "m", "system_prompt": "s"},
            "train_settings.json": {"identity": {}, "base_model": "m", "task": "gsm8k", "system_prompt": "s"}}
    for file, data in good.items():
        (run.path / file).write_text(json.dumps(data))
    (run.path / name).write_text(content)
    assert main(["eval", "--run-dir", str(run.path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "run " in err and "Traceback" not in err


def test_eval_of_a_training_that_did_not_finish_says_so(tmp_path, capsys):
    run = RunFolder(tmp_path / "run")
    settings = {"task": "gsm8k", "slice": {"n": 4}, "seed": 0, "max_new_tokens": 8, "samples": 0, "temperature": 0.7,
                "preset": "cpu-tiny", "route": "transformers", "base_model": "m", "system_prompt": "s"}
    write_json(run.eval_settings, settings)
    write_json(run.train_settings, {"identity": {}, "base_model": "m", "task": "gsm8k", "system_prompt": "s"})
    (run.model).mkdir()
    (run.model / "config.json").write_text("")
    assert main(["eval", "--run-dir", str(run.path)]) == 2
    assert "training in" in (err := capsys.readouterr().err) and "has not finished" in err and "--resume" in err


def test_a_held_out_record_damaged_by_hand_is_measured_again(tmp_path, caplog):
    from grpo_kit.training.callbacks import HeldOutEval

    run = RunFolder(tmp_path)
    run.heldout.mkdir()
    run.heldout_record(4).write_text('{"id": "a", "comp')
    callback = HeldOutEval.__new__(HeldOutEval)
    callback.records, callback.task = run, GSM8K
    with caplog.at_level("WARNING", logger="grpo_kit"):
        assert callback._earlier_result(4) is None
    assert "evaluating step 4 again" in caplog.text and not run.heldout_record(4).exists()


# --- 12. Countdown reads only plain decimals ----------------------------------------------------------------------


@pytest.mark.parametrize("text", ["0xa + 1", "0o12", "1_0 + 2", "1e1", "2j"])
def test_countdown_refuses_numbers_python_would_read_another_way(text):
    with pytest.raises(ValueError, match="plain decimal numbers"):
        safe_eval(text)


def test_a_reader_names_a_mistyped_run_folder_instead_of_creating_it(tmp_path):
    """Notebook 04 opens its run folder with RunFolder.existing: a typo is named, and no empty folder is left."""
    with pytest.raises(FileNotFoundError, match="no run folder at .*typo"):
        RunFolder.existing(tmp_path / "typo")
    assert not (tmp_path / "typo").exists()
    import inspect

    from grpo_kit import notebook

    assert "open_run(run_dir)" in (ROOT / "notebooks" / "04_post_training_eval.ipynb").read_text()
    assert "RunFolder.existing(resolve_run_dir(run_dir, use_drive))" in inspect.getsource(notebook.open_run)
    with pytest.raises(FileNotFoundError, match="no run folder at .*typo"):
        notebook.open_run(str(tmp_path / "typo"), use_drive=False)
    assert not (tmp_path / "typo").exists()


def test_an_edited_finished_step_is_refused_not_reported(tmp_path, capsys):
    """Finished.json's step edited to 999 put "after training step 999" into report.md and "999
    steps" into the model card of a 3-step run."""
    from grpo_kit.runs.folder import RunFolder

    run = RunFolder(tmp_path / "run")
    run.model.mkdir()
    (run.model / "model.safetensors").write_text("weights")
    run.train_settings.write_text("{}")
    run.mark_finished(3)
    assert run.finished_step() == 3
    record = json.loads(run.finished.read_text())
    run.finished.write_text(json.dumps({**record, "step": 999}))
    with pytest.raises(ValueError, match=r"finished.json was edited \(its step, 999, is not the step training "
                                         "recorded there\\)"):
        run.finished_step()
    assert main(["export", str(run.path)]) == 2
    err = capsys.readouterr().err
    assert "finished.json was edited" in err and len(err.strip().splitlines()) == 1


def test_an_edited_baseline_record_is_refused_by_every_reader_naming_the_file(tmp_path, capsys):
    """Case 3: strict/flexible flags of baseline.jsonl set to true made the report say "Strict accuracy 1.000 ->
    0.000, right->wrong 10"; trained.jsonl and finished.json were checked, the baseline was not."""
    from tests.viewer_run import write_run

    run = write_run(tmp_path / "run", n=12, steps=1, samples=2)
    (tmp_path / "out").mkdir()
    readers = {"view": ["view", "--trust-task-code", str(run), "--out", str(tmp_path / "out" / "v.html")],
               "compare": ["compare", "--trust-task-code", str(run), "--out", str(tmp_path / "out" / "cmp")],
               "reward-check": ["reward-check", str(run)]}
    for args in readers.values():
        assert main(args) == 0
    capsys.readouterr()
    for name, field in (("baseline.jsonl", "strict_correct"), ("baseline_sampled.jsonl", "flexible_correct")):
        path = run / name
        kept = path.read_text(encoding="utf-8")
        lines = [json.loads(line) for line in kept.splitlines()]
        path.write_text("".join(json.dumps({**r, field: True}) + "\n" for r in lines), encoding="utf-8")
        # the greedy records make the tables; the sampled ones reward-check's (view shows its refusal in the page)
        for command in ("view", "compare") if name == "baseline.jsonl" else ("reward-check",):
            assert main(readers[command]) == 2, command
            err = capsys.readouterr().err
            assert err == (f"error: {path} is not the file the baseline wrote (its SHA-256 differs from the one "
                           "eval_settings.json records: it was edited or replaced), so no table reads it: restore "
                           "it, or measure the baseline again in a new run folder (02_baseline_eval (or python -m "
                           "grpo_kit eval --before))\n"), command
        path.write_text(kept, encoding="utf-8")
        assert main(readers["reward-check"]) == 0


#: A Python that runs ``python -m grpo_kit ARGS`` for each request read from its standard input (one JSON line:
#: ``args``, ``cwd``), each command's standard output and error captured on its file descriptors 1 and 2, as a
#: process of its own would have them, and answers one JSON line on the standard output it started with.
_COMMANDS = textwrap.dedent("""
    import json, os, sys, tempfile, traceback

    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what is written between commands goes to the log, never among the replies
    from grpo_kit.cli import main

    for line in sys.stdin:
        request = json.loads(line)
        os.chdir(request["cwd"])
        sys.stdout.flush(), sys.stderr.flush()
        files, kept = [tempfile.TemporaryFile() for _ in "12"], [os.dup(1), os.dup(2)]
        for fd, file in zip((1, 2), files):
            os.dup2(file.fileno(), fd)
        try:
            code = main(request["args"])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            for fd, saved in zip((1, 2), kept):
                os.dup2(saved, fd)
                os.close(saved)
        texts = []
        for file in files:
            file.seek(0)
            texts.append(file.read().decode())
            file.close()
        replies.write(json.dumps({"returncode": code, "stdout": texts[0], "stderr": texts[1]}) + "\\n")
        replies.flush()
""")


class _AnotherUser:
    """One Python running ``python -m grpo_kit`` commands (:data:`_COMMANDS`) as a user who owns nothing here: as
    root (who may write anywhere) through util-linux's setpriv as ``nobody``, else as this user. One process for every
    command of this file's read-only tests, where each command in a Python of its own cost about 6 CPU seconds of
    imports; its ``HOME`` and ``MPLCONFIGDIR`` lie in a folder of root's that ``nobody`` cannot write, as the
    tests' folders are."""

    def __init__(self, home: Path) -> None:
        prefix = []
        if os.geteuid() == 0:
            if shutil.which("setpriv") is None:
                pytest.skip("root, and no setpriv to read a folder as another user")
            prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
            probe = subprocess.run([*prefix, sys.executable, "-c", "pass"], capture_output=True, text=True,
                                   timeout=60)
            if probe.returncode != 0:  # e.g. a shared-library Python whose libpython lies in root's own home
                pytest.skip(f"this Python does not start as another user: {probe.stderr.strip()[-300:]}")
        self.log = (home.parent / f"{home.name}.log").open("w+")
        self.process = subprocess.Popen([*prefix, sys.executable, "-c", _COMMANDS], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self.log, text=True, cwd=home,
                                        env={**os.environ, "HOME": str(home), "MPLCONFIGDIR": str(home / "mpl")})

    def __call__(self, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
        """``python -m grpo_kit ARGS`` run in ``cwd``: its exit status, standard output and error."""
        self.process.stdin.write(json.dumps({"args": args, "cwd": str(cwd)}) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], 300)
        reply = self.process.stdout.readline() if ready else ""
        if not reply:
            self.log.seek(0)
            raise AssertionError(f"the commands' Python gave no answer to {args}:\n{self.log.read()[-3000:]}")
        done = json.loads(reply)
        return subprocess.CompletedProcess(args, done["returncode"], done["stdout"], done["stderr"])

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)
        self.log.close()


@pytest.fixture(scope="module")
def as_another_user():
    """:class:`_AnotherUser`, one for this file's tests."""
    import tempfile

    home = Path(tempfile.mkdtemp(prefix="grpo-kit-another-user-"))
    home.chmod(0o755)
    try:
        user = _AnotherUser(home)
        yield user
        user.close()
    finally:
        shutil.rmtree(home)
        (home.parent / f"{home.name}.log").unlink(missing_ok=True)


def test_commands_that_only_read_a_run_folder_work_on_a_read_only_one(as_another_user):
    """Cases 14 and 18 of issue 44: a read-only run folder blocked reward-check, view --out and compare --out
    ("cannot write the run folder ... choose --run-dir", an option none of them takes); every file the kit wrote was
    mode 0600 whatever the umask, so another user could not read a shared run folder at all."""
    import tempfile

    from tests.viewer_run import write_run

    root = Path(tempfile.mkdtemp(prefix="grpo-kit-read-only-"))
    try:
        mask = os.umask(0o022)
        try:
            run = write_run(root / "run", n=12, steps=1, samples=2)
        finally:
            os.umask(mask)
        modes = {p.name: p.stat().st_mode & 0o777 for p in run.iterdir() if p.is_file()}
        assert modes["eval_settings.json"] == modes["finished.json"] == 0o644, modes  # written whole, umask kept
        for path in [run, *run.rglob("*")]:
            path.chmod(path.stat().st_mode & ~0o222)
        root.chmod(0o755)
        (root / "out").mkdir(mode=0o777)
        (root / "out").chmod(0o1777)
        for args in (["reward-check", "run"], ["view", "run", "--out", "out/view.html", "--trust-task-code"],
                     ["compare", "run", "--out", "out/cmp", "--trust-task-code"]):
            done = as_another_user(args, root)
            assert done.returncode == 0, (args, done.stderr)
        assert (root / "out" / "view.html").is_file() and (root / "out" / "cmp" / "runs_comparison.md").is_file()
        done = as_another_user(["view", "run", "--trust-task-code"], root)
        assert done.returncode == 2 and done.stderr == (f"error: cannot write run/view.html ({run} is read-only to "
                                                        "you): give --out a file where you can write, e.g. --out "
                                                        "view.html\n")
        assert sorted(p.name for p in run.iterdir()) == sorted([*modes, "groups", "model"])  # nothing was written
    finally:
        for path in [root, *root.rglob("*")]:
            path.chmod(0o755)
        shutil.rmtree(root)


# --- issue 57: run folders of their own, the lock's holder named first, a read-only folder's report -----------------


def _a_run(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "train_settings.json").write_text("{}")
    (folder / "model").mkdir()
    return folder


@pytest.mark.parametrize("command", [["eval", "--before"], ["train", "--preset", "cpu-tiny"]])
def test_a_run_folder_is_never_empty_nor_inside_another_run(command, tmp_path, monkeypatch, capsys):
    """S3: `eval --before --run-dir RUN/model/sub` wrote into another run's model/, whose compare and export then
    refused ("model/sub/.lock was added after training"); S4: `--run-dir ''` wrote the run's files loose into the
    working folder."""
    monkeypatch.chdir(tmp_path)
    run = _a_run(tmp_path / "run")
    assert main([*command, "--run-dir", "run/model/sub"]) == 2
    assert capsys.readouterr().err == (f"error: run/model/sub lies inside the run folder {run} (in its model/), whose "
                                       "files that run's steps write and check: choose a folder outside it, e.g. "
                                       f"--run-dir {tmp_path / 'run-2'}\n")
    assert main([*command, "--run-dir", ""]) == 2
    assert capsys.readouterr().err == ("error: the run folder is empty (--run-dir ''; notebooks: run_dir=''): name a "
                                       "folder of its own, e.g. --run-dir runs/my-run\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert sorted(p.name for p in run.iterdir()) == ["model", "train_settings.json"] and not any(run.glob("model/*"))


def test_a_second_train_and_an_export_name_the_training_that_holds_the_folder_first(tmp_path, monkeypatch, capsys):
    """F2: a second `train` on a folder being trained was told to pass --resume (the lock's owner was named only
    then); `export` during that train said model/ was missing."""
    import grpo_kit.runs.spec

    run = _a_run(tmp_path / "run")
    (run / "model").rmdir()  # a training that has not saved its model yet
    monkeypatch.setattr(grpo_kit.runs.spec, "latest_complete", lambda folder: folder / "checkpoint-2")
    holder = _hold_lock(run)
    try:
        for args in (["train", "--preset", "cpu-tiny", "--run-dir", str(run)], ["export", str(run)]):
            assert main(args) == 2, args
            err = capsys.readouterr().err
            assert err.startswith(f"error: {run} is being written by process {holder.pid} on "), err
            assert "(train, since " in err and "--resume" not in err and "is missing" not in err, err
    finally:
        holder.kill()
        holder.wait()
    assert main(["export", str(run)]) == 2  # the training gone: what is missing is said again
    assert f"{run / 'model'} is missing" in capsys.readouterr().err


def test_a_read_only_run_folder_already_evaluated_shows_its_report(as_another_user):
    """F3: `eval` on a read-only folder already evaluated told the user to choose another --run-dir."""
    import tempfile

    from tests.viewer_run import write_run

    root = Path(tempfile.mkdtemp(prefix="grpo-kit-read-only-"))
    try:
        mask = os.umask(0o022)
        try:
            run = write_run(root / "run", n=12, steps=1, samples=2)
            (run / "report.md").write_text("# grpo_kit: run\n\n| metric | before | after |\n\n## Diagnostics\n\nx\n")
        finally:
            os.umask(mask)
        for path in [run, *run.rglob("*")]:
            path.chmod(path.stat().st_mode & ~0o222)
        root.chmod(0o755)
        done = as_another_user(["eval", "--run-dir", "run"], root)
        assert done.returncode == 0, done.stderr
        assert done.stdout == "# grpo_kit: run\n\n| metric | before | after |\n\n"
        assert f"{Path('run')} is read-only, and its evaluation after training is of the model it holds now" in \
            done.stderr
        (run / "evaluated.json").chmod(0o644)
        (run / "evaluated.json").write_text("{}")  # not current: measured again, which needs a folder it can write
        done = as_another_user(["eval", "--run-dir", "run"], root)
        assert done.returncode == 2 and "cannot write the run folder run" in done.stderr, done.stderr
    finally:
        for path in [root, *root.rglob("*")]:
            path.chmod(0o755)
        shutil.rmtree(root)


def test_a_first_baseline_killed_before_it_wrote_anything_leaves_a_folder_the_next_one_takes(tmp_path, capsys):
    """SIGKILL during `eval --before` (the model loading) left a run folder holding only its lock: the next first
    baseline into it is measured as into a new folder, and one refused removes it, as it removes a folder it
    created."""
    run = tmp_path / "run"
    holder = _hold_lock(run)
    holder.kill()  # SIGKILL: what a killed eval --before leaves
    holder.wait()
    assert sorted(p.name for p in run.iterdir()) == [".lock", ".lock-holder.json"]
    assert main(["eval", "--before", "--run-dir", str(run), "--eval-size", "100000"]) == 2
    assert "--eval-size 100000" in capsys.readouterr().err and not run.exists()


def test_an_export_refused_for_a_full_disk_leaves_nothing_beside_out(tmp_path):
    """`.exp.lock` was left beside --out after a full-disk refusal: a lock beside the folder it guards goes with its
    holder record when the folder was not made."""
    import errno

    from grpo_kit.runs.locks import hold_lock

    out = tmp_path / "exp"
    with pytest.raises(OSError), hold_lock(tmp_path / ".exp.lock", tmp_path / ".exp.lock-holder.json", out, "export"):
        raise OSError(errno.ENOSPC, "No space left on device")
    assert not list(tmp_path.iterdir())
    with hold_lock(tmp_path / ".exp.lock", tmp_path / ".exp.lock-holder.json", out, "export"):
        out.mkdir()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".exp.lock", "exp"]  # a made export keeps its lock file
