"""The GPU proof's compile caches: kept between its parts on a machine, packed into one file that comes back from a
device call, and restored from that file on the next loan's machine before the parts run (issue 53).

Unsloth's first GRPO step is mostly compilation (the 2026-11-27 smoke: 97 s for the first step, 5 s for the
second), and every new process pays it again unless torch's on-disk caches are warm (unsloth_zoo 2026.10.7,
``compile_cache.py``). The caches, each pointed into one folder by its own variable (:data:`FOLDERS`): Inductor's
FX graph and AOTAutograd caches (``TORCHINDUCTOR_CACHE_DIR``), Triton's compiled kernels, Inductor's and Unsloth's own
(``TRITON_CACHE_DIR``), and Unsloth's Mega-cache bundles (``UNSLOTH_MEGA_CACHE_DIR``, written at a normal exit where
Unsloth arms it); beside them Unsloth's generated modules, ``unsloth_compiled_cache/`` in the working directory.
Every part of a call runs with the same folder, so a part finds what the parts before it compiled.

The file is a gzip'd tar of at most ``limit`` bytes (16 MiB: what one file back from a call may weigh); files that
would pass the limit are left out, the folders' order in :data:`FOLDERS` first, and counted in what :func:`pack`
returns. :func:`restore` extracts with PEP 706's ``data`` filter, the standard library's or before Python 3.11.4 its
backport (no absolute paths, no ``..``, no links out, no group- or other-writable modes: Unsloth refuses a
Mega-cache folder others can write).

  python benchmarks/compile_cache.py pack CACHE_ROOT FILE [--limit-mib 16]
  python benchmarks/compile_cache.py restore FILE CACHE_ROOT
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

try:  # PEP 706's extraction filters (filter="data"): in the standard library from Python 3.11.4
    import tarfile
    from tarfile import data_filter  # noqa: F401
except ImportError:  # older, such as Debian 12's 3.11.2: the same module, backported (requirements-cpu.txt)
    from backports import tarfile

#: The cache folders under the cache root, in the order they are packed, each with the variable that points the
#: library at it. Unsloth's generated modules (:data:`GENERATED`) come first: they are small.
FOLDERS: dict[str, str] = {"unsloth-mega": "UNSLOTH_MEGA_CACHE_DIR", "inductor": "TORCHINDUCTOR_CACHE_DIR",
                           "triton": "TRITON_CACHE_DIR"}
#: Unsloth's generated modules: a folder of the working directory (unsloth_zoo's ``UNSLOTH_COMPILE_LOCATION``
#: default), packed and restored under this name.
GENERATED = "unsloth_compiled_cache"
#: The largest file one device call brings back.
LIMIT = 16 * 2**20
#: Room kept below the limit for the gzip stream's buffered tail and the tar's end blocks.
MARGIN = 2**20


def environment(root: Path) -> dict[str, str]:
    """The variables that point each cache into ``root`` (:data:`FOLDERS`), for a part's process."""
    return {variable: str(root / name) for name, variable in FOLDERS.items()}


def files(root: Path, workdir: Path) -> list[tuple[Path, str]]:
    """Every cache file as ``(path, name in the archive)``: Unsloth's generated modules under ``workdir``, then each
    of :data:`FOLDERS` under ``root`` in order, each folder's files sorted by path."""
    found = []
    for base, name in [(workdir / GENERATED, GENERATED)] + [(root / n, n) for n in FOLDERS]:
        if base.is_dir():
            found += [(p, f"{name}/{p.relative_to(base).as_posix()}") for p in sorted(base.rglob("*"))
                      if p.is_file() and not p.is_symlink()]
    return found


def summary(root: Path, workdir: Path) -> dict[str, Any]:
    """``{"files": n, "mib": m}``: what the caches hold now (a part's row says how warm it started)."""
    found = files(root, workdir)
    return {"files": len(found), "mib": round(sum(p.stat().st_size for p, _ in found) / 2**20, 1)}


def pack(root: Path, workdir: Path, out: Path, limit: int = LIMIT) -> dict[str, Any]:
    """Write every cache file into the gzip'd tar ``out`` (written whole or not at all), leaving out a file that
    could take the archive past ``limit`` bytes even uncompressed. Returns what went in and what was left out:
    ``{"file", "bytes", "files", "left_out", "left_out_mib"}``."""
    partial = out.with_name(out.name + ".partial")
    packed, left = 0, []
    with partial.open("wb") as raw, tarfile.open(fileobj=raw, mode="w:gz", compresslevel=6) as tar:
        for path, name in files(root, workdir):
            size = path.stat().st_size
            if raw.tell() + size + 1024 > limit - MARGIN:
                left.append(size)
                continue
            tar.add(path, arcname=name, recursive=False)
            packed += 1
    os.replace(partial, out)
    return {"file": str(out), "bytes": out.stat().st_size, "files": packed, "left_out": len(left),
            "left_out_mib": round(sum(left) / 2**20, 1)}


def restore(archive: Path, root: Path, workdir: Path) -> dict[str, Any]:
    """Extract ``archive`` (from :func:`pack`): the :data:`FOLDERS` into ``root``, Unsloth's generated modules into
    ``workdir``, with the ``data`` filter. Returns ``{"files": n}``.

    Raises:
        ValueError: a member outside the known folders (not an archive :func:`pack` wrote).
    """
    with tarfile.open(archive, mode="r:gz") as tar:
        members = tar.getmembers()
        strangers = sorted({m.name.split("/")[0] for m in members} - set(FOLDERS) - {GENERATED})
        if strangers:
            raise ValueError(f"{archive} holds {strangers}, which no compile cache packs: not restored")
        root.mkdir(parents=True, exist_ok=True)
        tar.extractall(root, members=[m for m in members if not m.name.startswith(GENERATED + "/")],
                       filter="data")
        tar.extractall(workdir, members=[m for m in members if m.name.startswith(GENERATED + "/")], filter="data")
    return {"files": sum(1 for m in members if m.isfile())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    packing = sub.add_parser("pack", help="pack the caches under CACHE_ROOT into FILE")
    packing.add_argument("root", type=Path)
    packing.add_argument("file", type=Path)
    packing.add_argument("--limit-mib", type=float, default=LIMIT / 2**20)
    restoring = sub.add_parser("restore", help="restore FILE's caches into CACHE_ROOT")
    restoring.add_argument("file", type=Path)
    restoring.add_argument("root", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "pack":
            said = pack(args.root, Path.cwd(), args.file, int(args.limit_mib * 2**20))
        else:
            said = restore(args.file, args.root, Path.cwd())
    except (OSError, ValueError, tarfile.TarError) as e:
        print(f"compile_cache {args.command}: {e}", file=sys.stderr)
        return 2
    print(json.dumps(said))
    return 0


if __name__ == "__main__":
    sys.exit(main())
