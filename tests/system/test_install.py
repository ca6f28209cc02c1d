"""The install plan (python -m grpo_kit doctor --install-plan): the runtime's torch kept, the row made for it, vLLM
only where its wheel serves that torch, CUDA and driver; the shipped table against the registry's metadata."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_kit.cli import main
from grpo_kit.system.install import install_plan, install_table

ROOT = Path(__file__).resolve().parents[2]


def _plan(capsys, *args):
    code = main(["doctor", "--install-plan", "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def test_colabs_torch_2_11_cu128_on_a_driver_without_cuda_13_is_kept_and_the_plan_says_why_no_vllm(capsys):
    code, plan = _plan(capsys, "--torch", "2.11.0+cu128", "--driver", "570.172.08")
    assert code == 0 and plan["keep_torch"] is True and plan["vllm"] is None and plan["replaces"] is None
    assert not any(p.startswith(("torch==", "vllm==")) for p in plan["install"])
    assert "unsloth==2026.10.9" in plan["install"] and "trl==1.15.0" in plan["install"]
    # vllm 0.26.0 is the release whose metadata pins torch 2.11.0, and PyPI builds it for CUDA 13.0; driver 570 runs
    # no CUDA 13, so no runtime change helps on it
    assert "vllm 0.26.0" in plan["no_vllm"] and "CUDA 13.0" in plan["no_vllm"] and "without fast_inference" in (
        plan["no_vllm"]) and "which driver 570.172.08 does not run" in plan["no_vllm"]
    assert plan["xformers"] == "xformers==0.0.35" and not any(p.startswith("xformers") for p in plan["install"])
    assert plan["xformers_index_url"] == "https://download.pytorch.org/whl/cu128"  # the build for that CUDA


def test_colabs_default_runtime_gets_vllm_with_pypis_cuda_13_build_of_its_own_torch(capsys):
    """googlecolab/backend-info 2026-08-19: Python 3.13, torch 2.11.0+cu128, driver 580.82.07 (which runs CUDA 13).
    vllm 0.26.0 pins torch==2.11.0, torchvision==0.26.0 and torchaudio==2.11.0 (its METADATA), PyPI's CUDA 13.0
    builds: the plan installs those in place of the runtime's CUDA 12.8 ones, then vLLM and the row."""
    code, plan = _plan(capsys, "--torch", "2.11.0+cu128", "--driver", "580.82.07")
    assert code == 0 and not plan["fatal"] and plan["vllm"] == "0.26.0" and plan["no_vllm"] is None
    assert plan["keep_torch"] is False and plan["replaces"] == "2.11.0+cu128" and plan["cuda"] == "13.0"
    assert plan["install"][:3] == ["torch==2.11.0", "torchvision==0.26.0", "torchaudio==2.11.0"]
    assert "vllm==0.26.0" in plan["install"] and "unsloth==2026.10.9" in plan["install"]
    assert plan["xformers_index_url"] == "https://download.pytorch.org/whl/cu130"  # the new torch's CUDA
    note = plan["torch_note"]
    assert "torch 2.11.0+cu128 (CUDA 12.8) is replaced by PyPI's torch 2.11.0 (CUDA 13.0)" in note
    assert " GB to download" in note and "restart" in note and "--keep-torch" in note
    text = install_plan("2.11.0+cu128", "580.82.07").describe()
    assert text.splitlines()[0] == note and "torch 2.11.0+cu128 is replaced: torch==2.11.0 (CUDA 13.0)" in text
    code, kept = _plan(capsys, "--torch", "2.11.0+cu128", "--driver", "580.82.07", "--keep-torch")
    assert code == 0 and kept["keep_torch"] and kept["vllm"] is None and kept["replaces"] is None
    assert "kept as asked" in kept["no_vllm"] and not any(p.startswith("torch") for p in kept["install"])
    assert main(["doctor", "--keep-torch"]) == 2  # --keep-torch belongs to --install-plan
    # PyPI's torch 2.11.0 once installed reads as 2.11.0 (no local label): the plan then keeps it, with vLLM
    again = install_plan("2.11.0", "580.82.07")
    assert again.keep_torch and again.vllm == "0.26.0" and again.replaces is None


