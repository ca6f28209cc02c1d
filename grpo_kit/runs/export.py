"""Export a run's trained policy, merged (safetensors) or as GGUF, check it against the trained policy, card it,
upload it: ``python -m grpo_kit export`` / ``verify-export`` and notebook 04's last section.

Exporting is where training gets lost without anyone noticing: a merged LoRA that answers like the base
model (unsloth #1763, #2009, #2142, #5410; ``modules_to_save`` dropped until unsloth #3454), a GGUF
conversion that fails or changes the tokenizer (unsloth #1094, #2098, #3297, #3504). So no export is
called done before the runtime that will serve it has answered the same held-out questions, greedily, as the
trained policy in the run folder (:func:`grpo_kit.runs.verification.verify_export`, whose module gives the rules).

A refused export stays in ``<out>.refused`` with its ``verification.json``; the error shows the first
question where the two differ, side by side. A passed one gets ``verification.json`` (with the SHA-256 of
every file, so an upload can tell it is the checked artefact) and a model card (``README.md``).

Here, the commands' flow: where an export or a check's record may be written, the export built in its folder and
checked before it takes its place, and the upload of a checked one. The rest has a module each:
:mod:`grpo_kit.runs.export_formats` (merged and GGUF), :mod:`grpo_kit.runs.export_reference` (the trained policy
checked against), :mod:`grpo_kit.runs.unsloth_base` (an Unsloth run's 16-bit base),
:mod:`grpo_kit.runs.verification` (the check) and :mod:`grpo_kit.runs.model_card`.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

from grpo_kit.policy import loading
from grpo_kit.runs.export_formats import FORMATS, check_formats, tokenizer_bytes
from grpo_kit.runs.export_reference import load_reference, open_trained_run
from grpo_kit.runs.folder import RunFolder, enclosing_run
from grpo_kit.runs.locks import hold_lock
from grpo_kit.runs.model_card import model_card
from grpo_kit.runs.unsloth_base import merge_base
from grpo_kit.runs.verification import Verification, check_questions, file_hashes, verify_export
from grpo_kit.system.files import follow_umask, json_or_none, write_json, write_text
from grpo_kit.system.hub import upload_token

__all__ = ["ExportRefused", "check_out", "check_record", "export", "push_to_hub", "verification_record"]

log = logging.getLogger(__name__)


class ExportRefused(ValueError):
    """An export that did not pass its verification; ``verification`` holds the numbers."""

    def __init__(self, message: str, verification: Verification) -> None:
        super().__init__(message)
        self.verification = verification


def export(run_dir: str | Path, format: str = "merged", quant: str | None = None, out: str | Path | None = None,
           questions: int = 32, threshold: float | None = None, base: str | Path | None = None,
           trust_remote_code: bool = False) -> tuple[Path, Verification]:
    """Export a run's trained policy and verify it (:func:`grpo_kit.runs.verification.verify_export`) before calling
    it done. (Uploading it: :func:`push_to_hub`, or :func:`grpo_kit.runs.pipeline.export_steps`, which checks the
    upload before exporting.)

    Args:
        run_dir: the run folder (``model/``: a LoRA adapter or a full model; ``train_settings.json``).
        format: ``"merged"`` (base with the adapter folded in, the base's dtype, safetensors, tokenizer,
            generation config) or ``"gguf"`` (llama.cpp's converter on the merged model, then its quantizer).
        quant: GGUF type, one of :data:`grpo_kit.policy.llama_cpp.CONVERTER_TYPES` or ``QUANT_TYPES``
            (default ``q8_0``, Unsloth's notebooks' first choice); merged exports take none.
        out: the export folder (default ``<run_dir>/export/merged`` or ``<run_dir>/export/gguf-<quant>``).
        questions: held-out questions to verify on.
        threshold: replaces the type's threshold (see :func:`grpo_kit.runs.verification.verify_export`).
        base: a local folder holding the 16-bit base an Unsloth LoRA run merges into
            (:func:`grpo_kit.runs.unsloth_base.merge_base`); without it Unsloth downloads that base from the Hub,
            which is checked before any model loads.
        trust_remote_code: the run's task file may import and run Python of its own
            (:func:`grpo_kit.tasks.task_file.check_task_code`).

    Returns:
        ``(the export folder, its Verification)``; the folder holds the model, ``README.md`` and
        ``verification.json``.

    Raises:
        ValueError: a bad format, quant, question count or ``base``; the 16-bit base needed from the Hub with
            ``HF_HUB_OFFLINE`` set (all before any model loads).
        ConnectionError: the Hub does not answer for that base (before any model loads).
        ExportRefused: the export failed its check (kept in ``<out>.refused``).
        FileNotFoundError: no run folder or trained model; llama.cpp not built (GGUF).
        grpo_kit.runs.folder.RunFolderBusy: another process is writing the run folder (training it).
    """
    quant, fmt = check_formats([format], quant)[format], FORMATS[format]
    check_questions(questions, threshold)
    run, settings = open_trained_run(run_dir)
    merge_from = merge_base(run.path, base)
    out = check_out(out if out is not None else run.path / "export" / "-".join(filter(None, (format, quant))), format)
    # One writer per export folder, and no training rewrites model/ while it is exported.
    with _export_lock(out), run.lock("export", reading=True):
        check_out(out, format)  # again, now that no other export can be writing it
        run.check_model()
        with loading.saved_whole(out, "verification.json") as folder:  # takes the place of out only when it passed
            reference = load_reference(run, settings, questions, trust_remote_code)
            _check_disk(folder, fmt.needed(reference.parameters, quant, reference.dtype == "float32",
                                           tokenizer_bytes(run.model)), format)
            fmt.build(reference, folder, f"{run.path.name}-{quant}", quant, merge_from)
            verification = verify_export(folder, run.path, questions, reference=reference, threshold=threshold,
                                         trust_remote_code=trust_remote_code)
            target = out if verification.passed else out.with_name(out.name + ".refused")
            verification.export = target.name
            follow_umask(folder)  # safetensors writes its weights 0600
            if verification.passed:
                write_text(folder / "README.md", model_card(run.path, verification))
            write_json(folder / "verification.json", asdict(verification))
            if not verification.passed:  # kept for inspection, in place of an earlier refused export
                with loading.saved_whole(target, "verification.json") as kept:
                    for path in folder.iterdir():
                        path.rename(kept / path.name)
                raise ExportRefused(f"refused: {verification.summary()}\n{verification.side_by_side()}\n(the export "
                                    f"is kept in {target} for inspection)", verification)
    return out, verification


def _check_disk(where: Path, needed: int, format: str) -> None:
    """Refuse an export the disk under ``where`` cannot hold (``needed`` bytes:
    :meth:`grpo_kit.runs.export_formats.ExportFormat.needed`), before writing anything.

    Raises:
        ValueError: less free space than needed (the message gives both, in GB, and what to do).
    """
    from tqdm import tqdm  # format_sizeof: bytes in the unit that shows them (a tiny policy's export is megabytes)

    folder = next(p for p in (where, *where.parents) if p.exists())
    free = shutil.disk_usage(folder).free
    if free < needed * 1.05:
        raise ValueError(f"this {format} export needs about {tqdm.format_sizeof(needed, 'B')} of free space under "
                         f"{folder}, which has {tqdm.format_sizeof(free, 'B')}: free some space, or give --out a "
                         "folder on a larger disk")


def _in_run_files(path: Path) -> str | None:
    """The run folder's own files that ``path`` is or lies in (``"the run folder R"``, ``"the run folder R's own
    model"``: its ``model/``, whose every file ``finished.json`` fingerprints, ``checkpoints/``, ...), or ``None``: in
    no run folder, in its ``export/``, or a new folder of its own (:func:`grpo_kit.runs.folder.enclosing_run`)."""
    found = enclosing_run(path)
    if found is None or found[1] == "export" or not (found[0] / found[1]).exists():
        return None
    return f"the run folder {found[0]}" + (f"'s own {found[1]}" if found[1] else "")


def check_out(out: str | Path, kind: str) -> Path:
    """Refuse an export folder that would overwrite something that is not an export, before any work.

    ``out`` may be new, an empty folder, or a previous export of the same ``kind`` (which is replaced whole); so may
    ``<out>.refused``, where a refused export goes. It may not be, or lie inside, any run folder's own files
    (:func:`_in_run_files`); one that holds a run folder holds files that are not an export.

    Args:
        out: the export folder asked for.
        kind: ``"merged"`` or ``"gguf"``.

    Returns:
        ``out`` as a path.

    Raises:
        ValueError: any other ``out``; the message names the path and what to choose instead.
    """
    out = Path(out)
    fix = "choose a new or empty folder for --out (or a previous export of this format, which is replaced)"
    if (where := _in_run_files(out)) is not None:
        raise ValueError(f"--out {out} would write into {where}: {fix}")
    for path, passed in ((out, True), (out.with_name(out.name + ".refused"), False)):
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            what = "a link" if path.is_symlink() else "a file"  # replacing a link's target would reach elsewhere
            raise ValueError(f"--out: {path} is {what}, and an export is a folder of its own: {fix}")
        record = json_or_none(path / "verification.json")  # an export of this kind the kit wrote, passed or not
        if path.is_dir() and any(path.iterdir()) and not (isinstance(record, dict) and record.get("kind") == kind
                                                          and bool(record.get("passed")) == passed):
            held = ", ".join(sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir())[:5])
            raise ValueError(f"--out: {path} holds files that are not a {kind} export ({held}), which exporting "
                             f"would delete: {fix}")
    return out


def _export_lock(out: Path) -> Any:
    """The export folder's write lock (``.<name>.lock`` beside it): two exports into one folder cannot both run."""
    return hold_lock(out.with_name(f".{out.name}.lock"), out.with_name(f".{out.name}.lock-holder.json"), out,
                     "export")


def push_to_hub(export_dir: str | Path, repo_id: str, private: bool = True, token: str | None = None) -> str:
    """Upload a verified export folder to the Hugging Face Hub: create the repository (private unless asked),
    then upload the folder. Returns the repository's URL.

    Raises:
        ValueError: a malformed ``repo_id``; the folder has no passed ``verification.json``, or a file changed
            since it was verified (its SHA-256 differs), or the run it was verified against was trained further.
        PermissionError: no token (``HF_TOKEN`` or ``hf auth login``), before anything is uploaded.
        ConnectionError: ``HF_HUB_OFFLINE`` is set, or the Hub cannot be reached (or refused the token), before
            anything is uploaded.
    """
    token = upload_token(repo_id, token)
    folder = Path(export_dir)
    verification = json_or_none(folder / "verification.json")
    if not isinstance(verification, dict):
        raise ValueError(f"{folder} was never verified (no readable verification.json): export it with `python -m "
                         "grpo_kit export`, or check it with `python -m grpo_kit verify-export` first")
    if not verification.get("passed"):
        raise ValueError(f"{folder} failed its verification ({verification.get('rule')}): not uploading it")
    if file_hashes(folder) != verification.get("files"):
        raise ValueError(f"{folder} changed since it was verified (a file's SHA-256 differs): verify it again")
    source = folder / verification["run"] if verification.get("run") else None  # relative to the export
    if source and verification.get("model_digest") and (source / "finished.json").is_file():
        # a model/ edited since raises, naming the file
        if RunFolder(source, write=False).check_model() != verification["model_digest"]:
            raise ValueError(f"{source}/model was trained further or replaced since {folder} was verified against "
                             "it: export it again")
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    try:
        api.whoami()
    except Exception as e:  # DNS, no network, refused token: huggingface_hub raises several types
        raise ConnectionError(f"cannot reach the Hugging Face Hub with this token ({type(e).__name__}: {e}); "
                              "nothing was uploaded") from None
    url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
    api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="model",
                      commit_message="grpo_kit export (verified)")
    log.info(f"uploaded {folder} to {url}")
    return str(url)


