"""The command line's grammar (grpo_kit.cli_parser) as python -m grpo_kit parses it: every command listed, helped and
answered by its own function, a bad number refused in argparse's one line, no abbreviation taken."""

from __future__ import annotations

import argparse

import pytest

import grpo_kit.cli as cli
from grpo_kit.cli import main
from grpo_kit.cli_parser import COMMANDS, build_parser


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def test_help_lists_every_command_in_order_with_its_summary(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m grpo_kit [-h]\n") and "{" + ",".join(COMMANDS) + "}" in out
    assert " ".join(out.split()).count("python -m grpo_kit demo | train | eval") == 1  # cli's first paragraph
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("    ") and line.split()[0] in COMMANDS]
    assert listed == list(COMMANDS)
    letters = "".join(out.split())  # argparse wraps a summary at spaces and after hyphens
    assert all("".join(command.summary.split()) in letters for command in COMMANDS.values())


@pytest.mark.parametrize("name", COMMANDS)
def test_each_command_has_its_help_and_the_recipe_keys_only_where_it_takes_a_recipe(name, capsys):
    assert main([name, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python -m grpo_kit {name} [-h]")
    assert ("Any recipe key goes after these options in TRL's form" in out) == COMMANDS[name].takes_recipe
    assert ("--config FILE.yaml" in out) == COMMANDS[name].takes_recipe


def test_each_command_is_answered_by_its_function_in_cli():
    """The handler is looked up when the parser is built, so a test's monkeypatch of ``cli._train`` is what runs."""
    commands = _subparsers(cli._parser())
    assert list(commands) == list(COMMANDS)
    for name, parser in commands.items():
        assert parser.get_default("func") is getattr(cli, "_" + name.replace("-", "_")), name
        assert (parser.get_default("trl") == []) == COMMANDS[name].takes_recipe, name


def test_a_command_without_a_handler_is_a_key_error():
    with pytest.raises(KeyError, match="algorithms"):
        build_parser("d", {name: print for name in COMMANDS if name != "algorithms"})


@pytest.mark.parametrize(("argv", "says"), [
    (["demo", "--steps", "0"], "python -m grpo_kit demo: error: argument --steps: must be 1 or more, got 0"),
    (["demo", "--steps", "x"], "python -m grpo_kit demo: error: argument --steps: invalid int value: 'x'"),
    (["demo", "--xml-share", "1.5"],
     "python -m grpo_kit demo: error: argument --xml-share: must be in [0, 1], got 1.5"),
    (["eval", "--run-dir", "x", "--eval-fraction", "0"],
     "python -m grpo_kit eval: error: argument --eval-fraction: must be in (0, 1], got 0.0"),
    (["train", "--groups-per-step", "-1"],
     "python -m grpo_kit train: error: argument --groups-per-step: must be 0 or more, got -1"),
    (["demo", "--run-d", "x"], "python -m grpo_kit: error: unrecognized arguments: --run-d x"),  # no abbreviation
    (["train", "--config", "a.yaml", "--preset", "cpu-tiny"],
     "python -m grpo_kit train: error: argument --preset: not allowed with argument --config"),
])
def test_bad_input_is_argparses_one_line_and_exit_2(argv, says, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m grpo_kit") and err.endswith(says + "\n"), err
