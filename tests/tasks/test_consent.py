"""Consent holds whatever the name (issue 57, S1 and S2): without --trust-task-code a task file or a run folder's
record reaches only the names the kit itself defines for that role, nothing else is imported, called or handed a
shell; a printed command that adds --trust-task-code names the Python it lets run and the file it comes from."""

from __future__ import annotations

import json
import shlex

import pytest

from grpo_kit.cli import main
from grpo_kit.runs.folder import RunFolder
from grpo_kit.system.files import read_yaml
from grpo_kit.tasks import BUILTIN_TASKS
from grpo_kit.tasks.reward_registry import BUILTIN_REWARDS, recorded_paths
from grpo_kit.tasks.task_file import CODE_KEYS, kit_code, load_task
from grpo_kit.tasks.user_code import import_named

#: Names under grpo_kit that walk a module's globals to Python the kit never meant a task file to reach (S1).
HOSTILE = ("grpo_kit.tasks.user_code:importlib.import_module",  # imported test.py from the working folder
           "grpo_kit.policy.devices:os.system",  # handed the split's name to a shell
           "grpo_kit.tasks.gsm8k:load_gsm8k.__globals__",
           "grpo_kit.tasks.countdown:RULES.__class__")


@pytest.mark.parametrize("ref", HOSTILE)
def test_a_name_under_grpo_kit_is_not_the_kits_consent(ref, tmp_path, monkeypatch, capsys):
    """S1: the consent check looked only at the module of module:name; `loader: grpo_kit.tasks.user_code:
    importlib.import_module` with `splits: [test]` imported test.py from the working folder, and `loader:
    grpo_kit.policy.devices:os.system` ran the split's name as a shell command."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "test.py").write_text("open('imported.marker', 'w').close()\n", encoding="utf-8")
    (tmp_path / "task.yaml").write_text(f"loader: {ref}\nsplits: [test]\nanswer_type: text\n", encoding="utf-8")
    for command in (["eval", "--before", "--task", "task.yaml", "--run-dir", "run"],
                    ["train", "--task", "task.yaml", "--run-dir", "run"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"error: {tmp_path / 'task.yaml'} names Python that loading "
                                                       f"it would import and run (loader: {ref}; ")
        assert "nothing was imported" in err and "--trust-task-code" in err, err
    assert not (tmp_path / "imported.marker").exists() and not (tmp_path / "run").exists()


def test_the_kits_own_names_are_exactly_its_task_files_and_each_is_what_its_key_takes(tmp_path):
    """The registry is read from the kit's own task files, so a new task of the kit's is one more file; every entry
    imports and is of its key's kind, and a user's task file may name them without trust."""
    registry = kit_code()
    assert set(registry) == set(CODE_KEYS) and all(registry[key] for key in CODE_KEYS)
    for path in BUILTIN_TASKS.values():
        data = read_yaml(path, "a task file")
        assert all(data[key] in registry[key] for key in CODE_KEYS if key in data)
    for key, refs in registry.items():
        for ref in refs:
            found = import_named(ref, key)
            assert isinstance(found, dict) if key == "rules" else callable(found), ref
            assert ref.startswith("grpo_kit.tasks.") and "." not in ref.partition(":")[2], ref
    mine = tmp_path / "mine.yaml"
    mine.write_text("loader: grpo_kit.tasks.sum3:load_sum3\nrules: grpo_kit.tasks.sum3:RULES\n"
                    "demonstration: grpo_kit.tasks.sum3:demonstration\nanswer_type: number\n", encoding="utf-8")
    assert load_task(mine).extras["demonstration"] is not None  # no trust asked for the kit's own
    swapped = tmp_path / "swapped.yaml"  # the kit's own Python, but not what the kit gives that key
    swapped.write_text("loader: grpo_kit.tasks.sum3:demonstration\nanswer_type: number\n", encoding="utf-8")
    with pytest.raises(ValueError, match="names Python that loading it would import and run"):
        load_task(swapped)


def test_a_recorded_reward_reaches_only_a_built_in_rewards_own_function():
    """S1 for a run folder's record: reward_functions naming a kit module's globals was imported without trust."""
    builtin = BUILTIN_REWARDS["correctness_reward_func"]
    own = f"{builtin.__module__}:{builtin.__qualname__}"
    assert recorded_paths({"reward_functions": {"c": own}}, "train_settings.json") == {"c": own}
    for ref in ("grpo_kit.policy.devices:os.system", "grpo_kit.tasks.rewards:re.compile"):
        with pytest.raises(ValueError, match=f"train_settings.json names Python that reading its rewards would import "
                                             f"and run \\(reward c: {ref}"):
            recorded_paths({"reward_functions": {"c": ref}}, "train_settings.json")
        assert recorded_paths({"reward_functions": {"c": ref}}, "s", trust_remote_code=True) == {"c": ref}


def test_a_printed_command_names_the_code_trust_would_run_and_its_file(tmp_path, monkeypatch, capsys):
    """S2: a copied run whose train_settings.json names evilmod:fn, finished.json removed: export and eval answered
    "run python -m grpo_kit train --run-dir ... --resume --trust-task-code to finish it", and pasting it imported
    evilmod.py; the line named neither the code nor the file."""
    from tests.viewer_run import write_run

    monkeypatch.chdir(tmp_path)
    (tmp_path / "evilmod.py").write_text("open('evil.marker', 'w').close()\ndef fn(**kwargs):\n    return []\n",
                                         encoding="utf-8")
    run = write_run(tmp_path / "copied run", n=8, steps=1, samples=2)
    settings = json.loads((run / "train_settings.json").read_text())
    settings.update(reward_functions={"fn": "evilmod:fn"}, base_model="tiny", task="gsm8k", system_prompt="S")
    (run / "train_settings.json").write_text(json.dumps(settings))
    (run / "finished.json").unlink()
    named = f"(read first the Python it runs: reward fn: evilmod:fn; evilmod: {tmp_path / 'evilmod.py'})"
    resume = f"python -m grpo_kit train --run-dir {shlex.quote(str(run))} --resume --trust-task-code {named}"
    assert RunFolder(run, write=False).command("train --resume") == resume
    for args in (["export", str(run)], ["eval", "--run-dir", str(run), "--trust-task-code"]):
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert resume in err and err.count("\n") == 1, err
    assert not (tmp_path / "evil.marker").exists()
    # a task file's code: the line names the file's key, its module and where it would be imported from
    task = tmp_path / "rows.yaml"
    task.write_text("loader: my_rows:load\nanswer_type: number\n", encoding="utf-8")
    settings.update(reward_functions={})
    (run / "train_settings.json").write_text(json.dumps(settings))
    (run / "eval_settings.json").write_text(json.dumps({**json.loads((run / "eval_settings.json").read_text()),
                                                        "task": str(task)}))
    assert RunFolder(run, write=False).command("eval").endswith(
        f"--trust-task-code (read first the Python it runs: task file {task}'s loader: my_rows:load; my_rows: not "
        "found from here)")
    (run / "eval_settings.json").write_text(json.dumps({**json.loads((run / "eval_settings.json").read_text()),
                                                        "task": "gsm8k"}))
    assert "--trust-task-code" not in RunFolder(run, write=False).command("eval")  # built-ins only: no trust asked
