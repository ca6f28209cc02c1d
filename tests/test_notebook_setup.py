"""The notebooks' install cell and the doctor, with every reading faked: the driver, the versions, the GPU."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from grpo_kit import notebook

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


class FakeRuntime:
    """A Colab runtime as install_stack sees it: versions on disk and live in the kernel, pip recorded (and what
    it would leave installed)."""

    def __init__(self, monkeypatch, disk, live=None, installs=None):
        self.disk, self.live, self.calls = dict(disk), dict(live or {}), []
        self.installs = installs  # {name: version} pip leaves; None: exactly what was asked
        monkeypatch.setattr(notebook, "_disk_version", lambda name: self.disk.get(name))
        monkeypatch.setattr(notebook, "_live_version", lambda name: self.live.get(name))
        monkeypatch.setattr(notebook.subprocess, "check_call", self.pip)
        monkeypatch.setattr(notebook, "_route_here", lambda: "card: faked; route faked; time: faked")

    def pip(self, argv):
        self.calls.append(argv)
        if "-c" in argv:  # the constraints file lives as long as the pip call
            self.constraints = Path(argv[argv.index("-c") + 1]).read_text()
        asked = [a for a in argv[argv.index("-q") + 1:] if "==" in a]
        self.disk.update(dict(a.split("==") for a in asked) if self.installs is None else self.installs)


KIT = {requirement.split("==")[0]: requirement.split("==")[1] for requirement in
       __import__("grpo_kit.system.install", fromlist=["x"]).install_table()["kit"]}


def test_an_old_driver_is_refused_before_anything_downloads(monkeypatch):
    runtime = FakeRuntime(monkeypatch, {"torch": "2.13.0+cu130"})
    says = "NVIDIA driver 550.54.15 found, this runtime's torch 2.13.0+cu130 (CUDA 13.0) needs >= 580.65.06"
    with pytest.raises(RuntimeError, match=says.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")) as e:
        notebook.install_stack(driver=lambda: "550.54.15")
    assert "\n" not in str(e.value)  # one line
    assert runtime.calls == []


def test_without_a_driver_the_cpu_set_is_installed_and_on_a_ready_machine_nothing(monkeypatch, capsys):
    runtime = FakeRuntime(monkeypatch, {"torch": "2.13.0+cpu"})
    assert notebook.install_stack(driver=lambda: None)
    assert "No NVIDIA GPU here" in capsys.readouterr().out
    assert not any(a.startswith("unsloth") for a in runtime.calls[0])
    assert not notebook.install_stack(driver=lambda: None)  # a clone after `make install`: nothing to do


def test_the_runtimes_torch_is_kept_and_every_version_read_back(monkeypatch, capsys):
    runtime = FakeRuntime(monkeypatch, {"torch": "2.11.0+cu128", **KIT})
    assert notebook.install_stack(driver=lambda: "570.172.08")
    xformers, argv = runtime.calls
    assert "unsloth==2026.10.9" in argv and not any(a.startswith(("torch==", "vllm==", "xformers")) for a in argv)
    assert runtime.constraints == "torch==2.11.0+cu128\n"  # pip may not replace it
    # xformers alone from PyTorch's index for this CUDA (PyPI's 0.0.35 is one CUDA's build, unsloth METADATA's
    # cu128onlytorch2110 extra names this one)
    assert xformers[xformers.index("--index-url") + 1] == "https://download.pytorch.org/whl/cu128"
    assert "xformers==0.0.35" in xformers and "--no-deps" in xformers and "-c" in xformers
    out = capsys.readouterr().out
    assert "without fast_inference" in out and "no restart needed" in out
    assert not notebook.install_stack(driver=lambda: "570.172.08")  # a second run: everything is there
    assert len(runtime.calls) == 2


def test_colabs_default_runtime_replaces_its_torch_by_the_cuda_13_build_vllm_needs(monkeypatch, capsys):
    """Torch 2.11.0+cu128 on driver 580.82.07: PyPI's torch 2.11.0 (CUDA 13.0) and the torchvision and torchaudio
    vllm 0.26.0 pins replace the runtime's first, forced (pip takes 2.11.0+cu128 as meeting ==2.11.0), then xformers
    from the CUDA 13.0 index and the rest with vLLM, all three held; the route and hours are printed last."""
    runtime = FakeRuntime(monkeypatch, {"torch": "2.11.0+cu128", "torchvision": "0.26.0+cu128", **KIT},
                          live={"torch": "2.11.0+cu128"})
    assert notebook.install_stack(driver=lambda: "580.82.07")
    swap, xformers, rest = runtime.calls
    assert swap[swap.index("-q") + 1:] == ["--force-reinstall", "--no-deps", "torch==2.11.0", "torchvision==0.26.0",
                                           "torchaudio==2.11.0"]
    assert xformers[xformers.index("--index-url") + 1] == "https://download.pytorch.org/whl/cu130"
    assert "vllm==0.26.0" in rest and "torch==2.11.0" in rest  # its CUDA 13 libraries come as torch's dependencies
    assert runtime.constraints == "torch==2.11.0\ntorchvision==0.26.0\ntorchaudio==2.11.0\n"
    assert runtime.disk["torch"] == "2.11.0"
    out = capsys.readouterr().out
    assert out.startswith("vLLM for this runtime: vllm 0.26.0 pins torch 2.11.0") and "RESTART the runtime" in out
    assert out.rstrip().endswith("card: faked; route faked; time: faked")
    assert not notebook.install_stack(driver=lambda: "580.82.07")  # PyPI's 2.11.0 now: kept, nothing to do
    kept = FakeRuntime(monkeypatch, {"torch": "2.11.0+cu128", **KIT})
    assert notebook.install_stack(driver=lambda: "580.82.07", keep_torch=True)
    assert not any(a.startswith(("torch==", "vllm==")) for call in kept.calls for a in call)
    assert kept.constraints == "torch==2.11.0+cu128\n"


def test_a_cuda_13_runtime_without_an_xformers_build_gets_none_and_the_reason(monkeypatch, capsys):
    runtime = FakeRuntime(monkeypatch, {"torch": "2.13.0+cu130", **KIT})
    assert notebook.install_stack(driver=lambda: "580.82.07")
    (argv,) = runtime.calls
    assert not any(a.startswith("xformers") for a in argv)
    assert "xformers: none built for it (unsloth 2026.10.9 names no xformers build for torch 2.13.0" in \
        capsys.readouterr().out


def test_a_version_another_package_changed_is_named(monkeypatch):
    FakeRuntime(monkeypatch, {"torch": "2.13.0+cu130", **KIT}, installs={"trl": "1.16.0", "torch": "2.14.0"})
    with pytest.raises(RuntimeError, match=r"trl 1.16.0 \(wanted 1.15.0\).*torch 2.14.0 \(the runtime's "
                                           r"2.13.0\+cu130 was to stay\)"):
        notebook.install_stack(driver=lambda: "580.82.07")


def test_a_package_replaced_under_a_live_kernel_asks_for_a_restart(monkeypatch, capsys):
    FakeRuntime(monkeypatch, {"torch": "2.13.0+cu130", "transformers": "5.20.0", **KIT},
                live={"transformers": "5.20.0"})
    assert notebook.install_stack(driver=lambda: "580.82.07")
    assert "RESTART the runtime" in capsys.readouterr().out


def test_notebook_01_installs_only_what_a_cpu_runtime_needs(monkeypatch):
    runtime = FakeRuntime(monkeypatch, {"torch": "2.13.0+cpu"})
    assert notebook.install_stack(gpu=False, driver=lambda: None)
    (argv,) = runtime.calls
    asked = [a.split("==")[0] for a in argv if "==" in a and not a.startswith("torch")]
    assert "transformers" in asked and "datasets" in asked
    assert not {"unsloth", "vllm", "trl", "bitsandbytes"} & set(asked)


def test_the_driver_table():
    from grpo_kit.system.install import driver_problem

    assert driver_problem("580.65.06", "13.0", "x") is None and driver_problem("590.1", "13.0", "x") is None
    assert driver_problem("575.51.03", "12.9", "x") is None
    # CUDA 12 minor-version compatibility (NVIDIA's CUDA Compatibility guide): every 12.x runs on >= 525.60.13
    assert driver_problem("535.104.05", "12.8", "x") is None and driver_problem("525.60.13", "12.9", "x") is None
    assert "needs >= 525.60.13" in driver_problem("520.61.05", "12.8", "x")
    assert "needs >= 580.65.06" in driver_problem("575.51.03", "13.0", "x")


def test_every_notebook_installs_from_the_repository_its_install_cell_names():
    for path in NOTEBOOKS:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        install = next(c for c in cells if "install_stack" in "".join(c["source"]))
        source = "".join(install["source"])
        assert "REPOSITORY, BRANCH = " in source and "ls-remote" in source, path.name
        call = "install_stack(gpu=False)" if path.name.startswith("01_") else "install_stack()"  # 01: no GPU stack
        assert call in source, path.name


def test_the_install_cell_refuses_an_unreachable_repository_in_one_line(tmp_path):
    """The cell's own check, run where grpo_kit is not importable (as on a fresh runtime)."""
    cells = json.loads(NOTEBOOKS[0].read_text(encoding="utf-8"))["cells"]
    source = "".join(next(c for c in cells if "install_stack" in "".join(c["source"]))["source"])
    line = next(line for line in source.splitlines() if line.startswith("REPOSITORY, BRANCH = "))
    script = tmp_path / "cell.py"
    script.write_text(source.replace(line, f"REPOSITORY, BRANCH = {str(tmp_path / 'missing')!r}, 'main'"))
    out = subprocess.run([sys.executable, "-S", str(script)], capture_output=True, text=True, cwd=tmp_path,
                         env={"PATH": "/usr/bin:/bin", "GIT_TERMINAL_PROMPT": "0"}, timeout=60)
    assert out.returncode != 0 and "cannot reach branch 'main' of" in out.stderr