def test_colabs_torch_2_10_cu128_gets_no_vllm_outside_trls_range_and_the_runtime_that_has_one(capsys):
    """googlecolab/colabtools#5801: Colab's torch 2.10 + CUDA 12.8. vllm 0.19.1 is the newest release pinning torch
    2.10 (CUDA 12.8), below trl 1.15.0's declared vLLM range (0.21.0 to 0.31.0); the fix named is a runtime the
    driver runs, never a CUDA it cannot."""
    code, plan = _plan(capsys, "--torch", "2.10.0+cu128", "--driver", "580.82.07")
    assert code == 0 and plan["keep_torch"] and plan["vllm"] is None and not plan["fatal"]
    assert "vllm 0.19.1, the newest release that pins torch 2.10, is outside trl 1.15.0's declared vLLM range" in (
        plan["no_vllm"])
    assert "2.13.0 built for CUDA 13 (vllm 0.31.0) or 2.11.0 built for CUDA 13 (vllm 0.26.0)" in plan["no_vllm"]
    assert plan["xformers"] == "xformers==0.0.34"  # unsloth's cu128onlytorch2100 extra
    old = install_plan("2.10.0+cu128", "550.54.15")
    assert "which driver 550.54.15 does not run (CUDA 13 needs >= 580.65.06)" in old.no_vllm
    assert old.describe().splitlines()[0] == old.no_vllm  # said first, before the packages


def test_the_pinned_runtime_gets_vllm_0_31_within_trls_range(capsys):
    code, plan = _plan(capsys, "--torch", "2.13.0+cu130", "--driver", "580.82.07")
    assert code == 0 and plan["keep_torch"] and plan["vllm"] == "0.31.0" and plan["problems"] == []
    assert plan["no_vllm"] is None
    assert "vllm==0.31.0" in plan["install"] and plan["xformers"] is None  # no xformers build for torch 2.13
    assert "scaled_dot_product_attention" in plan["xformers_note"]


def test_a_cuda_12_runtime_on_a_535_driver_runs_by_minor_version_compatibility(capsys):
    """MIN_DRIVER per CUDA minor refused CUDA 12.x torch on drivers 535-565; CUDA 12 minor-version
    compatibility runs any 12.x on >= 525.60.13 (NVIDIA's CUDA Compatibility guide)."""
    code, plan = _plan(capsys, "--torch", "2.11.0+cu128", "--driver", "535.104.05")
    assert code == 0 and not plan["fatal"] and plan["xformers"] == "xformers==0.0.35"
    code, plan = _plan(capsys, "--torch", "2.12.1+cu126", "--driver", "520.61.05")
    assert code == 2 and "needs >= 525.60.13" in plan["problems"][0]
    no_build = install_plan("2.12.1+cu128", "570.172.08")  # PyTorch's index builds 0.0.35 for 2.12.1 on 12.6/13.0
    assert no_build.xformers is None and "for CUDA 12.6, 13.0 only" in no_build.xformers_note


@pytest.mark.parametrize("torch", ["2.11.0+cu128", "2.13.0+cu130", None])
def test_a_driver_too_old_for_every_row_exits_2_naming_it(capsys, torch):
    code, plan = _plan(capsys, *(["--torch", torch] if torch else []), "--driver", "470.57.02")
    if torch is None:  # this machine's torch is a CPU build: the same refusal comes from --torch
        return
    assert code == 2 and plan["fatal"] and "470.57.02" in plan["problems"][0] and plan["install"] == []


