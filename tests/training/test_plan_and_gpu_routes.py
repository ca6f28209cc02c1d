"""The GPU routes' known failures, each on a CPU with what a GPU would report faked, and `plan`."""

from __future__ import annotations

import dataclasses
import json
import logging
import types

import pytest

from grpo_kit.tasks import get_task
from grpo_kit.training.presets import PRESETS, get_preset

REWARDS = get_task("gsm8k").reward_set()


@pytest.mark.parametrize("name", ["multi-gpu-lora", "full-80gb"])
def test_trls_colocated_vllm_gets_the_recipes_context_length(name):
    """TRL's colocated vLLM gets prompt + completion length: unset, vLLM takes the model's 131,072 tokens and does
    not fit 0.3 of an 80 GB card."""
    preset = PRESETS[name]
    kwargs = preset.grpo_kwargs("out", REWARDS.weights)
    assert kwargs["vllm_max_model_length"] == preset.max_prompt_tokens + preset.max_completion_length


def test_without_a_context_length_the_plan_says_vllm_will_not_start():
    from grpo_kit.training.plan import make_plan

    unset = make_plan("multi-gpu-lora", {"vllm_max_model_length": 131072}, device="a100-80gb",
                      launch="ddp", processes=8)
    assert unset.fatal and any("vLLM will not start" in line for line in unset.problems)
    assert unset.memory["kv_cache_needed"] == 16.0  # 131,072 tokens x 128 KiB
    fixed = make_plan("multi-gpu-lora", device="a100-80gb", launch="ddp", processes=8)
    assert not fixed.fatal and fixed.vllm["max_model_len"] == 512
    assert fixed.memory["parts"]["vllm_weights"] == pytest.approx(14.96, abs=0.01)  # vLLM's bf16 copy of 8.03B


def _fsdp_checkpoint(folder, step, optimizer=True, weights=True):
    """A checkpoint as transformers 5.17 + accelerate 1.15 write it under FSDP with SHARDED_STATE_DICT."""
    checkpoint = folder / f"checkpoint-{step}"
    checkpoint.mkdir(parents=True)
    for name, wanted in (("pytorch_model_fsdp_0", weights), ("optimizer_0", optimizer)):
        if wanted:
            (checkpoint / name).mkdir()
            (checkpoint / name / ".metadata").write_bytes(b"m")
            for rank in range(2):
                (checkpoint / name / f"__{rank}_0.distcp").write_bytes(b"d")
    for name in ("scheduler.pt", "rng_state_0.pth", "rng_state_1.pth"):
        (checkpoint / name).write_bytes(b"x")
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return checkpoint


def test_an_fsdp_sharded_checkpoint_is_complete_and_resumed_from(tmp_path):
    """An FSDP-sharded checkpoint counts as complete and is resumed from; a half-written one does not."""
    from grpo_kit.training.checkpoints import is_complete, latest_complete

    folder = tmp_path / "checkpoints"
    _fsdp_checkpoint(folder, 25)
    newest = _fsdp_checkpoint(folder, 50)
    torn = _fsdp_checkpoint(folder, 75, optimizer=False)
    (newest.parent / "checkpoint-100").mkdir()
    ((newest.parent / "checkpoint-100") / "pytorch_model_fsdp_0").mkdir()  # killed before .metadata was written
    assert is_complete(newest) and not is_complete(torn)
    assert latest_complete(folder) == newest
    for weights, optimizer in (("pytorch_model_fsdp.bin", "optimizer.bin"),  # FULL_STATE_DICT
                               ("pytorch_model_fsdp_0_rank0.bin", "optimizer_0_rank0.bin")):  # LOCAL_STATE_DICT
        other = folder / "other" / "checkpoint-5"
        other.mkdir(parents=True, exist_ok=True)
        for name in (weights, optimizer, "scheduler.pt"):
            (other / name).write_bytes(b"x")
        (other / "trainer_state.json").write_text(json.dumps({"global_step": 5}))
        assert is_complete(other)
        for name in (weights, optimizer):
            (other / name).unlink()


class _Plugin:
    def __init__(self, kind):
        self.state_dict_type = kind

    def set_state_dict_type(self, kind):
        self.state_dict_type = kind


