"""The GPU proof, what a CPU can check: the one-call script end to end at toy shapes (bundle
checked, wheels installed into a folder of their own, every row in the given folder), the refusal without CUDA, a
route at toy shapes, and the wheel bundle's repacking (small fake wheels, no download; the real repacked wheels
import on the CPU stack in tests/stack/test_gpu_bundle.py)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from benchmarks import gpu_proof, wheel_bundle

ROOT = Path(__file__).resolve().parents[1]


def make_wheel(folder: Path, name: str, version: str, files: dict[str, str], entry_points: str = "") -> Path:
    """A valid wheel (pip installs it) holding ``files`` and a dist-info with ``RECORD``."""
    info = f"{name}-{version}.dist-info"
    files = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    if entry_points:
        files[f"{info}/entry_points.txt"] = entry_points
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        record = []
        for file, text in files.items():
            z.writestr(file, text)
            digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
            record.append(f"{file},sha256={digest},{len(text.encode())}")
        z.writestr(f"{info}/RECORD", "\n".join(record + [f"{info}/RECORD,,"]) + "\n")
    return path


def test_the_one_call_script_runs_end_to_end_at_toy_shapes_into_the_given_folder(tmp_path):
    """Benchmarks/gpu_call.sh --miniature: the same steps as on the lent machine (bundle checked against its
    manifest and the size limit, installed with pip --target, the proof run into --out), on this CPU."""
    bundle = tmp_path / "wheels"
    bundle.mkdir()
    make_wheel(bundle, "grpo_kit_probe", "1.0", {"grpo_kit_probe/__init__.py": "VALUE = 1\n"})
    manifest = wheel_bundle.bundle(bundle, {"grpo_kit_probe": "1.0"}, repack_rules={})
    assert manifest["fits"] and manifest["tree_bytes"] > 1_000_000  # the tracked tree, measured by git
    out = tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env.pop("OUT", None)
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_call.sh"), "--miniature", "--out", str(out),
                           "--wheels", str(bundle), "--python", sys.executable, "--", "--routes", "eval"],
                          capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["call.log", "log.txt", "raw.jsonl", "summary.md"]
    rows = [json.loads(line) for line in (out / "raw.jsonl").read_text().splitlines()]
    assert [r["route"] for r in rows] == ["machine", "pipeline-smoke", "eval"]
    smoke = rows[1]
    assert smoke["ok"] and [s["step"] for s in smoke["steps"]] == [
        "02 plan_baseline", "02 measure_before", "03 plan_training", "03 train", "04 open_run", "04 measure_after",
        "04 export_run (merged, verified)"]
    assert all(s["seconds"] >= 0 for s in smoke["steps"]) and "PASSED" in smoke["steps"][-1]["verification"]
    assert rows[2]["questions_per_s"] > 0
    call = (out / "call.log").read_text()
    assert "fits one call" in call and "installed 1 wheels" in call and "exit 0" in call
    assert "Pipeline smoke" in (out / "summary.md").read_text()


def test_the_script_refuses_a_bundle_its_manifest_does_not_describe(tmp_path):
    bundle = tmp_path / "wheels"
    bundle.mkdir()
    make_wheel(bundle, "grpo_kit_probe", "1.0", {"grpo_kit_probe/__init__.py": ""})
    wheel_bundle.bundle(bundle, {"grpo_kit_probe": "1.0"}, repack_rules={})
    make_wheel(bundle, "stray", "2.0", {"stray/__init__.py": ""})
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_call.sh"), "--miniature", "--out",
                           str(tmp_path / "out"), "--wheels", str(bundle), "--python", sys.executable],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "holds other wheels than its manifest lists" in done.stdout
    assert not (tmp_path / "out" / "raw.jsonl").exists()
    assert "manifest.json is missing" in wheel_bundle.check(tmp_path)
    (bundle / "stray-2.0-py3-none-any.whl").unlink()
    assert wheel_bundle.check(bundle) is None
    assert "over 1 MiB" in wheel_bundle.check(bundle, limit=2**20)  # with the tree, over a 1 MiB limit


def test_without_cuda_the_proof_refuses_clearly(capsys):
    assert gpu_proof.main(["--out", "unused"]) == 2
    assert "no CUDA GPU here" in capsys.readouterr().err


def test_a_route_at_toy_shapes_trains_every_trainable_tensor(tmp_path):
    row = gpu_proof.run_route("a100-peft", steps=2, miniature=True, workdir=tmp_path)
    assert row["every_trainable_moved"] and row["trainable_tensors"] == 2 * 2 * 7  # lora_A, lora_B x 2 layers x 7
    assert row["steps"] == 2 and row["generation_tokens_per_s"] > 0 and row["phase"] == "done"
    # generation timed alone: its seconds are part of the steps', and every completion's tokens are counted
    assert 0 < row["generation_s"] <= sum(row["step_times_s"]) and row["generated_tokens"] > 0
    assert row["estimate"]["estimate"] and row["estimate"]["parts"]["vllm_weights"] == 0


def test_a_part_cut_at_its_timeout_keeps_what_it_measured_and_the_phase_it_was_in(tmp_path, monkeypatch):
    """The child writes its row as it goes (its --progress file); killed at its timeout, with every process it
    started, the parent reads that row back. A stand-in child writes a row and hangs, whatever the machine's load."""
    child = tmp_path / "child.py"
    child.write_text("import json, subprocess, sys, time\n"
                     "path = sys.argv[sys.argv.index('--progress') + 1]\n"
                     "open(path, 'w').write(json.dumps({'route': 'a100-peft', 'phase': 'training: step 2', "
                     "'steps': 1, 'step_times_s': [0.5]}))\n"
                     "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
                     "print('started', flush=True)\n"
                     "time.sleep(600)\n")
    monkeypatch.setattr(gpu_proof, "__file__", str(child))
    monkeypatch.setattr(gpu_proof, "WORK", tmp_path / "work")
    args = gpu_proof.argparse.Namespace(steps=2, out=str(tmp_path), eval_questions=4, eval_tokens=4, eval_batch=4,
                                        miniature=True)
    row, output = gpu_proof.run_child("a100-peft", args, timeout=20)
    assert row["cut"] == "timed out after 20 s" and "started" in output
    assert row["phase"] == "training: step 2" and row["steps"] == 1 and row["step_times_s"] == [0.5]
    assert gpu_proof.unfinished(row) and "cut: timed out after 20 s (training: step 2)" in gpu_proof.summary([row])


