"""Named GRPO variants: every preset states its algorithm, each variant reaches TRL's GRPOConfig, bad names and
combinations are refused before any model loads, and the run folder records what ran."""

from __future__ import annotations

import pytest

from grpo_kit.training.algorithms import ALGORITHM_FIELDS, ALGORITHMS, LOSS_TYPES, algorithm_settings, check_algorithm
from grpo_kit.training.presets import PRESETS, get_preset


def test_every_preset_names_its_algorithm_and_sets_every_field_of_it():
    for preset in PRESETS.values():
        bundle = ALGORITHMS[preset.algorithm].fields
        assert {k: getattr(preset, k) for k in ALGORITHM_FIELDS} == bundle, preset.name
        check_algorithm(preset)


def test_a100_runs_grpo_as_trl_0_15_ran_it_for_the_blog_posts_notebook():
    a100 = PRESETS["a100"]
    assert (a100.algorithm, a100.loss_type, a100.beta, a100.scale_rewards, a100.num_iterations) == \
        ("grpo", "grpo", 0.04, "group", 1)
    assert a100.use_bias_correction_kl is False  # trl 0.15's k3 KL, not reweighted by the ratio
    assert a100.temperature == 1.0 and a100.generation_kwargs == {"temperature": 0.9}


def test_trl_loss_types_are_the_ones_the_kit_accepts():
    """The installed trl's GRPOConfig documents the same losses (trl 1.16 here; tests/stack checks 1.15)."""
    import trl

    doc = trl.GRPOConfig.__doc__
    section = doc[doc.index("loss_type (`str`"):doc.index("mask_truncated_completions (`bool`")]
    documented = {line.strip().split("`")[1].strip('"') for line in section.splitlines()
                  if line.strip().startswith("- `\"")}
    assert documented == set(LOSS_TYPES)


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_each_variant_reaches_grpo_config(name):
    from grpo_kit.tasks import RewardSet
    from grpo_kit.training.trainer import grpo_config

    config = grpo_config(get_preset(get_preset("cpu-tiny"), algorithm=name), "/tmp/grpo_kit-test-algorithms",
                         RewardSet(["correctness_reward_func"]))
    for field, value in ALGORITHMS[name].fields.items():
        assert getattr(config, field) == value, (name, field)


def test_set_overrides_a_field_of_the_variant_and_the_record_says_so(tmp_path):
    from grpo_kit.runs.spec import RunSpec

    spec = RunSpec.resolve("cpu-tiny", "gsm8k", run_dir=tmp_path, algorithm="dapo", beta=0.01)
    assert spec.preset.loss_type == "dapo" and spec.preset.epsilon_high == 0.28 and spec.preset.beta == 0.01
    recorded = algorithm_settings(spec.preset)
    assert recorded["name"] == "dapo" and recorded["overridden"] == ["beta"]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"algorithm": "ppo"}, "unknown algorithm 'ppo'"),
    ({"loss_type": "gspo"}, "loss_type = 'gspo' is not a loss"),
    ({"importance_sampling_level": "seq"}, "importance_sampling_level"),
    ({"scale_rewards": "std"}, "scale_rewards"),
    ({"epsilon": 0.2, "epsilon_high": 0.1}, "epsilon_high"),
    ({"num_iterations": 0}, "num_iterations"),
    ({"top_entropy_quantile": 1.5}, "top_entropy_quantile"),
    ({"loss_type": "luspo"}, "needs importance_sampling_level='sequence'"),
    ({"loss_type": "vespo", "use_vllm": True, "use_cpu": False}, "vllm_importance_sampling_mode"),
    ({"sync_ref_model": True}, "sync_ref_model needs a reference model"),
])
def test_bad_algorithm_settings_are_refused_before_any_model_loads(tmp_path, kwargs, message):
    from grpo_kit.runs.spec import RunSpec

    algorithm = kwargs.pop("algorithm", None)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        RunSpec.resolve("cpu-tiny", "gsm8k", run_dir=tmp_path, algorithm=algorithm, **kwargs)


def test_cli_refuses_an_unknown_algorithm(capsys):
    from grpo_kit.cli import main

    assert main(["train", "--preset", "cpu-tiny", "--algorithm", "ppo"]) == 2
    assert "unknown algorithm 'ppo': choose from grpo, trl_default" in capsys.readouterr().err


def test_a_users_recipe_without_an_algorithm_key_gets_trl_defaults_recorded(tmp_path):
    """A recipe file that names no algorithm records TRL's defaults written out, and takes overrides."""
    (tmp_path / "mine.yaml").write_text("model_name_or_path: null\nlearning_rate: 1.0e-5\n")
    custom = get_preset(tmp_path / "mine.yaml")
    assert custom.name == "mine" and custom.learning_rate == 1e-5
    assert algorithm_settings(custom)["fields"] == ALGORITHMS["trl_default"].fields
    assert get_preset(custom, beta=0.1).beta == 0.1
