"""Checkpoints of a GRPO run: which ones are complete, and whether a run folder may be resumed.

The trainer (transformers' ``Trainer``) writes ``checkpoint-<step>/`` every ``save_steps``: the
model or adapter, then the optimizer and scheduler, the RNG states, and last
``trainer_state.json``. A run killed while one is being written leaves a folder without a
readable ``trainer_state.json`` (or without the files before it): :func:`is_complete` tells, and
:func:`latest_complete` falls back to the newest complete one; a resume sets the torn one aside
(:func:`set_aside_torn`). Older checkpoints are deleted only after a newer one is complete
(``save_total_limit``), so one always survives. A save that fails for a full disk says so (:func:`saving`).

A resumed run continues the learning-rate schedule of its *current* length (:func:`continue_schedule`):
extending a finished 250-step run to 350 steps trains step 251 at the 350-step schedule's rate for
that step, where the restored optimizer would otherwise hold the old schedule's last rate (0 for a
cosine that ended) for one step.

A run folder records what it trains (:func:`run_identity`: preset, task, model, rewards);
:func:`check_same_run` refuses to resume it with anything else, saying what differs.
"""

from __future__ import annotations

import ast
import contextlib
import json
import logging
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from grpo_kit.system.files import DiskFull, follow_umask, json_or_none, out_of_space, sha256_file, write_json
from grpo_kit.tasks import RewardSet
from grpo_kit.training.presets import RESUMABLE_FIELDS, Recipe

__all__ = ["FINGERPRINT", "TORN", "WEIGHT_FILES", "TiedKeysLoaded", "check_fingerprint", "check_same_run",
           "checkpoint_callback", "checkpoint_step", "checkpoints", "continue_schedule", "is_complete",
           "latest_complete", "readable", "resume_point", "run_identity", "saving", "set_aside_torn",
           "weights_fingerprint"]

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_MISSING_KEYS = "There were missing keys in the checkpoint model loaded: "


class TiedKeysLoaded(logging.Filter):
    """A filter for transformers' ``Trainer`` logger (``transformers.trainer``) that drops its "There were missing keys
    in the checkpoint model loaded" warning on resume when every key it names is a weight tied to another the
    checkpoint holds: a model whose ``lm_head.weight`` is its embedding's tensor (the tiny policy's, tied like
    Llama 3.2's) saves it once, so every resume warned of a missing ``lm_head.weight`` although the weights loaded
    whole (transformers issues 27972 and 29128). Any other missing key is still said.

    Args:
        model: the model the checkpoint is loaded into (the trainer's, a peft wrapper included).
    """

    def __init__(self, model: Any) -> None:
        super().__init__()
        names: dict[int, list[str]] = {}
        for name, parameter in model.named_parameters(remove_duplicate=False):
            names.setdefault(id(parameter), []).append(name)
        self.tied = {name for shared in names.values() if len(shared) > 1 for name in shared}

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith(_MISSING_KEYS):
            return True
        try:
            keys = ast.literal_eval(message[len(_MISSING_KEYS):].rstrip("."))
        except (ValueError, SyntaxError):
            return True  # a message of another form: said as it is
        return not (isinstance(keys, list) and keys and set(keys) <= self.tied)

    def __enter__(self) -> TiedKeysLoaded:  # the filter on transformers' Trainer logger while a checkpoint loads
        logging.getLogger("transformers.trainer").addFilter(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("transformers.trainer").removeFilter(self)

#: What a saved model or adapter holds its weights in (one file, or the index of a sharded save), as transformers and
#: peft write them; DeepSpeed and FSDP checkpoints keep theirs in folders of their own (:func:`is_complete`).
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "adapter_model.safetensors", "pytorch_model.bin",
                "pytorch_model.bin.index.json", "adapter_model.bin")


def checkpoint_step(checkpoint: str | Path) -> int | None:
    """The step a ``checkpoint-<step>`` folder was saved at; ``None`` for any other name.

    >>> checkpoint_step("runs/a/checkpoints/checkpoint-250"), checkpoint_step("model")
    (250, None)
    """
    match = _CHECKPOINT.match(Path(checkpoint).name)
    return None if match is None else int(match.group(1))


def checkpoints(folder: str | Path) -> list[Path]:
    """The ``checkpoint-<step>`` folders in ``folder``, oldest step first (complete or not)."""
    return sorted((p for p in Path(folder).glob("checkpoint-*") if p.is_dir() and checkpoint_step(p) is not None),
                  key=checkpoint_step)


def _dcp_folder(folder: Path) -> bool:
    """Whether ``folder`` holds a torch.distributed.checkpoint save: its ``.metadata`` and at least one ``.distcp``."""
    return (folder / ".metadata").is_file() and any(folder.glob("*.distcp"))


