"""vLLM's bundle for the lent GPU machine, what a CPU checks without downloading it (small fake wheels): the
trimming and its manifest, the pieces' sizes, the calls that carry a piece each (``gpu_call.sh --vllm``: kept,
joined, checked, installed with pip --target), the refusals, and the GPU part's plan. The real bundle is rehearsed by
``make vllm-rehearsal`` (benchmarks/vllm_rehearsal.py), beside make test: it downloads 330 MB."""

from __future__ import annotations

import csv
import io
import json
import os
import random
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from benchmarks import gpu_vllm, vllm_bundle, vllm_pieces
from tests.test_gpu_proof import make_wheel

ROOT = Path(__file__).resolve().parents[1]
COMMA = "vllm/model_executor/layers/fused_moe/configs/E=1,N=14336,device_name=NVIDIA_H200.json"


def noise(size: int, seed: int) -> str:
    """Text that xz cannot shrink much (hex digits of random bytes), so the archive has a size worth cutting."""
    return random.Random(seed).randbytes(size // 2).hex()


@pytest.fixture
def built(tmp_path, monkeypatch):
    """A bundle of a fake vllm (every trimmed path present, a kept 'library', a file name with commas) and one
    fake dependency, cut for calls of 15 KB with a 1 KB tree and a 4 KB proof bundle on the last call."""
    out = tmp_path / "wheels-vllm"
    (out / "dl").mkdir(parents=True)
    trimmed = {"vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so": noise(4000, 1), "vllm/_moe_C_stable_libtorch.abi3.so":
               noise(4000, 2), "vllm/vllm-rs": noise(4000, 3), "vllm/third_party/deep_gemm/__init__.py": "G = 1\n",
               "vllm/third_party/fmha_sm100/api.py": "F = 1\n"}
    kept = {"vllm/__init__.py": "VALUE = 1\n", "vllm/_C_stable_libtorch.abi3.so": noise(60000, 4), COMMA: "{}\n"}
    make_wheel(out / "dl", "vllm", vllm_bundle.VLLM, {**trimmed, **kept},
               entry_points="[vllm.general_plugins]\nprobe = vllm:VALUE\n")
    make_wheel(out / "dl", "fakedep", "1.0", {"fakedep/__init__.py": "VALUE = 2\n"})
    monkeypatch.setattr(vllm_bundle, "CARRIED", {"fakedep": ("1.0", "a test's dependency")})
    manifest = vllm_bundle.build(out, download=False, tree=1000, kit=4000, limit=15000, preset=0)
    return out, manifest


def test_piece_sizes_are_the_fewest_that_fit_each_call():
    for total, cap, last_cap in [(100, 40, 30), (10, 40, 30), (81_000_000, 48_000_000, 38_000_000), (7, 1, 1),
                                 (1000, 300, 10)]:
        sizes = vllm_bundle.piece_sizes(total, cap, last_cap)
        assert sum(sizes) == total and max(sizes[:-1] or [0]) <= cap and sizes[-1] <= last_cap
        fewer = len(sizes) - 1
        assert fewer == 0 or (fewer - 1) * cap + last_cap < total  # one piece fewer cannot hold it
    with pytest.raises(ValueError, match="no room"):
        vllm_bundle.piece_sizes(10, 5, 0)


def test_the_bundle_is_trimmed_listed_and_cut_into_pieces(built, tmp_path):
    out, manifest = built
    assert [t["pattern"] for t in manifest["trimmed"]] == [pattern for pattern, _ in vllm_bundle.TRIM]
    assert all(t["files"] == 1 and t["bytes"] > 0 and t["why"] for t in manifest["trimmed"])
    assert {w["name"].split("-")[0] for w in manifest["wheels"]} == {"vllm", "fakedep"}
    assert manifest["environment"] == {"VLLM_USE_FLASHINFER_SAMPLER": "0", "VLLM_NO_USAGE_STATS": "1"}
    sizes = [p["bytes"] for p in manifest["pieces"]]
    assert sum(sizes) == manifest["archive"]["bytes"] and len(sizes) >= 3
    assert sizes == vllm_bundle.piece_sizes(manifest["archive"]["bytes"], 15000 - 1000, 15000 - 1000 - 4000)
    for piece in manifest["pieces"]:  # each call carries its piece and the manifest
        folder = out / piece["folder"]
        assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", piece["name"]]
        assert json.loads((folder / "manifest.json").read_text()) == manifest
    assert not (out / vllm_bundle.ARCHIVE).exists() and not (out / "stage").exists()
    wheels = _joined(out, tmp_path)
    vllm_wheel = next(w for w in wheels if w.name.startswith("vllm-"))
    with zipfile.ZipFile(vllm_wheel) as z:
        names = set(z.namelist())
        assert not any(name.startswith(("vllm/vllm_flash_attn/_vllm_fa2", "vllm/_moe_C", "vllm/vllm-rs",
                                        "vllm/third_party")) for name in names)
        assert {"vllm/__init__.py", "vllm/_C_stable_libtorch.abi3.so", COMMA} <= names
        assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist())  # xz compresses the archive
        info = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        assert "vllm.general_plugins" in z.read(info).decode()  # vLLM's plugins stay
        record = next(n for n in names if n.endswith(".dist-info/RECORD"))
        rows = list(csv.reader(io.StringIO(z.read(record).decode())))
        assert all(len(row) == 3 for row in rows) and any(row[0] == COMMA for row in rows)


