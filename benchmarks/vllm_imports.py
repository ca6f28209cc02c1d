"""What vLLM imports on an H200, established on a CPU: run by ``benchmarks/vllm_rehearsal.py`` in the rehearsal's
Python 3.12 with torch 2.11.0 (its CUDA 13.0 build) and the trimmed bundle installed as on the machine.

The CPU is shown an H200 the way vLLM and Triton look for one, and the packages the machine's image lacks are hidden
(``benchmarks/cpu_as_h200.py``); torch still sees no GPU.

Two routes, each in its own process (``--route``):

- ``vllm``: ``vllm.LLM`` and ``SamplingParams``: the engine's configuration for the 1.5B shape built as ``LLM`` builds
  it, the attention backend and FlashAttention version vLLM picks on sm_90, the model class, the tokenizer, the
  sampler, and the modules of the engine, the worker and the model runners (:data:`ENGINE_MODULES`).
- ``unsloth``: ``import unsloth`` first, as the kit does, then ``unsloth_zoo.vllm_utils`` (Unsloth's
  ``fast_inference``), every vLLM module its source names, and the engine configuration from the arguments its
  ``load_vllm`` passes for ``a100`` at 8B (4-bit bitsandbytes, LoRA rank 32, piecewise CUDA graphs).

Then every import written inside a function of a loaded module is tried (:func:`try_imports`): one that fails where no
``try`` guards it is a module first seen when that function runs on the GPU. Each is either on
:data:`OFF_PATH` (a feature a dense model's GRPO step does not use, with where it sits), a module that needs a GPU
to load, or a failure of the rehearsal. Prints one JSON line: the report.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from cpu_as_h200 import hide_what_the_machine_lacks, look_like_an_h200, on_the_machine, record_importers  # noqa: E402
from vllm_bundle import CARRIED, TRIM  # noqa: E402

#: Modules of the engine, the worker, the model runners (V1 and V2: vLLM 0.26 takes V2 for a dense model where
#: Triton works), the sampler, the loaders, compilation and LoRA that ``LLM(...)`` loads in its engine process.
ENGINE_MODULES = [
    "vllm.entrypoints.llm", "vllm.engine.arg_utils", "vllm.v1.engine.llm_engine", "vllm.v1.engine.core",
    "vllm.v1.engine.core_client", "vllm.v1.engine.output_processor", "vllm.v1.executor.uniproc_executor",
    "vllm.v1.executor.multiproc_executor", "vllm.v1.worker.gpu_worker", "vllm.v1.worker.gpu_model_runner",
    "vllm.v1.worker.gpu.model_runner", "vllm.v1.core.sched.scheduler", "vllm.v1.sample.sampler",
    "vllm.v1.attention.backends.flash_attn", "vllm.model_executor.model_loader.default_loader",
    "vllm.model_executor.model_loader.bitsandbytes_loader", "vllm.compilation.backends",
    "vllm.compilation.cuda_graph", "vllm.lora.request", "vllm.lora.worker_manager",
    "vllm.v1.worker.lora_model_runner_mixin", "vllm.lora.punica_wrapper.punica_gpu", "vllm.device_allocator.cumem",
    "vllm.model_executor.warmup.kernel_warmup",
]
#: Unsloth's modules that import vLLM (unsloth_zoo 2026.10.7): every ``vllm`` module they name is tried.
UNSLOTH_VLLM_MODULES = ["unsloth_zoo.vllm_utils", "unsloth_zoo.vllm_lora_request",
                        "unsloth_zoo.vllm_lora_worker_manager", "unsloth_zoo.vllm_rlhf_utils"]
#: Packages absent from the machine whose unguarded imports sit in functions a dense Llama/Qwen2 model's generation
#: and GRPO step on sm_90 do not call, ``{name in the error: where}``, read in vllm 0.26.0's source.
OFF_PATH: dict[str, str] = {
    "aiter": "ROCm kernels", "amdsmi": "ROCm", "vllm.platforms.rocm": "ROCm", "vllm_xpu_kernels": "Intel XPU",
    "tpu_inference": "TPU", "libtpu": "TPU", "zentorch": "AMD Zen CPUs", "ray": "the Ray executor",
    "ObjectRef": "the Ray executor", "deep_ep": "expert parallelism", "mori": "expert parallelism",
    "nixl": "KV-cache transfer", "flashinfer": "FlashInfer kernels (its sampler: VLLM_USE_FLASHINFER_SAMPLER=0, "
    "set with the bundle)", "modelscope": "VLLM_USE_MODELSCOPE", "tensorizer": "load_format='tensorizer'",
    "torchao": "quantization='torchao'", "fastsafetensors": "load_format='fastsafetensors'",
    "instanttensor": "load_format='instanttensor'", "runai_model_streamer": "load_format='runai_streamer'",
    "boto3": "S3 models", "botocore": "S3 models", "mcp": "the server's tool calls",
    "gpt_oss": "the server's tool calls",
    "cutlass": "the CuTe DSL: FlashAttention 4 (head size over 256 on sm_90) and MoE routers", "hpc": "the HPC "
    "attention backend", "conch": "ROCm quantized GEMMs", "fbgemm_gpu": "NVFP4 GEMMs", "quark": "AMD Quark "
    "quantization", "_typeshed": "type checking only", "PyNvVideoCodec": "video inputs", "deepstream": "video inputs",
    "torchcodec": "video inputs", "blake3": "multimodal input hashing (VLLM_MM_HASHER_ALGORITHM)",
    "depyf": "the compile debug dump (VLLM_DEBUG_DUMP_PATH) and one error message", "mistral_common": "Mistral "
    "tokenizers and Pixtral", "nvtx": "VLLM_NVTX_SCOPES_FOR_PROFILING", "outlines_core": "structured outputs",
    "lmformatenforcer": "structured outputs", "uvicorn": "the OpenAI server", "model_hosting_container_standards":
    "the OpenAI server", "tilelang": "DeepSeek's mHC kernels", "ijson": "the Mistral tool parser",
    "transformers_modules": "remote-code models", "xielu": "the xIELU activation", "opentelemetry": "tracing",
    "arctic_inference": "suffix speculative decoding", "av": "audio and video inputs", "soundfile": "audio inputs",
    "soxr": "audio inputs", "flash_attn": "ROCm's upstream FlashAttention", "setproctitle": "process titles "
    "(skipped without it)", "quantized_compressors": "AMD Zen CPUs (zentorch)",
}
#: What only a GPU lets load, ``{what the error says: why}``: Triton's CUDA driver (built at import by modules that
#: ask it for the device's properties) needs the real libcuda, and some modules initialise torch's CUDA.
NEEDS_GPU = {"cuModuleGetFunc": "Triton's CUDA driver at import", "NVIDIA driver": "torch's CUDA at import",
             "no CUDA GPUs": "torch's CUDA at import"}
def _targets(node: ast.ImportFrom | ast.Import, module: str, is_package: bool) -> list[str]:
    """The modules an import statement names (``from X import a``: ``X`` and, where ``X`` is a package, ``X.a``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = module.split(".") if is_package else module.split(".")[:-1]
    if node.level:
        base = base[:len(base) - node.level + 1]
        name = ".".join(base + ([node.module] if node.module else []))
    else:
        name = node.module or ""
    return [name] + [f"{name}.{alias.name}" for alias in node.names if alias.name != "*"]


def _guarded(stack: list[ast.AST]) -> bool:
    """Whether a ``try`` around the import catches ImportError (or anything wider)."""
    wide = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
    for node in stack:
        for handler in getattr(node, "handlers", []):
            kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
            if handler.type is None or {getattr(k, "id", getattr(k, "attr", "")) for k in kinds} & wide:
                return True
    return False


def imports_inside(module: str, path: Path) -> list[dict[str, Any]]:
    """The imports of ``module`` that its import did not run: inside a function, or under a module-level ``try``
    (what the guard may have caught). Module-level ``if`` branches are left: this platform's ran at import."""
    is_package = path.name == "__init__.py"
    found = []

    def visit(node: ast.AST, stack: list[ast.AST], function: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = function
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = f"{function}.{child.name}" if function else child.name
            if isinstance(child, (ast.Import, ast.ImportFrom)) and (function or any(
                    isinstance(s, ast.Try) for s in stack)):
                for target in _targets(child, module, is_package):
                    found.append({"target": target, "site": f"{module}:{function or '<module>'}:{child.lineno}",
                                  "guarded": _guarded(stack)})
            visit(child, stack + [child] if isinstance(child, (ast.Try, ast.If)) else stack, inner)

    visit(ast.parse(path.read_text(encoding="utf-8")), [], "")
    return found


def _trimmed(module: str) -> str | None:
    """The :data:`TRIM` pattern that removed ``module``'s file, or ``None``."""
    import fnmatch

    path = module.replace(".", "/")
    for pattern, _ in TRIM:
        if any(fnmatch.fnmatch(candidate, pattern) or candidate.startswith(pattern.rstrip("*"))
               for candidate in (path, path + ".py", path + "/__init__.py", path + ".abi3.so")):
            return pattern
    return None


def _where(target: str, error: BaseException) -> str | None:
    """The :data:`OFF_PATH` entry that names ``target``'s module, the module it missed, or (for the two that say it
    only in words) the error's text. A key names a module component, or its start up to an underscore."""
    parts = target.split(".") + (getattr(error, "name", None) or "").split(".")
    for key, where in OFF_PATH.items():
        if "." in key and (target + ".").startswith(key + "."):
            return where
        if any(part == key or part.startswith(key + "_") for part in parts) or (
                key in ("tilelang", "ObjectRef") and key in str(error)):
            return where
    return None


def classify(target: str, error: BaseException) -> tuple[str, str]:
    """Why importing ``target`` failed: ``("off path", where)`` (:data:`OFF_PATH`), ``("needs a GPU", why)``,
    ``("on the machine", package)`` (its image has it; not installed for the rehearsal), ``("trimmed", pattern)``,
    ``("not in vllm 0.26.0", "")`` (a module of another release, named by Unsloth) or ``("unknown", error)``."""
    said = f"{type(error).__name__}: {error}"
    missing = getattr(error, "name", None) or ""
    needs = next((why for marker, why in NEEDS_GPU.items() if marker in said), None)
    where = _where(target, error)
    if where:
        return "off path", where
    if needs:
        return "needs a GPU", needs
    if isinstance(error, ModuleNotFoundError) and missing and not missing.startswith("vllm"):
        if on_the_machine(missing):
            return "on the machine", missing.split(".")[0]
    if missing.startswith("vllm"):
        pattern = _trimmed(missing)
        return ("trimmed", pattern) if pattern else ("not in vllm 0.26.0", "")
    return "unknown", said[:300]


def imports_in(prefixes: tuple[str, ...]) -> dict[str, list[dict[str, Any]]]:
    """``{target: its sites}`` of :func:`imports_inside` over the loaded modules named by ``prefixes``."""
    sites: dict[str, list[dict[str, Any]]] = {}
    for name, module in list(sys.modules.items()):
        path = Path(getattr(module, "__file__", None) or "")
        if name.startswith(prefixes) and path.suffix == ".py":
            for found in imports_inside(name, path):
                sites.setdefault(found["target"], []).append(found)
    return sites


def try_imports(sites: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Import every target of ``sites`` not loaded yet; each failure with its sites, whether every site is guarded,
    and :func:`classify`'s reason. ``X.a`` is tried only where ``X`` imported (``from X import a``)."""
    failed: list[tuple[str, BaseException]] = []
    for target in sorted(sites):  # a package sorts before its modules
        if not target or target in sys.modules or any(target.startswith(t + ".") for t, _ in failed):
            continue
        try:
            importlib.import_module(target)
        except ModuleNotFoundError as e:
            if e.name == target and "." in target and target.rsplit(".", 1)[0] in sys.modules:
                continue  # `from X import a` where a is a name, not a module
            failed.append((target, e))
        except Exception as e:  # noqa: BLE001 - each failure is classified and reported
            failed.append((target, e))
    return [{"target": t, "kind": classify(t, e)[0], "why": classify(t, e)[1],
             "guarded": all(s["guarded"] for s in sites[t]), "sites": [s["site"] for s in sites[t][:3]]}
            for t, e in failed]


def run_step(steps: list[dict[str, Any]], name: str, call: Any) -> Any:
    """Run one step, recording ``ok`` and what it returned (a short text) or the error's last lines."""
    try:
        detail = call()
    except Exception as e:  # noqa: BLE001 - the report names it
        steps.append({"step": name, "ok": False, "error": "".join(traceback.format_exception(e)[-3:])[-1200:]})
        return None
    steps.append({"step": name, "ok": True, "detail": str(detail)[:600]})
    return detail


def model_folder(work: Path, model: str) -> Path:
    """A folder vLLM reads a model's configuration from: the kit's shipped ``config.json`` of ``model`` and the kit's
    own tokenizer (no weights: nothing is loaded)."""
    import shutil

    from grpo_kit.policy.shapes import model_config
    from grpo_kit.policy.warm_start import SHIPPED_DIR

    folder = work / model.replace("/", "--")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(model_config(model)), encoding="utf-8")
    tokenizer = next(p for p in sorted(SHIPPED_DIR.iterdir()) if (p / "tokenizer.json").is_file())
    for path in tokenizer.iterdir():
        if path.name.startswith(("tokenizer", "special_tokens", "chat_template")):
            shutil.copy(path, folder / path.name)
    return folder


def engine_config(folder: Path, **settings: Any) -> Any:
    """vLLM's configuration for the model in ``folder`` as ``LLM(model=folder, **settings)`` builds it, with what it
    chose on this H200: compilation, CUDA graphs, the model runner, the attention backend and FlashAttention's
    version, the model class."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.models import ModelRegistry
    from vllm.v1.attention.backends.fa_utils import get_flash_attn_version
    from vllm.v1.attention.selector import get_attn_backend

    config = EngineArgs(model=str(folder), **settings).create_engine_config()
    model = config.model_config
    with set_current_vllm_config(config):
        backend = get_attn_backend(model.get_head_size(), model.dtype, None)
        version = get_flash_attn_version(head_size=model.get_head_size())
    chosen = {"architectures": model.architectures, "dtype": str(model.dtype).replace("torch.", ""),
              "compilation_mode": int(config.compilation_config.mode),
              "cudagraph_mode": str(config.compilation_config.cudagraph_mode),
              "model_runner": "V2 (vllm.v1.worker.gpu)" if config.use_v2_model_runner else "V1",
              "attention": backend.get_name(), "flash_attention": version,
              "model_class": ModelRegistry.resolve_model_cls(model.architectures, model)[0].__module__,
              "quantization": model.quantization, "lora": bool(config.lora_config)}
    assert torch.cuda.is_available() is False  # the CPU still sees no GPU: nothing was allocated on one
    return config, chosen


def route_vllm(work: Path, steps: list[dict[str, Any]]) -> None:
    """``vllm.LLM`` and ``SamplingParams`` at the 1.5B shape (the module docstring)."""
    def imported() -> str:
        import vllm
        from vllm import LLM, SamplingParams  # noqa: F401

        SamplingParams(n=16, temperature=1.0, top_p=1.0, max_tokens=256, seed=0, ignore_eos=True)
        return f"vllm {vllm.__version__} from {Path(vllm.__file__).parent}"

    def platform() -> dict[str, Any]:
        from vllm.platforms import current_platform
        from vllm.vllm_flash_attn import flash_attn_interface as fa

        loaded = [m for m in ("vllm._C_stable_libtorch", "vllm.vllm_flash_attn._vllm_fa3_C") if m in sys.modules]
        return {"platform": type(current_platform).__name__, "capability": str(current_platform.
                get_device_capability()), "cuda_libraries_loaded": loaded, "fa3": fa.FA3_AVAILABLE,
                "fa2": fa.FA2_AVAILABLE, "fa2_unavailable_because": (fa.FA2_UNAVAILABLE_REASON or "")[:80]}

    run_step(steps, "import vllm, LLM, SamplingParams", imported)
    run_step(steps, "the platform vLLM sees", platform)
    made = run_step(steps, "LLM's engine configuration at 1.5B (bf16)", lambda: engine_config(
        model_folder(work, "Qwen/Qwen2.5-1.5B-Instruct"), dtype="bfloat16", max_model_len=768,
        gpu_memory_utilization=0.4, seed=0))
    if made:
        config = made[0]
        steps[-1]["detail"] = json.dumps(made[1])

        def tokenizer() -> str:
            from vllm.tokenizers import cached_tokenizer_from_config

            return type(cached_tokenizer_from_config(config.model_config)).__name__

        def sampler() -> str:
            from vllm.config import set_current_vllm_config
            from vllm.v1.sample.sampler import Sampler

            with set_current_vllm_config(config):
                topk = Sampler().topk_topp_sampler
            return f"top-k/top-p through {topk.forward.__name__} (FlashInfer's sampler off)"

        run_step(steps, "vLLM's tokenizer", tokenizer)
        run_step(steps, "the sampler", sampler)
    for module in ENGINE_MODULES:
        run_step(steps, f"import {module}", lambda m=module: importlib.import_module(m).__name__)


def route_unsloth(work: Path, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Unsloth's ``fast_inference`` (the module docstring). Returns what Unsloth's vLLM imports gave."""
    def imported() -> str:
        from grpo_kit.policy.loading import import_unsloth

        import_unsloth()
        import unsloth
        from unsloth import import_fixes

        if import_fixes.VLLM_BROKEN:
            raise RuntimeError(f"Unsloth disabled vLLM: {import_fixes.VLLM_DISABLED_REASON}")
        return f"unsloth {unsloth.__version__}; vLLM not disabled (its extensions load)"

    run_step(steps, "import unsloth (the kit's import_unsloth)", imported)
    for module in UNSLOTH_VLLM_MODULES:
        run_step(steps, f"import {module}", lambda m=module: importlib.import_module(m).__name__)
    named = imports_in(tuple(UNSLOTH_VLLM_MODULES))
    outcomes = try_imports({target: found for target, found in named.items() if target.startswith("vllm")})

    def config_8b() -> str:
        from vllm.config import CompilationConfig, CUDAGraphMode
        from vllm.model_executor.layers.quantization import get_quantization_config
        from vllm.model_executor.model_loader import get_model_loader

        compilation = CompilationConfig(mode=3, backend="inductor", cudagraph_num_of_warmups=1,
                                        cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE)
        config, chosen = engine_config(
            model_folder(work, "unsloth/Meta-Llama-3.1-8B-Instruct"), dtype="bfloat16", max_model_len=1024,
            gpu_memory_utilization=0.6, quantization="bitsandbytes", load_format="bitsandbytes", enable_lora=True,
            max_lora_rank=32, max_loras=1, enable_prefix_caching=True, logprobs_mode="processed_logprobs",
            max_num_seqs=64, compilation_config=compilation, seed=3407)
        chosen.update(loader=type(get_model_loader(config.load_config)).__name__,
                      quantization_config=get_quantization_config("bitsandbytes").__name__)
        return json.dumps(chosen)

    run_step(steps, "load_vllm's engine configuration for a100 at 8B (4-bit bitsandbytes, LoRA r32)", config_8b)
    return outcomes


def imported_from() -> dict[str, list[str]]:
    """``{PYTHONPATH folder: the top-level packages imported from it}``: what the bundle, the proof's wheels and the
    machine's stand-ins gave."""
    folders = [Path(p).resolve() for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    found: dict[str, set[str]] = {str(f): set() for f in folders}
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if file and "." not in name:
            path = Path(file).resolve()
            for folder in folders:
                if folder in path.parents:
                    found[str(folder)].add(name)
    return {folder: sorted(tops) for folder, tops in found.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--route", choices=["vllm", "unsloth"], required=True)
    parser.add_argument("--work", required=True, help="a scratch folder (model configurations)")
    args = parser.parse_args(argv)
    hidden = hide_what_the_machine_lacks()
    importers = record_importers(list(CARRIED))
    look_like_an_h200()
    steps: list[dict[str, Any]] = []
    unsloth_named: list[dict[str, Any]] = []
    if args.route == "vllm":
        route_vllm(Path(args.work), steps)
    else:
        unsloth_named = route_unsloth(Path(args.work), steps)
    before_scan = {"carried_first_imported_by": dict(importers), "imported_from": imported_from(),
                   "vllm_modules_loaded": sum(m.startswith("vllm") for m in sys.modules),
                   "modules_loaded": len(sys.modules)}
    failed = try_imports(imports_in(("vllm", "unsloth_zoo.vllm")))
    blocking = [f for f in failed if f["kind"] in ("unknown", "trimmed") and not f["guarded"]]
    blocking += [f for f in unsloth_named if f["kind"] in ("unknown", "trimmed")]  # guarded too: Unsloth's
    # `try: import ...; patch ... except: pass` would skip a patch silently on the GPU
    print(json.dumps({"route": args.route, "steps": steps, "hidden_here": hidden, **before_scan,
                      "probes_imported_from": imported_from(), "scan": failed, "unsloth_named": unsloth_named,
                      "blocking": blocking, "ok": all(s["ok"] for s in steps) and not blocking}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
