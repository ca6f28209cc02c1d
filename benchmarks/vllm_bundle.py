"""vLLM for the lent GPU machine, which has no network and takes at most 64 MiB a call: vllm 0.26.0 (the release that
pins torch 2.11.0, the machine's) trimmed of what a dense Llama or Qwen2 model on an H100/H200 (sm_90) never loads,
with the packages its import needs that the machine's image lacks, packed into one xz archive and cut into pieces
that travel one per device call (``benchmarks/vllm_call.sh`` keeps them on the machine and, once all are there,
joins, checks and installs them). docs/development/benchmarks.md gives the calls; ``make vllm-rehearsal``
(``benchmarks/vllm_rehearsal.py``) installs the same pieces on a CPU with the machine's versions and imports what
``vllm.LLM``, ``SamplingParams`` and Unsloth's ``fast_inference`` import.

What was trimmed (:data:`TRIM`) and what is carried (:data:`CARRIED`) were read from vllm 0.26.0's own source and
from the rehearsal; each is listed in ``manifest.json`` with its reason. Standard library and pip only: it runs here
without a virtual environment and on the machine with its own python3.

  python benchmarks/vllm_bundle.py --out wheels-vllm     # download, trim, pack, cut: wheels-vllm/piece-N/

``benchmarks/vllm_pieces.py`` checks a piece against the call's limit, keeps the pieces on the machine and joins them.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import math
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from wheel_bundle import PLATFORM, ROOT, _normal, _project, repack, tree_bytes  # noqa: E402

VLLM = "0.26.0"
#: A piece plus the tree, and on the last call the proof's own wheel bundle (``wheels/``), at most: 4 MiB under the
#: device tool's 64 MiB (:data:`wheel_bundle.LIMIT`), for the tree's growth between ``make wheels-vllm`` and a loan.
PIECE_LIMIT = 60 * 2**20
#: The archive's name inside each piece folder: ``vllm-bundle.tar.xz.1`` ... (their bytes in order are the archive).
ARCHIVE = "vllm-bundle.tar.xz"
#: xz's strongest preset (a 64 MiB dictionary): measured 2026-11-29, the bundle is 77.0 MiB at 9 and 80.2 MiB at 6.
XZ_PRESET = 9
#: Removed from the vllm wheel, ``(pattern inside the wheel, why)``. The rest (both CUDA libraries a dense model
#: calls, every Python module, the small extensions) stays, so nothing a guarded import probes for disappears but these.
TRIM: list[tuple[str, str]] = [
    ("vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so",
     "FlashAttention 2: on compute capability 9.x vLLM takes FlashAttention 3 (vllm/v1/attention/backends/fa_utils.py, "
     "get_flash_attn_version) and falls back to 2 only for ALiBi or batch invariance; its import is guarded "
     "(vllm/vllm_flash_attn/flash_attn_interface.py: FA2_AVAILABLE)"),
    ("vllm/_moe_C_stable_libtorch.abi3.so",
     "mixture-of-experts kernels only (every torch.ops._moe_C op is a MoE one: topk_softmax, moe_align_block_size, "
     "marlin MoE ...); loaded under contextlib.suppress(ImportError) (vllm/platforms/cuda.py, import_kernels)"),
    ("vllm/vllm-rs",
     "the Rust front end, started only with VLLM_USE_RUST_FRONTEND (vllm/envs.py, vllm/v1/utils.py)"),
    ("vllm/third_party/deep_gemm/*",
     "DeepGEMM, FP8 block-scaled GEMMs: found through has_deep_gemm() (vllm/utils/import_utils.py), which then says "
     "no; bf16 and bitsandbytes models never call it"),
    ("vllm/third_party/fmha_sm100/*",
     "Blackwell (sm_100) sparse attention of MiniMax-M3 (vllm/models/minimax_m3/nvidia), imported inside its "
     "functions only"),
]
#: What the machine lacks that importing ``vllm.LLM``, ``SamplingParams`` and Unsloth's ``fast_inference`` path needs,
#: ``{distribution: (version, why)}``: versions as pip resolves ``vllm==0.26.0`` for CPython 3.12 beside the
#: machine's torch 2.11.0 and transformers 5.17.0. Each is imported at module level on that path (the rehearsal says
#: by which module). The rest of vLLM's 110 declared requirements the machine has, or only features a GRPO step does
#: not use import them (the OpenAI server, multimodal inputs, MoE and FP8 kernels, FlashInfer, tracing); the
#: rehearsal lists those imports and where they sit (docs/development/benchmarks.md).
CARRIED: dict[str, tuple[str, str]] = {
    "pydantic": ("2.14.4", "vllm.config's dataclasses are pydantic dataclasses"),
    "pydantic-core": ("2.50.5", "pydantic's compiled core"),
    "annotated-types": ("0.8.0", "imported by pydantic"),
    "typing-inspection": ("0.4.5", "imported by pydantic"),
    "msgspec": ("0.22.0", "vllm.sampling_params and the engine's request and output structs (vllm.v1.engine)"),
    "pyzmq": ("27.3.0", "the engine core's messages (vllm.utils.network_utils, vllm.v1.engine.core_client)"),
    "cbor2": ("6.3.0", "vllm.utils.hashing, imported by vllm.config"),
    "pybase64": ("1.5.1", "vllm.multimodal.media, imported through the multimodal registry every engine builds"),
    "cachetools": ("8.0.2", "vllm.utils.cache, imported by the multimodal cache"),
    "openai": ("3.57.0", "message types of vllm.entrypoints.chat_utils and of the tool server vllm.reasoning "
                         "imports"),
    "httpx2": ("2.16.2", "imported by openai"),
    "sniffio": ("1.3.1", "imported by openai"),
    "openai-harmony": ("0.0.8", "vllm.entrypoints.mcp.tool_server, imported by vllm.reasoning"),
    "fastapi": ("0.136.3", "vllm.entrypoints.serve, imported by the offline pooling mixin of vllm.entrypoints.llm"),
    "starlette": ("1.10.0", "imported by fastapi"),
    "partial-json-parser": ("0.2.1.1.post7", "vllm.tool_parsers, imported by vllm.entrypoints.llm"),
    "llguidance": ("1.7.6", "vllm.v1.structured_output's back ends load it at import (their dataclasses' "
                            "annotations touch the lazily imported module)"),
    "xgrammar": ("0.2.7", "as llguidance, for vllm.v1.structured_output.backend_xgrammar"),
    "apache-tvm-ffi": ("0.1.10", "imported by xgrammar"),
    "compressed-tensors": ("0.17.0", "get_quantization_config imports every method's config, bitsandbytes' too "
                                     "(vllm/model_executor/layers/quantization/__init__.py); import unsloth asks "
                                     "for it"),
    "loguru": ("0.7.3", "imported by compressed-tensors"),
}


def sha256(path: Path) -> str:
    """The SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_command(folder: Path, vllm: str = VLLM, carried: dict[str, tuple[str, str]] | None = None) -> list[str]:
    """``pip download --no-deps`` of vllm and :data:`CARRIED`, CPython 3.12 manylinux wheels, into ``folder``."""
    carried = CARRIED if carried is None else carried
    return [sys.executable, "-m", "pip", "download", "--no-deps", *PLATFORM, "-d", str(folder), f"vllm=={vllm}",
            *(f"{name}=={version}" for name, (version, _) in carried.items())]


