"""The GPU proof's repacked wheels import on the CPU stack: unsloth without Studio and its command line,
bitsandbytes with only the CPU library and the lent machine's CUDA one (benchmarks/wheel_bundle.py, REPACK), installed
with pip --target as benchmarks/gpu_call.sh installs them, imported from there in a fresh process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import wheel_bundle

from .conftest import VLLM_C_RUNS

REPACKED = ("unsloth", "unsloth_zoo", "bitsandbytes")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bundle")
    versions = {name: version for name, version in wheel_bundle.pins().items() if name in REPACKED}
    got = subprocess.run(wheel_bundle.download_command(versions, folder), capture_output=True, text=True)
    if got.returncode != 0:
        pytest.skip(f"the package registry cannot be reached from here: {got.stderr.strip()[-200:]}")
    manifest = wheel_bundle.bundle(folder, versions, tree=0)
    target = folder / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(target),
                    *map(str, folder.glob("*.whl"))], check=True)
    return target, manifest


def test_the_repacked_wheels_import_from_their_folder(site, tmp_path):
    target, manifest = site
    repacked = {w["name"].split("-")[0]: w for w in manifest["wheels"] if w["repacked"]}
    assert set(repacked) == {"unsloth", "bitsandbytes"}
    assert sum(w["bytes"] for w in manifest["wheels"]) < 10 * 2**20  # from 75 MiB as downloaded
    assert sorted(p.name for p in (target / "bitsandbytes").glob("*.so")) == [
        "libbitsandbytes_cpu.so", f"libbitsandbytes_cuda{wheel_bundle.MACHINE_CUDA}.so"]
    hide = "" if VLLM_C_RUNS else "sys.modules['vllm'] = None; "  # as tests/stack/conftest.py does
    code = (f"import sys; {hide}import unsloth, unsloth_zoo, bitsandbytes; "
            "print(unsloth.__file__); print(unsloth_zoo.__file__); print(bitsandbytes.__file__)")
    env = {**os.environ, "PYTHONPATH": str(target), "UNSLOTH_ALLOW_CPU": "1", "UNSLOTH_COMPILE_DISABLE": "1",
           "UNSLOTH_COMPILE_LOCATION": str(tmp_path / "compiled")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    files = [Path(line) for line in done.stdout.strip().splitlines()[-3:]]
    assert all(target in f.parents for f in files), files  # the repacked copies, not .venv-stack's