def test_each_rule_of_the_plan():
    assert install_plan("2.13.0+cu130", None).fatal  # no driver
    fresh = install_plan(None, "580.82.07")
    assert not fresh.keep_torch and "torch==2.13.0" in fresh.install and fresh.vllm == "0.31.0"
    # no torch and a driver below CUDA 13's: PyPI's torch 2.10.0 (CUDA 12.8), never the pinned CUDA 13.0 one
    older = install_plan(None, "570.172.08")
    assert not older.fatal and "torch==2.10.0" in older.install and "torch 2.10.0 (CUDA 12.8)" in older.problems[0]
    assert install_plan(None, "470.57.02").fatal
    # a release without a row: the torch advised is one the driver runs
    unknown = install_plan("2.15.0+cu130", "570.172.08")
    assert unknown.fatal and "not a release the kit has a package set for" in unknown.problems[0]
    assert "pip install torch==2.10.0 (PyPI's build, CUDA 12.8" in unknown.problems[0]
    assert "pip install torch==2.13.0" in install_plan("2.15.0+cu130", "580.82.07").problems[0]
    assert "CPU build" in install_plan("2.13.0+cpu", "580.82.07").problems[0]
    no_vllm = install_plan("2.12.1+cu126", "560.35.03")
    assert not no_vllm.fatal and no_vllm.vllm is None and "no vLLM release pins torch 2.12" in no_vllm.no_vllm
    newest = install_plan("2.14.1+cu130", "580.82.07")  # vllm 0.33.0 pins 2.14.0, above trl 1.15.0's range
    assert newest.vllm is None and "vllm 0.33.0, the newest release that pins torch 2.14" in newest.no_vllm
    cu13_old_driver = install_plan("2.13.0+cu130", "575.51.03")
    assert cu13_old_driver.fatal and "575.51.03" in cu13_old_driver.problems[0]


def test_the_table_has_a_row_per_supported_torch_and_the_pinned_row_is_requirements_txt():
    table = install_table()
    assert [row["torch_minor"] for row in table["rows"]] == ["2.10", "2.11", "2.12", "2.13", "2.14"]
    pins = dict(line.split("#")[0].strip().split("==") for line in (ROOT / "requirements.txt").read_text().splitlines()
                if "==" in line.split("#")[0])
    row = next(r for r in table["rows"] if r["torch_minor"] == table["pinned"])
    assert row["torch"] == pins["torch"] and row["vllm"] == pins["vllm"]
    # no build for the pinned torch; PyPI's, unsloth's dependency
    assert row["releases"][row["torch"]]["xformers"] is None and "xformers" in pins
    assert row["packages"] == {name: pins[name] for name in row["packages"]}
    for row in table["rows"]:  # each row's own requirements hold among its versions
        assert row["problems"] == [] or row["vllm"] is None


def _registry_reachable() -> bool:
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "trl"], capture_output=True, timeout=60)
    return out.returncode == 0