def test_the_rerun_keeps_finished_rows_and_runs_only_what_was_left(tmp_path, monkeypatch):
    """--rerun reads the rows the last call left on the machine (its --out is emptied between calls), keeps the
    finished ones and runs the cut, failed and skipped ones again, in the plan's order."""
    monkeypatch.setattr(gpu_proof, "WORK", tmp_path / "work")
    mirror = tmp_path / "work" / "miniature" / "raw.jsonl"
    mirror.parent.mkdir(parents=True)
    first = [{"route": "machine", "device": "X"}, {"route": "pipeline-smoke", "ok": True, "steps": []},
             {"route": "a100-unsloth-4bit", "cut": "timed out after 245 s", "phase": "training: step 1",
              "child_seconds": 245.0},
             {"route": "a100-peft", "step_s": 30.0}, {"route": "eval", "skipped": "budget spent"}]
    mirror.write_text("".join(gpu_proof.json.dumps(r) + "\n" for r in first))
    ran = []

    def run_child(name, args, timeout):
        ran.append((name, timeout))
        return {"route": name, "step_s": 1.0}, "its output"

    monkeypatch.setattr(gpu_proof, "run_child", run_child)
    assert gpu_proof.main(["--miniature", "--rerun", "--out", str(tmp_path / "out")]) == 0
    # the part cut after more than this call's whole budget goes last, after the one that did not run
    assert [name for name, _ in ran] == ["eval", "a100-unsloth-4bit"]
    assert ran[0][1] == dict(gpu_proof.PLAN)["eval"] and ran[1][1] > gpu_proof.RERUN_BUDGET_S - 61
    rows = [gpu_proof.json.loads(line) for line in (tmp_path / "out" / "raw.jsonl").read_text().splitlines()]
    assert [(r["route"], r["call"]) for r in rows] == [("machine", "first"), ("pipeline-smoke", "first"),
                                                       ("a100-peft", "first"), ("eval", "rerun"),
                                                       ("a100-unsloth-4bit", "rerun")]
    assert mirror.read_text().count("\n") == 5 and "cut" not in mirror.read_text()  # the next rerun starts from here


def test_the_plans_first_call_fits_the_device_calls_limit():
    """The first call's parts add up to its budget, which leaves the call's 540 s room for the install; a part
    after the budget's parts gets its own cap, or what earlier parts saved."""
    assert gpu_proof.BUDGET_S == sum(cap for _, cap in gpu_proof.PLAN[:3]) <= 540 - 30
    assert [name for name, _ in gpu_proof.PLAN][:3] == ["machine", "pipeline-smoke", "a100-unsloth-4bit"]
    assert gpu_proof.child_timeout("a100-peft", left=200, later=["eval"]) == 140  # 90 + the 50 saved before it
    assert gpu_proof.child_timeout("a100-peft", left=70, later=["eval"]) == 70  # never more than is left


