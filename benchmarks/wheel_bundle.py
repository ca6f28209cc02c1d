"""The wheels a GPU machine without network needs for the GPU proof, downloaded here and split into parts that
each fit one call of the device tool (at most 64 MiB of files travel with a call).

The machine has torch, transformers, peft, accelerate, triton, numpy and pandas; the proof also needs TRL and
datasets (and what they pull that is not there), and for Unsloth's routes unsloth, unsloth_zoo and bitsandbytes
(:data:`GROUPS`). Every wheel is pinned and downloaded for CPython 3.12 on manylinux x86_64, without
dependencies (``pip download --no-deps``), so that exactly the listed files travel.

  python benchmarks/wheel_bundle.py --out wheels            # download, then split into wheels/part-1, part-2, ...
  python benchmarks/wheel_bundle.py --out wheels --no-download   # split and list what is already in wheels/

``wheels/manifest.json`` lists each wheel with its size, SHA-256, group and part; a wheel larger than the
limit cannot travel and is listed under ``too_large`` (a CUDA vLLM wheel would be one), never dropped silently.
The ``core`` group's parts come first. On the GPU machine, one call per part, each carrying ``wheels/part-<n>``
and installing it: ``pip install --no-deps --no-index wheels/part-<n>/*.whl`` (the machine keeps what a call
installed while it stays warm).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: At most this much travels with one device call (the device tool's limit, 64 MiB, less room for the code).
PART_LIMIT = 60 * 2**20
#: What the proof needs beyond the GPU machine's own packages, in two groups that travel in order: ``core`` for
#: every route (TRL and its data stack), ``unsloth`` for Unsloth's routes. Packages the kit pins are taken from
#: requirements.txt; their dependencies at the versions pip's resolver chose for requirements-stack.txt (the
#: stack suite's environment, trl 1.15.0 + unsloth 2026.10.7, November 2026).
GROUPS: dict[str, dict[str, str | None]] = {
    "core": {"trl": None, "datasets": None, "math-verify": None, "latex2sympy2_extended": "1.11.0",
             "antlr4-python3-runtime": "4.13.2", "pyarrow": "26.0.1", "dill": "0.4.1", "multiprocess": "0.70.19",
             "xxhash": "4.1.0", "fsspec": "2026.2.0", "aiohttp": "3.14.5", "aiohappyeyeballs": "2.7.1",
             "aiosignal": "1.4.0", "frozenlist": "1.8.0", "multidict": "7.2.1", "yarl": "1.25.1",
             "propcache": "0.5.4", "attrs": "26.1.0", "httpx": "0.28.1"},
    "unsloth": {"unsloth": None, "unsloth_zoo": None, "bitsandbytes": None, "xformers": None, "tyro": "1.0.17",
                "docstring_parser": "0.18.0", "typeguard": "4.6.0", "cut_cross_entropy": "25.1.1",
                "torchao": "0.18.0", "msgspec": "0.22.0", "sentencepiece": "0.2.3", "hf_transfer": "0.1.9",
                "einops": "0.8.2", "diffusers": "0.42.1", "typer": "0.29.2", "structlog": "26.1.0",
                "nest_asyncio": "1.6.0"},
}
#: CPython 3.12 on x86_64 Linux with glibc up to 2.35 (Ubuntu 22.04), as pip names the tags wheels may carry.
PLATFORM = ("--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp", "--abi", "cp312",
            "--abi", "abi3", "--abi", "none",
            *(arg for minor in range(35, 16, -1) for arg in ("--platform", f"manylinux_2_{minor}_x86_64")),
            "--platform", "manylinux2014_x86_64", "--platform", "any")


def pins(requirements: Path = ROOT / "requirements.txt",
         groups: dict[str, dict[str, str | None]] | None = None) -> dict[str, dict[str, str]]:
    """``{group: {package: version}}``: a ``None`` version is read from ``requirements`` (an exact pin).

    Raises:
        ValueError: a package left to ``requirements`` that it does not pin with ``==``.
    """
    found = {}
    for line in requirements.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*==\s*([^\s;#]+)", line)
        if match:
            found[_normal(match.group(1))] = match.group(2)
    groups = GROUPS if groups is None else groups
    missing = [n for group in groups.values() for n, v in group.items() if v is None and _normal(n) not in found]
    if missing:
        raise ValueError(f"{requirements} pins no exact version of {missing}: pin them (NAME==VERSION)")
    return {g: {n: v if v is not None else found[_normal(n)] for n, v in group.items()} for g, group in groups.items()}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def download_command(versions: dict[str, dict[str, str]], folder: Path) -> list[str]:
    """The ``pip download`` command for every pinned package: no dependencies, CPython 3.12 manylinux wheels."""
    return [sys.executable, "-m", "pip", "download", "--no-deps", *PLATFORM, "-d", str(folder),
            *(f"{name}=={version}" for group in versions.values() for name, version in group.items())]


@dataclass(frozen=True)
class Wheel:
    """One downloaded file: its name, size in bytes and SHA-256."""

    name: str
    size: int
    sha256: str


def wheels_in(folder: Path) -> list[Wheel]:
    """The wheels in ``folder`` (not in its parts), by name."""
    found = []
    for path in sorted(folder.glob("*.whl")):
        found.append(Wheel(path.name, path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest()))
    return found


def split(wheels: list[Wheel], limit: int = PART_LIMIT) -> tuple[list[list[Wheel]], list[Wheel]]:
    """Pack wheels into parts of at most ``limit`` bytes each (largest first, each into the first part it fits).

    Returns:
        ``(parts, too_large)``: every wheel is in exactly one part, or in ``too_large`` when it alone exceeds
        ``limit``.

    >>> parts, big = split([Wheel("a", 40, ""), Wheel("b", 30, ""), Wheel("c", 25, ""), Wheel("d", 200, "")], 64)
    >>> [[w.name for w in p] for p in parts], [w.name for w in big]
    ([['a'], ['b', 'c']], ['d'])
    """
    parts: list[list[Wheel]] = []
    room: list[int] = []
    too_large = []
    for wheel in sorted(wheels, key=lambda w: (-w.size, w.name)):
        if wheel.size > limit:
            too_large.append(wheel)
            continue
        for index, free in enumerate(room):
            if wheel.size <= free:
                parts[index].append(wheel)
                room[index] -= wheel.size
                break
        else:
            parts.append([wheel])
            room.append(limit - wheel.size)
    return parts, too_large


def _project(wheel_name: str) -> str:
    """A wheel's project name, normalised (``unsloth_zoo-2026.10.7-py3-none-any.whl`` -> ``unsloth-zoo``)."""
    return _normal(wheel_name.split("-")[0])


