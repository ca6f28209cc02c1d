"""Write grpo_kit/system/install_table.json: for each torch release the kit supports, the package set that resolves
with it, read from the packages' own metadata on the registry (no wheel is downloaded).

    python scripts/install_table.py            # rewrite the table (10 min on 2 busy cores, mostly the registry)
    python scripts/install_table.py --check    # compare the shipped table with the registry; exit 1 on a difference

Each row keeps the torch release, takes the GPU stack's pins from requirements.txt (unsloth, unsloth_zoo, trl,
transformers, peft, accelerate, datasets, bitsandbytes) and the newest vLLM whose ``Requires-Dist`` pins a torch of
that release and that the pinned TRL declares it supports (its ``vllm`` extra: trl 1.15.0 ``vllm>=0.21.0,<=0.31.0``,
the range ``trl.import_utils.is_vllm_available`` warns outside of); a release that pins the torch but lies outside
that range is named in the row's ``vllm_note`` instead. Then every Requires-Dist among the row's packages is checked
(markers read for Linux x86-64, CPython 3.12). xformers is read from Unsloth's own metadata: its
``cu<XYZ>onlytorch<release>`` extras name the xformers built for that torch on PyTorch's index for each CUDA
(``xformers==0.0.35; ... extra == "cu128onlytorch2110"``). PyPI's xformers wheel is one CUDA's build (0.0.35:
CUDA 12.8, for torch 2.10), so a row installs xformers only from PyTorch's index for the runtime's CUDA; where
Unsloth names no build for its torch, the row says so (pip then takes PyPI's as unsloth's dependency, and Unsloth
falls back to PyTorch's SDPA where it does not load). A CUDA is read from torch's own requirements
(``cuda-toolkit[...]==13.0.2`` or ``nvidia-cuda-runtime-cu12==12.8.90``): PyPI's vLLM wheels are built against
PyPI's torch of the version they pin, so a vLLM's CUDA is that torch's.

A row also names what else its vLLM pins exactly (``torchvision==0.26.0``, ``torchaudio==2.11.0``: PyPI's builds for
the same CUDA as its torch), which the install plan installs with PyPI's torch where it replaces a runtime's torch of
the same release built for another CUDA (Colab's ``2.11.0+cu128`` on a driver that runs CUDA 13), and the download
that replacement costs: every file ``pip install torch==X vllm==Y`` fetches on a machine that has none of them (their
sizes from the registry, ``Content-Length``). Every torch release of a row's minor has its own entry (``releases``):
its CUDA, its xformers, and the row's requirements checked against it, so a runtime's ``2.14.0`` is answered about
2.14.0, not the row's newest.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "grpo_kit" / "system" / "install_table.json"
#: The torch releases with a row: every one a Colab runtime may have in 2026 that Unsloth 2026.10 admits (< 2.15).
#: Colab's request for torch 2.10 with CUDA 12.8 is closed and those for 2.11-2.14 (CUDA 13 builds on PyPI) open
#: (googlecolab/colabtools#5801), so 2.10+cu128 may be what most runtimes have.
MINORS = ("2.10", "2.11", "2.12", "2.13", "2.14")
#: The GPU stack's packages taken from requirements.txt for every row (torch and vllm are chosen per row, xformers read
#: from unsloth's metadata).
STACK = ("unsloth", "unsloth_zoo", "trl", "transformers", "peft", "accelerate", "datasets", "bitsandbytes")
#: What a vLLM release pins besides torch, built for the same CUDA (installed with torch where the plan replaces it).
COMPANIONS = ("torchvision", "torchaudio")
#: Manylinux tags a Colab or cloud GPU machine (glibc 2.35) installs: every manylinux_2_N up to 2.35. pip matches
#: --platform tags exactly, so each is named (vllm 0.19.1, for one, is tagged manylinux_2_31 only).
PLATFORMS = (*(f"manylinux_2_{n}_x86_64" for n in range(35, 16, -1)), "manylinux2014_x86_64", "linux_x86_64")
#: ``pip install --dry-run`` reading only each wheel's METADATA. pip takes it from the file an index serves beside the
#: wheel (PEP 658: PyPI's ``core-metadata``) and, where an index or mirror serves none, downloads the whole wheel
#: (torch's: 530 MB) unless fast-deps lets it read the METADATA by HTTP range requests: pip tries the PEP 658 file
#: first, then the lazy wheel (pip/_internal/operations/prepare.py, ``_fetch_metadata_only``).
PIP_DRY_RUN = ("install", "--quiet", "--dry-run", "--use-feature=fast-deps", "--ignore-installed",
               "--only-binary=:all:")
MARKERS = {**default_environment(), "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
           "python_version": "3.12", "python_full_version": "3.12.12", "implementation_name": "cpython",
           "extra": ""}


def fetch(requirements: list[str]) -> dict[str, dict]:
    """Each requirement's chosen version and Requires-Dist, from one ``pip install --dry-run --no-deps --report``.

    Args:
        requirements: ``name==version`` or ``name``/specifier strings, at most one per package name.

    Returns:
        ``{canonical name: {"version": str, "requires_dist": [str, ...]}}``.

    Raises:
        subprocess.CalledProcessError: pip could not read them (the registry is unreachable or a version is gone).
    """
    return {canonicalize_name(item["metadata"]["name"]): {"version": item["metadata"]["version"],
                                                         "requires_dist": item["metadata"].get("requires_dist") or []}
            for item in dry_run(requirements, "--no-deps")}


def dry_run(requirements: list[str], *options: str, python: str = "3.12", timeout: float | None = None) -> list[dict]:
    """What ``pip install REQUIREMENTS`` would install on CPython ``python``, manylinux x86-64 (:data:`PLATFORMS`), as
    pip's ``--dry-run --report`` gives it: the report's ``install`` entries (``metadata``, ``download_info``), read
    from wheel metadata only (:data:`PIP_DRY_RUN`). ``options``: more of pip's options (``--no-deps``).

    Raises:
        subprocess.CalledProcessError: pip could not resolve them (its standard error in ``.stderr``).
        subprocess.TimeoutExpired: pip ran past ``timeout`` seconds.
    """
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.json"
        platforms = [arg for tag in PLATFORMS for arg in ("--platform", tag)]
        subprocess.run([sys.executable, "-m", "pip", *PIP_DRY_RUN, *options, "--python-version", python, *platforms,
                        "--report", str(report), *requirements],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=timeout)
        return json.loads(report.read_text())["install"]


@functools.cache
def fetch_one(requirement: str) -> dict:
    """:func:`fetch` of one requirement, remembered: the rows walk down the same vLLM releases."""
    return next(iter(fetch([requirement]).values()))


@functools.cache
def versions(name: str) -> list[str]:
    """The registry's versions of ``name``, newest first (``pip index versions``)."""
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", name, "--python-version", "3.12",
                          "--only-binary=:all:", *[a for t in PLATFORMS for a in ("--platform", t)]],
                         check=True, capture_output=True, text=True).stdout
    listed = re.search(r"Available versions: (.*)", out).group(1)
    return [v.strip() for v in listed.split(",") if not Version(v.strip()).is_prerelease]