def _shards(index: Path) -> set[str]:
    """The shard files a sharded save's ``*.index.json`` names (its ``weight_map``'s values).

    Raises:
        OSError, ValueError, KeyError, TypeError, AttributeError: the index is missing or not such a file.
    """
    return set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())


def readable(path: str | Path) -> bool:
    """Whether a weights file is whole, judged from its size and header without loading it:
    a ``.safetensors`` file opens with ``safetensors.safe_open`` (which parses the header and refuses a file that its
    tensors do not cover exactly); a sharded model's index names shards that are whole; a ``torch.save`` file
    (``.bin``, ``.pt``: a zip archive) ends with its zip directory.
    A file cut short by a kill or a full disk fails; one whose bytes were altered in place may not.

    >>> import tempfile, pathlib
    >>> cut = pathlib.Path(tempfile.mkdtemp()) / "model.safetensors"
    >>> _ = cut.write_bytes(b"\\x10" + b"\\x00" * 7 + b'{"a": 1}')
    >>> readable(cut)
    False
    """
    import zipfile

    from safetensors import SafetensorError, safe_open

    path = Path(path)
    try:
        if path.name.endswith(".safetensors"):
            with safe_open(path, "np"):
                return True
        if path.name.endswith(".index.json"):
            shards = _shards(path)
            return bool(shards) and all(readable(path.parent / shard) for shard in shards)
        if path.suffix in (".bin", ".pt", ".pth"):
            return zipfile.is_zipfile(path)
        return path.stat().st_size > 0
    except (OSError, ValueError, TypeError, KeyError, AttributeError, SafetensorError):
        return False


def is_complete(checkpoint: str | Path) -> bool:
    """Whether a checkpoint folder holds everything a resume needs.

    Complete means: ``trainer_state.json`` parses and names the folder's step, and the weights
    (full model or adapter), the optimizer and the scheduler are there, and the weights are whole (:func:`readable`:
    size and header checked, so weights cut short are caught before a resume depends on them). Where each launch
    keeps them:

    - one process, DDP: ``model.safetensors`` / ``adapter_model.safetensors`` (or ``pytorch_model.bin``),
      ``optimizer.pt``;
    - DeepSpeed: weights and optimizer both in ``global_step<N>/``;
    - FSDP with ``FULL_STATE_DICT``: ``pytorch_model_fsdp.bin`` and ``optimizer.bin``; ``LOCAL_STATE_DICT``: one
      ``pytorch_model_fsdp_0_rank<r>.bin`` and ``optimizer_0_rank<r>.bin`` per process; ``SHARDED_STATE_DICT``
      (configs/accelerate/fsdp2.yaml): ``pytorch_model_fsdp_0/`` and ``optimizer_0/``, each a
      torch.distributed.checkpoint folder (``.metadata`` plus ``__<rank>_0.distcp`` files), as accelerate 1.15's
      ``save_fsdp_model`` / ``save_fsdp_optimizer`` write them (accelerate/utils/fsdp_utils.py).
    """
    checkpoint, step = Path(checkpoint), checkpoint_step(checkpoint)
    state = json_or_none(checkpoint / "trainer_state.json")
    if step is None or not isinstance(state, dict) or state.get("global_step") != step:
        return False
    deepspeed = any(checkpoint.glob("global_step*"))
    if not all(readable(checkpoint / name) for name in WEIGHT_FILES if (checkpoint / name).is_file()):
        return False
    has_optimizer = (deepspeed or (checkpoint / "optimizer.pt").is_file()
                     or any(p.is_file() for p in checkpoint.glob("optimizer*.bin"))
                     or any(_dcp_folder(p) for p in checkpoint.glob("optimizer_*") if p.is_dir()))
    has_weights = (deepspeed or any((checkpoint / name).is_file() for name in WEIGHT_FILES)
                   or any(p.is_file() for p in checkpoint.glob("pytorch_model_fsdp*.bin"))
                   or any(_dcp_folder(p) for p in checkpoint.glob("pytorch_model_fsdp_*") if p.is_dir()))
    return has_weights and has_optimizer and (checkpoint / "scheduler.pt").is_file()


#: Written into each checkpoint once transformers saved it: the SHA-256 of its weight files
#: (:func:`checkpoint_callback`).
FINGERPRINT = "weights_sha256.json"


def weights_fingerprint(checkpoint: str | Path) -> dict[str, str]:
    """The SHA-256 of a checkpoint's weight files (model or adapter, and the shards an index names), by file name;
    empty for a DeepSpeed or FSDP checkpoint, whose weights live in folders of their own."""
    checkpoint = Path(checkpoint)
    names = {name for name in WEIGHT_FILES if (checkpoint / name).is_file()}
    for index in [name for name in names if name.endswith(".index.json")]:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
            names |= _shards(checkpoint / index)
    return {name: sha256_file(checkpoint / name) for name in sorted(names) if (checkpoint / name).is_file()}


