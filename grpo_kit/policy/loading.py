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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_kit.policy.devices import require_cuda
from grpo_kit.system.files import new_beside

__all__ = ["LORA_TARGETS", "UNSLOTH_PATCHES", "Loading", "check_adapter_trained", "import_unsloth", "load_policy",
           "load_unsloth_policy", "save_merged", "saved_whole"]

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
    """

    use_unsloth: bool = False
    load_in_4bit: bool = False
    fast_inference: bool = False
    lora_rank: int | None = 32
    lora_alpha: int = 32
    lora_target_modules: tuple[str, ...] = LORA_TARGETS
    max_seq_length: int = 512
    gpu_memory_utilization: float = 0.6
    seed: int = 3407

    @property
    def trains_all_weights(self) -> bool:
        """Full fine-tuning (no adapter)."""
        return self.lora_rank is None


def load_policy(name_or_path: str | Path, dtype: str = "auto", device_map: str | None = None) -> tuple[Any, Any]:
    """Load a causal LM and its tokenizer with plain transformers (CPU or GPU, no Unsloth).

    A folder holding a peft LoRA adapter (``adapter_config.json``) loads its base model
    and the adapter on top, so an adapter saved by training evaluates as is.

    Args:
        name_or_path: a Hub id (users' machines) or a local folder.
        dtype: ``"auto"`` (the checkpoint's), or a torch dtype name such as ``"float32"``.
        device_map: passed to ``from_pretrained`` (e.g. ``"auto"`` on a GPU); ``None`` keeps CPU.

    Returns:
        ``(model, tokenizer)``; the tokenizer pads on the left (batched generation) and has
        a pad token (its EOS token when it had none).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    auto: Any = AutoModelForCausalLM
    if (Path(name_or_path) / "adapter_config.json").is_file():  # peft only where needed: it takes seconds to import
        from peft import AutoPeftModelForCausalLM as auto
    model = auto.from_pretrained(str(name_or_path), dtype=dtype, device_map=device_map)
    tokenizer = AutoTokenizer.from_pretrained(str(name_or_path))
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
    kwargs: dict[str, Any] = dict(model_name=model_name, max_seq_length=loading.max_seq_length,
                                  load_in_4bit=loading.load_in_4bit, fast_inference=loading.fast_inference)
    if loading.fast_inference:
        kwargs.update(max_lora_rank=loading.lora_rank, gpu_memory_utilization=loading.gpu_memory_utilization)
    if loading.lora_rank is None and not saved_adapter:
        kwargs.update(full_finetuning=True)
    model, tokenizer = FastLanguageModel.from_pretrained(**kwargs)
    if loading.lora_rank is not None and not saved_adapter:
        model = FastLanguageModel.get_peft_model(model, r=loading.lora_rank, lora_alpha=loading.lora_alpha,
                                                 target_modules=list(loading.lora_target_modules),
                                                 use_gradient_checkpointing="unsloth", random_state=loading.seed)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


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