def _requirements(meta: dict) -> list[Requirement]:
    found = []
    for line in meta["requires_dist"]:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate(MARKERS):
            found.append(requirement)
    return found


def torch_pin(meta: dict, name: str = "torch") -> str | None:
    """The exact version a package pins of ``name`` (``torch==X``), or ``None``."""
    for requirement in _requirements(meta):
        if canonicalize_name(requirement.name) == name:
            exact = [s.version for s in requirement.specifier if s.operator == "=="]
            return exact[0] if exact else None
    return None


def vllm_range(trl: dict) -> SpecifierSet:
    """The vLLM releases a TRL release declares it supports: its ``vllm`` extra's specifier (empty: any).

    >>> str(vllm_range({"requires_dist": ['vllm<=0.31.0,>=0.21.0; extra == "vllm"', 'accelerate>=1.4.0']}))
    '<=0.31.0,>=0.21.0'
    """
    for line in trl["requires_dist"]:
        requirement = Requirement(line)
        if canonicalize_name(requirement.name) == "vllm" and 'extra == "vllm"' in str(requirement.marker or ""):
            return requirement.specifier
    return SpecifierSet()


def torch_cuda(meta: dict) -> str:
    """The CUDA of PyPI's torch wheel, from its requirements (``cuda-toolkit==13.0.2`` -> ``"13.0"``)."""
    for requirement in _requirements(meta):
        name = canonicalize_name(requirement.name)
        if name in ("cuda-toolkit", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime"):
            version = next(s.version for s in requirement.specifier if s.operator == "==")
            return ".".join(version.split(".")[:2])
    raise ValueError(f"torch {meta['version']} names no CUDA runtime in its requirements")


def xformers_of(unsloth: dict, torch_version: str) -> tuple[str | None, list[str]]:
    """The xformers Unsloth's metadata names for ``torch_version`` and the CUDAs PyTorch's index builds it for.

    >>> xformers_of({"requires_dist": ['xformers==0.0.35; platform_machine == "x86_64" and extra == '
    ...              '"cu128onlytorch2110"', 'xformers==0.0.35; extra == "cu130onlytorch2110"',
    ...              'xformers==0.0.34; extra == "cu128onlytorch2100"']}, "2.11.0")
    ('0.0.35', ['12.8', '13.0'])
    """
    release = torch_version.replace(".", "")
    found: dict[str, str] = {}
    for line in unsloth["requires_dist"]:
        requirement = Requirement(line)
        extra = re.search(r'extra == "cu(\d+)(\d)onlytorch(\d+)"', str(requirement.marker or ""))
        if canonicalize_name(requirement.name) == "xformers" and extra and extra.group(3) == release:
            exact = [spec.version for spec in requirement.specifier if spec.operator == "=="]
            if exact:
                found[f"{int(extra.group(1))}.{extra.group(2)}"] = exact[0]
    versions = set(found.values())
    if len(versions) != 1:
        return None, []
    return versions.pop(), sorted(found, key=Version)


def check_row(metas: dict[str, dict]) -> list[str]:
    """Every Requires-Dist among the row's packages that the row's versions do not satisfy, a line each."""
    problems = []
    for name, meta in metas.items():
        for requirement in _requirements(meta):
            other = metas.get(canonicalize_name(requirement.name))
            if other is not None and not requirement.specifier.contains(other["version"], prereleases=True):
                problems.append(f"{name} {meta['version']} requires {requirement.name}{requirement.specifier}, the "
                                f"row has {other['version']}")
    return problems


def release_entry(release: dict, metas: dict[str, dict]) -> dict:
    """What a row says of one torch release of its minor: its CUDA, the xformers Unsloth names for it with the CUDAs
    PyTorch's index builds it for, and the row's stack requirements it breaks (vLLM's own pin apart: a vLLM pins one
    release, which the install plan checks itself)."""
    xformers, xformers_cudas = xformers_of(metas["unsloth"], release["version"])
    stack = {name: meta for name, meta in metas.items() if name != "vllm"}
    return {"cuda": torch_cuda(release), "xformers": xformers, "xformers_cudas": xformers_cudas,
            "problems": check_row({**stack, "torch": release})}


def derive_row(minor: str, metas: dict[str, dict], vllm_note: str | None = None,
               releases: list[dict] | None = None, download_gb: float | None = None) -> dict:
    """One row of the table from the metadata of its packages (torch, the stack, and vllm where chosen);
    ``vllm_note`` says why there is no vLLM where :func:`row_metadata` chose none; ``releases`` are the metadata of
    every torch release of the minor (default: the row's torch alone); ``download_gb`` what torch's build and the
    vLLM cost to download (:func:`download_gb`).

    A vLLM whose requirements the row breaks is dropped, with the reason in ``problems``.
    """
    torch_meta = metas["torch"]
    vllm = metas.get("vllm")
    problems = check_row(metas)
    if vllm is not None and any(p.startswith("vllm ") for p in problems):
        problems = [f"no vLLM: {p}" if p.startswith("vllm ") else p for p in problems]
        vllm = None
    requires = {f"{name}=={m['version']}": sorted(str(r) for r in _requirements(m)
                                                 if canonicalize_name(r.name) in metas)
                for name, m in sorted(metas.items())}
    companions = {name: pin for name in COMPANIONS if vllm and (pin := torch_pin(vllm, name))}
    return {"torch_minor": minor, "torch": torch_meta["version"], "cuda": torch_cuda(torch_meta),
            "vllm": vllm and vllm["version"], "vllm_torch": vllm and torch_pin(vllm),
            "vllm_cuda": vllm and torch_cuda(torch_meta), "vllm_companions": companions,
            "vllm_download_gb": download_gb if vllm else None,
            "vllm_note": None if vllm else (vllm_note or f"no vLLM release pins torch {minor}"),
            "releases": {r["version"]: release_entry(r, metas) for r in sorted(releases or [torch_meta],
                                                                            key=lambda r: Version(r["version"]))},
            "packages": {name: metas[canonicalize_name(name)]["version"] for name in STACK},
            "problems": problems, "requires": requires}


def download_gb(requirements: list[str]) -> float:
    """GB (10**9 bytes, to 0.1) of every file ``pip install REQUIREMENTS`` downloads on a machine that has none of
    them: pip's resolution (``--dry-run --report``, dependencies included) and each file's ``Content-Length``."""
    import concurrent.futures
    import urllib.request

    urls = [item["download_info"]["url"] for item in dry_run(requirements)]

    def size(url: str) -> int:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=120) as response:
            return int(response.headers["Content-Length"])

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        return round(sum(pool.map(size, urls)) / 1e9, 1)


