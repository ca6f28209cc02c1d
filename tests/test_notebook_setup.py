"""The notebooks' install cell and the doctor, with every reading faked: the driver, the versions, the GPU
(issue 23, defect 8)."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from grpo_kit import notebook

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.fixture
def nothing_installed(monkeypatch):
    """A fresh Colab runtime as install_stack sees it: the stack missing, the repository reachable, pip recorded."""
    calls = []
    monkeypatch.setattr(notebook.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(notebook, "_reachable", lambda url, timeout_s=15.0: True, raising=False)
    monkeypatch.setattr(notebook.subprocess, "check_call", lambda argv: calls.append(argv))
    return calls


@pytest.mark.parametrize("driver, says", [
    ("550.54.15", "NVIDIA driver 550.54.15 found, torch 2.13.0 (CUDA 13.0) needs >= 580.65.06"),
    (None, "no NVIDIA driver found"),
])
def test_an_old_or_missing_driver_is_refused_before_anything_downloads(nothing_installed, driver, says):
    with pytest.raises(RuntimeError, match=says.replace("(", r"\(").replace(")", r"\)")) as e:
        notebook.install_stack(driver=lambda: driver)
    assert "\n" not in str(e.value)  # one line
    assert nothing_installed == []


def test_a_cuda_12_build_of_the_pinned_torch_installed_first_is_checked_as_such(nothing_installed, monkeypatch):
    """The remedy the refusal gives (torch's CUDA 12.6 build from the PyTorch index) then passes on that driver."""
    monkeypatch.setattr(notebook, "_disk_version", lambda name: "2.13.0+cu126" if name == "torch" else None)
    monkeypatch.setattr(notebook, "_live_version", lambda name: None)
    assert notebook.install_stack("https://example.org/kit", driver=lambda: "565.57.01")
    monkeypatch.setattr(notebook, "_disk_version", lambda name: "2.11.0+cu128" if name == "torch" else None)
    with pytest.raises(RuntimeError, match="needs >= 580.65.06"):  # pip would replace it with PyPI's CUDA 13.0 build
        notebook.install_stack("https://example.org/kit", driver=lambda: "565.57.01")


def test_an_unreachable_repository_is_named(nothing_installed, monkeypatch):
    monkeypatch.setattr(notebook, "_reachable", lambda url, timeout_s=15.0: False)
    with pytest.raises(RuntimeError, match="cannot read https://example.org/fork/raw/dev/requirements.txt: set "
                                           "REPOSITORY"):
        notebook.install_stack("https://example.org/fork", "dev", driver=lambda: "580.82.07")
    assert nothing_installed == []


def test_a_replaced_torch_under_a_live_kernel_asks_for_a_restart(nothing_installed, monkeypatch, capsys):
    monkeypatch.setattr(notebook, "_live_version", lambda name: "2.11.0+cu128")
    monkeypatch.setattr(notebook, "_disk_version", lambda name: "2.13.0")
    assert notebook.install_stack("https://example.org/kit", driver=lambda: "580.82.07")
    assert nothing_installed == [[sys.executable, "-m", "pip", "install", "-q", "-r",
                                  "https://example.org/kit/raw/main/requirements.txt"]]
    assert "RESTART the runtime" in capsys.readouterr().out
    monkeypatch.setattr(notebook, "_live_version", lambda name: None)
    notebook.install_stack("https://example.org/kit", driver=lambda: "580.82.07")
    assert "no restart needed" in capsys.readouterr().out


def test_the_driver_table():
    assert notebook.driver_problem("580.65.06") is None and notebook.driver_problem("590.1") is None
    assert notebook.driver_problem("575.51.03", "12.9") is None
    assert "needs >= 570.26" in notebook.driver_problem("565.57.01", "12.8")


def test_every_notebook_installs_from_the_repository_its_install_cell_names():
    for path in NOTEBOOKS:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        install = next(c for c in cells if "REPOSITORY, BRANCH = " in "".join(c["source"]))
        source = "".join(install["source"])
        call = "install_explore" if path.name.startswith("01_") else "install_stack"  # 01 needs no GPU stack
        assert f"{call}(REPOSITORY, BRANCH)" in source and "ls-remote" in source, path.name


def test_the_install_cell_refuses_an_unreachable_repository_in_one_line(tmp_path):
    """The cell's own check, run where grpo_kit is not importable (as on a fresh runtime)."""
    cells = json.loads(NOTEBOOKS[0].read_text(encoding="utf-8"))["cells"]
    source = "".join(next(c for c in cells if "REPOSITORY, BRANCH = " in "".join(c["source"]))["source"])
    line = next(line for line in source.splitlines() if line.startswith("REPOSITORY, BRANCH = "))
    script = tmp_path / "cell.py"
    script.write_text(source.replace(line, f"REPOSITORY, BRANCH = {str(tmp_path / 'missing')!r}, 'main'"))
    out = subprocess.run([sys.executable, "-S", str(script)], capture_output=True, text=True, cwd=tmp_path,
                         env={"PATH": "/usr/bin:/bin", "GIT_TERMINAL_PROMPT": "0"}, timeout=60)
    assert out.returncode != 0 and "cannot reach branch 'main' of" in out.stderr


def test_the_doctor_reports_each_reading(monkeypatch):
    import torch

    props = types.SimpleNamespace(name="Tesla T4", total_memory=int(14.7 * 2**30))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (3 * 2**30, int(14.7 * 2**30)))
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    versions = {"torch": ("2.11.0+cu128", "2.13.0"), "unsloth": (None, "2026.10.7")}
    monkeypatch.setattr(notebook, "_live_version", lambda name: versions.get(name, (None, None))[0])
    monkeypatch.setattr(notebook, "_disk_version", lambda name: versions.get(name, (None, None))[1])
    report = notebook.doctor("colab-t4", driver=lambda: "550.54.15")
    assert report["gpu"] == "Tesla T4" and report["bf16"] is False and report["free_gib"] == 3.0
    assert report["versions"]["torch"] == {"live": "2.11.0+cu128", "disk": "2.13.0"}
    assert report["driver_needed"] == "580.65.06" and report["needed_gib"] > 3.0
    problems = "\n".join(report["problems"])
    assert "restart the runtime" in problems and "driver 550.54.15 found" in problems and "3.0 GiB" in problems
    assert "Tesla T4" in notebook.format_doctor(report)
    bf16 = notebook.doctor("a100", driver=lambda: "580.82.07")
    assert any("bfloat16" in p for p in bf16["problems"])


def test_notebook_01_installs_only_its_own_pins_and_no_gpu_stack(monkeypatch):
    requirements = (Path(__file__).resolve().parents[1] / "requirements.txt").read_text(encoding="utf-8")
    calls = []
    monkeypatch.setattr(notebook.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(notebook, "_read", lambda url, timeout_s=15.0: requirements)
    monkeypatch.setattr(notebook.subprocess, "check_call", lambda argv: calls.append(argv))
    assert notebook.install_explore("https://example.org/kit")
    installed = calls[0][calls[0].index("-q") + 1:]
    assert sorted(p.split("==")[0] for p in installed) == sorted(notebook.EXPLORE_PACKAGES)
    assert all("==" in p for p in installed) and not any(p.startswith(("torch", "unsloth", "vllm")) for p in installed)
    monkeypatch.setattr(notebook, "_read", lambda url, timeout_s=15.0: None)
    with pytest.raises(RuntimeError, match="set REPOSITORY"):
        notebook.install_explore("https://example.org/kit")


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