class _FsdpTrainer:
    """Save_model as transformers 5.17 does it under FSDP: it writes weights only with FULL_STATE_DICT."""

    def __init__(self, kind):
        self.is_fsdp_enabled = True
        self.accelerator = types.SimpleNamespace(state=types.SimpleNamespace(fsdp_plugin=_Plugin(kind)),
                                                 is_main_process=True, wait_for_everyone=lambda: None)

    def save_model(self, path):
        if "FULL_STATE_DICT" in str(self.accelerator.state.fsdp_plugin.state_dict_type):
            from pathlib import Path

            Path(path).mkdir(parents=True, exist_ok=True)
            (Path(path) / "model.safetensors").write_bytes(b"w")


class _Tokenizer:
    def save_pretrained(self, path):
        pass


def test_the_final_save_under_fsdp_sharded_writes_the_weights(tmp_path):
    """Under FSDP with sharded checkpoints, the final model is gathered into one full state dict."""
    from grpo_kit.training.trainer import save_policy

    path = save_policy(_FsdpTrainer("StateDictType.SHARDED_STATE_DICT"), _Tokenizer(), tmp_path / "model")
    assert (path / "model.safetensors").is_file()


def test_a_save_that_wrote_no_weights_is_an_error(tmp_path):
    from grpo_kit.training.trainer import save_policy

    trainer = _FsdpTrainer("SHARDED_STATE_DICT")
    trainer.accelerator.state.fsdp_plugin.set_state_dict_type = lambda kind: None  # as if the switch did nothing
    (tmp_path / "model").mkdir()
    with pytest.raises(RuntimeError, match="saved no weights"):
        save_policy(trainer, _Tokenizer(), tmp_path / "model")


def test_the_stale_weights_alarm_says_at_the_first_step_that_it_is_not_armed(caplog):
    """On Unsloth's routes the metric the alarm reads is never logged; the run's log says so, once."""
    from grpo_kit.training.callbacks import STALE_METRIC, StaleWeightsAlarm, stale_weights_alarm

    why = stale_weights_alarm(PRESETS["a100"])
    assert not why["armed"] and "unsloth/models/rl.py" in why["why"]
    off = get_preset("a100", vllm_importance_sampling_correction=False)
    assert "the recipe sets" in stale_weights_alarm(off)["why"]
    unsloths_config = type("UnslothGRPOConfig", (), {"_unsloth_patched_rl_config": True})()
    unsloths_config.vllm_importance_sampling_correction = False
    alarm = StaleWeightsAlarm()
    state = types.SimpleNamespace(global_step=1)
    with caplog.at_level(logging.WARNING, logger="grpo_kit"):
        alarm.on_log(unsloths_config, state, None, logs={"reward": 0.5})
        alarm.on_log(unsloths_config, state, None, logs={"reward": 0.6})
    unarmed = [r.getMessage() for r in caplog.records if "NOT armed" in r.getMessage()]
    assert len(unarmed) == 1 and "Unsloth's generated GRPO trainer turns vllm_importance_sampling_correction off" \
        in unarmed[0] and "set vllm_importance_sampling_correction true" in unarmed[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="grpo_kit"):
        StaleWeightsAlarm().on_log(None, state, None, logs={"reward": 0.5})
    assert f"the trainer logged no {STALE_METRIC}" in caplog.records[0].getMessage()
    caplog.clear()
    armed = StaleWeightsAlarm()
    with caplog.at_level(logging.WARNING, logger="grpo_kit"):
        armed.on_log(None, state, None, logs={"reward": 0.5, STALE_METRIC: 0.01})
    assert not caplog.records and not armed.raised


def test_the_algorithm_the_fields_amount_to():
    from grpo_kit.training.plan import algorithm

    faithful = algorithm(PRESETS["a100"])  # the blog post's notebook: trl 0.15's GRPO
    assert (faithful["name"], faithful["fields"]["loss_type"], faithful["fields"]["beta"]) == ("grpo", "grpo", 0.04)
    assert not faithful["vllm_importance_sampling_correction"]  # Unsloth's config turns it off
    changed = algorithm(get_preset("a100", beta=0.0))
    assert changed["overridden"] == ["beta"] and "no KL" in changed["summary"]
    assert algorithm(PRESETS["multi-gpu-lora"])["vllm_importance_sampling_correction"]


