"""Where the merged export of an Unsloth LoRA run gets its 16-bit base (:func:`merge_base`), settled before any model
loads, and the check that a base given by hand is the trained policy's architecture (:func:`check_base_shape`).

Unsloth's merge does not fold the adapter into the weights in memory: it reads the 16-bit original of the adapter's
base again, from a local folder or the Hugging Face Hub (about 16 GB for an 8B model). Other runs merge into the base
they load, and read none of this.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from grpo_kit.runs.export_reference import trained_through_unsloth
from grpo_kit.runs.folder import RunFolder
from grpo_kit.system.files import json_or_none
from grpo_kit.system.hub import hub_offline

__all__ = ["check_base_shape", "merge_base"]

log = logging.getLogger(__name__)

#: Suffixes of Unsloth's pre-quantized repositories, whose 16-bit original its merge reads instead (unsloth
#: 2026.10.7 ``models/mapper.py``: ``unsloth/Meta-Llama-3.1-8B-Instruct-unsloth-bnb-4bit`` and ``...-bnb-4bit`` map to
#: ``unsloth/Meta-Llama-3.1-8B-Instruct``).
_QUANTIZED_SUFFIX = re.compile(r"(-unsloth)?-bnb-4bit$", re.IGNORECASE)
_BASE_HELP = ("pass --base PATH (notebook 04: export_base = PATH), a local folder holding that 16-bit model "
              "(config.json and *.safetensors, e.g. from `hf download NAME --local-dir PATH` on a machine online)")


def _safetensors_model(folder: Path) -> bool:
    """Whether ``folder`` holds an unquantized model Unsloth's merge reads: ``config.json`` without a 4-bit
    ``quantization_config`` and ``*.safetensors`` (every shard its index names)."""
    config = json_or_none(folder / "config.json")
    quantization = config.get("quantization_config") if isinstance(config, dict) else None
    if not isinstance(config, dict) or (isinstance(quantization, dict) and (
            quantization.get("load_in_4bit") or quantization.get("quant_method") in ("bitsandbytes", "gptq", "awq"))):
        return False
    index = json_or_none(folder / "model.safetensors.index.json")
    shards = set(index["weight_map"].values()) if isinstance(index, dict) and "weight_map" in index else set()
    return any(folder.glob("*.safetensors")) and all((folder / name).is_file() for name in shards)


def _hub_weights_bytes(repo: str) -> int:
    """The bytes of ``repo``'s safetensors files on the Hub (one metadata request, 30 s at most).

    Raises:
        Exception: whatever huggingface_hub raises when the Hub cannot be reached or the repository is not there.
    """
    from huggingface_hub import HfApi

    info = HfApi().model_info(repo, files_metadata=True, timeout=30)
    return sum(f.size or 0 for f in info.siblings or () if f.rfilename.endswith(".safetensors"))


def _cached_snapshot(repo: str) -> Path | None:
    """The Hugging Face cache's complete copy of ``repo`` (its snapshot folder), or ``None``; no network."""
    from huggingface_hub import snapshot_download

    try:
        folder = Path(snapshot_download(repo, local_files_only=True))
    except Exception:  # not cached (LocalEntryNotFoundError), or a damaged cache: the Hub decides then
        return None
    return folder if _safetensors_model(folder) else None


