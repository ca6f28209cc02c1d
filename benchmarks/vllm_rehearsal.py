"""vLLM's bundle rehearsed on a CPU with the lent machine's software (``make vllm-rehearsal``), so that no missing
module is first seen on the GPU.

1. The calls, as the machine gets them: each piece of ``wheels-vllm/`` (``make wheels-vllm``) carried alone into
   ``benchmarks/gpu_call.sh --vllm --no-run``, which keeps it and, at the last, joins, checks and installs the bundle
   with ``pip install --no-index --no-deps --target`` into a folder of its own, then the proof's wheels (``wheels/``).
2. The imports, in the rehearsal's Python 3.12 with torch 2.11.0 (its CUDA 13.0 build) and transformers 5.17.0
   (``.venv-rehearsal``, never installed into): ``benchmarks/vllm_imports.py`` for ``vllm.LLM`` and for Unsloth's
   ``fast_inference``, each in its own process, with the machine's other packages that this venv lacks installed
   beside (:data:`IMAGE`), a ``libcuda.so.1`` that fails every call (:data:`STUB`), and the machine's missing
   packages hidden.

Writes ``summary.md`` and ``report.json`` into ``--out``; exit 1 when a step failed or an import would fail on the GPU
for a reason the rehearsal cannot place. Downloads about 330 MB (the bundle and the stand-ins) the first time: beside
``make test``, not in it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from vllm_bundle import CARRIED, ENVIRONMENT  # noqa: E402
from wheel_bundle import PLATFORM  # noqa: E402

#: The machine's own packages that vLLM's path imports and ``.venv-rehearsal`` lacks, installed beside it for the
#: rehearsal only: torchvision at the machine's version (the device tool's notes), the others at the version pip
#: resolves beside vllm 0.26.0 (the machine's are not recorded).
IMAGE = {"cloudpickle": "3.1.3", "msgpack": "1.2.4", "py-cpuinfo": "9.0.0", "prometheus-client": "0.26.0",
         "six": "1.17.0", "uvloop": "0.23.0", "torchvision": "0.26.0"}
#: The driver a CPU lacks, as a library whose every call fails (CUDA_ERROR_NO_DEVICE, 100): vLLM's CUDA extensions
#: link ``libcuda.so.1`` for these symbols (read with ``nm -D --undefined-only``), and with it they load on a CPU.
STUB = r"""
int cuInit(unsigned int flags) { return 100; }
int cuDriverGetVersion(int *version) { if (version) *version = 13000; return 0; }
int cuGetProcAddress(const char *s, void **p, int v, unsigned long long f) { if (p) *p = 0; return 500; }
int cuGetProcAddress_v2(const char *s, void **p, int v, unsigned long long f, void *st) { if (p) *p = 0; return 500; }
#define FAILS(name) int name(void) { return 100; }
FAILS(cuPointerGetAttribute) FAILS(cuTensorMapEncodeTiled) FAILS(cuCtxGetCurrent) FAILS(cuCtxSetCurrent)
FAILS(cuDeviceGetAttribute) FAILS(cuDevicePrimaryCtxRetain) FAILS(cuGetErrorString) FAILS(cuMemAddressFree)
FAILS(cuMemAddressReserve) FAILS(cuMemCreate) FAILS(cuMemGetAllocationGranularity) FAILS(cuMemMap)
FAILS(cuMemRelease) FAILS(cuMemSetAccess) FAILS(cuMemUnmap)
"""


def machine_versions(python: str) -> dict[str, str]:
    """Python's, torch's and transformers' versions in ``python``.

    Raises:
        ValueError: it is not the machine's (Python 3.12, torch 2.11.0, transformers 5.17.0).
    """
    code = ("import sys, torch, transformers; print(sys.version.split()[0], torch.__version__, torch.version.cuda, "
            "transformers.__version__)")
    said = subprocess.run([python, "-c", code], capture_output=True, text=True)
    parts = said.stdout.split()
    if said.returncode or len(parts) != 4 or not parts[0].startswith("3.12") or not parts[1].startswith("2.11.0") \
            or parts[3] != "5.17.0":
        raise ValueError(f"{python} is not the machine's Python 3.12 with torch 2.11.0 and transformers 5.17.0 "
                         f"({said.stdout.strip() or said.stderr.strip()[-200:]}): make gpu-rehearsal builds one")
    return dict(zip(("python", "torch", "torch_cuda", "transformers"), parts))


def carry_pieces(pieces: Path, kit: Path, python: str, work: Path) -> list[dict[str, Any]]:
    """Run ``gpu_call.sh --vllm --no-run`` once per piece, each carrying that piece alone, as the machine's calls do.
    Returns each call's seconds, exit status and last line."""
    manifest = json.loads((pieces / "manifest.json").read_text(encoding="utf-8"))
    calls = []
    env = {**os.environ, "TMPDIR": str(work / "tmp")}
    for number, piece in enumerate(manifest["pieces"], 1):
        carried = work / f"call-{number}" / "pieces"
        carried.mkdir(parents=True)
        (carried / piece["folder"]).symlink_to(pieces / piece["folder"])
        start = time.perf_counter()
        done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_call.sh"), "--vllm", "--out",
                               str(work / f"call-{number}" / "out"), "--pieces", str(carried), "--keep",
                               str(work / "keep"), "--wheels", str(kit), "--python", python, "--no-run"],
                              capture_output=True, text=True, env=env)
        lines = (done.stdout + done.stderr).strip().splitlines()
        calls.append({"call": number, "piece": piece["name"], "bytes": piece["bytes"], "exit": done.returncode,
                      "seconds": round(time.perf_counter() - start, 1),
                      "said": [line for line in lines if "WARNING" not in line][-6:]})
        if done.returncode:
            break
    return calls


