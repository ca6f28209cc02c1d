"""The wheels a lent GPU machine lacks for the GPU proof, repacked without what is never imported at run time, so
that they travel with the working tree in ONE call of the device tool (``benchmarks/gpu_call.sh``).

The machine (its image, 'cuda': torch 2.11.0+cu130, transformers 5.17.0, accelerate, peft, huggingface_hub, pyarrow,
pandas, aiohttp, xxhash, fsspec, httpx, sentencepiece, einops, psutil, tqdm, pyyaml, ...) lacks TRL, datasets and
what datasets imports that is not there (dill, multiprocess), and Unsloth's route: unsloth, unsloth_zoo and
bitsandbytes (:data:`BUNDLE`). Unsloth's other requirements (tyro, diffusers, torchao, hf_transfer, msgspec,
cut_cross_entropy, structlog, ...) are imported only by paths the proof does not take (``import unsloth`` tries
them inside ``try``, or only its command line and Studio import them), and xformers from PyPI is a CUDA 12.8 build
that does not load on the machine's CUDA 13.0 torch (Unsloth then attends through PyTorch's SDPA).

Two wheels are repacked (:data:`REPACK`), each listed in ``manifest.json`` with what was removed and why:
unsloth without ``studio/`` and ``unsloth_cli/`` (82.5 MB unpacked: Unsloth Studio's web app and the ``unsloth``
command), bitsandbytes with only the CPU library and the one for the machine's CUDA. Every wheel is pinned and
downloaded for CPython 3.12 on manylinux x86_64, without dependencies (``pip download --no-deps``).

  python benchmarks/wheel_bundle.py --out wheels                # download, repack, write wheels/manifest.json
  python benchmarks/wheel_bundle.py --out wheels --no-download  # repack and list what is in wheels/ already
  python benchmarks/wheel_bundle.py --check wheels              # the bundle plus the tree fit one call (exit 2 if not)
"""

from __future__ import annotations