def merge_base(run_dir: str | Path, base: str | Path | None = None) -> Path | None:
    """Where the merged export of an Unsloth LoRA run gets its 16-bit base, settled before any model loads.

    Unsloth's ``save_pretrained_merged(..., "merged_16bit")`` does not merge into the weights in memory: it reads
    the 16-bit original of the adapter's base again (unsloth 2026.10.7 ``save.py``
    ``unsloth_generic_save_pretrained_merged`` -> unsloth_zoo ``saving_utils.py`` ``merge_and_overwrite_lora``),
    from a local folder when ``determine_base_model_source`` finds one (the literal name, or its last part in the
    working folder; the Hugging Face cache is never looked at), else from the Hub: about 16 GB for an 8B model,
    and offline it raises "could not reach the Hugging Face Hub". The kit hands it a local folder (the model
    config's ``_name_or_path``, which ``merge_and_overwrite_lora`` reads) where it has one: ``base``, a local
    copy Unsloth would find itself, or a complete copy in the Hugging Face cache.

    Args:
        run_dir: the run folder.
        base: a local folder holding the 16-bit base (``export --base``).

    Returns:
        the local folder to merge from, or ``None``: no 16-bit base is read (not an Unsloth LoRA run), or Unsloth
        downloads it from the Hub, which answered (a log line gives its size).

    Raises:
        ValueError: ``base`` for a run that needs none, or not a folder holding an unquantized safetensors model;
            ``HF_HUB_OFFLINE`` set where the base would come from the Hub (the message names ``--base``).
        ConnectionError: the Hub does not answer for the base (the message names ``--base``).
    """
    adapter = RunFolder(run_dir, write=False).model / "adapter_config.json"
    if not (trained_through_unsloth(run_dir) and adapter.is_file()):
        if base is not None:
            raise ValueError(f"--base is for a LoRA run trained through Unsloth, whose merge reads a 16-bit base; "
                             f"{run_dir} merges into the base it loads: drop --base")
        return None
    if base is not None:
        folder = Path(base).expanduser()
        if not _safetensors_model(folder):
            raise ValueError(f"--base {base} is not a folder holding an unquantized model (config.json without a "
                             "4-bit quantization_config, and its *.safetensors): give the 16-bit original the run's "
                             "base was quantized from")
        return folder.resolve()
    try:
        name = str(json.loads(adapter.read_text(encoding="utf-8"))["base_model_name_or_path"])
    except (OSError, ValueError, KeyError, TypeError):
        raise ValueError(f"{adapter} is damaged or was edited (no base_model_name_or_path): restore it") from None
    name = _QUANTIZED_SUFFIX.sub("", name)
    for local in (Path(name), Path(name.split("/")[-1])):  # where merge_and_overwrite_lora looks itself
        if _safetensors_model(local):
            return local.resolve()
    if (cached := _cached_snapshot(name)) is not None:
        log.info(f"export: Unsloth's merge reads the 16-bit base {name} from the Hugging Face cache ({cached})")
        return cached
    needs = f"this run's merged export needs the 16-bit base {name}, which Unsloth's merge downloads from the Hub"
    if hub_offline():
        raise ValueError(f"{needs}, and HF_HUB_OFFLINE is set: {_BASE_HELP}")
    try:
        size = _hub_weights_bytes(name)
    except Exception as e:  # offline, DNS, timeout, gated, not found: huggingface_hub raises several types
        raise ConnectionError(f"{needs}, and the Hub does not answer for it ({type(e).__name__}): {_BASE_HELP}") \
            from None
    log.warning(f"export: Unsloth's merge downloads the 16-bit base {name} from the Hugging Face Hub ({size / 1e9:.1f} "
                "GB) into the export's folder, and the merged export takes as much again; --base PATH uses a local "
                "copy instead")
    return None


def check_base_shape(base: Path, config: Any) -> None:
    """Refuse a ``--base`` whose architecture is not the trained policy's (Unsloth would merge by tensor name).

    Raises:
        ValueError: a field of ``base/config.json`` differs from the loaded model's config (both values named).
    """
    saved = json.loads((base / "config.json").read_text(encoding="utf-8"))
    keys = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
    differing = [f"{k} {saved.get(k)!r} != {getattr(config, k, None)!r}" for k in keys
                 if k in saved and saved.get(k) != getattr(config, k, saved.get(k))]
    if differing:
        raise ValueError(f"--base {base} is another architecture than the trained policy ({'; '.join(differing)}): "
                         "give the 16-bit original of the run's base")