def stand_ins(python: str, folder: Path) -> Path:
    """:data:`IMAGE` installed into ``folder`` (once: a stamp names what is there)."""
    stamp = folder / ".installed"
    wanted = json.dumps(IMAGE, sort_keys=True)
    if stamp.is_file() and stamp.read_text(encoding="utf-8") == wanted:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    download = folder.parent / "image-dl"
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", *PLATFORM, "-d", str(download),
                    *(f"{n}=={v}" for n, v in IMAGE.items())], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--target",
                    str(folder), *map(str, sorted(download.glob("*.whl")))], check=True)
    stamp.write_text(wanted, encoding="utf-8")
    return folder


def stub(folder: Path) -> Path:
    """:data:`STUB` compiled into ``folder/libcuda.so.1`` (no machine-specific flags: it runs on any x86-64)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "libcuda_stub.c").write_text(STUB, encoding="utf-8")
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-Wl,-soname,libcuda.so.1", "-o", str(folder / "libcuda.so.1"),
                    str(folder / "libcuda_stub.c")], check=True)
    return folder


def run_route(route: str, python: str, paths: list[Path], work: Path) -> dict[str, Any]:
    """``vllm_imports.py --route`` in ``python`` with ``paths`` first on its path and the stub driver; its report."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, paths)), "LD_LIBRARY_PATH": str(work / "stub"),
           "UNSLOTH_ALLOW_CPU": "1", "UNSLOTH_COMPILE_DISABLE": "1", "HF_HUB_OFFLINE": "1",
           "UNSLOTH_COMPILE_LOCATION": str(work / "unsloth_compiled"), "TRITON_CACHE_DIR": str(work / "triton"),
           "VLLM_CACHE_ROOT": str(work / "vllm-cache"), "TOKENIZERS_PARALLELISM": "false",
           **{k: v for k, (v, _) in ENVIRONMENT.items()}}
    start = time.perf_counter()
    done = subprocess.run([python, str(ROOT / "benchmarks" / "vllm_imports.py"), "--route", route, "--work",
                           str(work / "models")], capture_output=True, text=True, env=env, cwd=work)
    seconds = round(time.perf_counter() - start, 1)
    try:
        report = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        report = {"route": route, "ok": False, "steps": [], "scan": [], "blocking": [],
                  "error": (done.stderr or done.stdout)[-3000:]}
    report["seconds"] = seconds
    return report


def _route_lines(report: dict[str, Any], labels: dict[str, str]) -> list[str]:
    """A route's part of the summary: its steps, what came from where, and the imports its functions would make."""
    lines = [f"## `{report['route']}` ({report['seconds']} s)", ""]
    if report.get("error"):
        return lines + ["It did not report:", "", "```text", report["error"], "```", ""]
    lines += ["| step | | what it gave |", "| --- | --- | --- |"]
    lines += [f"| {s['step']} | {'ok' if s['ok'] else '**failed**'} | "
              f"{(s.get('detail') or s.get('error', '')).replace('|', '/').replace(chr(10), ' ')[:400]} |"
              for s in report["steps"]]
    lines += ["", f"These steps loaded {report['vllm_modules_loaded']} vLLM modules ({report['modules_loaded']} in "
              "all)."]
    for folder, tops in report.get("imported_from", {}).items():
        if folder in labels and tops:
            lines.append(f"From {labels[folder]}: {', '.join(tops)}.")
    importers = report["carried_first_imported_by"]
    lines.append("Carried packages, each with the module that asked for it first: " + ", ".join(
        f"{name} ({importers[name]})" if name in importers else f"{name} (only by the probes below)"
        for name in CARRIED) + ".")
    lines += ["", "Then every import written inside the loaded modules' functions (or under their `try`s) was tried; "
              "those that fail here, by reason:", ""]
    groups: dict[tuple[str, str], list[str]] = {}
    for f in report["scan"] + report.get("unsloth_named", []):
        key = (f["kind"] if not f.get("guarded") else f"{f['kind']}, guarded", f["why"] if f["kind"] in (
            "off path", "on the machine", "trimmed") else "")
        groups.setdefault(key, []).append(f"`{f['target']}`" + (f" ({f['why'][:90]})" if not key[1] and f["why"]
                                                                else ""))
    for (kind, why), targets in sorted(groups.items()):
        lines.append(f"- {kind}{': ' + why if why else ''}: {', '.join(targets[:6])}"
                     + (f" and {len(targets) - 6} more" if len(targets) > 6 else ""))
    blocking = report["blocking"]
    lines += ["", "Would fail on the GPU: " + (", ".join(f"`{b['target']}` ({b['why']})" for b in blocking)
                                               if blocking else "nothing found."), ""]
    return lines


