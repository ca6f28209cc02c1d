"""The export formats, each in one place (:class:`ExportFormat`): what it takes and checks before any work, the disk
it needs, how it is built from the trained policy and how a built one is read back to be checked against it.
:data:`FORMATS` lists them for the command line; :func:`check_formats` checks a request of several.

- merged (:class:`Merged`): the base with the adapter folded in, in the base's dtype, as safetensors with the
  tokenizer and generation config (:func:`write_merged`); read back with transformers, its weights compared with
  the trained policy's merge in memory;
- GGUF (:class:`Gguf`): the merged model through llama.cpp's converter, then its quantizer; read back with
  llama-cpp-python.
"""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path
from typing import Any

from grpo_kit.policy import llama_cpp, loading
from grpo_kit.policy.generation import TransformersBackend
from grpo_kit.runs.export_reference import Reference, dtype_name, generation_placement, saved_dtype
from grpo_kit.runs.unsloth_base import check_base_shape
from grpo_kit.system.progress import phase_bar

__all__ = ["F32_GGUF_LIMIT", "FORMATS", "ExportFormat", "Gguf", "Merged", "check_formats", "tokenizer_bytes",
           "write_merged"]

#: Above this many parameters a quantized GGUF is converted through a 16-bit GGUF, not a float32 one (half the
#: disk; llama.cpp's quantizer reads either). At or below it float32 keeps the tiny policy's conversion exact.
F32_GGUF_LIMIT = 1_000_000_000


def tokenizer_bytes(model: Path) -> int:
    """The bytes of a saved model folder's files other than its weights (tokenizer, configs): what a merged export
    copies, and about what a GGUF stores of the vocabulary."""
    weights = (".safetensors", ".bin", ".pt", ".pth")
    return sum(p.stat().st_size for p in model.rglob("*") if p.is_file() and not p.name.endswith(weights))


def write_merged(reference: Reference, folder: Path, base: Path | None = None) -> Path:
    """Save the trained policy merged into ``folder``: safetensors, base dtype, tokenizer, generation config; returns
    ``folder``. ``base``: an Unsloth LoRA run's 16-bit base (:func:`grpo_kit.runs.unsloth_base.merge_base`).

    A run trained through Unsloth is saved by Unsloth's own ``save_pretrained_merged(..., save_method=
    "merged_16bit")`` (unsloth/save.py): for a 4-bit run it merges the adapter into the 16-bit original the
    ``*-bnb-4bit`` base was made from, where peft's ``merge_and_unload`` would re-quantize into 4-bit weights
    (peft ``tuners/lora/bnb.py``) that no GGUF converter reads (:func:`grpo_kit.policy.loading.save_merged`).
    """
    models = reference.models
    model = models.trained if models.merged is None else models.merged  # Unsloth merges its own
    named = model.config._name_or_path
    if base is not None:
        check_base_shape(base, model.config)
        # merge_and_overwrite_lora finds its base from the config's _name_or_path (a local folder first)
        model.config._name_or_path = str(base)
    try:
        return loading.save_merged(model, reference.tokenizer, folder)
    finally:
        model.config._name_or_path = named


def _compare_weights(export_dir: Path, merged: Any) -> dict[str, Any]:
    """Every tensor of a merged export against the trained policy merged in memory: ``{"max_abs_diff", "differing",
    "missing"}`` (:attr:`grpo_kit.runs.verification.Verification.weights`)."""
    from safetensors.torch import load_file

    expected = merged.state_dict()  # detached tensors, maybe on the GPU: one at a time comes over
    found = {k: v for file in sorted(export_dir.glob("*.safetensors")) for k, v in load_file(str(file)).items()}
    # the largest |difference| of each tensor that the trained merge holds at the same shape
    diffs = {name: (tensor.float() - expected[name].float().cpu()).abs().max().item() if tensor.numel() else 0.0
             for name, tensor in found.items() if name in expected and expected[name].shape == tensor.shape}
    # one without a counterpart, or off by more than float32 rounding of its largest weight, differs
    differing = [name for name in found if name not in diffs
                 or diffs[name] > 1e-6 * max(1.0, expected[name].float().abs().max().item())]
    tied = getattr(merged.config, "tie_word_embeddings", False)  # a tied head is saved once, as the embedding
    missing = [n for n in expected if n not in found and not (tied and n == "lm_head.weight")]
    return {"max_abs_diff": max(diffs.values(), default=0.0), "differing": differing, "missing": missing}