def pins() -> dict[str, str]:
    """``requirements.txt``'s exact pins, ``{name: version}``."""
    found = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==")
            found[name.strip()] = version.strip()
    return found


def row_metadata(minor: str, pinned: dict[str, str]) -> tuple[dict[str, dict], str | None, list[dict], float | None]:
    """The metadata of a row's packages (the newest torch of ``minor`` and the vLLM chosen for it: the newest that
    pins it within the pinned TRL's declared range), why there is no vLLM where none is chosen, the metadata of every
    torch release of ``minor``, and where there is a vLLM, what its torch and it download (:func:`download_gb`)."""
    torch_versions = [v for v in versions("torch") if v.startswith(minor + ".")]
    trl = fetch_one(f"trl=={pinned['trl']}")
    supported = vllm_range(trl)
    chosen, outside = None, []
    for version in versions("vllm"):
        meta = fetch_one(f"vllm=={version}")
        pin = torch_pin(meta)
        if pin and pin.startswith(minor + "."):
            if supported.contains(version):
                chosen = meta
                break
            outside.append(version)
        if pin and Version(pin) < Version(minor + ".0"):
            break  # releases go down from here
    note = None
    if chosen is None and outside:
        note = (f"vllm {outside[0]}, the newest release that pins torch {minor}, is outside trl {pinned['trl']}'s "
                f"declared vLLM range ({supported}; trl/import_utils.py)")
    torch_version = torch_pin(chosen) if chosen else torch_versions[0]
    metas = fetch([f"torch=={torch_version}"] + [f"{name}=={pinned[name]}" for name in STACK])
    releases = [fetch_one(f"torch=={version}") for version in torch_versions]
    if chosen:
        metas["vllm"] = chosen
    size = download_gb([f"torch=={torch_version}", f"vllm=={chosen['version']}"]) if chosen else None
    return metas, note, releases, size


def build_table() -> dict:
    """The whole table from the registry."""
    pinned = pins()
    rows = [derive_row(minor, *row_metadata(minor, pinned)) for minor in MINORS]
    kit = [f"{name}=={version}" for name, version in pinned.items()
           if name not in STACK and name not in ("torch", "vllm", "xformers")]
    return {"generated_by": "python scripts/install_table.py", "pinned": ".".join(pinned["torch"].split(".")[:2]),
            "rows": rows, "kit": kit}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare the shipped table with the registry")
    args = parser.parse_args()
    table = build_table()
    text = json.dumps(table, indent=1) + "\n"
    if args.check:
        same = TABLE.read_text() == text
        print("the shipped table matches the registry" if same else "the shipped table differs: run this script")
        return 0 if same else 1
    TABLE.write_text(text)
    print(f"wrote {TABLE.relative_to(ROOT)}: " + "; ".join(
        f"torch {r['torch']} (CUDA {r['cuda']}): vllm {r['vllm']}, releases {', '.join(r['releases'])}"
        for r in table["rows"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
