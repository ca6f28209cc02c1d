"""The GPU proof (issues 21, 33, 42, 53): the notebooks' pipeline and GRPO steps at the presets' real shapes, with
random weights and no network, measured against the memory arithmetic of ``python -m grpo_kit plan``, in one device
call per loan (docs/development/benchmarks.md gives the commands, the plan's seconds and the numbers so far).

Each part runs in a child process of its own (``--child NAME``; the parts are in ``benchmarks/gpu_parts.py`` and
``benchmarks/gpu_pipeline.py``): Unsloth patches transformers and TRL when imported, and one part's peak memory must
not carry into the next. The parts, in :data:`PLAN`'s order:

| part | shape | what |
| --- | --- | --- |
| ``machine`` | | device, driver, versions, the copy bandwidth the memory-bound limits divide by |
| ``a100-unsloth-4bit`` | Llama-3.1-8B | ``a100`` without vLLM: Unsloth 4-bit LoRA r32, 16 completions, 256 + 256 |
| ``a100-peft`` | Llama-3.1-8B | the same through TRL + peft, bf16 LoRA; then continuous batching, CUDA graphs |
| ``a100-unsloth-16bit`` | Llama-3.1-8B | ``a100`` through Unsloth, 16-bit LoRA |
| ``eval`` | Qwen2.5-1.5B | greedy evaluation throughput of ``TransformersBackend`` at the notebooks' batch size |
| ``pipeline-smoke`` | Qwen2.5-1.5B, kit tokenizer | notebooks 02, 03, 04 and the export, ``a100``'s route |
| ``colab-t4`` | Qwen2.5-3B | the shipped recipe without vLLM: Unsloth 4-bit LoRA r64, ``adamw_8bit``, fp16 |
| ``full-80gb`` | Qwen2.5-1.5B | full fine-tuning, float32 master weights, bf16 autocast, 16 completions, 256 + 512 |

A call runs the parts not yet done (``--rerun``: by the rows the last call on this machine left; ``--done FILE``:
by the rows of earlier loans' calls) in that order within its budget. A part starts only with its own minimum left
(its load and first step as planned: ``benchmarks/gpu_plan.py``); it is given its planned seconds plus what the
parts before it saved, is told its deadline, and ends before it by itself (its trainer stopped between steps),
exiting normally so that what it compiled is in the caches (``benchmarks/compile_cache.py``); it is killed, with what
it measured kept, only if it overruns. The caches come back as ``compile-cache.tar.gz`` and a later loan's call
restores them (``--caches FILE``). ``--plan`` prints the two calls' seconds per part. Without CUDA the proof refuses
(exit 2); ``--miniature`` runs the same code at toy shapes on the CPU with no deadlines, for the kit's tests and
``make gpu-rehearsal``, and measures nothing; what it replaces because only a GPU runs it is said in its rows.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the benchmarks package is imported from the tree
    sys.path.insert(0, str(ROOT))

from benchmarks import compile_cache, gpu_plan  # noqa: E402
from benchmarks.gpu_parts import ROUTES, WORK  # noqa: E402
from benchmarks.gpu_plan import PARTS, PLAN  # noqa: E402

#: Evaluation questions on a GPU: two of the notebooks' batches of 32, enough for a rate.
EVAL_QUESTIONS = 64


def unfinished(row: dict[str, Any]) -> bool:
    """Whether ``row`` is one to run again: failed, cut, skipped, stopped at its deadline short of its end, or a
    smoke that stopped."""
    return any(k in row for k in ("error", "cut", "skipped", "stopped")) or row.get("ok") is False


def run_child(name: str, args: argparse.Namespace, timeout: float, deadline: float | None,
              env: dict[str, str]) -> tuple[dict[str, Any], str]:
    """Run part ``name`` in a child process of its own session, told its ``deadline`` (seconds since the epoch) and
    killed with everything it started after ``timeout`` seconds. Returns ``(its row, its output)``. A child that
    fails or is cut keeps what it had measured (its progress file), with ``error`` or ``cut`` and its phase."""
    progress = WORK / ("miniature" if args.miniature else "gpu") / "progress" / f"{name}.json"
    progress.parent.mkdir(parents=True, exist_ok=True)
    progress.unlink(missing_ok=True)
    part = PARTS.get(name)
    command = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--progress", str(progress),
               "--steps", str(args.steps), "--out", str(args.out), "--eval-questions", str(args.eval_questions),
               "--eval-tokens", str(args.eval_tokens), "--eval-batch", str(args.eval_batch),
               "--step-s", str(part.step_s if part else 0), "--cb-s", str(part.cb_s if part else 0)] + (
                  ["--miniature"] * args.miniature) + (["--deadline", f"{deadline:.1f}"] if deadline else [])
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT,
                             start_new_session=True)
    cut = None
    try:
        output, _ = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)  # the part's own children (data loader workers) too
        output, _ = child.communicate()
        cut = f"timed out after {timeout:.0f} s"
    seconds = round(time.perf_counter() - start, 1)
    try:
        partial = json.loads(progress.read_text())
    except (OSError, json.JSONDecodeError):
        partial = {}
    row = {"route": name, **partial}
    if cut:
        row["cut"] = cut
    elif child.returncode != 0 or not _last_row(output, name):
        row["error"] = " / ".join(output.strip().splitlines()[-3:]) or f"exit {child.returncode}"
    else:
        row = _last_row(output, name)
    row["child_seconds"] = seconds
    return row, output


def _last_row(output: str, name: str) -> dict[str, Any] | None:
    """The row a child printed: the last line of its output that is a JSON object of part ``name`` (libraries may
    print after it as the process exits)."""
    for line in reversed(output.strip().splitlines()):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and row.get("route") == name:
            return row
    return None


def child_env(args: argparse.Namespace, cache_root: Path) -> dict[str, str]:
    """A part's environment: the tree first on ``PYTHONPATH``, unbuffered output, every compile cache pointed into
    ``cache_root`` (:func:`benchmarks.compile_cache.environment`), and Unsloth allowed on a CPU for the
    miniature."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "PYTHONUNBUFFERED": "1", **compile_cache.environment(cache_root),
            **({"UNSLOTH_ALLOW_CPU": "1"} if args.miniature else {})}


