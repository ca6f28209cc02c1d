"""A CPU shown to vLLM as the lent H200, and the machine's missing packages hidden, for the rehearsal of vLLM's
imports (``benchmarks/vllm_imports.py``). Nothing else is faked: torch sees no GPU, and nothing is allocated or run
on one.

- :func:`look_like_an_h200`: vLLM's own NVML module (vllm/third_party/pynvml.py, which vllm/platforms/cuda.py reads
  without touching CUDA) answers for one NVIDIA H200 of compute capability 9.0, and Triton's CUDA driver says it is
  active (vllm/triton_utils/importing.py counts active drivers). vLLM's CUDA libraries link ``libcuda.so.1``; the
  rehearsal gives them one whose every call fails (``benchmarks/vllm_rehearsal.py`` compiles it), so they load and
  each symbol they take from torch 2.11.0 is resolved as on the machine.
- :func:`hide_what_the_machine_lacks`: every installed distribution that the machine's image does not list
  (benchmarks/machine_packages.txt) and no ``PYTHONPATH`` folder (the bundle) holds fails to import, as there.
- :func:`record_importers`: which module first imported each carried package.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.metadata
import os
import sys
from pathlib import Path
from typing import Any

MACHINE_PACKAGES = Path(__file__).resolve().parent / "machine_packages.txt"
H200 = {"name": "NVIDIA H200", "capability": (9, 0), "memory_mib": 143771, "driver": "580.159.04"}
#: Modules whose distribution is named otherwise (the machine lists distributions).
ALIASES = {"cv2": "opencv-python-headless", "cpuinfo": "py-cpuinfo", "yaml": "pyyaml", "PIL": "pillow",
           "google": "protobuf", "zmq": "pyzmq"}


def _normal(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def machine_packages(listed: Path = MACHINE_PACKAGES) -> set[str]:
    """The distributions of the machine's image, normalised."""
    return {_normal(line.strip()) for line in listed.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")}


def on_the_machine(module: str, machine: set[str] | None = None) -> bool:
    """Whether the machine's image has the distribution of top-level ``module``."""
    top = module.split(".")[0]
    return _normal(ALIASES.get(top, top)) in (machine_packages() if machine is None else machine)


def top_modules(dist: importlib.metadata.Distribution) -> set[str]:
    """The top-level modules a distribution installs (``top_level.txt``, else its ``RECORD``)."""
    listed = dist.read_text("top_level.txt")
    if listed:
        return set(listed.split())
    tops = set()
    for file in dist.files or []:
        top = file.parts[0]
        if not top.endswith((".dist-info", ".data", ".pth")) and top not in ("..", "__pycache__", "bin"):
            tops.add(top.removesuffix(".py").split(".")[0])
    return tops


def look_like_an_h200() -> None:
    """vLLM's NVML module answers for one H200 and Triton's CUDA driver says it is active (the module docstring);
    call before importing vLLM."""

    class Memory:
        total = free = H200["memory_mib"] * 2**20
        used = 0

    handle = object()
    answers = {"nvmlInit": lambda *a: None, "nvmlShutdown": lambda: None, "nvmlDeviceGetCount": lambda: 1,
               "nvmlDeviceGetHandleByIndex": lambda i: handle, "nvmlDeviceGetName": lambda h: H200["name"],
               "nvmlDeviceGetCudaComputeCapability": lambda h: H200["capability"],
               "nvmlDeviceGetMemoryInfo": lambda h: Memory(), "nvmlSystemGetDriverVersion": lambda: H200["driver"],
               "nvmlDeviceGetUUID": lambda h: "GPU-00000000-0000-0000-0000-000000000000"}

    class Answering(importlib.abc.Loader):
        def __init__(self, real: Any) -> None:
            self.real = real

        def create_module(self, spec: Any) -> Any:
            return self.real.create_module(spec)

        def exec_module(self, module: Any) -> None:
            self.real.exec_module(module)
            for name, answer in answers.items():
                setattr(module, name, answer)

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
            if name != "vllm.third_party.pynvml":
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            spec.loader = Answering(spec.loader)
            return spec

    sys.meta_path.insert(0, Finder())
    from triton.backends import backends

    backends["nvidia"].driver.is_active = staticmethod(lambda: True)


def hide_what_the_machine_lacks() -> list[str]:
    """Hide every installed distribution the machine's image does not list, unless a ``PYTHONPATH`` folder has it:
    importing one of its modules fails as it would there. Returns the hidden distributions."""
    machine = machine_packages()
    here = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    folders = {Path(p).resolve() for p in here}
    hidden, tops = [], set()
    for dist in importlib.metadata.distributions():
        name = _normal(dist.metadata["Name"])
        if name in machine or Path(str(dist.locate_file(""))).resolve() in folders:
            continue
        hidden.append(name)
        tops |= top_modules(dist)

    class Hider(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
            if "." in name or name not in tops:
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, here)
            if spec is None:
                raise ModuleNotFoundError(f"No module named {name!r} (not on the lent machine)", name=name)
            return spec

    sys.meta_path.insert(0, Hider())
    return sorted(set(hidden))


def record_importers(carried: list[str]) -> dict[str, str]:
    """``{carried distribution: the module that first imported it}``, filled as imports happen (imports made by
    the rehearsal's own probing are not counted)."""
    tops = {}
    for name in carried:
        try:
            tops.update({top: name for top in top_modules(importlib.metadata.distribution(name))})
        except importlib.metadata.PackageNotFoundError:
            tops[name.replace("-", "_")] = name
    seen: dict[str, str] = {}

    class Recorder(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
            if name in tops and tops[name] not in seen:
                frame = sys._getframe(1)
                while frame and frame.f_globals.get("__name__", "").startswith(("importlib", "_frozen")):
                    frame = frame.f_back
                importer = frame.f_globals.get("__name__", "?") if frame else "?"
                if importer != "__main__":
                    seen[tops[name]] = importer
            return None

    sys.meta_path.insert(0, Recorder())
    return seen
