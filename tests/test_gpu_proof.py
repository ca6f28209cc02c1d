"""The GPU proof, what a CPU can check: the one-call script end to end at toy shapes (bundle checked, wheels
installed into a folder of their own, every row and the compile caches in the given folder), the refusal without
CUDA, a route at toy shapes (its generation's KV cache under gradient checkpointing, continuous batching), the plan's
arithmetic (every part over two calls of at most 9 minutes), the parts' deadlines, the calls' scheduling, the compile
caches' round trip, and the wheel bundle's repacking (small fake wheels, no download; the real repacked wheels import
on the CPU stack in tests/stack/test_gpu_bundle.py)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks import (
    compile_cache,
    gpu_generation,
    gpu_parts,
    gpu_pipeline,
    gpu_plan,
    gpu_proof,
    gpu_report,
    wheel_bundle,
)

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
                           "--wheels", str(bundle), "--python", sys.executable, "--",
                           "--routes", "pipeline-smoke", "eval"],
                          capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["call.log", "compile-cache.tar.gz", "log.txt", "raw.jsonl",
                                                     "summary.md"]
    rows = [json.loads(line) for line in (out / "raw.jsonl").read_text().splitlines()]
    assert [r["route"] for r in rows] == ["machine", "eval", "pipeline-smoke"]
    smoke = rows[2]
    assert smoke["ok"] and [s["step"] for s in smoke["steps"]] == gpu_pipeline.SMOKE_STEPS
    assert all(s["seconds"] >= 0 for s in smoke["steps"]) and "PASSED" in smoke["steps"][-1]["verification"]
    assert rows[1]["questions_per_s"] > 0 and rows[1]["questions_done"] == 8 and rows[1]["max_new_tokens"] == 8
    call = (out / "call.log").read_text()
    assert "fits one call" in call and "installed 1 wheels" in call and "exit 0" in call and "caches packed" in call
    summary = (out / "summary.md").read_text()
    assert "Pipeline smoke" in summary and "What this rehearsal cannot see" in summary


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


def test_a_route_at_toy_shapes_trains_every_trainable_tensor_and_keeps_its_generations_kv_cache(tmp_path):
    """TRL + peft at toy shapes with the recipe's gradient checkpointing: every adapter tensor moves, generation is
    timed alone, its KV cache is kept (one token a forward over a cache, checkpointing off while generating, on in
    training), and continuous batching generates the same prompts after training (without CUDA graphs on a CPU)."""
    row = gpu_parts.run_route("a100-peft", steps=2, miniature=True, workdir=tmp_path)
    assert row["every_trainable_moved"] and row["trainable_tensors"] == 2 * 2 * 7  # lora_A, lora_B x 2 layers x 7
    assert row["steps"] == 2 and row["generation_tokens_per_s"] > 0 and row["phase"] == "done"
    # generation timed alone: its seconds are part of the steps', and every completion's tokens are counted
    assert 0 < row["generation_s"] <= sum(row["step_times_s"]) and row["generated_tokens"] > 0
    assert row["estimate"]["estimate"] and row["estimate"]["parts"]["vllm_weights"] == 0
    kv = row["generation_kv_cache"]
    assert row["gradient_checkpointing"] and kv["kept"] and kv["forwards_checkpointing"] == 0
    assert kv["training_forwards_checkpointing"] > 0 and kv["one_token_forwards_over_a_cache"] > 0
    assert row["decode_bytes"]["total"] > row["decode_bytes"]["weights"] > 0 and "stopped" not in row
    batching = row["continuous_batching"]
    assert [c["sequences"] for c in batching["calls"]] == [16, 16] and not batching["cuda_graphs"]
    assert all(c["tokens"] > 0 for c in batching["calls"])


def test_the_kv_watch_says_when_generation_dropped_its_cache():
    watch = gpu_generation.KvWatch({"active": True, "calls": 1})
    watch.forwards = [(8, True, False), (1, True, False), (1, True, False)]
    assert watch.summary()["kept"]
    watch.forwards = [(8, False, True), (1, False, True)]  # checkpointing in training mode: the layer drops it
    assert watch.summary()["kept"] is False
    watch.forwards = [(8, True, False)]  # the prompt's forward only: no decoding step was seen
    assert watch.summary()["kept"] is None


def test_a_trainer_stops_at_its_deadline_between_steps():
    """Stopped after a step when the next (the plan's steady step, or the median measured after the first) would not
    end before the deadline: the row says why, and training ends as at its last step."""
    progress = gpu_parts.Progress(None, {"route": "a100-peft"})
    times = [100.0]
    stop = gpu_parts.stop_at_deadline(time.time() + 60, 30, times, progress)
    state, control = SimpleNamespace(global_step=1, max_steps=3), SimpleNamespace(should_training_stop=False)
    stop.on_step_end(None, state, control)
    assert not control.should_training_stop and "stopped" not in progress.row  # 30 s expected, 60 s left
    times.append(80.0)  # the steps after the first take 80 s: the next would end past the deadline
    state.global_step = 2
    stop.on_step_end(None, state, control)
    assert control.should_training_stop and "at its deadline after step 2: the next step needs about 80 s" in \
        progress.row["stopped"]
    assert gpu_proof.unfinished(progress.row)


def test_an_evaluation_past_its_deadline_stops_before_a_batch():
    row = gpu_pipeline.run_eval(True, questions=8, new_tokens=4, batch_size=4, deadline=time.time() - 1)
    assert "questions_done" not in row and "at its deadline after 0 questions" in row["stopped"]


def test_a_part_cut_at_its_timeout_keeps_what_it_measured_and_the_phase_it_was_in(tmp_path, monkeypatch):
    """The child writes its row as it goes (its --progress file); killed at its timeout, with every process it
    started, the parent reads that row back. A stand-in child writes a row and hangs, whatever the machine's load;
    it was told its deadline."""
    child = tmp_path / "child.py"
    child.write_text("import json, subprocess, sys, time\n"
                     "path = sys.argv[sys.argv.index('--progress') + 1]\n"
                     "deadline = sys.argv[sys.argv.index('--deadline') + 1]\n"
                     "open(path, 'w').write(json.dumps({'route': 'a100-peft', 'phase': 'training: step 2', "
                     "'steps': 1, 'step_times_s': [0.5], 'deadline': deadline}))\n"
                     "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
                     "print('started', flush=True)\n"
                     "time.sleep(600)\n")
    monkeypatch.setattr(gpu_proof, "__file__", str(child))
    monkeypatch.setattr(gpu_proof, "WORK", tmp_path / "work")
    args = gpu_proof.argparse.Namespace(steps=2, out=str(tmp_path), eval_questions=4, eval_tokens=4, eval_batch=4,
                                        miniature=True)
    # 8 s: the stand-in's Python starts and writes its row in well under a second, in seconds on a loaded machine
    row, output = gpu_proof.run_child("a100-peft", args, timeout=8, deadline=1234.5, env=dict(os.environ))
    assert row["cut"] == "timed out after 8 s" and "started" in output and row["deadline"] == "1234.5"
    assert row["phase"] == "training: step 2" and row["steps"] == 1 and row["step_times_s"] == [0.5]
    assert gpu_proof.unfinished(row) and "cut: timed out after 8 s (training: step 2)" in gpu_report.summary([row])


def test_a_childs_row_is_read_even_when_libraries_print_after_it():
    row = {"route": "eval", "questions_per_s": 2.0}
    output = f"loading\n{json.dumps(row)}\n[atexit] a library's last word\n"
    assert gpu_proof._last_row(output, "eval") == row and gpu_proof._last_row(output, "machine") is None


def test_a_call_runs_what_is_left_each_part_only_with_its_minimum_left(tmp_path, monkeypatch):
    """--rerun keeps the finished rows this machine's last call left (its --out is emptied between calls) and runs
    the rest in the plan's order, each only with its minimum left, each given its planned seconds plus what the
    parts before it saved; a part skipped for time is said so and is run by the next call."""
    monkeypatch.setattr(gpu_proof, "WORK", tmp_path / "work")
    monkeypatch.setattr(gpu_proof, "available", lambda names: names)
    mirror = tmp_path / "work" / "miniature" / "raw.jsonl"
    mirror.parent.mkdir(parents=True)
    first = [{"route": "machine", "device": "X", "call": "first"},
             {"route": "a100-unsloth-4bit", "cut": "timed out after 216 s", "call": "first"},
             {"route": "a100-peft", "step_s": 30.0, "call": "first"},
             {"route": "a100-unsloth-16bit", "stopped": "at its deadline after step 1", "call": "first"},
             {"route": "eval", "questions_per_s": 9.0, "call": "first"}]
    mirror.write_text("".join(json.dumps(r) + "\n" for r in first))
    carried = tmp_path / "carried"
    (carried / "inductor" / "fx").mkdir(parents=True)
    (carried / "inductor" / "fx" / "entry.py").write_text("graph")
    compile_cache.pack(carried, tmp_path, tmp_path / "caches.tar.gz")  # an earlier loan's caches
    ran = []

    def run_child(name, args, timeout, deadline, env):
        ran.append((name, round(timeout)))
        assert deadline == pytest.approx(time.time() + timeout - gpu_plan.EXIT_S, abs=5)
        assert (Path(env["TORCHINDUCTOR_CACHE_DIR"]) / "fx" / "entry.py").read_text() == "graph"  # restored first
        return {"route": name, "step_s": 1.0}, "its output"

    monkeypatch.setattr(gpu_proof, "run_child", run_child)
    out = tmp_path / "out"
    assert gpu_proof.main(["--miniature", "--rerun", "--budget-s", "120", "--caches", str(tmp_path / "caches.tar.gz"),
                           "--out", str(out)]) == 1
    # 4-bit (147 s at least) cannot start within 120 s; the 16-bit route (planned 86 s) is the only part the plan
    # expects to finish, so it may take all 120; the stand-ins take no time, so the smoke (107 s at least) and
    # full-80gb (63) start after it, and colab-t4 (126) is skipped
    assert ran == [("a100-unsloth-16bit", 120), ("pipeline-smoke", 120), ("full-80gb", 120)]
    rows = [json.loads(line) for line in (out / "raw.jsonl").read_text().splitlines()]
    assert [(r["route"], r["call"]) for r in rows] == [
        ("machine", "first"), ("a100-peft", "first"), ("eval", "first"), ("a100-unsloth-4bit", "rerun"),
        ("a100-unsloth-16bit", "rerun"), ("pipeline-smoke", "rerun"), ("colab-t4", "rerun"), ("full-80gb", "rerun")]
    assert "under the 147 s its load and first step need" in rows[3]["skipped"]
    assert "120 s left of the call's 120 s, under the 126 s" in rows[6]["skipped"]
    assert all(r["caches_at_start"]["files"] >= 1 for r in rows[4:] if "skipped" not in r)
    assert (out / "compile-cache.tar.gz").is_file() and mirror.read_text().count("\n") == 8


def test_every_part_comes_back_over_two_calls_each_inside_nine_minutes():
    """The plan's arithmetic: each call's parts, at their planned seconds (from the 2026-11-29 H200 run), add up
    inside the proof's budget, which leaves the call's 540 s (9 minutes) room for the install and the caches' packing;
    every part is in one of two calls (one per loan), the machine in each; a part's minimum is its load and first
    step."""
    calls = gpu_plan.planned_calls()
    assert len(calls) == 2 and all(call[0] == "machine" for call in calls)
    assert sorted(n for call in calls for n in call[1:]) == sorted(p.name for p in gpu_plan.PLAN[1:])
    for call in calls:
        assert sum(gpu_plan.PARTS[n].planned_s for n in call) <= gpu_plan.BUDGET_S
    assert gpu_plan.BUDGET_S + 30 <= gpu_plan.CALL_TIMEOUT_S <= 9 * 60
    assert gpu_plan.RERUN_BUDGET_S + 25 <= gpu_plan.RERUN_TIMEOUT_S
    assert calls[0][:3] == ["machine", "a100-unsloth-4bit", "a100-peft"]  # the blog post's route first
    unsloth = gpu_plan.PARTS["a100-unsloth-4bit"]
    assert unsloth.min_s == unsloth.planned_s - 12 == 147  # all but step 2 (7 s) and the exit (5 s)
    assert gpu_plan.child_timeout("a100-peft", left=300, reserved=150) == 150  # 117 + the 33 saved before it
    assert gpu_plan.child_timeout("a100-peft", left=70, reserved=0) == 70  # never more than is left


def test_the_compile_caches_go_round_trip_within_the_file_limit(tmp_path):
    """Packed from the cache folders and Unsloth's generated modules into one gzip'd tar (written whole), restored
    on another machine's folders file for file, owner-only modes kept (Unsloth's Mega-cache refuses a folder others
    can write); past the limit, files are left out and counted; a foreign archive is refused."""
    root, work = tmp_path / "cache", tmp_path / "tree"
    files = {root / "inductor" / "fx" / "entry.py": "graph", root / "triton" / "k1" / "kernel.cubin": "x" * 5000,
             root / "unsloth-mega" / "key" / "manifest.json": "{}",
             work / "unsloth_compiled_cache" / "UnslothGRPOTrainer.py": "class T: ..."}
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "unsloth-mega" / "key" / "manifest.json").chmod(0o600)
    env = compile_cache.environment(root)
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(root / "inductor") and env["TRITON_CACHE_DIR"] == str(root / "triton")
    packed = compile_cache.pack(root, work, tmp_path / "caches.tar.gz")
    assert packed["files"] == 4 and packed["left_out"] == 0 and packed["bytes"] <= compile_cache.LIMIT
    assert not (tmp_path / "caches.tar.gz.partial").exists()
    root2, work2 = tmp_path / "machine2" / "cache", tmp_path / "machine2" / "tree"
    assert compile_cache.restore(tmp_path / "caches.tar.gz", root2, work2) == {"files": 4}
    for path, text in files.items():
        moved = (root2 / path.relative_to(root)) if root in path.parents else work2 / path.relative_to(work)
        assert moved.read_text() == text
    assert (root2 / "unsloth-mega" / "key" / "manifest.json").stat().st_mode & 0o077 == 0
    assert compile_cache.summary(root2, work2) == {"files": 4, "mib": 0.0}
    small = compile_cache.pack(root, work, tmp_path / "small.tar.gz", limit=compile_cache.MARGIN + 4000)
    assert small["left_out"] == 1 and small["files"] == 3  # the 5,000-byte kernel could pass the limit
    with tarfile.open(tmp_path / "foreign.tar.gz", "w:gz") as tar:
        tar.add(root / "inductor" / "fx" / "entry.py", arcname="etc/passwd")
    with pytest.raises(ValueError, match="which no compile cache packs"):
        compile_cache.restore(tmp_path / "foreign.tar.gz", root2, work2)


def test_the_summary_sets_generation_beside_the_cards_memory_bound_limit():
    """16 sequences whose decoding step reads 16 GB on a card that copies 4,000 GB/s: 250 steps a second at most,
    4,000 tokens/s; 160 tokens/s is 4% of it."""
    decode = {"total": 16 * 10**9, "completions": 16, "weights": 15 * 10**9, "kv_cache": 10**9}
    assert gpu_report.limit(decode, 4000.0) == pytest.approx(4000.0)
    rows = [{"route": "machine", "device": "NVIDIA H200", "copy_bandwidth_gb_s": 4000.0},
            {"route": "a100-peft", "generation_tokens_per_s": 160.0, "ms_per_decoding_step": 100.0,
             "decode_bytes": decode, "steps": 2, "step_times_s": [30.0, 29.0], "step_s": 29.0,
             "continuous_batching": {"calls": [{"tokens_per_s": 800.0}], "cuda_graphs": True}}]
    text = gpu_report.summary(rows)
    assert "| plain `generate` (TRL + peft, inside the GRPO step) | 160.0 | 100.0 | 16.0 | 4000 | 4.0% |" in text
    assert "continuous batching, CUDA graphs, call 1 whole" in text and "| 800.0 |" in text and "| 20.0% |" in text
    assert "What this rehearsal cannot see" not in text


def test_the_word_tokenizer_covers_every_id():
    tokenizer = gpu_parts.word_tokenizer(300, eos_id=299)
    assert tokenizer("w5 w17 w250")["input_ids"] == [5, 17, 250]
    assert tokenizer.decode([5, 17]) == "w5 w17" and tokenizer.eos_token_id == 299
    prompts = gpu_parts.prompts(300, 12, 3)
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