def check_record(export: str | Path) -> Path:
    """Where ``verify-export --record`` would write ``verification.json``, refused before any work when that
    overwrites what is not the kit's or lies in a run folder's own files (as :func:`check_out` for ``export --out``).

    Args:
        export: the checked export: a folder, or a ``.gguf`` file (its folder receives the record).

    Returns:
        The ``verification.json`` path.

    Raises:
        ValueError: the folder is, or lies inside, a run folder's own files (:func:`_in_run_files`), or it holds a
            ``verification.json`` the kit did not write. The message says what to do instead.
    """
    folder = Path(export) if Path(export).is_dir() else Path(export).parent
    record = folder / "verification.json"
    if (where := _in_run_files(folder)) is not None:
        raise ValueError(f"--record would write {record} into {where}, which holds only what training wrote "
                         f"(eval and export would then refuse the run): check {export} without --record, or export "
                         "the run with python -m grpo_kit export, which verifies and records")
    if record.exists() and not (isinstance(found := json_or_none(record), dict) and "kind" in found):
        raise ValueError(f"--record would overwrite {record}, which the kit did not write: move it aside, or "
                         "check without --record")
    return record


def verification_record(export: str | Path, verification: Verification) -> Path:
    """Write ``verification.json`` into an export folder checked by :func:`grpo_kit.runs.verification.verify_export`
    (the CLI's ``verify-export`` does, so a verified export made elsewhere can be uploaded); returns its path.

    Raises:
        ValueError: the place is refused (:func:`check_record`).
    """
    return write_json(check_record(export), asdict(verification))
