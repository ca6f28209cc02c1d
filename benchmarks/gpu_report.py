"""The GPU proof's ``summary.md``: the machine, the pipeline smoke's steps, a row per route, generation at the 8B
shape against the card's memory-bound limit, the evaluation's throughput, and for the CPU rehearsal what it replaced
and what it cannot see. Written from the rows alone (``raw.jsonl``), after every part.

The memory-bound limit of a decoding step: the bytes it reads (``decode_bytes`` in each route's row:
``benchmarks/gpu_generation.py``) over the bandwidth the machine part measured (a device-to-device copy, bytes read
and written); for ``n`` sequences decoded together it allows ``n`` tokens per that time.
"""

from __future__ import annotations

from typing import Any

#: What the CPU rehearsal cannot see, said at the top of its summary.
UNSEEN_ON_A_CPU = [
    "times: toy shapes on a CPU, nothing here is a measurement of the GPU route",
    "Unsloth's loader, trainer and generation: FastLanguageModel.from_pretrained reads the GPU's properties, so "
    "Unsloth's routes stop after saving their model and the smoke takes cpu-tiny's route",
    "bf16 (and fp16): the CPU trains in float32",
    "4-bit weights and 8-bit optimizers: bitsandbytes' CUDA kernels",
    "TRL 1.15's Triton log-probability kernel, swapped for its arithmetic in PyTorch",
    "CUDA graphs: continuous batching runs without them on a CPU",
]
#: The routes whose generation is compared at the 8B shape, with the generator each one's trainer uses.
GENERATORS = [("a100-peft", "plain `generate` (TRL + peft, inside the GRPO step)"),
              ("a100-unsloth-16bit", "Unsloth's `generate` (its GRPO trainer, 16-bit weights)"),
              ("a100-unsloth-4bit", "Unsloth's `generate` (its GRPO trainer, 4-bit weights)")]


def summary(rows: list[dict[str, Any]]) -> str:
    """The Markdown summary of a proof's rows (every call's so far)."""
    machines = [r for r in rows if r.get("route") == "machine"]
    info = machines[-1] if machines else {}
    miniature = not info.get("device")
    lines = [f"# GPU proof on {info.get('device') or 'a CPU (the miniature: nothing measured)'}", "",
             f"driver {info.get('driver')}, torch {info.get('torch')} (CUDA {info.get('torch_cuda')}), transformers "
             f"{info.get('transformers')}, trl {info.get('trl')}, peft {info.get('peft')}, unsloth "
             f"{info.get('unsloth')}, bitsandbytes {info.get('bitsandbytes')}"
             + (f"; copy bandwidth {info['copy_bandwidth_gb_s']} GB/s" if info.get("copy_bandwidth_gb_s") else ""),
             ""]
    if miniature:
        lines += ["What this rehearsal cannot see:", "", *[f"- {u}" for u in UNSEEN_ON_A_CPU], ""]
    replaced = sorted({f"{k}: {v}" for row in rows for k, v in (row.get("miniature_replaced") or {}).items()})
    if replaced:
        lines += ["What the rehearsal replaced, since only a GPU runs it:", "", *[f"- {r}" for r in replaced], ""]
    lines += _smoke(rows) + _routes(rows) + _generation(rows, info) + _kv_cache(rows) + _evaluation(rows)
    covers = {(r["route"], r["peak_covers"]) for r in rows if r.get("peak_covers")}
    if covers:
        lines += ["", "What each peak covers:", "", *[f"- {route}: {text}" for route, text in sorted(covers)]]
    return "\n".join(lines) + "\n"


def said(row: dict[str, Any]) -> str:
    """What stopped a row short, or ``""``: an error, a cut with the phase it was in, a stop at its deadline, a
    skip, or where the rehearsal stops."""
    if "error" in row:
        return "failed: " + str(row["error"])[:140]
    if "cut" in row:
        return f"cut: {row['cut']} ({row.get('phase', '?')})"
    if "stopped" in row:
        return f"stopped {row['stopped']}"
    if "only_on_a_gpu" in row:
        return f"rehearsed up to: {row['only_on_a_gpu']}"
    return f"skipped: {row['skipped']}" if "skipped" in row else ""