def check_fingerprint(checkpoint: str | Path) -> None:
    """Refuse a checkpoint whose weights are not the ones training saved (its :data:`FINGERPRINT`); one saved
    without a fingerprint (by an older kit, or killed before it was written) is not checked.

    Raises:
        ValueError: a weight file was replaced, edited or removed; the message names it.
    """
    checkpoint = Path(checkpoint)
    recorded = json_or_none(checkpoint / FINGERPRINT)
    if not isinstance(recorded, dict):
        return
    now = weights_fingerprint(checkpoint)
    for name, digest in sorted(recorded.items()):
        if now.get(name) != digest:
            raise ValueError(f"{checkpoint / name} is not the file training saved (its SHA-256 differs from the one "
                             f"{FINGERPRINT} records, or it is gone): restore it, or delete {checkpoint} to resume "
                             "from an earlier checkpoint")


def latest_complete(folder: str | Path) -> Path | None:
    """The newest complete checkpoint in ``folder`` (see :func:`is_complete`), or ``None``."""
    return next((checkpoint for checkpoint in reversed(checkpoints(folder)) if is_complete(checkpoint)), None)


def resume_point(folder: str | Path, max_steps: int, finished_step: int | None = None) -> Path | None:
    """The checkpoint a ``--resume`` starts from (``None``: step 0, there being no checkpoint), refusing a resume
    that would go backwards or silently start over.

    Args:
        folder: the run's ``checkpoints/`` folder.
        max_steps: the steps the resumed run is asked to reach.
        finished_step: the step the run finished at, when it did (the run folder's ``finished.json``).

    Checkpoints newer than the one returned that are not complete (torn by a kill or a full disk) are set aside when
    training starts (:func:`set_aside_torn`); with none complete, the run starts again from step 0.

    Raises:
        ValueError: the run has trained past ``max_steps`` (a run cannot be shortened); a finished run asked for more
            steps has no complete checkpoint of its last step (pruned or damaged: it would be trained again from an
            earlier step); the checkpoint's weights are not the ones training saved (:func:`check_fingerprint`); each
            message says what to do.
    """
    folder = Path(folder)
    found = latest_complete(folder)
    reached = checkpoint_step(found) if found is not None else 0
    done = max(finished_step or 0, reached)
    if done > max_steps:
        raise ValueError(f"{folder.parent} has trained {done} steps, more than --max_steps {max_steps}: a run cannot "
                         f"be shortened. Resume with --max_steps {done} or more, or train a new run folder")
    if found is not None:
        check_fingerprint(found)
    if finished_step is not None and max_steps > finished_step and reached < finished_step:
        raise ValueError(f"{folder.parent} finished at step {finished_step}, but no complete checkpoint of that step "
                         f"is left in {folder} ({'newest complete: ' + found.name if found else 'none complete'}), so "
                         f"a resume would train again from step {reached} and replace the finished model. The run "
                         "stays as it is: train a new run folder to train longer")
    return found


#: Where :func:`set_aside_torn` moves torn checkpoints, inside the checkpoints folder: a name neither transformers
#: (``checkpoint-*``) nor :func:`checkpoints` reads as a checkpoint.
TORN = "torn"


def set_aside_torn(folder: str | Path) -> list[Path]:
    """Move the checkpoints newer than the newest complete one (every one, when none is complete) that are not
    complete (:func:`is_complete`: torn by a kill or a full disk while being saved) into ``folder/torn/``, so that a
    resume continues from the newest whole checkpoint and transformers never writes a new save over a torn one's
    files; nothing is deleted (the user may look at, or remove, ``torn/``).

    Args:
        folder: the run's ``checkpoints/`` folder.

    Returns:
        Where each was moved (``torn/checkpoint-<step>``, with ``-2``, ``-3`` ... when an earlier one took the name),
        oldest step first.
    """
    folder = Path(folder)
    newest = latest_complete(folder)
    after = checkpoint_step(newest) if newest is not None else -1
    moved = []
    for checkpoint in checkpoints(folder):
        if checkpoint_step(checkpoint) > after and not is_complete(checkpoint):
            target, n = folder / TORN / checkpoint.name, 1
            while target.exists():
                n += 1
                target = folder / TORN / f"{checkpoint.name}-{n}"
            target.parent.mkdir(exist_ok=True)
            checkpoint.rename(target)
            moved.append(target)
    return moved