def test_the_doctor_reports_each_reading(monkeypatch):
    import torch

    props = types.SimpleNamespace(name="Tesla T4", total_memory=int(14.7 * 2**30), major=7, minor=5)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # emulation counts: not read
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (3 * 2**30, int(14.7 * 2**30)))
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    versions = {"torch": ("2.11.0+cu128", "2.13.0"), "unsloth": (None, "2026.10.9")}
    from grpo_kit.training import doctor

    monkeypatch.setattr(doctor, "_live_version", lambda name: versions.get(name, (None, None))[0])
    monkeypatch.setattr(doctor, "_disk_version", lambda name: versions.get(name, (None, None))[1])
    report = notebook.doctor("colab-t4", driver=lambda: "550.54.15")
    assert report["gpu"] == "Tesla T4" and report["bf16"] is False and report["free_gib"] == 3.0
    assert report["versions"]["torch"] == {"live": "2.11.0+cu128", "disk": "2.13.0"}
    assert report["driver_needed"] == "580.65.06" and report["needed_gib"] > 3.0
    problems = "\n".join(report["problems"])
    assert "restart the runtime" in problems and "driver 550.54.15 found" in problems and "3.0 GiB" in problems
    assert "Tesla T4" in notebook.format_doctor(report)
    bf16 = notebook.doctor("a100", driver=lambda: "580.82.07")
    assert any("bfloat16" in p for p in bf16["problems"])


