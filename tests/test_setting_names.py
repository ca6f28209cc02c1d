"""Every setting the kit's messages name is one a user can give: a command's option, a recipe key as TRL's parser
reads it, a notebook parameter or a task file's key; none names a spelling the kit no longer takes."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from grpo_kit.cli import _GONE_OPTIONS, _parser
from grpo_kit.tasks.task_file import EXTRAS, KEYS
from grpo_kit.training.checks import RULES
from grpo_kit.training.presets import _defaults
from grpo_kit.training.recipe_keys import RENAMED, STALE

ROOT = Path(__file__).resolve().parents[1]
#: ``--option`` in a string (not inside a word), as a message or a help text would write it.
OPTION = re.compile(r"(?<![\w-])--([a-z][a-z0-9_-]*[a-z0-9])")
#: ``key=value`` or ``key = value`` with a snake_case key, as a message tells a user to set something.
SETTING = re.compile(r"(?<![\w.{])([a-z][a-z0-9]*_[a-z0-9_]+) ?= ?(?=[\w'\"(\[-])")
#: Other programs whose own options a string may quote (a command the kit prints for the user to run).
OTHER_PROGRAMS = ("vllm", "pip", "hf download", "huggingface-cli", "convert_hf_to_gguf", "llama-quantize",
                  "nvidia-smi", "accelerate launch")


#: Calls whose text a user reads: the log's lines, ``plan``'s problems, printed lines, warnings, help texts.
SAYS = ("debug", "info", "warning", "error", "Problem", "print", "warn", "add_argument", "Rule")


def _strings(messages: bool = False) -> list[tuple[str, int, str]]:
    """Every string constant of the package that is not a docstring (``messages``: only those inside a ``raise`` or
    a call of :data:`SAYS`): ``(file, line, text)``."""
    found = []
    for path in sorted((ROOT / "grpo_kit").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        roots = [node for node in ast.walk(tree) if isinstance(node, ast.Raise) or isinstance(node, ast.Call) and (
            getattr(node.func, "attr", None) in SAYS or getattr(node.func, "id", None) in SAYS)] if messages else [tree]
        seen = {id(node): node for root in roots for node in ast.walk(root)
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings}
        found += [(path.relative_to(ROOT).as_posix(), node.lineno, node.value) for node in seen.values()]
    return found


def _options() -> set[str]:
    """Every option of every command, without its dashes."""
    commands = next(a for a in _parser()._actions if hasattr(a, "choices") and isinstance(a.choices, dict)).choices
    return {option[2:] for command in commands.values() for action in command._actions
            for option in action.option_strings}


def _notebook_parameters() -> set[str]:
    """The names the notebooks' parameters cells set (what papermill and a Colab user change), and the parameters of
    the notebooks' calls (``grpo_kit.notebook``)."""
    import inspect

    import grpo_kit.notebook

    names = {name for function in vars(grpo_kit.notebook).values() if inspect.isfunction(function)
             for name in inspect.signature(function).parameters}
    for notebook in (ROOT / "notebooks").glob("*.ipynb"):
        for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
            if "parameters" in cell.get("metadata", {}).get("tags", []):
                names |= {m.group(1) for m in re.finditer(r"^([a-z_][a-z0-9_]*) *=", "".join(cell["source"]), re.M)}
    return names


MESSAGES = _strings(messages=True)
#: vLLM's own argument, which the kit's vLLM backend takes under vLLM's name (``VLLMBackend(...,
#: gpu_memory_utilization=)``); a recipe's is ``vllm_gpu_memory_utilization``.
VLLMS_OWN = {("grpo_kit/policy/vllm.py", "gpu_memory_utilization")}
RECIPE_KEYS = set(_defaults())


def test_the_options_messages_name_exist():
    """``--x`` in a message is a command's option or a recipe key (dashes or underscores), unless the string quotes
    another program's command; the only gone ones named are in the table that refuses them."""
    known, wrong = _options() | RECIPE_KEYS | {k.replace("_", "-") for k in RECIPE_KEYS}, []
    for file, line, text in MESSAGES:
        if any(program in text for program in OTHER_PROGRAMS):
            continue
        for name in OPTION.findall(text):
            if name not in known and not (file == "grpo_kit/cli.py" and f"--{name}" in _GONE_OPTIONS):
                wrong.append(f"{file}:{line}: --{name}")
    assert not wrong, wrong


def test_the_settings_messages_name_are_keys_a_user_can_give():
    """``key=value`` in a message names a recipe key, a notebook parameter or a task file's key."""
    known = RECIPE_KEYS | _notebook_parameters() | set(KEYS) | set(EXTRAS)
    wrong = [f"{file}:{line}: {name}" for file, line, text in MESSAGES for name in SETTING.findall(text)
             if name not in known and not any(program in text for program in OTHER_PROGRAMS)]
    assert not wrong, wrong


def test_no_message_names_a_recipe_key_that_is_gone():
    """The kit's old short names and the keys TRL removed appear only where they are read or refused."""
    gone = re.compile(r"\b(" + "|".join(k for k in {*STALE, *RENAMED} if "_" in k) + r")\b")
    wrong = [f"{file}:{line}: {m}" for file, line, text in MESSAGES for m in gone.findall(text)
             if file != "grpo_kit/training/recipe_keys.py" and (file, m) not in VLLMS_OWN]
    assert not wrong, wrong


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.field)
def test_every_range_the_checks_name_is_a_recipe_key(rule):
    assert rule.field in RECIPE_KEYS