def _install_table_script():
    """scripts/install_table.py as a module: what reads the registry's metadata through pip."""
    spec = importlib.util.spec_from_file_location("install_table", ROOT / "scripts" / "install_table.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def _pinned_row_asks(pool):
    """The pinned row's metadata from the registry, each pip call in ``pool``: a function that waits for them and
    returns ``(script, row, metas, releases)``."""
    def ask():
        script, table = _install_table_script(), install_table()
        row = next(r for r in table["rows"] if r["torch_minor"] == table["pinned"])
        requirements = [f"torch=={row['torch']}", f"vllm=={row['vllm']}"]
        requirements += [f"{name}=={version}" for name, version in row["packages"].items()]
        metas = pool.submit(script.fetch, requirements)
        releases = [pool.submit(script.fetch_one, f"torch=={release}") for release in row["releases"]]
        return script, row, metas.result(), [release.result() for release in releases]

    return pool.submit(ask).result


def _plan_requirements() -> list[str]:
    """What the plan for Colab's default runtime installs (torch 2.11.0+cu128, driver 580.82.07)."""
    return install_plan("2.11.0+cu128", "580.82.07").install


#: The tests that ask the registry (pip, mostly waiting on it), by name: what each asks, started in a thread pool.
REGISTRY_ASKS = {
    "test_the_shipped_pinned_row_equals_the_registrys_metadata": _pinned_row_asks,
    **{f"test_the_pinned_gpu_stack_resolves_for_cpython_3_12_and_3_13[{python}]":
       (lambda pool, python=python: pool.submit(_resolve, python, ["-r", str(ROOT / "requirements.txt")]).result)
       for python in ("3.12", "3.13")},
    "test_colabs_default_runtime_plan_resolves_for_cpython_3_13":
        lambda pool: pool.submit(_resolve, "3.13", _plan_requirements()).result,
}


@pytest.fixture(scope="module")
def registry_asked(request):
    """Every registry question of this file's selected tests, asked at once when the first of them starts: each pip
    call mostly waits on the registry (the resolutions a minute or more each), so together they take about as long as
    the longest one, not the sum.
    ``{test name: a function that waits for its answer}``, and ``"reachable"``: whether pip reaches the registry."""
    import concurrent.futures

    selected = {item.name for item in request.session.items if item.path == request.path}  # doctests have no .module
    with concurrent.futures.ThreadPoolExecutor(16) as pool:  # more than the calls: one of them waits on others
        asked = {"reachable": pool.submit(_registry_reachable).result}
        asked |= {name: ask(pool) for name, ask in REGISTRY_ASKS.items() if name in selected}
        yield asked


@pytest.fixture
def registry_answer(request, registry_asked):
    """A function that waits for this test's answer from the registry (:func:`registry_asked`), called in the test
    so that what pip refused fails the test itself; skipped where pip cannot reach the registry."""
    if not registry_asked["reachable"]():
        pytest.skip("the package registry cannot be reached from here")
    return registry_asked[request.node.name]


@pytest.mark.skipif(importlib.util.find_spec("packaging") is None, reason="needs packaging")
def test_the_shipped_pinned_row_equals_the_registrys_metadata(registry_answer):
    """Read again from the registry (Requires-Dist through pip's --dry-run --report; no wheel is downloaded)."""
    script, row, metas, releases = registry_answer()
    assert script.derive_row(row["torch_minor"], metas, releases=releases, download_gb=row["vllm_download_gb"]) == row


@pytest.mark.registry  # make install-table-check: it tests PyPI's releases, not the kit's code
def test_the_shipped_table_is_what_the_registry_says_now():
    """scripts/install_table.py --check: every row regenerated from the registry (10 minutes on 2 busy cores, mostly
    waiting on it: every torch release's metadata and the sizes of a vLLM row's files), so a new vLLM, torch or
    xformers release that changes a row fails here until the table is rewritten."""
    if not _registry_reachable():
        pytest.skip("the package registry cannot be reached from here")
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "install_table.py"), "--check"],
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]


def test_a_machine_without_a_gpu_is_told_the_cpu_install_not_a_gpu_plan(capsys, monkeypatch):
    """doctor --install-plan on a CPU-only machine (or --torch of a CUDA build without --driver) names no torch to
    keep, no vLLM and no packages, as if a GPU install applied: it says there is no GPU here and what the CPU route
    installs."""
    import grpo_kit.training.doctor

    monkeypatch.setattr(grpo_kit.training.doctor, "nvidia_driver", lambda: None)
    for args in ([], ["--torch", "2.13.0+cu130"]):
        assert main(["doctor", "--install-plan", *args]) == 2
        out = capsys.readouterr().out
        assert out.count("\n") == 1 and out.startswith("problem: no NVIDIA driver found"), out
        assert "pip install -r requirements-cpu.txt" in out and "preset cpu-tiny" in out
        assert "is kept" not in out and "vLLM:" not in out and "install:" not in out


DRIVERS = ["470.57.02", "535.104.05", "570.172.08", "580.82.07"]


def _runtimes():
    """Every torch release of every row, as PyPI builds it and as PyTorch's index builds it for CUDA 12.6, 12.8 and
    13.0."""
    for row in install_table()["rows"]:
        for release in row["releases"]:
            yield row, release
            yield from ((row, f"{release}+cu{tag}") for tag in ("126", "128", "130"))


