"""The install plan: which packages to put beside the torch a runtime already has, read from a table of package sets
that resolve together, one row per torch release the kit supports (``install_table.json``, beside this file).

A Colab or Jupyter GPU runtime comes with a torch built for its CUDA and driver. Replacing it costs gigabytes and a
restart, and a torch built for a newer CUDA than the driver runs is a CPU-only torch. So the plan keeps the
runtime's torch and installs the row made for it, as Unsloth's own Colab cells do (they choose xformers and vLLM by
the torch found). Every vLLM release pins one torch (``Requires-Dist: torch==X``) and PyPI's vLLM wheels are built
for the CUDA of PyPI's torch of that version (vllm 0.31.0's ``_C_stable_libtorch.abi3.so`` links
``libcudart.so.13``): a runtime whose torch is another version has no vLLM, and the Unsloth route runs without
``fast_inference`` there (generation through transformers). One exception: a runtime whose torch is the very release
a vLLM pins, built for another CUDA major, on a driver that runs the vLLM's CUDA (Colab's torch 2.11.0+cu128 on driver
580.82.07, which runs CUDA 13; vllm 0.26.0 pins torch 2.11.0, PyPI's CUDA 13.0 build). There the plan replaces that
torch by PyPI's build of the same release, with the torchvision and torchaudio the vLLM pins (PyPI's builds for the
same CUDA), and installs the vLLM: gigabytes to download and a restart, said in the plan's first line with how to keep
the runtime's torch instead (``keep``).
xformers likewise: PyPI's wheel is one CUDA's build (xformers 0.0.35's ``cpp_lib.json``: torch 2.10.0+cu128, its
``_C.so`` linking ``libcudart.so.12``), so the plan takes the xformers Unsloth's metadata names for the runtime's
torch from PyTorch's index for the runtime's CUDA (``unsloth`` METADATA, extras ``cu<XYZ>onlytorch<release>``), in a
pip call of its own before the rest (unsloth's own ``xformers>=0.0.27.post2`` is then met). Where there is no such
build, pip takes PyPI's as unsloth's dependency; it does not load on a CUDA 13 torch, and Unsloth attends through
PyTorch's scaled_dot_product_attention, warning once.

``scripts/install_table.py`` writes the table from the packages' own metadata (``pip install --dry-run --no-deps
--report``: Requires-Dist without downloading wheels). Importing this module imports no third-party package: the
notebooks' install cell calls it before anything is installed.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["MIN_DRIVER", "PYTORCH_INDEX", "InstallPlan", "cuda_of", "driver_problem", "install_plan", "install_table",
           "installed_version", "version_tuple"]

TABLE = Path(__file__).with_name("install_table.json")

#: The oldest Linux driver each CUDA major runs on, by minor-version compatibility (NVIDIA's CUDA Compatibility
#: guide, "Minor Version Compatibility": an application built with any CUDA 12.x runtime runs on a driver >= 525.60.13,
#: one built with 13.x on >= 580; the toolkit's own GA driver per minor is only what ships with it). torch ships
#: compiled kernels (SASS) for the cards it supports, so it needs no newer driver to JIT PTX.
MIN_DRIVER = {"13": "580.65.06", "12": "525.60.13", "11": "450.80.02"}
#: PyTorch's wheel index for one CUDA (``cu128``): torch, torchvision and xformers built for it.
PYTORCH_INDEX = "https://download.pytorch.org/whl/{tag}"


def installed_version(package: str) -> str | None:
    """The version of ``package`` installed in this environment (its metadata on disk), or ``None``."""
    import importlib.metadata

    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def version_tuple(text: str) -> tuple[int, ...]:
    """The numeric release of a version string, local label dropped.

    >>> version_tuple("2.11.0+cu128"), version_tuple("570.172.08")
    ((2, 11, 0), (570, 172, 8))
    """
    return tuple(int(part) for part in text.split("+")[0].split(".") if part.isdigit())


def cuda_of(torch_version: str, default: str | None = None) -> str | None:
    """The CUDA a torch build runs on, read from its local version label.

    Args:
        torch_version: ``torch.__version__`` (``"2.11.0+cu128"``, ``"2.13.0+cpu"``, ``"2.13.0"``).
        default: the CUDA of a build without a label (PyPI's wheel of that version: the table's ``cuda``).

    Returns:
        ``"12.8"``, ``None`` for a CPU or ROCm build, ``default`` without a label.

    >>> cuda_of("2.11.0+cu128"), cuda_of("2.13.0+cpu"), cuda_of("2.13.0", "13.0"), cuda_of("2.12.1+cu130")
    ('12.8', None, '13.0', '13.0')
    """
    if "+" not in torch_version:
        return default
    match = re.fullmatch(r"cu(\d+)(\d)", torch_version.split("+", 1)[1])
    return f"{int(match.group(1))}.{match.group(2)}" if match else None


def driver_problem(driver: str | None, cuda: str, what: str) -> str | None:
    """One line saying why ``what`` (built for ``cuda``) cannot use this driver; ``None`` when it can.

    >>> driver_problem("580.82.07", "13.0", "torch 2.13.0") is None
    True
    >>> driver_problem("570.172.08", "13.0", "vllm 0.31.0")
    'NVIDIA driver 570.172.08 found, vllm 0.31.0 (CUDA 13.0) needs >= 580.65.06'
    >>> driver_problem("535.104.05", "12.8", "torch 2.11.0+cu128") is None  # CUDA 12 minor-version compatibility
    True
    """
    if driver is None:
        return f"no NVIDIA driver found (nvidia-smi), and {what} (CUDA {cuda}) needs one"
    needed = MIN_DRIVER.get(cuda.split(".")[0])
    if needed is not None and version_tuple(driver) < version_tuple(needed):
        return f"NVIDIA driver {driver} found, {what} (CUDA {cuda}) needs >= {needed}"
    return None


@lru_cache(maxsize=1)
def install_table() -> dict[str, Any]:
    """The shipped table (``install_table.json``): ``{"pinned": torch minor of requirements.txt, "rows": [...],
    "kit": [name==version, ...]}``; each row ``{"torch_minor", "torch", "cuda", "vllm", "vllm_torch", "vllm_cuda",
    "vllm_companions": {name: version}, "vllm_download_gb", "vllm_note", "releases": {torch release: {"cuda",
    "xformers", "xformers_cudas", "problems"}}, "packages": {name: version}, "problems": [...], "requires": {...}}``
    (``scripts/install_table.py`` says how each is read)."""
    return json.loads(TABLE.read_text(encoding="utf-8"))


@dataclass
class InstallPlan:
    """What an install does on a runtime: ``python -m grpo_kit doctor --install-plan``.

    Attributes:
        torch: the runtime's torch (``None``: none installed).
        cuda: the CUDA the kept (or installed) torch runs on.
        driver: the NVIDIA driver found.
        keep_torch: the runtime's torch stays; ``False`` when none is installed (the row's torch is installed) or when
            the plan replaces it (``replaces``).
        replaces: the runtime's torch the plan replaces by PyPI's build of the same release (for the vLLM that pins
            it), or ``None``; ``torch_note`` then says why, what it costs and how to keep it.
        install: ``name==version`` of every package pip installs (torch among them only when not kept; with
            ``replaces``, torch and the torchvision and torchaudio its vLLM pins first).
        vllm: the vLLM version installed, or ``None`` (the Unsloth route then runs without ``fast_inference``).
        xformers: ``xformers==VERSION`` installed from ``xformers_index_url`` alone (``pip install --no-deps
            --index-url``: PyTorch's index for the runtime's CUDA, where the build for this torch and CUDA is), or
            ``None``; ``xformers_note`` says why none.
        no_vllm: where the plan installs no vLLM on a GPU runtime, one line: why, and the runtime that would have
            one (checked against this driver), or that none the kit pins runs on it; ``None`` otherwise.
        problems: one line each; with ``fatal`` the first says why no route exists and what to do.
        fatal: no GPU route exists for this runtime (the CLI exits 2, the notebook cell stops before downloading).
    """

    torch: str | None
    cuda: str | None
    driver: str | None
    keep_torch: bool
    replaces: str | None = None
    torch_note: str | None = None
    install: list[str] = field(default_factory=list)
    vllm: str | None = None
    xformers: str | None = None
    xformers_index_url: str | None = None
    xformers_note: str | None = None
    no_vllm: str | None = None
    problems: list[str] = field(default_factory=list)
    fatal: bool = False

    def to_json(self) -> dict[str, Any]:
        """The plan as one JSON object (the fields above)."""
        return asdict(self)

    def describe(self) -> str:
        """The plan as text, a line each; a plan with no GPU route (``fatal``) is its problems alone: its torch,
        vLLM and package lines would describe an install that does not happen."""
        if self.fatal:
            return "\n".join(f"problem: {p}" for p in self.problems)
        installed = next((p for p in self.install if p.startswith("torch==")), "none")
        head = (f"torch {self.torch} (CUDA {self.cuda or 'none'}) is kept" if self.keep_torch else
                f"torch {self.replaces} is replaced: {installed} (CUDA {self.cuda})" if self.replaces else
                f"torch is installed: {installed}")
        first = [note for note in (self.torch_note, self.no_vllm) if note]
        lines = first + [f"{head}; NVIDIA driver: {self.driver or 'none'}",
                 f"vLLM: {self.vllm or 'none (the Unsloth route runs without fast_inference)'}",
                 "install: " + (" ".join(self.install) if self.install else "nothing"),
                 f"xformers: {self.xformers} from {self.xformers_index_url}" if self.xformers else
                 f"xformers: none built for it ({self.xformers_note or 'not installed'})"]
        return "\n".join(lines + [f"problem: {p}" for p in self.problems])


def _row_for(minor: str, table: dict[str, Any]) -> dict[str, Any] | None:
    return next((row for row in table["rows"] if row["torch_minor"] == minor), None)


def _runs_vllm(row: dict[str, Any], driver: str) -> bool:
    """Whether the row has a vLLM and this driver runs its CUDA."""
    return bool(row["vllm"]) and driver_problem(driver, row["vllm_cuda"], "") is None


def _runnable(table: dict[str, Any], driver: str) -> list[dict[str, Any]]:
    """The rows whose PyPI torch this driver runs, the ones with a vLLM it runs first, newest first in each."""
    rows = [row for row in reversed(table["rows"]) if driver_problem(driver, row["cuda"], "") is None]
    return sorted(rows, key=lambda row: not _runs_vllm(row, driver))  # a stable sort: newest first in each


def _torch_advice(table: dict[str, Any], driver: str) -> str:
    """What torch to install for this driver: the newest release with a vLLM it runs, else the newest it runs at all
    (never a CUDA the driver cannot run)."""
    rows = _runnable(table, driver)
    if not rows:
        cudas = sorted({row["cuda"] for row in table["rows"]})
        return (f"no torch the kit has a package set for runs on NVIDIA driver {driver} (CUDA {', '.join(cudas)}): "
                f"use a runtime with a newer driver ({_needs([row['cuda'] for row in table['rows']])})")
    row = rows[0]
    return (f"pip install torch=={row['torch']} (PyPI's build, CUDA {row['cuda']}, which driver {driver} runs"
            + (f"; vLLM {row['vllm']} with it" if row["vllm"] else "") + "), then restart the runtime")


def _needs(cudas: list[str]) -> str:
    """The oldest driver each CUDA major of ``cudas`` (``"12.8"``, ``"13.0"`` ...) needs, in words."""
    majors = sorted({cuda.split(".")[0] for cuda in cudas})
    return ", ".join(f"CUDA {c} needs >= {MIN_DRIVER[c]}" for c in majors if c in MIN_DRIVER)


def _vllm_fix(table: dict[str, Any], driver: str) -> str:
    """Where vLLM would come from for this driver: the torch releases whose row has a vLLM the driver runs."""
    fits = [row for row in _runnable(table, driver) if _runs_vllm(row, driver)]
    if not fits:
        cudas = [row["vllm_cuda"] for row in table["rows"] if row["vllm"]]
        return (f"the kit's vLLM builds are for CUDA {', '.join(sorted({c.split('.')[0] for c in cudas}))}, which "
                f"driver {driver} does not run ({_needs(cudas)}): a runtime with a newer driver has one")
    return ("a runtime whose torch is " + " or ".join(f"{row['torch']} built for CUDA {row['vllm_cuda'].split('.')[0]}"
                                                     f" (vllm {row['vllm']})" for row in fits)
            + " has one (on Colab, another runtime: Runtime > Change runtime type)")


def install_plan(torch: str | None, driver: str | None, table: dict[str, Any] | None = None,
                 keep: bool = False) -> InstallPlan:
    """The packages to install beside a runtime's torch (or with the pinned one, where there is none).

    Rules, in order:

    1. No NVIDIA driver: no GPU route (fatal).
    2. No torch: the pinned row (``requirements.txt``'s torch) is installed whole, torch included, when the driver
       runs its CUDA; else the newest row whose CUDA the driver runs (a vLLM it runs preferred); fatal when none.
    3. A torch the table has no row for, or a CPU build: fatal, with a torch to install that the driver runs.
    4. A torch whose CUDA the driver cannot run: fatal (the runtime's own torch cannot use the GPU).
    5. A torch that is the release the row's vLLM pins, built for another CUDA major, on a driver that runs the
       vLLM's CUDA: unless ``keep``, torch is replaced by PyPI's build of that release with the torchvision and
       torchaudio the vLLM pins, and the row's packages and the vLLM installed (``torch_note`` says why, what it costs
       and how to keep the runtime's torch).
    6. Otherwise torch is kept and the row's packages installed; vLLM only where the row has one (a release that
       pins this torch, within the pinned TRL's declared range), its pinned torch is this exact release, its CUDA
       major is this torch's, and the driver runs it; else ``no_vllm`` says in one line why there is none and
       which runtime would have one, and the Unsloth route runs without ``fast_inference``.

    The row's requirements and xformers are those of the runtime's own torch release (the row's ``releases``); a
    release newer than the table's is answered with the newest it has, said in ``problems``.

    Args:
        torch: the runtime's ``torch.__version__`` or its installed version (``None``: not installed).
        driver: the NVIDIA driver's version (``nvidia-smi``), ``None`` without one.
        table: the package table (default: the shipped :func:`install_table`).
        keep: keep the runtime's torch where rule 5 would replace it (no vLLM then).

    Returns:
        An :class:`InstallPlan`.

    >>> plan = install_plan("2.13.0+cu130", "580.82.07")
    >>> plan.keep_torch, plan.vllm, plan.fatal, any(p.startswith("torch==") for p in plan.install)
    (True, '0.31.0', False, False)
    >>> colab = install_plan("2.11.0+cu128", "580.82.07")
    >>> colab.replaces, colab.vllm, colab.install[:3]
    ('2.11.0+cu128', '0.26.0', ['torch==2.11.0', 'torchvision==0.26.0', 'torchaudio==2.11.0'])
    >>> install_plan("2.13.0", "535.104.05").problems[0].split(":")[0]
    "NVIDIA driver 535.104.05 found, this runtime's torch 2.13.0 (CUDA 13.0) needs >= 580.65.06"
    >>> install_plan("2.10.0+cu128", "550.54.15").no_vllm.split(", is")[0]
    'no vLLM for this runtime (vllm 0.19.1, the newest release that pins torch 2.10'
    """
    table = install_table() if table is None else table
    if driver is None:
        return InstallPlan(torch, None, None, keep_torch=torch is not None, fatal=True, problems=[
            "no NVIDIA driver found (nvidia-smi), so no GPU package set applies to this machine: the GPU stack needs "
            "an NVIDIA GPU. On this CPU install the CPU route (pip install -r requirements-cpu.txt; the notebooks' "
            "install_stack() does it) and use preset cpu-tiny; on Colab choose Runtime > Change runtime type > GPU; "
            "for a GPU runtime's plan give its torch and driver (doctor --install-plan --torch VERSION --driver "
            "VERSION)"])
    if torch is None:
        return _fresh_plan(table, driver)
    minor = ".".join(torch.split("+")[0].split(".")[:2])
    row = _row_for(minor, table)
    if row is None:
        return InstallPlan(torch, cuda_of(torch), driver, keep_torch=True, fatal=True, problems=[
            f"torch {torch} is not a release the kit has a package set for "
            f"({', '.join(r['torch_minor'] for r in table['rows'])}): {_torch_advice(table, driver)}; or run on a "
            "runtime that has one"])
    release, problems = _release(row, torch)
    cuda = cuda_of(torch, default=release["cuda"])
    if cuda is None:
        return InstallPlan(torch, None, driver, keep_torch=True, fatal=True, problems=[
            f"torch {torch} is a CPU build: {_torch_advice(table, driver)}"])
    if problem := driver_problem(driver, cuda, f"this runtime's torch {torch}"):
        return InstallPlan(torch, cuda, driver, keep_torch=True, fatal=True, problems=[
            f"{problem}: torch cannot use the GPU. {_torch_advice(table, driver)}; or use a runtime with a newer "
            "driver"])
    if _replaceable(row, torch, cuda, driver) and not keep:
        return _replacing(row, torch, cuda, driver, problems)
    why_not = _why_no_vllm(row, torch, cuda, driver)
    if why_not and _replaceable(row, torch, cuda, driver):
        why_not += (f"; the runtime's torch is kept as asked, where the plan would replace it by PyPI's torch "
                    f"{row['vllm_torch']} (CUDA {row['vllm_cuda']}) for vllm {row['vllm']}")
    no_vllm = (f"no vLLM for this runtime ({why_not}), so the Unsloth route generates through transformers, without "
               f"fast_inference; {_vllm_fix(table, driver)}") if why_not else None
    return InstallPlan(torch, cuda, driver, keep_torch=True, install=_packages(row, with_vllm=why_not is None),
                       vllm=None if why_not else row["vllm"], no_vllm=no_vllm, problems=problems,
                       **_xformers(row, release, torch.split("+")[0], cuda))


def _fresh_plan(table: dict[str, Any], driver: str) -> InstallPlan:
    """Rule 2 of :func:`install_plan`: no torch installed."""
    pinned = _row_for(table["pinned"], table)
    runnable = _runnable(table, driver)
    row = pinned if pinned in runnable else (runnable[0] if runnable else None)
    if row is None:
        return InstallPlan(None, pinned["cuda"], driver, keep_torch=False, fatal=True, problems=[
            f"{driver_problem(driver, pinned['cuda'], 'torch ' + pinned['torch'])}: no torch is installed and "
            f"{_torch_advice(table, driver)}"])
    problems = [] if row is pinned else [
        f"driver {driver} does not run the kit's pinned torch {pinned['torch']} (CUDA {pinned['cuda']}): "
        f"torch {row['torch']} (CUDA {row['cuda']}) is installed instead"]
    install = [f"torch=={row['torch']}"] + _packages(row, with_vllm=True)
    return InstallPlan(None, row["cuda"], driver, keep_torch=False, install=install, vllm=row["vllm"],
                       no_vllm=None if row["vllm"] else f"no vLLM: {row['vllm_note']}; {_vllm_fix(table, driver)}",
                       problems=problems + row["releases"][row["torch"]]["problems"],
                       **_xformers(row, row["releases"][row["torch"]], row["torch"], row["cuda"]))


def _release(row: dict[str, Any], torch: str) -> tuple[dict[str, Any], list[str]]:
    """The row's entry for the runtime's torch release (its CUDA, xformers and the problems of the row's packages
    with it), and the problems: those, plus a line where the table has no such release (the newest it has stands in).
    """
    release = torch.split("+")[0]
    if release in row["releases"]:
        return row["releases"][release], list(row["releases"][release]["problems"])
    newest = max(row["releases"], key=version_tuple)
    return row["releases"][newest], [*row["releases"][newest]["problems"], (
        f"torch {release} is not among the releases the kit's table read for torch {row['torch_minor']} "
        f"({', '.join(row['releases'])}): its package set and xformers are {newest}'s (python "
        "scripts/install_table.py reads them again)")]


def _replaceable(row: dict[str, Any], torch: str, cuda: str, driver: str) -> bool:
    """Rule 5 of :func:`install_plan`: this torch is the release the row's vLLM pins, built for another CUDA major,
    and the driver runs the vLLM's CUDA."""
    return bool(row["vllm"]) and version_tuple(torch) == version_tuple(row["vllm_torch"]) and \
        cuda.split(".")[0] != row["vllm_cuda"].split(".")[0] and driver_problem(driver, row["vllm_cuda"], "") is None


def _replacing(row: dict[str, Any], torch: str, cuda: str, driver: str, problems: list[str]) -> InstallPlan:
    """Rule 5's plan: PyPI's torch of the same release (the vLLM's CUDA) and its companions, then the row and vLLM."""
    new, companions = row["vllm_torch"], row["vllm_companions"]
    beside = "".join(f", {name} {version}" for name, version in companions.items())
    note = (f"vLLM for this runtime: vllm {row['vllm']} pins torch {new} built for CUDA {row['vllm_cuda']}, which "
            f"driver {driver} runs, so torch {torch} (CUDA {cuda}) is replaced by PyPI's torch {new} (CUDA "
            f"{row['vllm_cuda']}){beside}: up to about {row['vllm_download_gb']:g} GB to download with vLLM, and a "
            "restart; to keep the runtime's torch and train without vLLM (Unsloth generating with its own generate, "
            "plan's time without vLLM), doctor --install-plan --keep-torch, in a notebook install_stack(keep_torch="
            "True)")
    install = [f"torch=={new}", *(f"{name}=={version}" for name, version in companions.items()),
               *_packages(row, with_vllm=True)]
    return InstallPlan(torch, row["vllm_cuda"], driver, keep_torch=False, replaces=torch, torch_note=note,
                       install=install, vllm=row["vllm"], problems=problems,
                       **_xformers(row, row["releases"][new], new, row["vllm_cuda"]))


def _xformers(row: dict[str, Any], release: dict[str, Any], version: str, cuda: str) -> dict[str, Any]:
    """The plan's xformers fields for torch ``version`` (its ``release`` entry) built for ``cuda`` (see
    :class:`InstallPlan`)."""
    if release["xformers"] and cuda in release["xformers_cudas"]:
        return {"xformers": f"xformers=={release['xformers']}",
                "xformers_index_url": PYTORCH_INDEX.format(tag="cu" + cuda.replace(".", ""))}
    fallback = ("pip takes PyPI's as unsloth's dependency, and where it does not load Unsloth attends through "
                "PyTorch's scaled_dot_product_attention")
    if release["xformers"] is None:
        return {"xformers_note": f"unsloth {row['packages']['unsloth']} names no xformers build for torch {version} "
                                 f"(its cu*onlytorch* extras): {fallback}"}
    return {"xformers_note": f"PyTorch's index builds xformers {release['xformers']} for torch {version} for CUDA "
                             f"{', '.join(release['xformers_cudas'])} only, and this runtime's is {cuda}: {fallback}"}


def _why_no_vllm(row: dict[str, Any], torch: str, cuda: str, driver: str) -> str | None:
    if row["vllm"] is None:
        return row.get("vllm_note") or f"no vLLM release pins torch {row['torch_minor']}"
    what = f"vllm {row['vllm']}"
    if version_tuple(torch) != version_tuple(row["vllm_torch"]):
        return f"{what} pins torch=={row['vllm_torch']} and this runtime has torch {torch}"
    if cuda.split(".")[0] != row["vllm_cuda"].split(".")[0]:
        return (f"{what} is built for CUDA {row['vllm_cuda']} (PyPI's torch {row['vllm_torch']}) and this runtime's "
                f"torch {torch} for CUDA {cuda}")
    return driver_problem(driver, row["vllm_cuda"], what)


def _packages(row: dict[str, Any], with_vllm: bool) -> list[str]:
    """The row's packages as ``name==version``, its vLLM among them ``with_vllm`` (where it has one)."""
    names = {**row["packages"], **({"vllm": row["vllm"]} if with_vllm and row["vllm"] else {})}
    return [f"{name}=={version}" for name, version in names.items()]