def bundle(folder: Path, versions: dict[str, dict[str, str]], limit: int = PART_LIMIT) -> dict[str, object]:
    """Move the wheels in ``folder`` into ``part-<n>/`` folders of at most ``limit`` bytes each, group by group
    (the ``core`` parts first), and write ``manifest.json``.

    Raises:
        ValueError: a pinned package has no wheel in ``folder`` (the download failed or was skipped), or a
            wheel belongs to no group.
    """
    for part in sorted(folder.glob("part-*")):  # re-split from scratch
        for path in part.glob("*.whl"):
            path.rename(folder / path.name)
        part.rmdir()
    wheels = wheels_in(folder)
    group_of = {_normal(n): g for g, group in versions.items() for n in group}
    strays = sorted(w.name for w in wheels if _project(w.name) not in group_of)
    have = {_project(w.name) for w in wheels}
    missing = sorted(n for n in group_of if n not in have)
    if missing or strays:
        raise ValueError(f"{folder}: no wheel for {missing}, and wheels of no group {strays}: run without "
                         "--no-download (pip download), or remove the strays")
    parts: list[tuple[str, list[Wheel]]] = []
    too_large: list[Wheel] = []
    for group in versions:
        packed, big = split([w for w in wheels if group_of[_project(w.name)] == group], limit)
        parts += [(group, p) for p in packed]
        too_large += big
    for number, (_, part) in enumerate(parts, start=1):
        target = folder / f"part-{number}"
        target.mkdir()
        for wheel in part:
            (folder / wheel.name).rename(target / wheel.name)
    manifest = {"limit_bytes": limit, "python": "cp312", "platform": "manylinux x86_64", "pins": versions,
                "parts": [{"part": f"part-{n}", "group": g, "bytes": sum(w.size for w in p),
                           "wheels": [{"name": w.name, "bytes": w.size, "sha256": w.sha256} for w in p]}
                          for n, (g, p) in enumerate(parts, start=1)],
                "too_large": [{"name": w.name, "bytes": w.size} for w in too_large]}
    tmp = folder / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    tmp.replace(folder / "manifest.json")  # whole or not at all
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="wheels", help="the bundle's folder")
    parser.add_argument("--no-download", action="store_true", help="split what is in --out already")
    parser.add_argument("--limit-mib", type=float, default=PART_LIMIT / 2**20, help="bytes per part, in MiB")
    args = parser.parse_args(argv)
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    versions = pins()
    if not args.no_download:
        subprocess.check_call(download_command(versions, folder))
    manifest = bundle(folder, versions, int(args.limit_mib * 2**20))
    for part in manifest["parts"]:
        print(f"{part['part']}: {part['bytes'] / 2**20:.1f} MiB, {', '.join(w['name'] for w in part['wheels'])}")
    for wheel in manifest["too_large"]:
        print(f"cannot travel (over {args.limit_mib:g} MiB alone): {wheel['name']} ({wheel['bytes'] / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
