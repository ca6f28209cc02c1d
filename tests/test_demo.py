"""The demo pipeline end to end on a small slice, and the command line."""

from __future__ import annotations

import json

import pytest

from grpo_kit.cli import main
from grpo_kit.demo import DemoConfig, run_demo
from grpo_kit.policy.tiny import TinyPolicySpec
from grpo_kit.policy.warm_start import WarmStart

SMALL = dict(eval_size=6, train_size=16, grpo_steps=2, eval_max_new_tokens=16, samples=2,
             warm=WarmStart(steps=4, batch_size=8), spec=TinyPolicySpec(vocab_size=400, hidden_size=32, num_layers=1,
                                                                           num_heads=2, num_kv_heads=1,
                                                                           intermediate_size=64),
             preset_overrides=dict(per_device_train_batch_size=8, max_completion_length=12), progress=False)


def test_demo_writes_the_run_folder_and_caches_the_warm_start(tmp_path):
    config = DemoConfig(name="small", runs_dir=str(tmp_path / "runs"), cache_dir=str(tmp_path / "cache"), **SMALL)
    result = run_demo(config)
    run = tmp_path / "runs" / "small"
    assert {p.name for p in run.iterdir()} >= {"report.md", "baseline.jsonl", "trained.jsonl", "log_history.json",
                                               "training_curves.png", "baseline_sampled.jsonl", "comparison.csv",
                                               "before_after.png", "generations.jsonl"}
    assert len((run / "baseline_sampled.jsonl").read_text().splitlines()) == 6 * 2
    assert len((run / "baseline.jsonl").read_text().splitlines()) == 6
    history = json.loads((run / "log_history.json").read_text())
    assert any("rewards/strict_format_reward_func/mean" in row for row in history)
    report = (run / "report.md").read_text()
    for needle in ["| metric", "Hard correctness", "Strict accuracy", "Flexible accuracy", "strict-match and "
                   "flexible-extract", "McNemar", "pass@2 (strict)",
                   "maj@2 (flexible)", "truncation_rate", "format only", "## Settings", "## Wall times", "## Versions",
                   "cannot do grade-school arithmetic", "trl:"]:
        assert needle in report
    assert list(result["table"].columns)[:5] == ["metric", "before", "after", "delta", "max"]
    assert (run / "training_curves.png").stat().st_size > 10_000

    again = run_demo(config)  # the warm-started policy now comes from the cache
    assert "loaded from cache" in (run / "report.md").read_text()
    assert again["wall"]["warm start"] < result["wall"]["warm start"]


def test_demo_rejects_bad_settings_before_building_a_model(tmp_path):
    with pytest.raises(ValueError, match="must be divisible by num_generations"):
        run_demo(DemoConfig(runs_dir=str(tmp_path), cache_dir=str(tmp_path / "never"),
                            preset_overrides=dict(per_device_train_batch_size=12)))
    assert not (tmp_path / "never").exists()


def test_cli_lists_presets_with_their_algorithm_beside_their_model(capsys):
    from grpo_kit.training.algorithms import algorithm_settings
    from grpo_kit.training.presets import PRESETS

    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["preset", "model", "algorithm", "loss_type", "beta"]
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:len(PRESETS) + 1]}
    assert set(rows) == set(PRESETS)
    for name, preset in PRESETS.items():
        fields = algorithm_settings(preset)["fields"]
        assert rows[name][-3:] == [preset.algorithm, fields["loss_type"], f"{fields['beta']:g}"], rows[name]
    assert rows["a100"][1:] == ["unsloth/Meta-Llama-3.1-8B-Instruct", "grpo", "grpo", "0.04"]
    assert "cpu-tiny: " in out  # the descriptions follow the table


def test_cli_reports_bad_settings_as_an_error(capsys, tmp_path):
    assert main(["demo", "--xml-share", "1.5", "--runs-dir", str(tmp_path)]) == 2
    assert "--xml-share" in capsys.readouterr().err


def test_demo_needs_a_task_it_can_train(tmp_path):
    with pytest.raises(ValueError, match="choose one of gsm8k, countdown"):
        run_demo(DemoConfig(task="math500", runs_dir=str(tmp_path), cache_dir=str(tmp_path / "never")))
    assert main(["demo", "--task", "math500"]) == 2
    assert not (tmp_path / "never").exists()