def test_the_word_tokenizer_covers_every_id():
    tokenizer = gpu_proof.word_tokenizer(300, eos_id=299)
    assert tokenizer("w5 w17 w250")["input_ids"] == [5, 17, 250]
    assert tokenizer.decode([5, 17]) == "w5 w17" and tokenizer.eos_token_id == 299
    prompts = gpu_proof.prompts(300, 12, 3)
    assert all(len(tokenizer(p)["input_ids"]) == 12 for p in prompts)


def test_a_repacked_wheel_drops_what_is_never_imported_and_still_installs(tmp_path):
    """Unsloth 2026.10.7's wheel is 29.5 MiB, 82.5 MB of it Unsloth Studio (studio/) and its command line
    (unsloth_cli/, the `unsloth` console script); import unsloth reads neither."""
    bundle = tmp_path / "wheels"
    bundle.mkdir()
    make_wheel(bundle, "unsloth", "2026.10.7", {"unsloth/__init__.py": "OK = True\n", "studio/app.js": "x" * 5000,
                                                 "unsloth_cli/__init__.py": "app = None\n"},
               entry_points="[console_scripts]\nunsloth = unsloth_cli:app\n")
    make_wheel(bundle, "trl", "1.15.0", {"trl/__init__.py": ""})
    manifest = wheel_bundle.bundle(bundle, {"unsloth": "2026.10.7", "trl": "1.15.0"}, tree=0)
    unsloth = next(w for w in manifest["wheels"] if w["name"].startswith("unsloth"))
    assert unsloth["repacked"]["removed"] == ["studio/app.js", "unsloth_cli/__init__.py"]
    assert "`import unsloth` imports neither" in unsloth["repacked"]["why"]
    assert next(w for w in manifest["wheels"] if w["name"].startswith("trl"))["repacked"] is None
    with zipfile.ZipFile(bundle / unsloth["name"]) as z:
        assert not any(n.startswith(("studio/", "unsloth_cli/")) for n in z.namelist())
        record = z.read("unsloth-2026.10.7.dist-info/RECORD").decode()
    assert "studio/" not in record and "unsloth/__init__.py,sha256=" in record
    again = wheel_bundle.bundle(bundle, {"unsloth": "2026.10.7", "trl": "1.15.0"}, tree=0)  # repacked once only
    assert again["wheels"][1]["repacked"] == unsloth["repacked"] and again["wheels"][1]["sha256"] == unsloth["sha256"]
    make_wheel(bundle, "unsloth", "2026.10.7", {"unsloth/__init__.py": "OK = True\n", "studio/app.js": "x" * 5000,
                                                 "unsloth_cli/__init__.py": "app = None\n"})  # downloaded again
    third = wheel_bundle.bundle(bundle, {"unsloth": "2026.10.7", "trl": "1.15.0"}, tree=0)
    assert third["wheels"][1]["repacked"]["removed"] == ["studio/app.js", "unsloth_cli/__init__.py"]
    with zipfile.ZipFile(bundle / unsloth["name"]) as z:
        assert not any(n.startswith(("studio/", "unsloth_cli/")) for n in z.namelist())
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(site),
                    *map(str, bundle.glob("*.whl"))], check=True)
    out = subprocess.run([sys.executable, "-c", "import unsloth; print(unsloth.OK)"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(site)}, cwd=tmp_path)
    assert out.stdout.strip() == "True" and not (site / "studio").exists() and not (site / "bin").exists()


def test_a_missing_or_stray_wheel_is_named(tmp_path):
    make_wheel(tmp_path, "trl", "1.15.0", {"trl/__init__.py": ""})
    make_wheel(tmp_path, "left_over", "1.0", {"left_over/__init__.py": ""})
    with pytest.raises(ValueError, match=r"no wheel for \['bitsandbytes'\], and wheels of no package listed "
                                         r"\['left_over-1.0-py3-none-any.whl'\]"):
        wheel_bundle.bundle(tmp_path, {"trl": "1.15.0", "bitsandbytes": "0.50.2"}, tree=0)


def test_the_bundle_is_what_the_machine_lacks_pinned_for_cpython_3_12(tmp_path):
    versions = wheel_bundle.pins()
    assert versions == {"trl": "1.15.0", "datasets": "4.8.5", "dill": "0.4.1", "multiprocess": "0.70.19",
                        "unsloth": "2026.10.9", "unsloth_zoo": "2026.10.9", "bitsandbytes": "0.50.2",
                        "peft": "0.21.2"}
    command = wheel_bundle.download_command(versions, tmp_path)
    assert command[3:5] == ["download", "--no-deps"] and "--only-binary=:all:" in command
    assert command[command.index("--python-version") + 1] == "3.12"
    assert all("==" in arg for arg in command[command.index(str(tmp_path)) + 1:])
    with pytest.raises(ValueError, match="pins no exact version of \\['nothing'\\]"):
        wheel_bundle.pins(bundle={"nothing": None})