class ExportFormat:
    """One export format, everything it does in one place: what it takes and checks before any work
    (:meth:`check`, :meth:`check_tools`), the disk it needs (:meth:`needed`), how it is built from the trained policy
    (:meth:`build`), and how a built one is found and read back to be verified against the trained policy
    (:meth:`found`, :meth:`open`). Its folder under ``<run>/export/`` is its name, and a type's: ``gguf-q8_0``."""

    name = ""
    #: It takes a type to quantize to (``--quant``); a type outside
    #: :data:`~grpo_kit.runs.verification.IDENTICAL_THRESHOLDS` is judged by agreeing answers rather than identical
    #: completions.
    quantizes = False
    #: Of several formats exported together, the one ``--push-to-hub`` uploads.
    for_the_hub = False

    def check(self, quant: str | None) -> str | None:
        """The type to build (``quant`` checked).

        Raises:
            ValueError: a type this format does not take.
        """
        if quant is not None:
            raise ValueError(f"--quant {quant!r} sets a GGUF's type: add --format gguf (a {self.name} export keeps the "
                             "base model's dtype)")
        return None

    def check_tools(self, verifying: bool = False) -> None:
        """Refuse, before any work, when what building (or, ``verifying``, reading back) needs is not installed."""

    def needed(self, parameters: int, quant: str | None, float32: bool, tokenizer: int = 0) -> int:
        """Bytes of disk the build needs: the merged model (4 a parameter in float32, else 2) and its ``tokenizer``
        files (bytes: :func:`tokenizer_bytes`)."""
        return parameters * (4 if float32 else 2) + tokenizer

    def build(self, reference: Reference, folder: Path, name: str, quant: str | None, base: Path | None = None
              ) -> None:
        """Write the export into ``folder`` (``name``: the run's, for a file's name; ``base``: an Unsloth LoRA run's
        16-bit base, :func:`write_merged`)."""
        with phase_bar("merging and saving", None):
            write_merged(reference, folder, base)

    def found(self, export: Path) -> Path | None:
        """What of ``export`` this format reads (``None``: not this format's)."""
        return export if (export / "config.json").is_file() else None

    def open(self, found: Path, reference: Reference) -> tuple[Any, str, dict[str, Any] | None]:
        """``(a generation backend on it, its dtype, its weights against the trained policy's merge or None)``;
        the trained policy's models are released first (an 8B reference and its export do not both fit on one
        card)."""
        saved = saved_dtype(found)
        merged = reference.models.merged
        weights = _compare_weights(found, merged) if merged is not None and saved == reference.dtype else None
        del merged
        reference.models.release()
        model, tokenizer = loading.load_policy(found, **generation_placement(saved))
        return TransformersBackend(model, tokenizer, name="the export"), saved or dtype_name(model), weights


