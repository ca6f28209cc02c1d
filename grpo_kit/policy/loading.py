"""Loading a policy: with transformers (+ peft for a saved adapter) or through Unsloth; saving it merged, and any
model folder whole or not at all (:func:`saved_whole`).

:class:`Loading` is how a recipe wants its policy loaded (Unsloth or not, 4-bit, LoRA, colocated vLLM);
the presets build it (:attr:`grpo_kit.training.presets.Recipe.loading`), so nothing below the training
wing needs to know what a preset is.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_kit.policy.devices import require_cuda
from grpo_kit.system.files import new_beside

__all__ = ["LORA_TARGETS", "UNSLOTH_PATCHES", "Loading", "check_adapter_trained", "import_unsloth", "load_policy",
           "load_unsloth_policy", "save_merged", "saved_whole", "transformers_load_kwargs", "unsloth_load_kwargs",
           "unsloth_peft_kwargs"]

#: LoRA on every attention and MLP projection (the Unsloth notebook's choice, kept by the blog post).
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Loading:
    """How a policy is loaded for training and evaluation.

    Attributes:
        use_unsloth: load through Unsloth (CUDA only) instead of plain transformers.
        load_in_4bit: QLoRA (bitsandbytes 4-bit base weights; Unsloth only).
        fast_inference: Unsloth's colocated vLLM engine sharing the weights (LoRA only).
        lora_rank, lora_alpha, lora_target_modules: the adapter; ``lora_rank=None`` trains every weight.
        max_seq_length: prompt plus completion, in tokens (Unsloth's engine holds at most this many).
        gpu_memory_utilization: the share of GPU memory vLLM may take.
        seed: the adapter's initialisation.
        lora_dropout, use_rslora, use_dora, lora_modules_to_save, lora_target_parameters: the rest of the adapter, as
            TRL's ``ModelConfig`` names them (Unsloth's ``get_peft_model`` takes them: :func:`unsloth_peft_kwargs`).
        model_kwargs: ``from_pretrained`` keyword arguments the recipe gives (``revision``, ``trust_remote_code``,
            ``attn_implementation``, ``dtype`` and ``model_init_kwargs``:
            :attr:`grpo_kit.training.presets.Recipe.model_kwargs`), over the kit's placement.
    """

    use_unsloth: bool = False
    load_in_4bit: bool = False
    fast_inference: bool = False
    lora_rank: int | None = 32
    lora_alpha: int = 32
    lora_target_modules: tuple[str, ...] | str = LORA_TARGETS
    max_seq_length: int = 512
    gpu_memory_utilization: float = 0.6
    seed: int = 3407
    lora_dropout: float = 0.0
    use_rslora: bool = False
    use_dora: bool = False
    lora_modules_to_save: tuple[str, ...] | None = None
    lora_target_parameters: tuple[str, ...] | None = None
    model_kwargs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def trains_all_weights(self) -> bool:
        """Full fine-tuning (no adapter)."""
        return self.lora_rank is None


def load_policy(name_or_path: str | Path, dtype: str = "auto", device_map: str | None = None,
                **from_pretrained: Any) -> tuple[Any, Any]:
    """Load a causal LM and its tokenizer with plain transformers (CPU or GPU, no Unsloth).

    A folder holding a peft LoRA adapter (``adapter_config.json``) loads its base model
    and the adapter on top, so an adapter saved by training evaluates as is.

    Args:
        name_or_path: a Hub id (users' machines) or a local folder.
        dtype: ``"auto"`` (the checkpoint's), or a torch dtype name such as ``"float32"``.
        device_map: passed to ``from_pretrained`` (e.g. ``"auto"`` on a GPU); ``None`` keeps CPU.
        **from_pretrained: more of the model's ``from_pretrained`` keyword arguments (a recipe's
            :attr:`Loading.model_kwargs`); ``revision`` and ``trust_remote_code`` load the tokenizer too.

    Returns:
        ``(model, tokenizer)``; the tokenizer pads on the left (batched generation) and has
        a pad token (its EOS token when it had none).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    auto: Any = AutoModelForCausalLM
    if (Path(name_or_path) / "adapter_config.json").is_file():  # peft only where needed: it takes seconds to import
        from peft import AutoPeftModelForCausalLM as auto
    model = auto.from_pretrained(str(name_or_path), dtype=dtype, device_map=device_map, **from_pretrained)
    tokenizer = AutoTokenizer.from_pretrained(str(name_or_path), **{k: from_pretrained[k] for k in (
        "revision", "trust_remote_code") if k in from_pretrained})
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


#: Modules Unsloth patches when it is imported; imported before it, they keep unpatched code.
UNSLOTH_PATCHES = ("transformers", "trl", "peft")


def import_unsloth() -> Any:
    """Import ``unsloth`` before transformers, TRL and peft (it patches them when imported); return it.

    The GPU path calls this first (:func:`grpo_kit.policy.routes.prepare_stack`), so Unsloth's patches apply to
    everything the run uses: its loader, its generated ``GRPOTrainer`` and its memory savings.

    Raises:
        RuntimeError: one of :data:`UNSLOTH_PATCHES` was imported before Unsloth in this process (restart
            the Python process or notebook kernel and let the kit load the model first).
        ImportError: Unsloth is not installed (``pip install -r requirements.txt``).
    """
    import sys

    if "unsloth" not in sys.modules:
        if early := [name for name in UNSLOTH_PATCHES if name in sys.modules]:
            raise RuntimeError(f"{', '.join(early)} was imported before unsloth in this process, so Unsloth's "
                               "patches would not apply to it (the GPU route's memory savings and its trainer). "
                               "Restart the Python process or notebook kernel and run the kit's cells in order; "
                               "in your own script call grpo_kit.policy.loading.import_unsloth() before anything "
                               "imports transformers, trl or peft.")
    import unsloth

    return unsloth


def load_unsloth_policy(model_name: str, loading: Loading = Loading(use_unsloth=True, load_in_4bit=True,
                                                                      fast_inference=True)) -> tuple[Any, Any]:
    """Load a policy through Unsloth: 4-bit or 16-bit LoRA (optionally with colocated vLLM), or full weights.

    What runs where (unsloth #2846, #3577):

    | route | LoRA 4-bit | LoRA 16-bit | full fine-tuning |
    | --- | --- | --- | --- |
    | Unsloth + colocated vLLM (``fast_inference=True``) | yes | yes | no |
    | Unsloth, generation with transformers | yes | yes | yes (``lora_rank=None``) |
    | transformers + TRL's colocated vLLM (``use_unsloth=False, use_vllm=True``) | no | yes | yes |

    ``unsloth`` is imported here (:func:`import_unsloth`), before transformers, TRL and peft.

    Args:
        model_name: Hub id or path; a folder holding a saved LoRA adapter loads its base model with the
            adapter on top (the trained policy, evaluated through the same loader as its baseline).
        loading: 4-bit or not, the adapter (``lora_rank=None`` trains all weights), colocated vLLM
            (``fast_inference``) and its memory share, the sequence length, the adapter's seed.

    Returns:
        ``(model, tokenizer)``.

    Raises:
        RuntimeError: no CUDA GPU.
        ValueError: full fine-tuning with ``fast_inference`` (Unsloth cannot do it).
    """
    if loading.lora_rank is None and loading.fast_inference:
        raise ValueError("Unsloth cannot combine full fine-tuning with fast_inference: pass fast_inference=False")
    require_cuda("Unsloth")
    import_unsloth()  # first: it patches transformers, TRL and peft
    from unsloth import FastLanguageModel

    # A folder holding a saved adapter loads its base and the adapter (Unsloth reads adapter_config.json).
    saved_adapter = (Path(model_name) / "adapter_config.json").is_file()
    model, tokenizer = FastLanguageModel.from_pretrained(**unsloth_load_kwargs(model_name, loading, saved_adapter))
    if loading.lora_rank is not None and not saved_adapter:
        model = FastLanguageModel.get_peft_model(model, **unsloth_peft_kwargs(loading))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def transformers_load_kwargs(loading: Loading, placed: Mapping[str, Any]) -> dict[str, Any]:
    """What :func:`load_policy` gets on the transformers route: the placement's ``dtype`` and ``device_map``
    (:func:`grpo_kit.policy.devices.placement`), the recipe's ``from_pretrained`` keys over them (TRL's grpo script
    lets ``model_init_kwargs`` win the same way).

    >>> transformers_load_kwargs(Loading(model_kwargs={"dtype": "bfloat16"}), {"dtype": "float32", "device_map": None})
    {'dtype': 'bfloat16', 'device_map': None}
    """
    return {**placed, **loading.model_kwargs}


def unsloth_load_kwargs(model_name: str, loading: Loading, saved_adapter: bool = False) -> dict[str, Any]:
    """What ``FastLanguageModel.from_pretrained`` gets (unsloth 2026.10.7, ``unsloth/models/loader.py``): the model,
    Unsloth's context length, 4-bit or not, its colocated vLLM with its memory share and largest LoRA rank, full
    fine-tuning without an adapter, and of the recipe's ``from_pretrained`` keys those Unsloth takes (``revision``,
    ``trust_remote_code``, ``dtype``: ``"auto"`` is Unsloth's ``None``, its own choice); ``attn_implementation`` and
    ``model_init_kwargs`` are refused on this route before anything loads
    (:func:`grpo_kit.training.recipe_keys.unread`).

    >>> unsloth_load_kwargs("m", Loading(use_unsloth=True, model_kwargs={"revision": "v2", "dtype": "auto"}))
    {'model_name': 'm', 'max_seq_length': 512, 'load_in_4bit': False, 'fast_inference': False, 'revision': 'v2', \
'dtype': None}
    """
    kwargs: dict[str, Any] = dict(model_name=model_name, max_seq_length=loading.max_seq_length,
                                  load_in_4bit=loading.load_in_4bit, fast_inference=loading.fast_inference)
    if loading.fast_inference:
        kwargs.update(max_lora_rank=loading.lora_rank, gpu_memory_utilization=loading.gpu_memory_utilization)
    if loading.lora_rank is None and not saved_adapter:
        kwargs.update(full_finetuning=True)
    kwargs.update({k: v for k, v in loading.model_kwargs.items() if k in ("revision", "trust_remote_code")})
    if "dtype" in loading.model_kwargs:  # Unsloth asserts a torch dtype or a 16-bit name: "float32" as torch's
        dtype = loading.model_kwargs["dtype"]
        kwargs["dtype"] = None if dtype in (None, "auto") else dtype if dtype != "float32" else _torch_float32()
    return kwargs


def _torch_float32() -> Any:
    import torch

    return torch.float32


def unsloth_peft_kwargs(loading: Loading) -> dict[str, Any]:
    """What ``FastLanguageModel.get_peft_model`` gets for the recipe's adapter (unsloth 2026.10.7,
    ``unsloth/models/llama.py``): TRL's ``ModelConfig`` LoRA keys under Unsloth's names (``use_dora`` through its
    ``**kwargs`` into peft's ``LoraConfig``), Unsloth's gradient checkpointing and the adapter's seed.

    >>> sorted(unsloth_peft_kwargs(Loading(use_unsloth=True, lora_rank=8)))  # doctest: +NORMALIZE_WHITESPACE
    ['lora_alpha', 'lora_dropout', 'modules_to_save', 'r', 'random_state', 'target_modules', 'target_parameters',
     'use_gradient_checkpointing', 'use_rslora']
    """
    targets = loading.lora_target_modules
    return {"r": loading.lora_rank, "lora_alpha": loading.lora_alpha, "lora_dropout": loading.lora_dropout,
            "target_modules": targets if isinstance(targets, str) else list(targets),
            "use_rslora": loading.use_rslora,
            "modules_to_save": list(loading.lora_modules_to_save) if loading.lora_modules_to_save else None,
            "target_parameters": list(loading.lora_target_parameters) if loading.lora_target_parameters else None,
            **({"use_dora": True} if loading.use_dora else {}),
            "use_gradient_checkpointing": "unsloth", "random_state": loading.seed}


def check_adapter_trained(path: str | Path) -> None:
    """Check that a saved LoRA adapter is not the untrained initialisation (all ``lora_B`` zero).

    peft starts every ``lora_B`` at zero, so an adapter saved before any effective step leaves
    the model unchanged: evaluating it measures the base model by mistake.

    Raises:
        FileNotFoundError: no ``adapter_model.safetensors`` in ``path``.
        ValueError: every ``lora_B`` weight is zero (or there is none).
    """
    from safetensors.torch import load_file

    file = Path(path) / "adapter_model.safetensors"
    if not file.is_file():
        raise FileNotFoundError(f"no LoRA adapter at {file}")
    lora_b = [t for name, t in load_file(str(file)).items() if "lora_B" in name]
    if not lora_b or all(not t.any() for t in lora_b):
        raise ValueError(f"the adapter in {path} is all zeros (lora_B never moved): it would evaluate the base "
                         "model. Train for at least one step with a non-zero advantage, or check the learning rate.")


def save_merged(model: Any, tokenizer: Any, path: str | Path) -> Path:
    """Save base plus LoRA merged into one 16-bit model (for vLLM or the Hub); returns the folder.

    An Unsloth model uses its ``save_pretrained_merged(..., save_method="merged_16bit")``; a peft
    model is merged with ``merge_and_unload`` (which folds the adapter into the base in place:
    keep using the returned files, not ``model``); a plain model is saved as is.
    """
    path = Path(path)
    if hasattr(model, "save_pretrained_merged"):
        model.save_pretrained_merged(str(path), tokenizer, save_method="merged_16bit")
        return path
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    model.save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return path


@contextlib.contextmanager
def saved_whole(folder: Path, marker: str) -> Iterator[Path]:
    """Write a model folder whole or not at all: the block fills a new folder beside ``folder`` (made with the user's
    umask, :func:`grpo_kit.system.files.new_beside`), which then takes the place of ``folder`` (what was there, e.g. an
    incomplete one left by a killed build or an older kit, is first moved aside whole, then removed: ``folder`` is at
    every moment the old one whole, absent, or the new one whole). On an error or Ctrl-C in the block nothing
    half-written is left behind.

    Args:
        folder: where the model goes (its parent folder is created).
        marker: the file the block writes into the folder last. A folder holding it is complete: where another process
            put its own copy in place first (a build of the same inputs: the same files), that copy is kept.

    Raises:
        OSError: the folder could not be written (e.g. a full disk) and no complete copy is in place; what was at
            ``folder`` before is put back.
    """
    folder.parent.mkdir(parents=True, exist_ok=True)
    building = new_beside(folder, "building-", folder=True)
    try:
        yield building
        aside = new_beside(folder, "old-", folder=True)
        with contextlib.suppress(FileNotFoundError):
            os.replace(folder, aside / folder.name)
        try:
            os.replace(building, folder)
        except OSError:  # another process put the same folder in place between the two lines above
            if not (folder / marker).is_file():  # a full disk, not a race: what was there goes back
                with contextlib.suppress(OSError):
                    os.replace(aside / folder.name, folder)
                with contextlib.suppress(OSError):
                    aside.rmdir()  # empty unless what was there could not go back
                raise
        shutil.rmtree(aside, ignore_errors=True)
    finally:
        shutil.rmtree(building, ignore_errors=True)