import argparse
import base64
import csv
import fnmatch
import hashlib
import io
import json
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The bundle and the tree together, at most: what the device tool lets travel with one call (64 MiB: the tree's
#: tracked and untracked-but-not-ignored files, and the carried paths). ``--check`` prints the room left.
LIMIT = 64 * 2**20
#: The CUDA of the lent machine's torch (2.11.0+cu130): bitsandbytes keeps this library (``BNB_CUDA_VERSION`` aside,
#: bitsandbytes 0.50.2 cextension.py loads ``libbitsandbytes_cuda<torch.version.cuda>.so``, read in cuda_specs.py).
MACHINE_CUDA = "130"
#: What travels, ``{package: version}``; ``None``: requirements.txt's pin. dill and multiprocess at the versions
#: datasets 4.8.5 resolves with (requirements-stack.txt's environment).
#: peft travels too: the machine's image has a peft of unknown version, and the kit is tested with requirements.txt's.
BUNDLE: dict[str, str | None] = {"trl": None, "datasets": None, "dill": "0.4.1", "multiprocess": "0.70.19",
                                 "unsloth": None, "unsloth_zoo": None, "bitsandbytes": None, "peft": None}
#: Repacked wheels: ``{package: (patterns removed, why)}``; a pattern matches paths inside the wheel
#: (``fnmatch``), and ``{keep}`` in a pattern's exception list is kept.
REPACK: dict[str, dict[str, object]] = {
    "unsloth": {"remove": ["studio/*", "unsloth_cli/*"], "keep": [],
                "why": "Unsloth Studio's web app and the `unsloth` command line (top-level packages of their own); "
                       "`import unsloth` imports neither (unsloth/__init__.py), and the console script is dropped "
                       "with them"},
    "bitsandbytes": {"remove": ["bitsandbytes/libbitsandbytes_*.so"],
                     "keep": ["bitsandbytes/libbitsandbytes_cpu.so",
                              f"bitsandbytes/libbitsandbytes_cuda{MACHINE_CUDA}.so"],
                     "why": f"the libraries of other CUDA, ROCm and XPU versions: bitsandbytes loads the one for "
                            f"torch.version.cuda (bitsandbytes/cextension.py), cuda{MACHINE_CUDA} on the lent "
                            "machine; the CPU one stays for import on a CPU"},
}
#: CPython 3.12 on x86_64 Linux with glibc up to 2.35, as pip names the tags wheels may carry.
PLATFORM = ("--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp", "--abi", "cp312",
            "--abi", "abi3", "--abi", "none",
            *(arg for minor in range(35, 16, -1) for arg in ("--platform", f"manylinux_2_{minor}_x86_64")),
            "--platform", "manylinux2014_x86_64", "--platform", "any")


def pins(requirements: Path = ROOT / "requirements.txt",
         bundle: dict[str, str | None] | None = None) -> dict[str, str]:
    """``{package: version}``: a ``None`` version is read from ``requirements`` (an exact pin).

    Raises:
        ValueError: a package left to ``requirements`` that it does not pin with ``==``.
    """
    found = {}
    for line in requirements.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*==\s*([^\s;#]+)", line)
        if match:
            found[_normal(match.group(1))] = match.group(2)
    bundle = BUNDLE if bundle is None else bundle
    missing = [n for n, v in bundle.items() if v is None and _normal(n) not in found]
    if missing:
        raise ValueError(f"{requirements} pins no exact version of {missing}: pin them (NAME==VERSION)")
    return {n: v if v is not None else found[_normal(n)] for n, v in bundle.items()}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _project(wheel_name: str) -> str:
    """A wheel's project name, normalised (``unsloth_zoo-2026.10.7-py3-none-any.whl`` -> ``unsloth-zoo``)."""
    return _normal(wheel_name.split("-")[0])


def download_command(versions: dict[str, str], folder: Path) -> list[str]:
    """The ``pip download`` command for every pinned package: no dependencies, CPython 3.12 manylinux wheels."""
    return [sys.executable, "-m", "pip", "download", "--no-deps", *PLATFORM, "-d", str(folder),
            *(f"{name}=={version}" for name, version in versions.items())]


@dataclass(frozen=True)
class Wheel:
    """One wheel file: its name, size in bytes and SHA-256."""

    name: str
    size: int
    sha256: str


def wheels_in(folder: Path) -> list[Wheel]:
    """The wheels in ``folder``, by name."""
    return [Wheel(p.name, p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.glob("*.whl"))]


def _removed(path: str, rule: dict[str, object]) -> bool:
    return any(fnmatch.fnmatch(path, p) for p in rule["remove"]) and path not in rule["keep"]  # type: ignore[union-attr]


def repack(wheel: Path, rule: dict[str, object], compression: int = zipfile.ZIP_DEFLATED) -> dict[str, object]:
    """Rewrite ``wheel`` in place without the files ``rule`` removes; its ``RECORD`` (and ``entry_points.txt``,
    whose console scripts would name a removed module, unless ``rule["keep_entry_points"]``) rewritten to match, so
    pip installs it as any wheel. ``compression``: each member's, ``zipfile.ZIP_STORED`` for a wheel that travels
    inside a better-compressed archive (``benchmarks/vllm_bundle.py``).

    Returns:
        ``{"removed": [paths], "removed_bytes": int (unpacked), "why": str}``.
    """
    removed: list[str] = []
    removed_bytes = 0
    lines: list[list[str]] = []
    tmp = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(tmp, "w", compression) as target:
        infos = source.infolist()
        gone = {i.filename for i in infos if _removed(i.filename, rule)}
        record_info = next(i for i in infos if i.filename.endswith(".dist-info/RECORD"))
        record = record_info.filename
        for info in infos:
            name = info.filename
            if name in gone:
                removed.append(name)
                removed_bytes += info.file_size
                continue
            if name == record:
                continue  # written last, from what was kept
            data = source.read(info)
            if name.endswith(".dist-info/entry_points.txt") and gone and not rule.get("keep_entry_points"):
                data = b""  # the console script (`unsloth = unsloth_cli:app`) would name a removed module
            info.compress_type = compression
            target.writestr(info, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            lines.append([name, f"sha256={digest}", str(len(data))])
        text = io.StringIO()  # csv: vLLM's file names hold commas (fused_moe/configs/E=1,N=14336,...json)
        csv.writer(text, lineterminator="\n").writerows(lines + [[record, "", ""]])
        record_info.compress_type = compression
        target.writestr(record_info, text.getvalue())  # its own date: the same wheel repacks to the same bytes
    tmp.replace(wheel)  # whole or not at all
    tops = sorted({p.split("/")[0] + "/" if "/" in p else p for p in removed} if len(removed) > 20 else removed)
    return {"removed": tops, "removed_files": len(removed), "removed_bytes": removed_bytes, "why": rule["why"]}


def tree_bytes(root: Path = ROOT) -> int:
    """The bytes of the tree that travels with a device call besides the bundle: tracked files and untracked ones
    git does not ignore (``git ls-files --cached --others --exclude-standard``).

    Raises:
        subprocess.CalledProcessError: ``root`` is not a git checkout.
    """
    listed = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    names = subprocess.run(listed, cwd=root, check=True, capture_output=True).stdout.split(b"\0")
    return sum((root / n.decode()).stat().st_size for n in names if n and (root / n.decode()).is_file())


def bundle(folder: Path, versions: dict[str, str], repack_rules: dict[str, dict[str, object]] | None = None,
           tree: int | None = None, limit: int = LIMIT) -> dict[str, object]:
    """Repack the wheels in ``folder`` (once: a wheel the manifest lists as repacked, with the same SHA-256, is left as
    it is; one downloaded again over it is repacked again) and write
    ``manifest.json``: each wheel with its size, SHA-256 and what was removed and why, the tree's bytes and the
    total against ``limit``.

    Raises:
        ValueError: a pinned package has no wheel in ``folder`` (the download failed or was skipped), or a wheel
            belongs to none.
    """
    rules = REPACK if repack_rules is None else repack_rules
    wheels = {_project(p.name): p for p in sorted(folder.glob("*.whl"))}
    wanted = {_normal(n) for n in versions}
    missing, strays = sorted(wanted - set(wheels)), sorted(p.name for n, p in wheels.items() if n not in wanted)
    if missing or strays:
        raise ValueError(f"{folder}: no wheel for {missing}, and wheels of no package listed {strays}: run without "
                         "--no-download (pip download), or remove the strays")
    try:
        before = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        done = {(w["name"], w["sha256"]): w["repacked"] for w in before["wheels"] if w.get("repacked")}
    except (OSError, ValueError, KeyError, TypeError):
        done = {}
    listed = []
    for project, path in sorted(wheels.items()):
        rule = next((r for n, r in rules.items() if _normal(n) == project), None)
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        repacked = done.get((path.name, sha)) or (repack(path, rule) if rule is not None else None)
        data = path.read_bytes()
        listed.append({"name": path.name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                       "repacked": repacked})
    total = sum(w["bytes"] for w in listed)
    tree = tree_bytes() if tree is None else tree
    manifest = {"limit_bytes": limit, "python": "cp312", "platform": "manylinux x86_64", "pins": versions,
                "wheels": listed, "bundle_bytes": total, "tree_bytes": tree, "total_bytes": total + tree,
                "fits": total + tree <= limit}
    tmp = folder / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    tmp.replace(folder / "manifest.json")  # whole or not at all
    return manifest


def check(folder: Path, limit: int = LIMIT) -> str | None:
    """Why the bundle in ``folder`` cannot travel in one call (``None``: it can): no manifest, a wheel the manifest
    does not list or whose size differs, or the bundle and the tree over ``limit``. Runs where the tree has no
    ``.git`` (the device machine): then the tree's bytes are the manifest's."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        listed = {w["name"]: w["bytes"] for w in manifest["wheels"]}
        tree = int(manifest["tree_bytes"])
    except (OSError, ValueError, KeyError, TypeError):
        return f"{folder}/manifest.json is missing or damaged: run python benchmarks/wheel_bundle.py --out {folder}"
    found = {p.name: p.stat().st_size for p in folder.glob("*.whl")}
    if found != listed:
        return f"{folder} holds other wheels than its manifest lists: run python benchmarks/wheel_bundle.py again"
    try:
        tree = tree_bytes()
    except (OSError, subprocess.CalledProcessError):
        pass  # no git here: the manifest's measure of the tree
    total = sum(found.values()) + tree
    if total > limit:
        return (f"the bundle ({sum(found.values()) / 2**20:.1f} MiB) and the tree ({tree / 2**20:.1f} MiB) are "
                f"{total / 2**20:.1f} MiB, over {limit / 2**20:g} MiB")
    print(f"wheel bundle: {sum(found.values()) / 2**20:.1f} MiB + tree {tree / 2**20:.1f} MiB = {total / 2**20:.1f} "
          f"MiB of the {limit / 2**20:g} MiB one call may carry ({(limit - total) / 2**20:.1f} MiB left)", flush=True)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="wheels", help="the bundle's folder")
    parser.add_argument("--no-download", action="store_true", help="repack what is in --out already")
    parser.add_argument("--check", metavar="FOLDER", default=None, help="only check that FOLDER fits one call")
    parser.add_argument("--limit-mib", type=float, default=LIMIT / 2**20, help="bundle plus tree, in MiB")
    args = parser.parse_args(argv)
    limit = int(args.limit_mib * 2**20)
    if args.check is not None:
        problem = check(Path(args.check), limit)
        print(f"wheel bundle: {problem}" if problem else f"wheel bundle {args.check}: fits one call", flush=True)
        return 2 if problem else 0
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    versions = pins()
    if not args.no_download:
        subprocess.check_call(download_command(versions, folder))
    manifest = bundle(folder, versions, limit=limit)
    for wheel in manifest["wheels"]:
        cut = wheel["repacked"]
        note = f" (repacked: -{cut['removed_bytes'] / 2**20:.1f} MiB unpacked)" if cut else ""
        print(f"{wheel['name']}: {wheel['bytes'] / 2**20:.2f} MiB{note}")
    print(f"bundle {manifest['bundle_bytes'] / 2**20:.1f} MiB + tree {manifest['tree_bytes'] / 2**20:.1f} MiB = "
          f"{manifest['total_bytes'] / 2**20:.1f} MiB (limit {limit / 2**20:g} MiB)")
    return 0 if manifest["fits"] else 2


if __name__ == "__main__":
    sys.exit(main())