class Gguf(ExportFormat):
    """llama.cpp's format: the merged model through llama.cpp's converter, then its quantizer; read back with
    llama-cpp-python."""

    name = "gguf"
    quantizes = True

    def check(self, quant: str | None) -> str | None:
        quant = "q8_0" if quant is None else str(quant).lower()  # Unsloth's notebooks' first choice
        if quant not in (types := llama_cpp.CONVERTER_TYPES + llama_cpp.QUANT_TYPES):
            raise ValueError(f"quant must be one of {', '.join(types)}, got {quant!r}")
        return quant

    def check_tools(self, verifying: bool = False) -> None:
        if not verifying:
            llama_cpp._converter()
        llama_cpp.import_llama_cpp()

    def needed(self, parameters: int, quant: str | None, float32: bool, tokenizer: int = 0) -> int:
        """What :meth:`build` has on disk at once: the merged model and the converter's GGUF of ``quant`` (f32, f16,
        bf16, q8_0: :data:`~grpo_kit.policy.llama_cpp.CONVERTER_TYPES`), or for a type only the quantizer writes, the
        converter's float32 or 16-bit GGUF in between and the quantizer's, at most q8_0's size
        (:data:`~grpo_kit.policy.llama_cpp.GGUF_BYTES_PER_WEIGHT`); each GGUF carries the vocabulary, counted as the
        ``tokenizer`` files' bytes."""
        size = llama_cpp.GGUF_BYTES_PER_WEIGHT
        merged = super().needed(parameters, quant, float32, tokenizer)
        if quant in llama_cpp.CONVERTER_TYPES:
            return merged + math.ceil(parameters * size[quant]) + tokenizer
        between = size["f32" if parameters <= F32_GGUF_LIMIT else "f16"]
        return merged + math.ceil(parameters * (between + size["q8_0"])) + 2 * tokenizer

    def build(self, reference: Reference, folder: Path, name: str, quant: str | None, base: Path | None = None
              ) -> None:
        super().build(reference, folder / "merged", name, quant, base)
        gguf = folder / f"{name}.gguf"
        # a type the converter writes directly; else through float32 only for a small model (an 8B model's float32
        # GGUF is 32 GB of disk), then the quantizer
        between = quant if quant in llama_cpp.CONVERTER_TYPES else "f32" if reference.parameters <= F32_GGUF_LIMIT \
            else "bf16" if reference.dtype in (None, "bfloat16") else "f16"
        with phase_bar(f"converting to GGUF {between} (llama.cpp's convert_hf_to_gguf.py)", None):
            full = llama_cpp.convert_to_gguf(
                folder / "merged", gguf if between == quant else folder / f"full-{between}.gguf.tmp", between)
        if full != gguf:
            with phase_bar(f"quantizing to {quant} (llama.cpp's llama_model_quantize)", None):
                llama_cpp.quantize_gguf(full, gguf, quant)
            full.unlink()
        shutil.rmtree(folder / "merged")

    def found(self, export: Path) -> Path | None:
        if export.is_file() and export.suffix == ".gguf":
            return export
        files = sorted(export.glob("*.gguf")) if export.is_dir() else []
        return files[0] if len(files) == 1 else None

    def open(self, found: Path, reference: Reference) -> tuple[Any, str, dict[str, Any] | None]:
        tokenizer = reference.tokenizer
        reference.models.release()
        backend = llama_cpp.LlamaCppBackend(found, lambda prompt: tokenizer.apply_chat_template(
            prompt, add_generation_prompt=True, tokenize=False))
        # the type as the file's name says it (model-<type>.gguf)
        match = re.search(r"-(f32|f16|bf16|q\d\w*)\.gguf$", found.name, re.IGNORECASE)
        return backend, match.group(1).lower() if match else "unknown", None


class Merged(ExportFormat):
    """The base with the adapter folded in, in the base's dtype: safetensors, tokenizer, generation config; read back
    with transformers."""

    name = "merged"
    for_the_hub = True


#: The export formats by name, in the order the command line lists them (the first is the default).
FORMATS: dict[str, ExportFormat] = {f.name: f for f in (Merged(), Gguf())}


def check_formats(formats: list[str] | tuple[str, ...], quant: str | None = None) -> dict[str, str | None]:
    """Check a request for ``formats`` exported together, before any work: their names, ``quant`` (it goes to the
    formats that quantize; with none of them it is refused) and the tools each needs (:meth:`ExportFormat.check_tools`).

    Returns:
        Each format's type to build (:meth:`ExportFormat.check`: ``None`` where it keeps the base model's dtype).

    Raises:
        ValueError: an unknown format, or a ``quant`` no format takes; ImportError / FileNotFoundError: a format's
            tools are missing. Each message is one line saying what to change.
    """
    if unknown := [f for f in formats if f not in FORMATS]:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {unknown[0]!r}")
    typed = any(FORMATS[f].quantizes for f in formats)
    checked = {f: FORMATS[f].check(quant if FORMATS[f].quantizes or not typed else None) for f in formats}
    for format in formats:  # a missing llama.cpp is said before a merged export is built
        FORMATS[format].check_tools()
    return checked