def test_notebook_03_says_which_presets_keep_a_reference_model():
    """Its introduction said "no reference model (TRL's default beta=0)" while `a100` trains with beta 0.04."""
    from grpo_kit.training.presets import PRESETS

    cells = json.loads((NOTEBOOKS[0].parent / "03_train_grpo.ipynb").read_text(encoding="utf-8"))["cells"]
    intro = " ".join("".join(cells[0]["source"]).split())
    assert "no reference model (TRL's default `beta=0`)" not in intro
    for name, preset in PRESETS.items():
        if preset.beta > 0:
            assert f"`{name}` preset keeps the blog post's {preset.beta:g}" in intro, name


def test_the_cpu_demo_switch():
    assert notebook.cpu_demo_settings(False) is None and notebook.cpu_demo_settings(None) is None
    assert notebook.cpu_demo_settings(True) == notebook.CpuDemo()
    assert notebook.cpu_demo_settings({"eval_size": 8, "batch_size": 4}).batch_size == 4
    with pytest.raises(ValueError, match="cpu_demo has no setting 'eval_sise': it takes True, False or a dict of"):
        notebook.cpu_demo_settings({"eval_sise": 8})
    with pytest.raises(ValueError, match="set it to True, False or a dict"):
        notebook.cpu_demo_settings("yes")
    assert notebook.gpu_check("a100", cpu_demo={"preset_overrides": {"max_steps": 3}}).name == "cpu-tiny"
    assert notebook.gpu_check(None, cpu_demo={"preset_overrides": {"max_steps": 3}}).max_steps == 3


