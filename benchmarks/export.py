"""Export on a CPU: seconds to merge, convert, quantize and verify a run's trained policy, and each artefact's size.

Runs the steps of :func:`grpo_kit.runs.export.export` one by one, timed apart, on a finished run folder (the
demo's by default): the trained policy's answers and its merge (once), the merged safetensors export and its
check, then one GGUF per type (llama.cpp's converter, its quantizer for the k-quants) and its check in
llama.cpp. Each row says what the check measured: identical greedy completions out of the questions, the share
of questions whose flexible answer agrees, the flexible accuracy difference with its exact McNemar p, and
whether the export passed. These numbers set the thresholds in ``grpo_kit/runs/verification.py``.

Run: make install-llama; GRPO_KIT_LLAMA=.llama .venv/bin/python benchmarks/export.py [--run-dir runs/demo]
     [--questions 32] [--types f32 f16 bf16 q8_0 q4_k_m]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from grpo_kit.policy.llama_cpp import CONVERTER_TYPES, convert_to_gguf, quantize_gguf
from grpo_kit.runs.export_formats import write_merged
from grpo_kit.runs.export_reference import load_reference, open_trained_run
from grpo_kit.runs.verification import verify_export


def _size(path: Path) -> float:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", default="runs/demo")
    parser.add_argument("--questions", type=int, default=32)
    parser.add_argument("--types", nargs="+", default=["f32", "f16", "bf16", "q8_0", "q4_k_m"])
    args = parser.parse_args()

    run, settings = open_trained_run(args.run_dir)
    start = time.perf_counter()
    reference = load_reference(run, settings, args.questions)
    ref_s = time.perf_counter() - start
    print(f"trained policy: {settings['base_model']} ({reference.dtype}); its {args.questions} greedy answers and "
          f"its merge: {ref_s:.1f} s")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        start = time.perf_counter()
        merged = write_merged(reference, work / "merged")
        merge_s = time.perf_counter() - start
        start = time.perf_counter()
        check = verify_export(merged, run.path, args.questions, reference=reference)
        rows.append(("merged", merge_s, 0.0, time.perf_counter() - start, _size(merged), check))
        for kind in args.types:
            gguf = work / f"model-{kind}.gguf"
            start = time.perf_counter()
            if kind in CONVERTER_TYPES:
                convert_to_gguf(merged, gguf, kind)
                convert_s, quant_s = time.perf_counter() - start, 0.0
            else:
                full = convert_to_gguf(merged, work / "full-f32.gguf", "f32")
                convert_s = time.perf_counter() - start
                start = time.perf_counter()
                quantize_gguf(full, gguf, kind)
                quant_s = time.perf_counter() - start
                full.unlink()
            start = time.perf_counter()
            check = verify_export(gguf, run.path, args.questions, reference=reference)
            rows.append((f"gguf {kind}", convert_s, quant_s, time.perf_counter() - start, _size(gguf), check))
            gguf.unlink()
        shutil.rmtree(merged)

    print("\n| export | merge or convert (s) | quantize (s) | verify (s) | size (MB) | identical | flexible agree "
          "| flexible acc trained -> export | McNemar p | passed |")
    print("|:--|--:|--:|--:|--:|--:|--:|--:|--:|:--|")
    for name, make_s, quant_s, verify_s, size, c in rows:
        print(f"| {name} | {make_s:.1f} | {quant_s:.2f} | {verify_s:.1f} | {size:.2f} | {c.identical}/{c.questions} | "
              f"{c.agreement:.0%} | {c.accuracy_trained:.3f} -> {c.accuracy_export:.3f} | {c.mcnemar_p:.3g} | "
              f"{'yes' if c.passed else 'NO'} |")
    first = next((c for *_, c in rows if c.first_difference), None)
    if first is not None:
        print(f"\nfirst difference ({first.kind} {first.dtype}):\n{first.side_by_side()}")
    print(json.dumps({name: {"identical": c.identical, "agreement": c.agreement} for name, *_, c in rows}))


if __name__ == "__main__":
    main()