@contextlib.contextmanager
def saving(folder: str | Path, resume: Callable[[], str]) -> Iterator[None]:
    """Training's saves into ``folder`` (checkpoints, the trained model), a full disk said as one
    (:class:`grpo_kit.system.files.DiskFull`): torch's zip writer says only "unexpected pos 704 vs 598" and
    safetensors "Error while serializing", neither that the disk is full.

    Args:
        folder: the run's ``checkpoints/`` folder.
        resume: the command that resumes the run (called only on a full disk, once the records name its code).

    Raises:
        grpo_kit.system.files.DiskFull: a save failed for want of space; the message names the checkpoint being
            written, the free space, the library's own words, and the resume that continues from the newest whole
            checkpoint once space is freed (the torn one is set aside then: :func:`set_aside_torn`).
    """
    try:
        yield
    except Exception as e:
        if not out_of_space(e, folder):
            raise
        torn = [c for c in checkpoints(folder) if not is_complete(c)]
        doing = f"training saved {torn[-1].name}" if torn else "training saved its model"
        raise DiskFull(folder, doing, e, f"free space there, then run {resume()}: a torn checkpoint is set aside and "
                                         "training continues from the newest whole one") from None


def run_identity(preset: Recipe, task: str, model: str, rewards: RewardSet,
                 data: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a run trains, as JSON-able values: the preset's fields (less those a resumed run may change,
    :data:`grpo_kit.training.presets.RESUMABLE_FIELDS`), the task, the model, the rewards with their weights and
    how its training questions were chosen (``data``: ``train_size`` and ``seed``)."""
    # lora_rank beside TRL's use_peft/lora_r: what export and the cards read of a run folder, whatever its version
    fields = {"name": preset.name, **{k: v for k, v in preset.settings.items() if k not in RESUMABLE_FIELDS},
              "lora_rank": preset.lora_rank}
    return json.loads(json.dumps({"preset": fields, "task": task, "model": model,
                                  "rewards": dict(zip(rewards.names, rewards.weights)), **(data or {})}, default=str))


def check_same_run(recorded: dict[str, Any], current: dict[str, Any], folder: str | Path) -> None:
    """Refuse to resume a run folder with a different preset, task, model or reward set.

    Args:
        recorded: the identity stored in the run folder (:func:`run_identity` when it started).
        current: this invocation's identity.
        folder: the run folder (for the message).

    Raises:
        ValueError: they differ; the message lists each difference (recorded -> now) and leaves the way on to the
            caller (:meth:`grpo_kit.runs.spec.RunSpec.resolve` prints the command that resumes as recorded).
    """
    before, now = recorded.get("preset", {}), current.get("preset", {})
    pairs = [(key, recorded.get(key), current.get(key))
             for key in ("task", "model", "rewards", "train_size", "seed", "validation_size")]
    pairs += [(f"preset.{key}", before.get(key), now.get(key)) for key in sorted(set(before) | set(now))]
    differences = [f"{key}: {was!r} -> {is_now!r}" for key, was, is_now in pairs if was != is_now]
    if differences:
        raise ValueError(f"{folder} holds checkpoints of a different run, so it cannot be resumed with these "
                         "settings (recorded -> now):\n  " + "\n  ".join(differences))


def continue_schedule(optimizer: Any, lr_scheduler: Any) -> list[float]:
    """Set the optimizer's learning rates to the schedule's value at its current step; return them.

    transformers rebuilds the schedule for the run's ``max_steps`` and restores only its step counter
    from the checkpoint, but the restored optimizer still holds the rate the *old* schedule set last,
    which the next step would train with. Schedules that are not ``LambdaLR`` (constant, cosine, linear
    with warmup all are) are left alone.
    """
    scheduler = getattr(lr_scheduler, "scheduler", lr_scheduler)  # accelerate wraps it
    if not hasattr(scheduler, "lr_lambdas"):
        return [group["lr"] for group in optimizer.param_groups]
    rates = [base * fn(scheduler.last_epoch) for base, fn in zip(scheduler.base_lrs, scheduler.lr_lambdas)]
    for group, rate in zip(optimizer.param_groups, rates):
        group["lr"] = rate
    scheduler._last_lr = list(rates)
    return rates


def checkpoint_callback() -> Any:
    """A ``TrainerCallback`` for the checkpoints: when training starts from one it applies :func:`continue_schedule`;
    once transformers saved one it writes its :data:`FINGERPRINT` (main process), so that a resume can tell the
    weights are the ones training wrote (:func:`check_fingerprint`)."""
    from transformers import TrainerCallback

    class CheckpointCallback(TrainerCallback):
        def on_train_begin(self, args, state, control, optimizer=None, lr_scheduler=None, **kwargs):
            if state.global_step > 0 and optimizer is not None and lr_scheduler is not None:
                continue_schedule(optimizer, lr_scheduler)

        def on_save(self, args, state, control, **kwargs):
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if state.is_world_process_zero and folder.is_dir():
                write_json(follow_umask(folder) / FINGERPRINT, weights_fingerprint(folder))  # weights were 0600

    return CheckpointCallback()
