"""Recipes are TRL's own config files: read by TRL's parser, any GRPOConfig key reaching the trainer's config, a
misspelled key refused in one line, a `trl grpo` recipe taken as it is, and the shipped presets being such files."""

from __future__ import annotations

import logging

import pytest
import yaml

from grpo_kit.cli import main
from grpo_kit.tasks import get_task
from grpo_kit.training.presets import PRESETS, RECIPES_DIR, get_preset, recipe_yaml
from grpo_kit.training.trainer import build_grpo_config

GSM8K = get_task("gsm8k")

#: A recipe as `trl grpo --config` takes it (open-r1's recipes/*/config_*.yaml are of this form), with a tiny-policy
#: model so that it also builds on a CPU.
TRL_RECIPE = """\
# Model arguments
model_name_or_path: null
dtype: float32
# Data training arguments
dataset_name: openai/gsm8k
dataset_config: main
reward_funcs:
- accuracy_reward
- think_format_reward
# GRPO trainer config
use_cpu: true
bf16: false
learning_rate: 3.0e-05
lr_scheduler_type: cosine
warmup_steps: 0.1
num_generations: 8
per_device_train_batch_size: 8
max_completion_length: 64
max_steps: 5
save_steps: 5
seed: 7
"""


def test_every_shipped_preset_is_a_recipe_file_with_trls_keys():
    """Each preset is grpo_kit/recipes/NAME.yaml; its keys are TRL's (read back by the same parser unchanged)."""
    assert sorted(PRESETS) == sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))
    for name, recipe in PRESETS.items():
        assert recipe.name == name
        assert get_preset(RECIPES_DIR / f"{name}.yaml") == recipe


@pytest.mark.parametrize("argv, key, value", [
    (["--top_entropy_quantile", "0.2"], "top_entropy_quantile", 0.2),
    (["--vllm_importance_sampling_mode", "token_truncate"], "vllm_importance_sampling_mode", "token_truncate"),
    (["--num_generations_eval", "4"], "num_generations_eval", 4),
])
def test_any_grpo_config_key_reaches_trls_config_with_no_kit_change(tmp_path, argv, key, value):
    """Keys the kit never names, given in TRL's command-line form, are typed by TRL's parser and reach GRPOConfig."""
    recipe = get_preset("cpu-tiny", argv=argv)
    assert getattr(recipe, key) == value
    assert getattr(build_grpo_config(recipe, str(tmp_path), GSM8K.reward_set()), key) == value


def test_a_recipe_file_sets_any_grpo_config_key(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({**yaml.safe_load((RECIPES_DIR / "cpu-tiny.yaml").read_text()),
                                    "top_entropy_quantile": 0.5, "vllm_importance_sampling_mode": "token_mask"}))
    config = build_grpo_config(get_preset(path), str(tmp_path), GSM8K.reward_set())
    assert (config.top_entropy_quantile, config.vllm_importance_sampling_mode) == (0.5, "token_mask")


@pytest.mark.parametrize("text, message", [
    ("learning_rat: 1.0e-5\n", "unknown recipe key 'learning_rat' (did you mean learning_rate?)"),
    ("num_generation: 4\n", "unknown recipe key 'num_generation' (did you mean num_generations?)"),
    ("extra: {top_p: 0.9}\n", "recipe key 'extra' is gone: write its GRPOConfig keys themselves"),
    ("- a list\n", "is not a YAML mapping"),
    ("max_steps: ten\n", "recipe key max_steps: invalid int value: 'ten'"),
])
def test_a_bad_recipe_file_is_refused_in_one_line(tmp_path, capsys, text, message):
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(ValueError) as refused:
        get_preset(tmp_path / "bad.yaml")
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert main(["plan", "--config", str(tmp_path / "bad.yaml")]) == 2
    assert message in capsys.readouterr().err


def test_a_trl_grpo_recipe_runs_unchanged_and_its_data_keys_are_answered(tmp_path, caplog):
    """The keys `trl grpo` reads for its data set and rewards get one line each naming the kit's option; the rest
    builds TRL's config as written."""
    (tmp_path / "trl.yaml").write_text(TRL_RECIPE)
    with caplog.at_level(logging.WARNING, logger="grpo_kit.training.presets"):
        recipe = get_preset(tmp_path / "trl.yaml")
    lines = [r.getMessage() for r in caplog.records]
    assert any("dataset_name is set aside; grpo_kit takes it from --task" in line for line in lines)
    assert any("reward_funcs is set aside; grpo_kit takes it from --rewards" in line for line in lines)
    config = build_grpo_config(recipe, str(tmp_path / "out"), GSM8K.reward_set())
    assert (config.seed, config.max_steps, config.warmup_steps, config.lr_scheduler_type) == (7, 5, 0.1, "cosine")
    assert recipe.algorithm == "trl_default" and recipe.model is None


def test_the_cli_takes_a_recipe_file_and_trl_form_overrides(tmp_path, capsys):
    (tmp_path / "trl.yaml").write_text(TRL_RECIPE)
    assert main(["plan", "--config", str(tmp_path / "trl.yaml"), "--json", "--top_entropy_quantile", "0.3"]) == 0
    out = capsys.readouterr().out
    assert '"top_entropy_quantile": 0.3' in out and '"seed": 7' in out
    assert main(["plan", "--config", str(tmp_path / "trl.yaml"), "--preset", "cpu-tiny"]) == 2
    assert "--config and --preset both name the recipe" in capsys.readouterr().err
    assert main(["presets", "--learning_rate", "1"]) == 2  # only the commands that take a recipe take its keys


def test_the_resolved_recipe_reads_back_as_the_same_recipe(tmp_path):
    """recipe.yaml (what a run folder keeps, and what a resume reads) holds the overrides and reads back equal."""
    recipe = get_preset("a100", argv=["--learning_rate", "1e-5"], lora_rank=16, algorithm="dapo")
    (tmp_path / "recipe.yaml").write_text(recipe_yaml(recipe))
    again = get_preset(tmp_path / "recipe.yaml")
    assert again == recipe and again.name == "a100"
    assert (again.learning_rate, again.lora_rank, again.algorithm, again.epsilon_high) == (1e-5, 16, "dapo", 0.28)


def test_a_recipes_env_block_is_said_in_the_runs_first_lines(tmp_path, monkeypatch, capsys, kit_log_on_stderr):
    """Case 2: a recipe's env: block set HF_HUB_OFFLINE and other variables without a word."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("GRPO_KIT_TEST_VARIABLE", raising=False)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("env:\n  HF_HUB_OFFLINE: '0'\n  GRPO_KIT_TEST_VARIABLE: 5\nmax_steps: 3\n", encoding="utf-8")
    main(["plan", "--config", str(recipe)])  # (2: this recipe wants a GPU)
    first = capsys.readouterr().err.splitlines()[0]
    assert first == (f"[grpo_kit] WARNING: recipe {recipe} sets environment variables for this process (its env: "
                     "block): HF_HUB_OFFLINE=0 (was 1), GRPO_KIT_TEST_VARIABLE=5")
    import os

    assert os.environ["GRPO_KIT_TEST_VARIABLE"] == "5"
    recipe.write_text("env: [HF_HUB_OFFLINE]\n", encoding="utf-8")
    with pytest.raises(ValueError, match="env must map environment variable names to values"):
        get_preset(recipe)