@pytest.mark.parametrize("questions, chosen", [(0.5, {"fraction": 0.5}), (40, {"n": 40}), (1.0, {"fraction": 1.0})])
def test_the_baseline_plan_reads_a_share_or_a_number_of_questions(tmp_path, questions, chosen):
    plan, run = notebook.plan_baseline("gsm8k", notebook.gpu_check("cpu-tiny"), eval_questions=questions,
                                       run_dir=str(tmp_path / "run"), use_drive=False)
    assert plan.slice == chosen and run.path == tmp_path / "run"
    demo, _ = notebook.plan_baseline("gsm8k", notebook.gpu_check("cpu-tiny"), eval_questions=questions,
                                     run_dir=str(tmp_path / "run"), use_drive=False, cpu_demo={"eval_size": 12})
    assert demo.slice == {"n": 12} and demo.max_new_tokens == notebook.CpuDemo().max_new_tokens


@pytest.mark.parametrize("questions", [0, -3, 1.5, "half", True])
def test_a_bad_share_of_questions_is_refused_in_one_line(tmp_path, questions):
    with pytest.raises(ValueError, match="eval_questions = .*: set a share of the test split in \\(0, 1\\]"):
        notebook.plan_baseline("gsm8k", notebook.gpu_check("cpu-tiny"), eval_questions=questions,
                               run_dir=str(tmp_path / "run"), use_drive=False)


def test_the_baseline_plan_takes_the_eval_plans_settings_by_their_own_names(tmp_path):
    """Issue 56: notebook 02's call passes EvalPlan's fields through as ``eval --before`` builds the plan, and refuses
    in one line a name the plan has none of, before anything loads."""
    config = notebook.gpu_check("cpu-tiny")
    plan, _ = notebook.plan_baseline("gsm8k", config, run_dir=str(tmp_path / "run"), use_drive=False, samples=2,
                                     eval_questions=12, temperature=0.9, batch_size=4, seed=3, max_new_tokens=None)
    assert (plan.temperature, plan.batch_size, plan.seed, plan.samples, plan.slice) == (0.9, 4, 3, 2, {"n": 12})
    assert plan.max_new_tokens == 256  # None: the plan's default
    with pytest.raises(ValueError, match=r"^plan_baseline has no setting 'max_new_token' \(did you mean "
                                         r"max_new_tokens\?\): it takes eval_questions, samples and baseline_plan's "
                                         r"\(EvalPlan's fields\) .*temperature"):
        notebook.plan_baseline("gsm8k", config, run_dir=str(tmp_path / "run"), use_drive=False, max_new_token=32)
    with pytest.raises(ValueError, match=r"plan_baseline has no setting 'eval_size' \(did you mean eval_questions\?\)"):
        notebook.plan_baseline("gsm8k", config, run_dir=str(tmp_path / "run"), use_drive=False, eval_size=40)