def summary(versions: dict[str, str], calls: list[dict[str, Any]], reports: list[dict[str, Any]],
            labels: dict[str, str], site_bytes: int) -> str:
    """The rehearsal's Markdown summary."""
    load = os.getloadavg()[0]
    lines = ["# vLLM's bundle rehearsed on a CPU", "",
             f"Python {versions['python']}, torch {versions['torch']} (CUDA {versions['torch_cuda']} build), "
             f"transformers {versions['transformers']}; load average {load:.1f} at the end (the seconds are this "
             "CPU's, not the GPU machine's).", "", "| call | piece | MiB | exit | seconds | last line |",
             "| --: | --- | --: | --: | --: | --- |"]
    lines += [f"| {c['call']} | {c['piece']} | {c['bytes'] / 2**20:.1f} | {c['exit']} | {c['seconds']} | "
              f"{(c['said'] or [''])[-1].replace('|', '/')} |" for c in calls]
    lines += ["", f"Installed: {site_bytes / 2**20:.1f} MiB.", ""]
    for report in reports:
        lines += _route_lines(report, labels)
    return "\n".join(lines) + "\n"


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=str(ROOT / ".venv-rehearsal" / "bin" / "python"))
    parser.add_argument("--pieces", default=str(ROOT / "wheels-vllm"), help="made by `make wheels-vllm`")
    parser.add_argument("--wheels", default=str(ROOT / "wheels"), help="the proof's, made by `make wheels`")
    parser.add_argument("--work", default=str(ROOT / ".vllm-rehearsal"), help="scratch (ignored by git)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "vllm-rehearsal"))
    args = parser.parse_args(argv)
    # absolute (the routes run with the scratch folder as their cwd), not resolved (a venv's python is a link)
    args.python = os.path.abspath(args.python)
    pieces, kit, work, out = Path(args.pieces).resolve(), Path(args.wheels).resolve(), Path(args.work), Path(args.out)
    try:
        versions = machine_versions(args.python)
        for folder, make in ((pieces, "wheels-vllm"), (kit, "wheels")):
            if not (folder / "manifest.json").is_file():
                raise ValueError(f"{folder}/manifest.json is missing: run `make {make}`")
    except ValueError as e:
        print(f"vllm rehearsal: {e}", file=sys.stderr)
        return 2
    for old in ("keep", "tmp", "models", *(p.name for p in work.glob("call-*"))):
        shutil.rmtree(work / old, ignore_errors=True)
    (work / "tmp").mkdir(parents=True)
    calls = carry_pieces(pieces, kit, args.python, work.resolve())
    for call in calls:
        print(f"call {call['call']} ({call['piece']}): exit {call['exit']} in {call['seconds']} s: "
              f"{(call['said'] or [''])[-1]}", flush=True)
    if not calls or calls[-1]["exit"]:
        print("vllm rehearsal: a call failed:\n" + "\n".join(calls[-1]["said"] if calls else []), file=sys.stderr)
        return 1
    current = (work / "keep" / "pieces" / "current").read_text(encoding="utf-8").strip()
    site = work.resolve() / "keep" / f"site-{current}"
    kit_site = next((work.resolve() / "tmp" / "grpo_kit_gpu_proof").glob("site-*"))
    image = stand_ins(args.python, work.resolve() / "image")
    stub(work / "stub")
    labels = {str(site.resolve()): "the bundle", str(kit_site.resolve()): "the proof's wheels",
              str(image.resolve()): "the machine's own packages (stand-ins here)"}
    reports = [run_route(route, args.python, [ROOT, kit_site, site, image], work.resolve())
               for route in ("vllm", "unsloth")]
    out.mkdir(parents=True, exist_ok=True)
    text = summary(versions, calls, reports, labels, _bytes(site))
    (out / "summary.md").write_text(text, encoding="utf-8")
    (out / "report.json").write_text(json.dumps({"versions": versions, "calls": calls, "routes": reports},
                                                indent=1) + "\n", encoding="utf-8")
    print(text)
    return 0 if all(r.get("ok") for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