def _joined(out: Path, tmp_path: Path) -> list[Path]:
    """Every piece kept as the machine keeps them, then joined: the wheels."""
    calls = tmp_path / "calls"
    for folder in sorted(out.glob("piece-*")):
        (calls / folder.name).mkdir(parents=True)
        (calls / folder.name / folder.name).symlink_to(folder)
        kept, _ = vllm_pieces.store(calls / folder.name, tmp_path / "keep")
    return vllm_pieces.assemble(kept, tmp_path / "wheels")


def test_the_machine_keeps_each_piece_and_joins_them_once_all_are_there(built, tmp_path):
    out, manifest = built
    keep = tmp_path / "keep"
    count = len(manifest["pieces"])
    for number, piece in enumerate(manifest["pieces"], 1):
        call = tmp_path / f"call-{number}"
        (call / piece["folder"]).mkdir(parents=True)
        (call / piece["folder"] / piece["name"]).write_bytes((out / piece["folder"] / piece["name"]).read_bytes())
        (call / piece["folder"] / "manifest.json").write_text((out / "manifest.json").read_text())
        folder, missing = vllm_pieces.store(call, keep)
        assert missing == list(range(number + 1, count + 1))
        if missing:
            with pytest.raises(ValueError, match="have not come yet"):
                vllm_pieces.assemble(folder, tmp_path / "early")
    assert vllm_pieces.store(tmp_path / "nothing-carried", keep) == (folder, [])  # a later call goes on with it
    assert sorted(w.name for w in vllm_pieces.assemble(folder, tmp_path / "wheels")) == sorted(
        w["name"] for w in manifest["wheels"])
    damaged = folder / manifest["pieces"][0]["name"]
    damaged.write_bytes(b"x" + damaged.read_bytes()[1:])
    with pytest.raises(ValueError, match="not the archive the manifest lists"):
        vllm_pieces.assemble(folder, tmp_path / "wheels")


def test_a_damaged_or_oversized_piece_is_refused_before_it_is_kept(built, tmp_path):
    out, manifest = built
    piece = out / "piece-1"
    assert vllm_pieces.check(piece, limit=64 * 2**20) is None
    assert "over" in vllm_pieces.check(piece, limit=1000)
    file = piece / manifest["pieces"][0]["name"]
    file.write_bytes(file.read_bytes()[:-1])
    assert "not the piece its manifest lists" in vllm_pieces.check(piece)
    with pytest.raises(ValueError, match="not the piece its manifest lists"):
        vllm_pieces.store(out, tmp_path / "keep")
    with pytest.raises(ValueError, match="no vLLM piece was carried"):
        vllm_pieces.store(tmp_path / "empty", tmp_path / "elsewhere")


def test_back_to_back_calls_bring_the_bundle_and_install_it(built, tmp_path):
    """gpu_call.sh --vllm, once per piece as the device tool's calls carry them: each piece kept, and the last call
    joins, checks and installs the wheels with pip --target (here this Python's pip; --no-run: no GPU part)."""
    out, manifest = built
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    env.pop("OUT", None)
    (tmp_path / "tmp").mkdir()

    def call(number: int | None) -> subprocess.CompletedProcess:
        carried = tmp_path / f"call-{number}"
        carried.mkdir()
        if number:
            (carried / f"piece-{number}").symlink_to(out / f"piece-{number}")
        return subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_call.sh"), "--vllm", "--out",
                               str(tmp_path / f"out-{number}"), "--pieces", str(carried), "--keep",
                               str(tmp_path / "keep"), "--wheels", str(tmp_path / "no-wheels"), "--python",
                               sys.executable, "--no-run"], capture_output=True, text=True, env=env, timeout=300)

    count = len(manifest["pieces"])
    for number in range(1, count + 1):
        done = call(number)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"{number} of {count} pieces on this machine" in done.stdout
        assert ("still to carry" in done.stdout) == (number < count)
    assert "joined, checked and installed vLLM's bundle" in done.stdout
    site = next((tmp_path / "keep").glob("site-*"))
    assert (site / "vllm" / "__init__.py").is_file() and (site / "fakedep" / "__init__.py").is_file()
    assert not (site / "vllm" / "vllm-rs").exists() and (tmp_path / "out-1" / "call.log").is_file()
    again = call(0)  # a later call that carries nothing finds it installed
    assert again.returncode == 0 and "installed already" in again.stdout, again.stdout + again.stderr


