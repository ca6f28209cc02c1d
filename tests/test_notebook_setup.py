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
                                           "`repository`"):
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


def test_every_notebook_installs_from_its_repository_parameter():
    for path in NOTEBOOKS:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        parameters = next(c for c in cells if "parameters" in c.get("metadata", {}).get("tags", []))
        assert "repository = " in "".join(parameters["source"]), path.name
        install = next(c for c in cells if "install_stack" in "".join(c["source"]))
        source = "".join(install["source"])
        assert "install_stack(repository, branch)" in source and "ls-remote" in source, path.name


def test_the_install_cell_refuses_an_unreachable_repository_in_one_line(tmp_path):
    """The cell's own check, run where grpo_kit is not importable (as on a fresh runtime)."""
    cells = json.loads(NOTEBOOKS[0].read_text(encoding="utf-8"))["cells"]
    source = "".join(next(c for c in cells if "install_stack" in "".join(c["source"]))["source"])
    script = tmp_path / "cell.py"
    script.write_text(f"repository = {str(tmp_path / 'missing')!r}\nbranch = 'main'\n" + source)
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