def test_the_training_plan_takes_run_spec_resolves_arguments_and_preset_fields(tmp_path, capsys):
    """Notebook 03's call is RunSpec.resolve's: its own arguments and any preset field (the command line's --key
    value) by name, None keeping the default; a misspelt name is refused in one line naming the nearest."""
    config = notebook.gpu_check("cpu-tiny")
    spec = notebook.plan_training(config, "gsm8k", run_dir=str(tmp_path / "run"), use_drive=False, max_steps=3,
                                  learning_rate=2e-5, train_size=40, rewards={"correctness_reward_func": 1.0},
                                  eval_steps=None, cpu_demo={"warm_start_steps": 6})
    assert (spec.preset.max_steps, spec.preset.learning_rate, spec.train_size) == (3, 2e-5, 40)
    assert spec.rewards.names == ["correctness_reward_func"] and spec.eval_steps is None
    assert spec.policy.tiny.warm.steps == 6 and "3 steps" in capsys.readouterr().out.replace("GRPO step", "step")
    with pytest.raises(ValueError, match=r"unknown recipe key 'max_step' \(did you mean max_steps\?\)"):
        notebook.plan_training(config, "gsm8k", run_dir=str(tmp_path / "run"), use_drive=False, max_step=3)


def test_the_export_takes_export_steps_settings_and_refuses_others_before_anything_loads(tmp_path):
    with pytest.raises(ValueError, match=r"^export_run has no setting 'hub_repo': it takes .* push_to_hub, .*"):
        notebook.export_run(tmp_path, ["merged"], hub_repo="you/model")
    with pytest.raises(ValueError, match=r"^export_run has no setting 'question' \(did you mean questions\?\)"):
        notebook.export_run(tmp_path, "merged", question=4)


def test_the_comparison_applies_its_preset_fields_to_every_variant(tmp_path, capsys):
    config = notebook.gpu_check("cpu-tiny")
    comparison = notebook.plan_comparison("sum3", config, run_dir=str(tmp_path / "compare"), use_drive=False,
                                          max_steps=3, learning_rate=2e-4, eval_size=20, samples=0, seed=1)
    assert [(s.preset.max_steps, s.preset.learning_rate, s.seed) for s in comparison.specs.values()] == \
        [(3, 2e-4, 1)] * 2
    assert comparison.plan.slice == {"n": 20} and comparison.plan.samples == 0 and comparison.plan.seed == 1
    assert "cpu-tiny: 3 steps, learning rate 0.0002" in capsys.readouterr().out
    with pytest.raises(ValueError, match=r"unknown recipe key 'learning_rat' \(did you mean learning_rate\?\)"):
        notebook.plan_comparison("sum3", config, run_dir=str(tmp_path / "compare"), use_drive=False,
                                 learning_rat=2e-4)


def test_in_a_notebook_the_kits_information_is_on_standard_output_and_warnings_on_standard_error(capsys):
    """Jupyter draws standard error as an error (issue 46: the kit's information lines rendered in red boxes)."""
    import logging

    from grpo_kit.system.logs import configure_logging

    logger = logging.getLogger("grpo_kit")
    handlers = list(logger.handlers)
    try:
        configure_logging(info_to_stdout=True)
        logging.getLogger("grpo_kit.notebook").info("a plan")
        logging.getLogger("grpo_kit.notebook").warning("a problem")
        out, err = capsys.readouterr()
        assert out == "[grpo_kit] a plan\n" and err == "[grpo_kit] WARNING: a problem\n"
    finally:
        logger.handlers[:] = handlers