def child_main(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """One part in this process (``--child``): its row, printed by :func:`main` as the last line."""
    from benchmarks import gpu_parts, gpu_pipeline

    workdir.mkdir(parents=True, exist_ok=True)
    progress = gpu_parts.Progress(args.progress, {"route": args.child})
    if args.miniature and args.child not in ("machine", "eval"):  # a CPU: TRL 1.15's Triton kernel cannot run
        if ROUTES.get(args.child, {}).get("loader") == "unsloth":
            from grpo_kit.policy.loading import import_unsloth

            import_unsloth()  # before TRL, as on the GPU
        from benchmarks.triton_shim import swap_in_without_gpu

        swapped = swap_in_without_gpu()
        if swapped:
            progress.note(miniature_replaced={"trl_logprob_kernel": swapped})
    if args.child == "machine":
        progress.note(**gpu_pipeline.machine())
        return progress.row
    if args.child == "pipeline-smoke":
        return gpu_pipeline.run_smoke(args.miniature, workdir, progress, args.deadline)
    if args.child == "eval":
        return gpu_pipeline.run_eval(args.miniature, args.eval_questions, args.eval_tokens, args.eval_batch, progress,
                                     args.deadline)
    return gpu_parts.run_route(args.child, args.steps, args.miniature, workdir, progress, args.deadline,
                               args.step_s, args.cb_s)


def available(names: list[str]) -> list[str]:
    """The parts of ``names`` this machine can run: Unsloth's 4-bit routes where Unsloth and bitsandbytes import, its
    16-bit one and the smoke (``a100``'s route) where Unsloth does. On a CPU (the miniature) every part runs."""
    import importlib.util

    unsloth = importlib.util.find_spec("unsloth") is not None
    bnb = unsloth and importlib.util.find_spec("bitsandbytes") is not None
    needs = {"a100-unsloth-4bit": bnb, "colab-t4": bnb, "a100-unsloth-16bit": unsloth}
    return [name for name in names if needs.get(name, True)]


def earlier_rows(args: argparse.Namespace, mirror: Path) -> list[dict[str, Any]]:
    """The finished rows of earlier calls, not run again: this machine's last call's (``--rerun``, its machine row
    included) and those in ``--done`` files (earlier loans', each tagged with its call, ``earlier`` where untagged).
    Of several finished rows of one part, the last is kept; every machine row is."""
    rows = []
    for path in args.done:
        rows += [dict({"call": "earlier"}, **json.loads(line)) for line in Path(path).read_text().splitlines()
                 if line.strip()]
    if args.rerun and mirror.is_file():
        rows += [dict({"call": "first"}, **json.loads(line)) for line in mirror.read_text().splitlines()
                 if line.strip()]
    finished = [r for r in rows if not unfinished(r)]
    last = {r["route"]: i for i, r in enumerate(finished)}
    return [r for i, r in enumerate(finished) if r["route"] == "machine" or last[r["route"]] == i]


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT") or "benchmarks/results/gpu-proof",
                        help="folder for raw.jsonl, summary.md, log.txt and compile-cache.tar.gz (default $OUT)")
    parser.add_argument("--routes", nargs="*", default=None, help=f"from {', '.join(p.name for p in PLAN[1:])} "
                                                                  "(default: every part this machine can run)")
    parser.add_argument("--rerun", action="store_true",
                        help=f"a second call on the same machine: the last call's finished rows (kept under {WORK}) "
                             "are kept, the rest run again")
    parser.add_argument("--done", nargs="*", default=[], metavar="RAW_JSONL",
                        help="raw.jsonl files of earlier loans' calls: their finished parts are kept, not run")
    parser.add_argument("--caches", default=None, help="a compile-cache.tar.gz an earlier call brought back, "
                                                       "restored before the parts run")
    parser.add_argument("--label", default=None, help="the call's name in its rows (default: first, or rerun)")
    parser.add_argument("--budget-s", type=float, default=None,
                        help=f"seconds for the parts (default {gpu_plan.BUDGET_S}; {gpu_plan.RERUN_BUDGET_S} with "
                             "--rerun; none with --miniature)")
    parser.add_argument("--plan", action="store_true", help="print the calls' planned seconds per part and stop")
    parser.add_argument("--steps", type=int, default=2, help="GRPO steps per route (the first, with its warm-up "
                        "and compilation, is timed apart)")
    parser.add_argument("--eval-questions", type=int, default=None, help=f"default {EVAL_QUESTIONS} (8 miniature)")
    parser.add_argument("--eval-tokens", type=int, default=None, help="default: the notebooks' (8 miniature)")
    parser.add_argument("--eval-batch", type=int, default=None, help="default: the notebooks' (4 miniature)")
    parser.add_argument("--miniature", action="store_true", help="toy shapes on the CPU (tests); measures nothing")
    for hidden in ("--child", "--progress"):
        parser.add_argument(hidden, default=None, help=argparse.SUPPRESS)
    for hidden in ("--deadline", "--step-s", "--cb-s"):
        parser.add_argument(hidden, type=float, default=None if hidden == "--deadline" else 0.0,
                            help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.routes is not None and set(args.routes) - set(PARTS):
        parser.error(f"unknown part(s) {sorted(set(args.routes) - set(PARTS))}: choose from "
                     f"{', '.join(p.name for p in PLAN[1:])}")
    return args


def eval_defaults(args: argparse.Namespace) -> None:
    """The evaluation's size: :data:`EVAL_QUESTIONS` at the notebooks' batch and tokens on a GPU, 8 questions of 8
    tokens in batches of 4 in the miniature."""
    if args.miniature:
        defaults = {"eval_questions": 8, "eval_tokens": 8, "eval_batch": 4}
    else:
        from grpo_kit.runs.measure import EvalPlan

        defaults = {"eval_questions": EVAL_QUESTIONS, "eval_tokens": EvalPlan.max_new_tokens,
                    "eval_batch": EvalPlan.batch_size}
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.plan:
        gpu_plan.print_plan()
        return 0
    eval_defaults(args)
    import torch

    if not args.miniature and not torch.cuda.is_available():
        print("gpu_proof: no CUDA GPU here (torch sees none), so there is nothing to measure. Run it on a CUDA "
              "machine (make gpu-proof), or pass --miniature to check the code at toy shapes on this CPU.",
              file=sys.stderr)
        return 2
    workdir = WORK / ("miniature" if args.miniature else "gpu")
    if args.child is not None:
        print(json.dumps(child_main(args, workdir), default=str))
        return 0
    return run_call(args, workdir)


def to_run(args: argparse.Namespace, kept: list[dict[str, Any]]) -> list[str]:
    """The parts this call runs, in :data:`PLAN`'s order: those asked for (``--routes``; default all) that this
    machine can run and that no kept row has finished; ``machine`` first unless this machine's row is kept
    (``--rerun``)."""
    names = available([p.name for p in PLAN[1:] if args.routes is None or p.name in args.routes])
    done = {r["route"] for r in kept}
    machine = [] if args.rerun and "machine" in done else ["machine"]
    return machine + [n for n in names if n != "machine" and n not in done]


def run_call(args: argparse.Namespace, workdir: Path) -> int:
    """One call: the caches restored (``--caches``), the parts of :func:`to_run` each in its child within the budget
    (:func:`schedule`), every row appended to ``raw.jsonl`` and this machine's copy (for ``--rerun``) as it ends,
    ``summary.md`` rewritten, and the caches packed into ``compile-cache.tar.gz``. Exit 1 if a part is unfinished."""
    from benchmarks.gpu_report import summary
    from grpo_kit.system.files import write_text

    mirror = workdir / "raw.jsonl"  # the rows on this machine, for --rerun (the call's --out is emptied each call)
    kept = earlier_rows(args, mirror)
    names = to_run(args, kept)
    label = args.label or ("rerun" if args.rerun else "first")
    budget = args.budget_s or (None if args.miniature
                               else gpu_plan.RERUN_BUDGET_S if args.rerun else gpu_plan.BUDGET_S)
    cache_root = workdir / "compile-cache"
    if args.caches:
        try:
            said = f"restored {json.dumps(compile_cache.restore(Path(args.caches), cache_root, ROOT))}"
        except (OSError, ValueError, tarfile.TarError) as e:  # the parts still run, compiling for themselves
            said = f"NOT restored ({type(e).__name__}: {e}); every part compiles for itself"
        print(f"gpu_proof: caches from {args.caches}: {said}", flush=True)
    print(f"gpu_proof ({label}): {len(kept)} finished rows kept; running {', '.join(names) or 'nothing'} within "
          f"{'no budget' if budget is None else f'{budget:g} s'}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for path in (out / "raw.jsonl", out / "log.txt"):
        path.unlink(missing_ok=True)  # this call's rows only
    new_mirror = workdir / "raw.jsonl.next"
    new_mirror.unlink(missing_ok=True)
    rows = list(kept)
    for row in kept:
        for path in (out / "raw.jsonl", new_mirror):
            _append(path, json.dumps(row, default=str) + "\n")
    for row, output in schedule(names, args, budget, child_env(args, cache_root), cache_root):
        row["call"] = label
        rows.append(row)
        for path in (out / "raw.jsonl", new_mirror):
            _append(path, json.dumps(row, default=str) + "\n")
        _append(out / "log.txt", f"== {row['route']}: {json.dumps(row, default=str)[:300]}\n"
                + "\n".join(output.splitlines()[-150:]) + "\n")
        write_text(out / "summary.md", summary(rows))
        print(json.dumps(row, default=str), flush=True)
    os.replace(new_mirror, mirror)
    packed = compile_cache.pack(cache_root, ROOT, out / "compile-cache.tar.gz")
    print(f"gpu_proof: caches packed: {json.dumps(packed)}", flush=True)
    print(summary(rows))
    return 0 if not any(unfinished(r) for r in rows) else 1


def schedule(names: list[str], args: argparse.Namespace, budget: float | None, env: dict[str, str],
             cache_root: Path) -> Any:
    """Run ``names`` in order within ``budget`` seconds, yielding ``(row, output)`` as each ends. A part starts only
    with its ``Part.min_s`` left (else its row says it was skipped), is given :func:`benchmarks.gpu_plan.child_timeout`
    (what is left beyond the planned seconds of the later parts ``simulate`` expects to finish) and a deadline
    :data:`benchmarks.gpu_plan.EXIT_S` before that. Without a budget (the miniature) nothing is timed."""
    expected, _ = gpu_plan.simulate(names, budget) if budget is not None else (names, [])
    end = None if budget is None else time.monotonic() + budget
    for i, name in enumerate(names):
        warm = compile_cache.summary(cache_root, ROOT)
        if end is None:
            row, output = run_child(name, args, 3600, None, env)
        else:
            left = end - time.monotonic()
            if left < PARTS[name].min_s:
                yield {"route": name, "skipped": f"{left:.0f} s left of the call's {budget:g} s, under the "
                                                 f"{PARTS[name].min_s} s its load and first step need"}, ""
                continue
            reserved = sum(PARTS[n].planned_s for n in names[i + 1:] if n in expected)
            timeout = gpu_plan.child_timeout(name, left, reserved)
            row, output = run_child(name, args, timeout, time.time() + timeout - gpu_plan.EXIT_S, env)
            row["time_limit_s"] = round(timeout)
        row["caches_at_start"] = warm
        yield row, output


def _append(path: Path, text: str) -> None:
    """Append ``text`` and push it to the disk now: what a call cut short had written comes back."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


if __name__ == "__main__":
    sys.exit(main())