def test_the_gpu_part_plans_its_parts_and_refuses_without_cuda(tmp_path, capsys):
    assert gpu_vllm.main(["--plan"]) == 0
    assert [line.split(":")[0] for line in capsys.readouterr().out.splitlines()] == [
        name for name, _, _ in gpu_vllm.PARTS]
    assert gpu_vllm.main(["--out", str(tmp_path)]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err
    done = [{"part": "vllm-import", "phase": "done"}, {"part": "vllm-llm", "phase": "generating", "cut": "x"}]
    assert gpu_vllm.to_run(None, done) == ["vllm-llm", "plain-generate", "a100-unsloth-vllm"]
    assert gpu_vllm.to_run(["vllm-import"], done) == ["vllm-import"]
    with pytest.raises(ValueError, match="unknown part"):
        gpu_vllm.to_run(["nope"], done)


def test_a_call_without_unsloth_skips_its_step_and_keeps_earlier_rows(tmp_path, monkeypatch):
    import argparse
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "unsloth" else real(name, *a))
    args = argparse.Namespace(out=tmp_path / "out", work=tmp_path / "work", budget_s=None, miniature=False, steps=2)
    earlier = [{"part": "vllm-import", "phase": "done"}]
    rows = gpu_vllm.run_call(["a100-unsloth-vllm"], earlier, args)
    assert [r["part"] for r in rows] == ["vllm-import", "a100-unsloth-vllm"] and rows[0]["call"] == "earlier"
    assert "Unsloth is not installed" in rows[1]["skipped"] and not gpu_vllm.finished(rows[1])
    kept = [json.loads(line) for line in (tmp_path / "work" / "raw.jsonl").read_text().splitlines()]
    assert gpu_vllm.to_run(None, earlier + kept) == ["vllm-llm", "plain-generate", "a100-unsloth-vllm"]
    assert "a100-unsloth-vllm" in (tmp_path / "out" / "summary.md").read_text()


def test_the_rehearsal_places_each_failed_import_and_finds_those_no_try_guards(tmp_path):
    from benchmarks import vllm_imports

    classify = vllm_imports.classify
    assert classify("flashinfer", ModuleNotFoundError("x", name="flashinfer"))[0] == "off path"
    assert classify("vllm.vllm_flash_attn.cute.interface", ModuleNotFoundError("x", name="cutlass"))[0] == "off path"
    assert classify("vllm.third_party.flash_linear_attention.ops.index",
                    ImportError("undefined symbol: cuModuleGetFunc"))[0] == "needs a GPU"
    assert classify("vllm.v1.spec_decode.ngram_proposer", ModuleNotFoundError("x", name="numba")) == (
        "on the machine", "numba")
    assert classify("vllm.third_party.deep_gemm", ModuleNotFoundError("x", name="vllm.third_party.deep_gemm")) == (
        "trimmed", "vllm/third_party/deep_gemm/*")
    assert classify("vllm.worker.model_runner", ModuleNotFoundError("x", name="vllm.worker"))[0] == "not in vllm 0.26.0"
    assert classify("vllm.x", ModuleNotFoundError("x", name="arrayfire"))[0] == "unknown"  # 'ray' is not in it
    source = tmp_path / "mod.py"
    source.write_text("import os\ntry:\n    import a_guarded\nexcept ImportError:\n    pass\n\n"
                      "def f():\n    from . import sibling\n    from .sub import name\n    try:\n        import b\n"
                      "    except Exception:\n        pass\n    import c\n")
    found = {f["target"]: f["guarded"] for f in vllm_imports.imports_inside("pkg.mod", source)}
    assert found == {"a_guarded": True, "pkg": False, "pkg.sibling": False, "pkg.sub": False, "pkg.sub.name": False,
                     "b": True, "c": False}  # `import os` ran at import: not listed


def test_the_same_wheels_pack_to_the_same_bytes(built, tmp_path, monkeypatch):
    """A bundle built again from the same downloads is byte for byte the same (a piece carried from an earlier build
    still joins with one from a later)."""
    out, manifest = built
    again = tmp_path / "again"
    (again / "dl").mkdir(parents=True)
    for wheel in (out / "dl").glob("*.whl"):
        (again / "dl" / wheel.name).write_bytes(wheel.read_bytes())
    import time

    later = time.time() + 3600  # an hour on: nothing in the bundle may carry the time it was built
    monkeypatch.setattr(time, "time", lambda: later)
    rebuilt = vllm_bundle.build(again, download=False, tree=1000, kit=4000, limit=15000, preset=0)
    assert rebuilt["archive"]["sha256"] == manifest["archive"]["sha256"]