def trim_rule(trim: list[tuple[str, str]] | None = None) -> dict[str, object]:
    """:data:`TRIM` as :func:`wheel_bundle.repack`'s rule (vLLM's entry points stay: its LoRA resolver plugins)."""
    trim = TRIM if trim is None else trim
    return {"remove": [pattern for pattern, _ in trim], "keep": [], "keep_entry_points": True,
            "why": "see trimmed"}


def trimmed_parts(wheel: Path, trim: list[tuple[str, str]] | None = None) -> list[dict[str, object]]:
    """What :data:`TRIM` removes from ``wheel``: each pattern with its files, unpacked bytes and reason.

    Raises:
        ValueError: a pattern matches nothing (the wheel is not the release the list was read from).
    """
    trim = TRIM if trim is None else trim
    with zipfile.ZipFile(wheel) as z:
        infos = z.infolist()
    parts = []
    for pattern, why in trim:
        hits = [i for i in infos if fnmatch.fnmatch(i.filename, pattern)]
        if not hits:
            raise ValueError(f"{wheel.name}: nothing matches {pattern!r}: is it vllm {VLLM}?")
        parts.append({"pattern": pattern, "files": len(hits), "bytes": sum(i.file_size for i in hits), "why": why})
    return parts


def piece_sizes(total: int, cap: int, last_cap: int) -> list[int]:
    """The fewest pieces that hold ``total`` bytes: each at most ``cap``, the last at most ``last_cap`` (it travels
    with the proof's wheel bundle), as equal as that allows.

    >>> piece_sizes(100, 40, 30)
    [35, 35, 30]
    >>> piece_sizes(10, 40, 30)
    [10]

    Raises:
        ValueError: ``last_cap`` or ``cap`` leaves no room.
    """
    if cap <= 0 or last_cap <= 0:
        raise ValueError(f"no room for a piece: {cap} bytes a call, {last_cap} on the last")
    if total <= last_cap:
        return [total]
    for count in range(2, total + 2):
        last = min(last_cap, total // count)
        each = math.ceil((total - last) / (count - 1))
        if each <= cap:
            sizes = [each] * (count - 1) + [last]
            sizes[-2] -= sum(sizes) - total  # the rounding comes off the piece before the last
            return sizes
    raise AssertionError("unreachable: one byte a piece always fits")


def pack(wheels: list[Path], archive: Path, preset: int = XZ_PRESET) -> int:
    """Write ``wheels`` (stored, uncompressed inside) into one xz tar archive, whole or not at all: names sorted,
    times and owners zeroed, so the same wheels give the same bytes. Returns their unpacked bytes."""
    tmp = archive.with_name(archive.name + ".tmp")
    unpacked = 0
    with tarfile.open(tmp, "w:xz", preset=preset) as tar:
        for wheel in sorted(wheels, key=lambda p: p.name):
            info = tar.gettarinfo(str(wheel), arcname=wheel.name)
            info.mtime, info.uid, info.gid, info.uname, info.gname, info.mode = 0, 0, 0, "", "", 0o644
            with wheel.open("rb") as f:
                tar.addfile(info, f)
            unpacked += info.size
    tmp.replace(archive)
    return unpacked


def cut(archive: Path, sizes: list[int], out: Path) -> list[dict[str, object]]:
    """Cut ``archive`` into ``out/piece-N/<archive name>.N`` of ``sizes`` bytes. Returns each piece's folder, name,
    bytes and SHA-256."""
    pieces = []
    with archive.open("rb") as source:
        for number, size in enumerate(sizes, 1):
            folder = out / f"piece-{number}"
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            path = folder / f"{archive.name}.{number}"
            path.write_bytes(source.read(size))
            pieces.append({"folder": folder.name, "name": path.name, "bytes": size, "sha256": sha256(path)})
    return pieces


def kit_bytes(folder: Path = ROOT / "wheels") -> int:
    """The bytes of the proof's own wheel bundle (``make wheels``), which travels with the last piece.

    Raises:
        ValueError: it is not built (its manifest is missing).
    """
    try:
        return int(json.loads((folder / "manifest.json").read_text(encoding="utf-8"))["bundle_bytes"])
    except (OSError, ValueError, KeyError) as e:
        raise ValueError(f"{folder}/manifest.json is missing: run `make wheels` first (the last vLLM piece travels "
                         "with that bundle)") from e


#: Settings the trimmed bundle needs wherever it runs (``benchmarks/vllm_call.sh`` exports them), with why.
ENVIRONMENT: dict[str, tuple[str, str]] = {
    "VLLM_USE_FLASHINFER_SAMPLER": ("0", "FlashInfer is not carried, and vLLM 0.26.0's TopKTopPSampler imports it "
                                         "unguarded when this is on, its default on CUDA "
                                         "(vllm/v1/sample/ops/topk_topp_sampler.py); Unsloth sets the same"),
    "VLLM_NO_USAGE_STATS": ("1", "the machine has no network: no usage report thread"),
}


def _wheels_for(folder: Path, wanted: list[str]) -> dict[str, Path]:
    """The one wheel of each ``wanted`` project in ``folder``.

    Raises:
        ValueError: a project without a wheel (the download failed or was skipped).
    """
    found = {_project(p.name): p for p in sorted(folder.glob("*.whl"))}
    missing = sorted(set(wanted) - set(found))
    if missing:
        raise ValueError(f"{folder}: no wheel for {missing}: run without --no-download (pip download)")
    return {name: found[name] for name in wanted}


def build(out: Path, download: bool = True, tree: int | None = None, kit: int | None = None,
          limit: int = PIECE_LIMIT, preset: int = XZ_PRESET) -> dict[str, object]:
    """Download (into ``out/dl``, kept), trim, pack and cut the bundle into ``out/piece-N/``, each with a copy of
    ``manifest.json``: the pins, what was trimmed and why, every wheel's bytes and SHA-256 and why it travels, the
    archive's and each piece's bytes and SHA-256, the tree's and the proof's wheel bundle's bytes, and the calls.

    Raises:
        ValueError: a wheel is missing, :data:`TRIM` matches nothing, or the pieces cannot fit the calls.
        subprocess.CalledProcessError: pip could not download.
    """
    dl, stage = out / "dl", out / "stage"
    dl.mkdir(parents=True, exist_ok=True)
    if download:
        subprocess.check_call(download_command(dl))
    wheels = _wheels_for(dl, ["vllm", *(_normal(n) for n in CARRIED)])
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir()
    trimmed = trimmed_parts(wheels["vllm"])
    why = {_normal(n): reason for n, (_, reason) in CARRIED.items()}
    listed = []
    for project, source in wheels.items():
        path = stage / source.name
        shutil.copyfile(source, path)
        rule = trim_rule() if project == "vllm" else {"remove": [], "keep": [], "why": ""}
        repack(path, rule, zipfile.ZIP_STORED)  # stored: the archive's xz compresses them
        listed.append({"name": path.name, "bytes": path.stat().st_size, "sha256": sha256(path),
                       "why": why.get(project, "vLLM itself, trimmed (see trimmed)")})
    archive = out / ARCHIVE
    unpacked = pack(sorted(stage.glob("*.whl")), archive, preset)
    tree = tree_bytes() if tree is None else tree
    kit = kit_bytes() if kit is None else kit
    sizes = piece_sizes(archive.stat().st_size, limit - tree, limit - tree - kit)
    for old in out.glob("piece-*"):
        shutil.rmtree(old)
    manifest = {"vllm": VLLM, "python": "cp312", "platform": "manylinux x86_64", "trimmed": trimmed,
                "wheels": listed, "environment": {k: v for k, (v, _) in ENVIRONMENT.items()},
                "archive": {"name": ARCHIVE, "bytes": archive.stat().st_size, "sha256": sha256(archive),
                            "unpacked_bytes": unpacked, "xz_preset": preset},
                "pieces": cut(archive, sizes, out), "tree_bytes": tree, "kit_bytes": kit, "limit_bytes": limit}
    text = json.dumps(manifest, indent=1) + "\n"
    for folder in [out, *(out / p["folder"] for p in manifest["pieces"])]:
        (folder / "manifest.tmp").write_text(text, encoding="utf-8")
        (folder / "manifest.tmp").replace(folder / "manifest.json")
    archive.unlink()
    shutil.rmtree(stage)
    return manifest


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def report(manifest: dict[str, object]) -> str:
    """What was built, in lines: the trimmed parts, the wheels, the archive and each piece with the calls."""
    lines = [f"vllm {manifest['vllm']} for CPython 3.12 manylinux x86-64, trimmed:"]
    lines += [f"  - {t['pattern']}: {_mib(t['bytes'])} unpacked" for t in manifest["trimmed"]]
    lines += [f"  {w['name']}: {_mib(w['bytes'])} (stored)" for w in manifest["wheels"]]
    archive = manifest["archive"]
    lines.append(f"archive {archive['name']}: {_mib(archive['bytes'])} (xz -{archive['xz_preset']}) of "
                 f"{_mib(archive['unpacked_bytes'])} of wheels")
    for number, piece in enumerate(manifest["pieces"], 1):
        lines.append(f"  call {number}: {piece['folder']}/{piece['name']} {_mib(piece['bytes'])} "
                     f"sha256 {piece['sha256'][:16]}")
    lines.append(f"{len(manifest['pieces'])} calls; tree {_mib(manifest['tree_bytes'])}, the proof's wheels "
                 f"{_mib(manifest['kit_bytes'])} with the last piece, each call at most "
                 f"{_mib(manifest['limit_bytes'])}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="wheels-vllm", help="the bundle's folder (its downloads kept in OUT/dl)")
    parser.add_argument("--no-download", action="store_true", help="use the wheels in OUT/dl as they are")
    args = parser.parse_args(argv)
    try:
        manifest = build(Path(args.out), download=not args.no_download)
    except ValueError as e:
        print(f"vllm bundle: {e}", file=sys.stderr, flush=True)
        return 2
    print(report(manifest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
