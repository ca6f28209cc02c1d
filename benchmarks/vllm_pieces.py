"""vLLM's bundle in pieces (``make wheels-vllm``, ``benchmarks/vllm_bundle.py``): each piece checked against the size
a device call may carry, kept on the machine as calls bring them, and joined, checked and unpacked once all are
there (``benchmarks/vllm_call.sh`` runs these on the machine). Standard library only.

  python benchmarks/vllm_pieces.py --check wheels-vllm/piece-1       # that piece and the tree fit one call
  python benchmarks/vllm_pieces.py --store wheels-vllm --into DIR    # keep the pieces carried; exit 3: more to come
  python benchmarks/vllm_pieces.py --assemble DIR/ID --wheels-out W  # join, check, unpack the wheels
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compile_cache import tarfile  # noqa: E402  (with PEP 706's filters: the standard library's or their backport)
from vllm_bundle import ARCHIVE, kit_bytes, sha256  # noqa: E402
from wheel_bundle import LIMIT, ROOT, tree_bytes  # noqa: E402


def _manifest(folder: Path) -> dict[str, object]:
    """``folder/manifest.json``.

    Raises:
        ValueError: it is missing or damaged.
    """
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{folder}/manifest.json is missing or unreadable: run `make wheels-vllm`") from e
    if not isinstance(manifest.get("pieces"), list) or "sha256" not in manifest.get("archive", {}):
        raise ValueError(f"{folder}/manifest.json lists no pieces or archive: run `make wheels-vllm`")
    return manifest


def _piece_of(folder: Path, manifest: dict[str, object]) -> tuple[int, dict[str, object]]:
    """``(number, entry)`` of the piece ``folder`` holds, checked against the manifest.

    Raises:
        ValueError: no piece of this manifest here, or its size or SHA-256 differs.
    """
    for number, piece in enumerate(manifest["pieces"], 1):
        path = folder / piece["name"]
        if folder.name == piece["folder"] and path.is_file():
            if path.stat().st_size != piece["bytes"] or sha256(path) != piece["sha256"]:
                raise ValueError(f"{path} is not the piece its manifest lists (size or SHA-256): build it again")
            return number, piece
    raise ValueError(f"{folder} holds no piece its manifest lists")


def check(folder: Path, limit: int = LIMIT, kit_folder: Path = ROOT / "wheels") -> str | None:
    """Why piece ``folder`` cannot travel in one call (``None``: it can): it is not its manifest's, or with the
    tree (and, for the last piece, the proof's wheel bundle) it is over ``limit``. Where the tree has no ``.git``
    (the device machine), the manifest's measures stand in."""
    try:
        manifest = _manifest(folder)
        number, piece = _piece_of(folder, manifest)
    except ValueError as e:
        return str(e)
    try:
        tree = tree_bytes()
    except (OSError, subprocess.CalledProcessError):
        tree = int(manifest["tree_bytes"])
    last = number == len(manifest["pieces"])
    kit = (kit_bytes(kit_folder) if (kit_folder / "manifest.json").is_file() else int(manifest["kit_bytes"])) \
        if last else 0
    total = piece["bytes"] + tree + kit
    with_kit = f" + the proof's wheels {kit / 2**20:.1f} MiB" if last else ""
    said = (f"piece {number} of {len(manifest['pieces'])}: {piece['bytes'] / 2**20:.1f} MiB + tree "
            f"{tree / 2**20:.1f} MiB{with_kit} = {total / 2**20:.1f} MiB of {limit / 2**20:g} MiB")
    if total > limit:
        return said + ": over; run `make wheels-vllm` again (it sizes the pieces to the tree)"
    print(f"{said} ({(limit - total) / 2**20:.1f} MiB left)", flush=True)
    return None


def store(pieces: Path, into: Path) -> tuple[Path, list[int]]:
    """Keep every piece carried under ``pieces`` (its ``piece-N`` folders) in ``into/<archive SHA-256, 12>/``, each
    checked against its manifest and copied whole or not at all; ``into/current`` names that folder (a call that
    carries no piece goes on with the bundle kept last). Returns that folder and the numbers still missing.

    Raises:
        ValueError: no piece carried and none kept, a piece that is not its manifest's, or pieces of two bundles.
    """
    carried = [f for f in sorted(pieces.glob("piece-*")) if (f / "manifest.json").is_file()]
    manifests = {f: _manifest(f) for f in carried}
    digests = {m["archive"]["sha256"] for m in manifests.values()}
    if len(digests) > 1:
        raise ValueError(f"{pieces} holds pieces of {len(digests)} different bundles: carry one bundle's")
    current = into / "current"
    if not digests and not current.is_file():
        raise ValueError(f"no vLLM piece was carried ({pieces}/piece-N) and none is kept in {into}: carry "
                         "wheels-vllm/piece-1 (make wheels-vllm)")
    folder = into / (next(iter(digests))[:12] if digests else current.read_text(encoding="utf-8").strip())
    folder.mkdir(parents=True, exist_ok=True)
    (into / "current.tmp").write_text(folder.name + "\n", encoding="utf-8")
    (into / "current.tmp").replace(current)
    for source, manifest in manifests.items():
        _, piece = _piece_of(source, manifest)
        if not (folder / piece["name"]).is_file():
            tmp = folder / (piece["name"] + ".tmp")
            shutil.copyfile(source / piece["name"], tmp)
            tmp.replace(folder / piece["name"])
        shutil.copyfile(source / "manifest.json", folder / "manifest.json")
    manifest = _manifest(folder)
    missing = [n for n, p in enumerate(manifest["pieces"], 1) if not (folder / p["name"]).is_file()]
    return folder, missing


def assemble(folder: Path, wheels_out: Path) -> list[Path]:
    """Join the pieces kept in ``folder`` (:func:`store`), check the archive's SHA-256, unpack its wheels into
    ``wheels_out`` and check each against the manifest. Returns the wheels.

    Raises:
        ValueError: a piece is missing, or the archive or a wheel is not the manifest's.
    """
    manifest = _manifest(folder)
    paths = [folder / p["name"] for p in manifest["pieces"]]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise ValueError(f"{folder}: pieces {missing} have not come yet")
    shutil.rmtree(wheels_out, ignore_errors=True)
    wheels_out.mkdir(parents=True)
    archive = wheels_out / ARCHIVE
    with archive.open("wb") as joined:
        for path in paths:
            with path.open("rb") as f:
                shutil.copyfileobj(f, joined, 2**20)
    if sha256(archive) != manifest["archive"]["sha256"]:
        raise ValueError(f"the joined pieces in {folder} are not the archive the manifest lists: carry them again")
    with tarfile.open(archive, "r:xz") as tar:
        tar.extractall(wheels_out, filter="data")
    archive.unlink()
    listed = {w["name"]: w["sha256"] for w in manifest["wheels"]}
    found = {p.name: p for p in wheels_out.glob("*.whl")}
    wrong = sorted(n for n in set(listed) | set(found) if n not in found or n not in listed
                   or sha256(found[n]) != listed[n])
    if wrong:
        raise ValueError(f"the unpacked wheels differ from the manifest: {wrong}")
    return sorted(found.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", metavar="PIECE", default=None, help="that piece fits one call (exit 2 if not)")
    parser.add_argument("--store", metavar="PIECES", default=None, help="keep the pieces carried under PIECES")
    parser.add_argument("--into", default=None, help="with --store: the folder pieces are kept in")
    parser.add_argument("--assemble", metavar="FOLDER", default=None, help="join and unpack a kept bundle")
    parser.add_argument("--wheels-out", default=None, help="with --assemble: where its wheels go")
    args = parser.parse_args(argv)
    try:
        if args.check:
            problem = check(Path(args.check))
            print(f"vllm bundle: {problem}" if problem else f"vllm bundle {args.check}: fits one call", flush=True)
            return 2 if problem else 0
        if args.store and args.into:
            folder, missing = store(Path(args.store), Path(args.into))
            count = len(_manifest(folder)["pieces"])
            print(f"vllm bundle: {count - len(missing)} of {count} pieces on this machine ({folder})" +
                  (f"; still to carry: {', '.join(f'wheels-vllm/piece-{n}' for n in missing)}" if missing else ""),
                  flush=True)
            return 3 if missing else 0
        if args.assemble and args.wheels_out:
            wheels = assemble(Path(args.assemble), Path(args.wheels_out))
            print(f"vllm bundle: {len(wheels)} wheels checked in {args.wheels_out}", flush=True)
            return 0
    except ValueError as e:
        print(f"vllm bundle: {e}", file=sys.stderr, flush=True)
        return 2
    parser.error("give --check PIECE, --store PIECES --into DIR, or --assemble FOLDER --wheels-out DIR")


if __name__ == "__main__":
    sys.exit(main())