@pytest.mark.parametrize("driver", DRIVERS)
def test_every_runtime_row_and_driver_gets_vllm_wherever_one_can_run(driver):
    """For every runtime the table knows and each driver: a plan is fatal exactly where the driver cannot run the
    runtime's torch; vLLM is installed exactly where the torch it ends with (kept or replaced) is the release the row's
    vLLM pins, built for its CUDA major, on a driver that runs it; torch is replaced only for that; every line speaks
    of the runtime's own release, never of another release of its row (torch 2.14.0 was answered about 2.14.1)."""
    from grpo_kit.system.install import cuda_of, driver_problem, version_tuple

    for row, torch in _runtimes():
        release, cuda = torch.split("+")[0], cuda_of(torch, default=row["releases"][torch.split("+")[0]]["cuda"])
        plan = install_plan(torch, driver)
        assert plan.fatal == (driver_problem(driver, cuda, "") is not None), (torch, driver)
        if plan.fatal:
            continue
        could = bool(row["vllm"]) and version_tuple(release) == version_tuple(row["vllm_torch"]) and \
            driver_problem(driver, row["vllm_cuda"], "") is None
        assert (plan.vllm is not None) == could, (torch, driver, plan.no_vllm)
        assert (plan.vllm is None) == (plan.no_vllm is not None), (torch, driver)
        swapped = could and cuda.split(".")[0] != row["vllm_cuda"].split(".")[0]
        assert (plan.replaces == torch) == swapped and plan.keep_torch == (not swapped), (torch, driver)
        pinned = [p for p in plan.install if p.split("==")[0] in ("torch", "torchvision", "torchaudio")]
        assert pinned == ([f"torch=={row['vllm_torch']}", *(f"{n}=={v}" for n, v in row["vllm_companions"].items())]
                          if swapped else []), (torch, driver)
        assert (f"vllm=={plan.vllm}" in plan.install) == (plan.vllm is not None)
        text = plan.describe()
        for other in row["releases"]:
            if other not in (release, row["vllm_torch"]):
                assert f"torch {other}" not in text and f"torch=={other}" not in text, (torch, other, text)


def test_a_release_newer_than_the_table_is_answered_with_the_newest_it_read_and_says_so():
    table = install_table()
    row = next(r for r in table["rows"] if r["torch_minor"] == "2.14")
    newest = max(row["releases"], key=lambda v: tuple(map(int, v.split("."))))
    plan = install_plan("2.14.9+cu130", "580.82.07")
    assert not plan.fatal and any("torch 2.14.9 is not among the releases" in p and f"{newest}'s" in p
                                  for p in plan.problems)


def _resolve(python: str, requirements: list[str]) -> dict[str, str]:
    """What pip's resolver installs for ``requirements`` on CPython ``python`` manylinux x86-64 (metadata only: no
    wheel is downloaded), {name: version}; pip's refusal fails the test with pip's words."""
    try:
        found = _install_table_script().dry_run(requirements, python=python, timeout=900)
    except subprocess.CalledProcessError as refused:
        pytest.fail(refused.stderr[-3000:])
    from packaging.utils import canonicalize_name

    return {canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"] for item in found}


def _pinned(lines: list[str]) -> dict[str, str]:
    """``{name: version}`` of the ``NAME==VERSION`` lines (comments dropped), each name as :func:`_resolve` spells it
    (PEP 503's normal form)."""
    from packaging.utils import canonicalize_name

    pairs = [line.split("#")[0].split("==") for line in lines]
    return {canonicalize_name(pair[0].strip()): pair[1].strip() for pair in pairs if len(pair) == 2}


@pytest.mark.slow
@pytest.mark.parametrize("python", ["3.12", "3.13"])
def test_the_pinned_gpu_stack_resolves_for_cpython_3_12_and_3_13(python, registry_answer):
    """requirements.txt as pip's resolver takes it for CPython 3.12 (the lent GPU machine) and 3.13 (Colab's runtime,
    googlecolab/backend-info 2026-08-19), manylinux x86-64: every pin kept (about a minute each on the registry,
    asked together with this file's other registry questions)."""
    pins = _pinned((ROOT / "requirements.txt").read_text().splitlines())
    found = registry_answer()  # pip's resolution of requirements.txt on this Python (REGISTRY_ASKS)
    assert {name: found.get(name) for name in pins} == pins


@pytest.mark.slow
def test_colabs_default_runtime_plan_resolves_for_cpython_3_13(registry_answer):
    """The plan for Colab's runtime (torch 2.11.0+cu128, driver 580.82.07, Python 3.13): PyPI's torch 2.11.0 and its
    companions, vllm 0.26.0 and the row's packages resolve together as pip takes them on Python 3.13."""
    pins = _pinned(_plan_requirements())
    found = registry_answer()  # pip's resolution of these requirements on Python 3.13 (REGISTRY_ASKS)
    assert {name: found.get(name) for name in pins} == pins