def _smoke(rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    for row in rows:
        if row["route"] != "pipeline-smoke":
            continue
        lines += [f"Pipeline smoke ({row.get('preset')}'s route, {row.get('model_shape')} shape, kit tokenizer, call "
                  f"{row.get('call')}): " + ("every step ran" if row.get("ok") else said(row) or "stopped"), ""]
        if row.get("steps"):
            lines += ["| step | seconds | peak reserved GiB | result |", "| --- | --: | --: | --- |"]
            for s in row["steps"]:
                result = s.get("error") or ", ".join(f"{k} {v}" for k, v in s.items() if k not in (
                    "step", "seconds", "ok", "peak_allocated_gib", "peak_reserved_gib"))
                lines.append(f"| {s['step']} | {s.get('seconds', 'cut')} | {s.get('peak_reserved_gib', '')} | "
                             f"{str(result)[:160]} |")
            lines.append("")
    return lines


def _routes(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| route | shape | call | first step s | s/step (median after the first) | generation tokens/s "
             "(generation alone) | peak allocated GiB | peak reserved GiB | plan's estimate GiB | reserved / "
             "estimate | every trainable tensor moved | caches at start | stopped |",
             "| --- | --- | --- | --: | --: | --: | --: | --: | --: | --: | --- | --- | --- |"]
    for row in rows:
        if row["route"] in ("machine", "eval", "pipeline-smoke"):
            continue
        moved = (f"{row['every_trainable_moved']} ({row['moved_tensors']}/{row['trainable_tensors']})"
                 if "moved_tensors" in row else "")
        warm = row.get("caches_at_start") or {}
        first = (row.get("step_times_s") or [""])[0]
        steady = row.get("step_s", "") if row.get("steps", 0) > 1 else ""
        lines.append(f"| {row['route']} | {row.get('model_shape', '')} | {row.get('call', '')} | {first} | {steady} | "
                     f"{row.get('generation_tokens_per_s', '')} | {row.get('peak_allocated_gib', '')} | "
                     f"{row.get('peak_reserved_gib', '')} | {(row.get('estimate') or {}).get('needed', '')} | "
                     f"{row.get('peak_reserved_over_estimate', '')} | {moved} | "
                     f"{'{} files, {} MiB'.format(warm['files'], warm['mib']) if warm else ''} | {said(row)} |")
    return lines


def limit(decode: dict[str, Any] | None, bandwidth_gb_s: float | None) -> float | None:
    """Tokens per second a card of ``bandwidth_gb_s`` allows when each decoding step of ``decode["completions"]``
    sequences reads ``decode["total"]`` bytes; ``None`` without either."""
    if not decode or not bandwidth_gb_s:
        return None
    return decode["completions"] * bandwidth_gb_s * 1e9 / decode["total"]


def _generation(rows: list[dict[str, Any]], info: dict[str, Any]) -> list[str]:
    found = {r["route"]: r for r in rows if r["route"] in dict(GENERATORS)}
    if not found:
        return []
    bandwidth = info.get("copy_bandwidth_gb_s")
    lines = ["", "Generation at the 8B shape (16 completions of 256 tokens after 256-token prompts), against the "
                 "card's memory-bound limit (bytes a decoding step reads over the measured copy bandwidth):", "",
             "| generator | tokens/s | ms per decoding step | GB read per decoding step | limit tokens/s | share "
             "of the limit |", "| --- | --: | --: | --: | --: | --: |"]
    entries = []
    for route, generator in GENERATORS:
        row = found.get(route)
        if row is None:
            continue
        entries.append((generator, row.get("generation_tokens_per_s"), row.get("ms_per_decoding_step"),
                        row.get("decode_bytes")))
        batching = row.get("continuous_batching") or {}
        if batching.get("error"):
            entries.append((f"continuous batching failed: {batching['error'][:200]}", None, None, None))
        for i, call in enumerate(batching.get("calls", []), 1):
            graphs = "CUDA graphs" if batching.get("cuda_graphs") else "no CUDA graphs (a CPU)"
            entries.append((f"continuous batching, {graphs}, call {i} whole (`generate_batch` as TRL calls it)",
                            call.get("tokens_per_s"), None, batching.get("decode_bytes") or row.get("decode_bytes")))
    for generator, rate, ms, decode in entries:
        most = limit(decode, bandwidth)
        lines.append(f"| {generator} | {rate if rate is not None else ''} | {ms if ms is not None else ''} | "
                     f"{round(decode['total'] / 1e9, 2) if decode else ''} | {round(most) if most else ''} | "
                     f"{f'{rate / most:.1%}' if most and rate else ''} |")
    return lines


def _kv_cache(rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    for row in rows:
        kv = row.get("generation_kv_cache")
        if not kv:
            continue
        state = {True: "kept", False: "NOT kept", None: "not seen (no decoder layer was called as a module)"}
        lines.append(f"- {row['route']}: the generation's KV cache {state[kv.get('kept')]} with gradient "
                     f"checkpointing {'on' if row.get('gradient_checkpointing') else 'off'} ("
                     + ", ".join(f"{k} {v}" for k, v in kv.items() if k != "kept") + ")")
    return ["", "Generation's KV cache (read at the first decoder layer while the trainer generates):", "", *lines] \
        if lines else []


def _evaluation(rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    for row in rows:
        if row["route"] == "eval":
            lines += ["", f"Evaluation (transformers backend, {row.get('model_shape')} shape, greedy, "
                          f"{row.get('max_new_tokens')} new tokens, batch {row.get('batch_size')}, call "
                          f"{row.get('call')}): "
                          + (f"{row['questions_per_s']} questions/s, {row.get('generated_tokens_per_s')} tokens/s over "
                             f"{row.get('questions_done')} questions"
                             + (f", peak reserved {row['peak_reserved_gib']} GiB" if "peak_reserved_gib" in row else "")
                             + ". " if "questions_per_s" in row else "") + said(row)]
    return lines