PLAN_KEYS = {"route", "model", "algorithm", "grpo_config", "processes", "vllm", "memory", "alarm", "resume_from",
             "problems"}


def _plan(capsys, *argv):
    from grpo_kit.cli import main

    code = main(["plan", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_plans_json_is_the_plan_field_for_field(capsys):
    """`plan --json` is :meth:`Plan.to_json`: one key per field, in the order the command has always printed them
    (scripts read them by name), the card as its fields."""
    from grpo_kit.training.plan import make_plan

    code, printed = _plan(capsys, "--preset", "multi-gpu-full", "--device", "h100-80gb", "--launch", "zero3")
    plan = make_plan("multi-gpu-full", device="h100-80gb", launch="zero3")
    assert code == 0 and printed == json.loads(json.dumps(plan.to_json(), default=str))
    assert list(printed) == [
        "preset", "recipe_keys", "route", "model", "algorithm", "rewards", "adapter", "grpo_config", "unsloth_changes",
        "processes", "device", "launch", "vllm", "memory", "alarm", "sampling", "generator", "without_vllm", "time",
        "disk", "resume_from", "resume_why", "problems", "fatal"]
    assert printed["device"]["name"] == plan.device.name == "NVIDIA H100 80GB HBM3" and len(printed["processes"]) == 7
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.fatal = True  # type: ignore[misc]  # a plan is what make_plan found


def test_plan_json_for_each_route_on_a_cpu(capsys):
    code, a100 = _plan(capsys, "--preset", "a100", "--device", "a100-40gb")
    assert code == 0 and PLAN_KEYS <= set(a100)
    assert a100["route"] == "unsloth" and a100["vllm"]["mode"] == "colocate" and not a100["alarm"]["armed"]
    memory = a100["memory"]
    assert memory["estimate"] and set(memory["parts"]) >= {"weights", "trainable", "optimizer", "vllm_weights",
                                                           "kv_cache", "activations"}
    assert memory["needed"] == pytest.approx(sum(memory["parts"].values()), abs=0.05) and memory["fits"]
    assert a100["grpo_config"]["optim"] == "paged_adamw_8bit" and a100["processes"][0]["rank"] == 0
    code, ddp = _plan(capsys, "--preset", "multi-gpu-lora", "--device", "h100-80gb", "--launch", "ddp", "--gpus", "4")
    assert code == 0 and ddp["route"] == "transformers+peft"
    assert [p["device_map"] for p in ddp["processes"]] == [{"": r} for r in range(4)]
    code, zero3 = _plan(capsys, "--preset", "multi-gpu-full", "--device", "h100-80gb", "--launch", "zero3",
                        "--gpus", "7")
    assert code == 0 and zero3["route"] == "transformers" and zero3["vllm"]["mode"] == "server"
    assert "vllm serve unsloth/Meta-Llama-3.1-8B-Instruct" in zero3["vllm"]["command"]
    assert [p["device_map"] for p in zero3["processes"]] == [None] * 7


@pytest.mark.parametrize("argv, says", [
    (["--preset", "a100", "--device", "t4-16gb"], "bfloat16"),
    (["--preset", "full-80gb", "--device", "l4-24gb"], "does not fit"),
])
def test_plan_exits_2_on_what_would_end_the_run(capsys, argv, says):
    code, plan = _plan(capsys, *argv)
    assert code == 2 and any(says in line and line.startswith("FATAL") for line in plan["problems"])


def test_plan_takes_only_known_cards_and_names_the_nearest(capsys):
    """Issue 55: `plan --device t4` was accepted with "no GPU, no estimate"; a card the table lacks is refused in one
    line, before anything is planned, naming the card meant."""
    from grpo_kit.cli import main

    for asked, nearest in (("t4", "did you mean t4-16gb?"), ("a100", "did you mean a100-40gb or a100-80gb?"),
                           ("NVIDIA L4", "did you mean l4-24gb?"), ("v100-16gb", "--device takes a100-40gb")):
        assert main(["plan", "--preset", "a100", "--device", asked]) == 2
        err = capsys.readouterr().err
        assert f"unknown card {asked!r}: " in err and nearest in err and err.count("\n") == 1, err


def test_plan_for_a_resume_names_the_checkpoint(tmp_path, capsys):
    from grpo_kit.training.checkpoints import run_identity

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    identity = run_identity(PRESETS["multi-gpu-full"], "gsm8k", "unsloth/Meta-Llama-3.1-8B-Instruct", REWARDS)
    (run / "train_settings.json").write_text(json.dumps({"identity": identity, "max_steps": 300}))
    code, nothing = _plan(capsys, "--run-dir", str(run), "--resume", "--device", "h100-80gb")
    assert nothing["resume_from"] is None and "step 0" in nothing["resume_why"]
    assert nothing["grpo_config"]["max_steps"] == 300  # as the run folder recorded it
    _fsdp_checkpoint(run / "checkpoints", 9)
    newest = _fsdp_checkpoint(run / "checkpoints", 50)
    _fsdp_checkpoint(run / "checkpoints", 100, weights=False)
    code, plan = _plan(capsys, "--run-dir", str(run), "--resume", "--max-steps", "350", "--device", "h100-80gb",
                       "--launch", "fsdp2", "--gpus", "8")
    assert plan["resume_from"] == str(newest) and plan["resume_why"].endswith("newer but incomplete: checkpoint-100")
    assert plan["grpo_config"]["max_steps"] == 350 and plan["model"] == "unsloth/Meta-Llama-3.1-8B-Instruct"


def test_plan_refuses_the_resumes_train_refuses(tmp_path, capsys):
    """Plan and train --resume decide a resume by one rule (checkpoints.resume_point): a torn checkpoint is set aside
    (issue 57: step 0 when none is whole), no shortening of a run."""
    from grpo_kit.training.checkpoints import run_identity

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    identity = run_identity(PRESETS["multi-gpu-full"], "gsm8k", "unsloth/Meta-Llama-3.1-8B-Instruct", REWARDS)
    (run / "train_settings.json").write_text(json.dumps({"identity": identity, "max_steps": 300}))
    _fsdp_checkpoint(run / "checkpoints", 100, weights=False)
    code, plan = _plan(capsys, "--run-dir", str(run), "--resume", "--device", "h100-80gb")
    assert plan["resume_from"] is None and "training would start at step 0" in plan["resume_why"]
    assert not any("checkpoint-100" in line for line in plan["problems"])
    newest = _fsdp_checkpoint(run / "checkpoints", 300)
    (run / "finished.json").write_text(json.dumps({"step": 300}))
    code, plan = _plan(capsys, "--run-dir", str(run), "--resume", "--device", "h100-80gb")
    assert plan["resume_from"] == str(newest) and "trains nothing" in plan["resume_why"]
    code, plan = _plan(capsys, "--run-dir", str(run), "--resume", "--max-steps", "200", "--device", "h100-80gb")
    assert code == 2 and any("a run cannot be shortened" in line for line in plan["problems"])


def test_plan_text_and_a_cpu_without_device(capsys):
    from grpo_kit.cli import main

    assert main(["plan", "--preset", "cpu-tiny"]) == 0
    out = capsys.readouterr().out
    assert "route transformers" in out and "problems: none" in out
    assert main(["plan", "--preset", "a100"]) == 2  # no GPU here, and no --device


def test_train_runs_the_plans_checks_before_loading(monkeypatch, tmp_path):
    """`train` on a T4 with a bfloat16 preset fails in RunSpec.resolve, before any model loads."""
    import torch

    from grpo_kit.runs.spec import RunSpec

    props = types.SimpleNamespace(name="Tesla T4", total_memory=int(14.7 * 2**30), major=7, minor=5)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # emulation counts: not read
    with pytest.raises(ValueError, match="would fail on Tesla T4: preset .multi-gpu-lora. computes in bfloat16"):
        RunSpec.resolve("multi-gpu-lora", run_dir=tmp_path / "run")


@pytest.mark.parametrize("device, preset", [("t4-16gb", "colab-t4"), ("l4-24gb", "colab-l4"), ("a100-40gb", "a100"),
                                            ("h100-80gb", "a100"), ("h200-141gb", "a100")])
def test_plan_without_a_preset_picks_the_one_the_notebooks_pick_for_the_card(capsys, device, preset):
    code, plan = _plan(capsys, "--device", device)
    assert plan["preset"] == preset and code == 0


def test_plan_shows_the_grpo_config_as_unsloths_generated_trainer_holds_it(capsys):
    """Unsloth/models/rl.py: with fast_inference the trainer's __init__ sets use_vllm, vllm_mode='colocate' and
    top_k 0 -> -1; its config defaults vllm_importance_sampling_correction to False."""
    _, a100 = _plan(capsys, "--preset", "a100", "--device", "a100-40gb")
    config = a100["grpo_config"]
    assert config["use_vllm"] is True and config["vllm_mode"] == "colocate" and config["top_k"] == -1
    assert config["vllm_importance_sampling_correction"] is False
    assert a100["unsloth_changes"]["use_vllm"] == {"passed": None, "effective": True}
    _, trl = _plan(capsys, "--preset", "multi-gpu-lora", "--device", "h100-80gb", "--launch", "ddp")
    assert trl["unsloth_changes"] == {} and "top_k" not in trl["grpo_config"]


def test_the_memory_verdict_agrees_with_vllms_fatal_problem(capsys):
    """`plan --preset multi-gpu-lora --device a100-40gb --launch ddp` said "fits" above "FATAL: vLLM will not
    start": vLLM's share must hold its KV cache for the run to fit."""
    code, plan = _plan(capsys, "--preset", "multi-gpu-lora", "--device", "a100-40gb", "--launch", "ddp")
    assert code == 2 and any(line.startswith("FATAL: vLLM will not start") for line in plan["problems"])
    assert plan["memory"]["fits"] is False and plan["memory"]["needed"] <= plan["memory"]["available"]
    from grpo_kit.training.plan import format_plan, make_plan

    text = format_plan(make_plan("multi-gpu-lora", device="a100-40gb", launch="ddp"))
    assert "DOES NOT FIT (vLLM's share leaves no room for its KV cache)" in text


def test_lora_under_zero3_counts_the_whole_model_trl_gathers_for_each_weight_sync(capsys):
    """Trl/generation/vllm_generation.py gathers the full model on every process to merge the adapter before a
    sync: for an 8B model on 8 GPUs about 14 GiB (7/8 of its 16-bit weights) held then, not in the ZeRO-3 shard."""
    _, zero3 = _plan(capsys, "--preset", "multi-gpu-lora", "--device", "h100-80gb", "--launch", "zero3", "--gpus", "8")
    parts = zero3["memory"]["parts"]
    assert 12 < parts["sync_gather"] < 16 and parts["weights"] < 3
    assert zero3["memory"]["needed"] == pytest.approx(sum(parts.values()) - parts["activations"], abs=0.05)
    _, ddp = _plan(capsys, "--preset", "multi-gpu-lora", "--device", "h100-80gb", "--launch", "ddp", "--gpus", "8")
    assert ddp["memory"]["parts"]["sync_gather"] == 0


def test_a_vllm_server_keeps_a_gpu_of_its_own(capsys):
    from grpo_kit.cli import main
    from grpo_kit.training.plan import make_plan

    default = make_plan("multi-gpu-full", launch="zero3", device="h100-80gb")
    assert len(default.processes) == 7 and not any("vllm_mode='server'" in p for p in default.problems)
    assert main(["plan", "--preset", "multi-gpu-full", "--launch", "zero3", "--device", "h100-80gb",
                 "--gpus", "8"]) == 2
    assert "8 training processes take all 8 GPUs: train on 7" in capsys.readouterr().out


def test_plan_says_which_temperature_applies_the_hours_download_and_disk_and_without_vllm():
    """Issue 46: plan showed temperature=1.0 beside generation_kwargs={'temperature': 0.9} without saying which
    applies, gave memory but no hours, download or disk, and did not say what a runtime without vLLM does."""
    from grpo_kit.training.plan import format_plan, make_plan

    plan = make_plan("a100", device="a100-40gb")
    assert plan.sampling.startswith("sampled at temperature 0.9 (generation_kwargs") and \
        "divides the logits by temperature 1" in plan.sampling
    with_vllm, without = plan.time["with_vllm"], plan.time["without_vllm"]
    assert round(with_vllm["hours"], 1) == 2.0  # the blog post's own 2 hours: its recipe on its card
    # issue 54: without vLLM, the Unsloth step the GPU proof measured on an H200, scaled to the A100's bandwidth
    assert without["seconds_per_step"] == round(6.974 * 4800 / 1555) and \
        "measured by the GPU proof, benchmarks/results/gpu-2026-11-29" in without["basis"]
    # issue 55: without vLLM an Unsloth recipe runs Unsloth without fast_inference, and the estimate says so
    assert (with_vllm["route"], without["route"]) == ("vllm", "unsloth")
    assert "a100 without fast_inference (Unsloth 4-bit LoRA r32, its own generate) on one H200" in without["basis"]
    assert plan.time["applies"] is None and plan.time["session"] is None  # planned for a card elsewhere
    assert "fast_inference=False" in plan.without_vllm
    assert 5 < plan.disk["download"] < 6.5 and plan.disk["base_for_merge"] == 16.1
    text = format_plan(plan)
    for line in ("sampling: sampled at temperature 0.9", "time (estimate, not measured on this card) for 250 steps: "
                 "with vLLM generating about 2.0 h", "download (estimate): 5.7 GB", "  without vLLM (a runtime"):
        assert line in text, line
    faster = make_plan("a100", device="h100-80gb").time["with_vllm"]["hours"]
    assert faster < with_vllm["hours"]  # more memory bandwidth, a shorter estimate
    trl = make_plan("multi-gpu-lora", device="a100-80gb", launch="ddp")
    assert trl.without_vllm.startswith("TRL refuses") and trl.time["without_vllm"] is None  # nothing runs
    assert "without vLLM (Unsloth, generating with its own generate) about 1.5 h" in text
    plain = make_plan("cpu-tiny")
    assert plain.time is None and plain.without_vllm is None and plain.sampling.startswith("temperature")


def test_a_24_gb_card_gets_a_recipe_that_fits_a_colab_session_and_a100_there_is_told_so():
    """Issue 55: an L4 got a100's 8B recipe (10.4 h with vLLM, 32.9 h without, as estimated then). The recipe made for
    it (preset None) fits one Colab session either way; a100 asked for there with more steps says which estimate is
    longer than a session and names the smaller choice with its hours."""
    from grpo_kit.training.cost import SESSION_HOURS
    from grpo_kit.training.plan import format_plan, make_plan

    made = make_plan(device="l4-24gb")
    assert made.preset == "colab-l4" and not made.fatal and made.time["session"] is None
    assert all(made.time[k]["hours"] < SESSION_HOURS for k in ("with_vllm", "without_vllm"))
    big = make_plan("a100", {"max_steps": 500}, device="l4-24gb")
    assert "with vLLM (20.7 h) and without vLLM (15.5 h) is longer than one Colab session" in big.time["session"]
    assert ("preset colab-l4 (unsloth/Qwen2.5-3B-Instruct), takes about 1.5 h with vLLM and 1.1 h without vLLM for "
            "its 250 steps") in big.time["session"]
    assert big.time["session"] in format_plan(big)


def test_plans_json_gives_its_estimates_rounded_as_its_memory_figures_are(capsys):
    """plan --json gave hours, seconds and GB with sixteen digits (2.054108672 GB), not the digits plan prints, and
    its without-vLLM line spoke of "the time below", which a JSON object has no below."""
    from grpo_kit.cli import main

    assert main(["plan", "--preset", "colab-t4", "--device", "t4-16gb", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    figures = [*plan["disk"].values(), *(e[k] for e in plan["time"].values() if isinstance(e, dict)
                                        for k in ("hours", "seconds_per_step"))]
    numbers = [v for v in figures if isinstance(v, (int, float))]
    assert len(numbers) == 11 and all(round(v, 2) == v for v in numbers), numbers
    assert "below" not in plan["without_vllm"]


def test_a_count_of_one_is_said_in_the_singular():
    """plan said "1 process(es)" and "for 1 steps"; train "1 steps of 32 completions"."""
    from grpo_kit.training.plan import format_plan, make_plan

    text = format_plan(make_plan("colab-t4", overrides={"max_steps": 1}, device="t4-16gb"))
    assert "launch single, 1 process\n" in text and "for 1 step:" in text, text
    assert "process(es)" not in text and "1 steps" not in text


def test_plan_prints_the_config_and_adapter_train_builds(tmp_path, capsys):
    """A recipe's reward_funcs [correctness, xmlcount] with reward_weights [2.0, 0.5] trained with those, while plan
    printed reward_weights=[1.0]*6 (the default task's six); its LoRA keys reached neither. plan's GRPOConfig and
    adapter are now built by the functions train builds its own with, from the run train resolves."""
    from grpo_kit.cli import main
    from grpo_kit.runs.spec import RunSpec
    from grpo_kit.training.plan import make_plan
    from grpo_kit.training.trainer import grpo_config, peft_config

    recipe = tmp_path / "weighted.yaml"
    recipe.write_text("reward_funcs: [correctness_reward_func, xmlcount_reward_func]\nreward_weights: [2.0, 0.5]\n"
                      "use_cpu: true\nuse_peft: true\nlora_r: 4\nlora_dropout: 0.3\nuse_rslora: true\n")
    assert main(["plan", "--config", str(recipe)]) == 0
    out = capsys.readouterr().out
    assert "rewards: correctness_reward_func 2, xmlcount_reward_func 0.5\n" in out
    assert "reward_weights=[2.0, 0.5]" in out and "r=4, " in out and "lora_dropout=0.3" in out, out
    plan = make_plan(recipe, run_dir=tmp_path / "run")
    spec = RunSpec.resolve(recipe, task=None, run_dir=tmp_path / "run")
    built = grpo_config(spec.preset, str(spec.folder.checkpoints), spec.rewards)
    assert {k: getattr(built, k) for k in plan.grpo_config} == plan.grpo_config
    adapter = peft_config(spec.preset)
    assert {k: v for k, v in plan.adapter.items() if k != "built_by"} == \
        {k: sorted(v) if isinstance(v, set) else v for k, v in vars(adapter).items() if k in plan.adapter}
def test_on_a_gpu_every_announced_time_is_plans_arithmetic_for_that_card_and_route(monkeypatch, caplog):
    """Issue 55: on a GPU the GRPO announcement scaled the tiny CPU policy's rates by parameters / 1.1e6 (653 s a step,
    45 h for a100's 250 steps where plan said 2.0 h). Now train's announcement and the evaluation's generation on a
    GPU are plan's arithmetic (grpo_kit.policy.speed) for the card and the route the run takes, with the basis."""
    import torch

    from grpo_kit.policy import devices
    from grpo_kit.policy.generation import Sampling, TransformersBackend
    from grpo_kit.policy.speed import generation_seconds
    from grpo_kit.runs import train as train_module
    from grpo_kit.training.plan import make_plan

    a100 = devices.CARDS["a100-40gb"]
    monkeypatch.setattr(train_module, "first_gpu", lambda: a100)
    planned = make_plan("a100", device="a100-40gb").time
    for preset, key, route in ((PRESETS["a100"], "with_vllm", "vLLM generating"),
                               # no vLLM here: RunSpec.resolve turned fast_inference off, the route Unsloth's
                               (get_preset("a100", fast_inference=False), "without_vllm",
                                "Unsloth, generating with its own generate")):
        spec = types.SimpleNamespace(preset=preset, task=types.SimpleNamespace(name="gsm8k"),
                                     policy=types.SimpleNamespace(name=preset.model))
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="grpo_kit"):
            seconds = train_module._announce_grpo(spec, None, None, None, done=0)
        assert round(seconds / 3600, 1) == planned[key]["hours"], key
        assert f"on NVIDIA A100-SXM4-40GB, route unsloth with {route}" in caplog.text
        assert planned[key]["basis"] in caplog.text
    monkeypatch.setattr(devices, "gpus", lambda: [a100])
    model = types.SimpleNamespace(device=torch.device("cuda", 0), num_parameters=lambda: 8_030_261_248)
    backend = TransformersBackend(model, tokenizer=None, progress=True)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="grpo_kit"):
        seconds = backend._announce("greedy", 660, [list(range(32))] * 21, Sampling(max_new_tokens=256), False)
    assert seconds == generation_seconds("transformers", 660 * 256, 8_030_261_248, a100)[0]
    assert round(seconds / 60) == 38 and "at most on NVIDIA A100-SXM4-40GB" in caplog.text
