"""The tiny policy's supervised warm start ("cold start" in DeepSeek-R1) on a task's worked solutions, with
TRL's SFTTrainer, and the cache of warm-started policies.

Each task says how to demonstrate one of its examples (``demonstration`` in :attr:`grpo_kit.tasks.Task.extras`):
GSM8K's solutions come with the data, Countdown's from the solver. R1 fine-tuned on a little
chain-of-thought data before RL; R1-Zero did not. Here the warm start also sets up what GRPO should
teach: only ``xml_share`` of the targets use the answer format
(:func:`grpo_kit.tasks.answer_format.render`), the rest a plain ``steps\\n#### answer`` style, so the
policy knows the format exists but rarely picks it under greedy decoding.

Greedy decoding picks the single most likely first token. The formatted targets all open with
``<reasoning>``; the plain ones open with one fixed lead-in (``plain_lead``, by default the zero-shot
chain-of-thought trigger of Kojima et al. 2022), so the plain style stays the greedy choice while a
sizeable ``xml_share`` still shows up in sampled GRPO groups.

The warm start lives in the policy wing, not beside the GRPO trainer, because it is how the tiny
policy comes to exist: loading that policy means building it once and caching it
(:func:`warm_started_tiny_policy`), and loading is the policy wing's job.

The demos' policies ship with the kit (:data:`SHIPPED_DIR`, a few MB each), so every machine starts the demo and the
compare demo from the same weights without spending minutes on the warm start; ``make tiny-weights`` (:func:`ship`)
rebuilds them, and a test checks that a rebuild evaluates the same.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_kit.policy.devices import cuda_available
from grpo_kit.policy.loading import load_policy, saved_whole
from grpo_kit.policy.tiny import DEFAULT_CACHE_DIR, TinyPolicySpec, build_tiny_policy
from grpo_kit.system.logs import counted
from grpo_kit.system.workers import Worker
from grpo_kit.tasks import DEFAULT_TASK, Task, get_task
from grpo_kit.tasks.answer_format import render

__all__ = ["SHIPPED_DIR", "WARM_EPOCHS", "WARM_STEPS_RANGE", "TinyPolicy", "WarmStart", "completion_budget", "ship",
           "warm_start", "warm_start_dataset", "warm_started_tiny_policy", "warm_steps_for"]

#: A cache folder is trusted only when this file is in it: it is written last, after the weights and tokenizer.
_COMPLETE = "warm-start.json"

log = logging.getLogger(__name__)

#: Warm-started tiny policies shipped with the kit, each in a folder named as its cache folder
#: (:attr:`TinyPolicy.folder`): the demo's and the compare demo's (``python -m grpo_kit demo`` and ``compare-demo``
#: with their defaults). A missing cache whose shipped copy exists is restored from it instead of trained.
SHIPPED_DIR = Path(__file__).resolve().parent / "shipped"
#: torch threads of a build that is shipped or compared with a shipped copy: the order of floating-point sums, and so
#: the weights, depend on it.
SHIP_THREADS = 1


@dataclass(frozen=True)
class WarmStart:
    """Warm-start settings. Defaults fit the tiny CPU policy (AdamW 3e-3, cosine: about 3 minutes on two
    cores); ``steps`` are optimiser steps of ``batch_size`` examples.

    Raises:
        ValueError: ``xml_share`` outside [0, 1]; an unknown ``reasoning`` style; ``steps`` or ``batch_size`` < 1.
    """

    xml_share: float = 0.3
    reasoning: str = "equations"
    plain_lead: str = "Let's think step by step."
    steps: int = 300
    batch_size: int = 16
    learning_rate: float = 3e-3
    max_length: int = 320
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.xml_share <= 1:
            raise ValueError(f"xml_share must be in [0, 1], got {self.xml_share}")
        if self.reasoning not in ("equations", "full"):
            raise ValueError(f"reasoning must be 'equations' or 'full', got {self.reasoning!r}")
        for name in ("steps", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"warm start {name} must be a whole number >= 1, got {value!r}")


def _plain(reasoning: str, answer: str, lead: str = "") -> str:
    """The warm start's other style, ``steps\\n#### answer`` (GSM8K's own), after an optional lead-in line."""
    return f"{lead}\n{reasoning}\n#### {answer}" if lead else f"{reasoning}\n#### {answer}"


#: Passes over a task file's train rows that :func:`warm_steps_for` sizes a warm start to, and its bounds in steps.
WARM_EPOCHS, WARM_STEPS_RANGE = 20, (60, WarmStart.steps)


def warm_steps_for(task: Task, batch_size: int = WarmStart.batch_size) -> int:
    """The warm start's steps for ``task``: the kit's own tasks keep :attr:`WarmStart.steps` (300, what the shipped
    policy was built with); a task file of your own gets :data:`WARM_EPOCHS` passes over its train rows, between 60
    and 300 steps (a few hundred rows learn the answer format in a minute or two on 2 CPU cores, where 300 steps
    over 60 rows would repeat each 80 times).

    >>> from grpo_kit.tasks import get_task
    >>> warm_steps_for(get_task("gsm8k"))
    300
    """
    if task.file is None or not task.trains:
        return WarmStart.steps
    low, high = WARM_STEPS_RANGE
    return max(low, min(high, -(-WARM_EPOCHS * len(task.load("train")) // batch_size)))


def completion_budget(task: Task, settings: WarmStart = WarmStart(), most: int = 256) -> int:
    """New tokens enough for the tiny policy's answers on ``task``: the longest warm-start target of its train rows in
    either style (:func:`warm_start_dataset`), in bytes (a byte-level tokenizer never needs more tokens than bytes),
    plus 8, rounded up to a multiple of 8, between 16 and ``most``. What ``eval --before`` uses for a task file on the
    tiny policy, where the kit's default of 256 would spend minutes decoding past answers a few words long.

    Raises:
        ValueError: the task has no demonstrations (:func:`warm_start_dataset`).
    """
    demonstrate = _demonstration(task)
    demos = filter(None, (demonstrate(row, settings.reasoning) for row in task.load("train")))
    longest = max((len(text.encode()) for d in demos for text in (render(*d), _plain(*d, settings.plain_lead))),
                  default=0)
    return max(16, min(most, -(-(longest + 8) // 8) * 8))


def _demonstration(task: Task) -> Any:
    """The task's ``demonstration`` (:attr:`grpo_kit.tasks.Task.extras`); raises ``ValueError`` without one."""
    if (demonstrate := task.extras.get("demonstration")) is None:
        raise ValueError(f"task {task.name!r} has no worked solutions to warm-start from")
    return demonstrate


def warm_start_dataset(dataset: Any, settings: WarmStart = WarmStart(), task: str | Task = DEFAULT_TASK) -> Any:
    """Build the prompt/completion dataset: each row's demonstration in the answer format with probability
    ``xml_share`` (or the task's own ``warm_xml_share``, :attr:`grpo_kit.tasks.Task.extras`), else in the plain style.

    Args:
        dataset: train rows of ``task`` (e.g. GSM8K: ``prompt``, ``solution``, ``answer``; Countdown:
            ``prompt``, ``nums``, ``target``, solved here).
        settings: the share of formatted targets, the reasoning style and the seed.
        task: a :class:`grpo_kit.tasks.Task` (or its name) with a demonstration.

    Returns:
        ``datasets.Dataset`` with conversational ``prompt`` and ``completion`` columns and a
        boolean ``xml`` column.

    Raises:
        ValueError: the task has no demonstrations.
    """
    from datasets import Dataset

    task = get_task(task)
    demonstrate = _demonstration(task)
    rng = random.Random(settings.seed)
    share = task.extras.get("warm_xml_share", settings.xml_share)
    rows = []
    for row in dataset:
        xml = rng.random() < share
        demo = demonstrate(row, settings.reasoning)
        if demo is None:  # an unsolvable puzzle teaches nothing
            continue
        text = render(*demo) if xml else _plain(*demo, settings.plain_lead)
        rows.append({"prompt": row["prompt"], "completion": [{"role": "assistant", "content": text}], "xml": xml})
    return Dataset.from_list(rows)


def _mean_tokens(tokenizer: Any, rows: Any, most: int = 64) -> float:
    """Mean tokens of the first ``most`` warm-start examples (prompt and completion, in the chat template)."""
    picked = [rows[i] for i in range(min(most, len(rows)))]
    texts = [tokenizer.apply_chat_template(r["prompt"] + r["completion"], tokenize=False) for r in picked]
    return sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts) / max(1, len(texts))


def warm_start(model: Any, tokenizer: Any, dataset: Any, output_dir: str | Path,
               settings: WarmStart = WarmStart(), progress: bool = True, task: str | Task = DEFAULT_TASK) -> Any:
    """Fine-tune ``model`` on :func:`warm_start_dataset` of ``dataset`` and save it to ``output_dir``.

    The loss is on completion tokens only (TRL's default for prompt/completion data), with
    the chat template's end-of-turn token as the target after each completion, so the
    policy learns to stop.

    Args:
        model: a causal LM (trained in place).
        tokenizer: its tokenizer, with a chat template.
        dataset: train rows of ``task`` (see :func:`warm_start_dataset`).
        output_dir: where the model and tokenizer are saved (``save_pretrained``).
        settings: :class:`WarmStart`.
        progress: announce the warm start with its expected time and show a bar of its steps
            (:func:`grpo_kit.system.progress.step_bar`).
        task: the task the rows belong to.

    Returns:
        The trainer's ``log_history`` (``list[dict]``, loss per logging step).
    """
    from trl import SFTConfig, SFTTrainer

    from grpo_kit.system.progress import announce, expected_seconds, step_bar

    rows = warm_start_dataset(dataset, settings, task)
    expected = None
    if progress:
        tokens = _mean_tokens(tokenizer, rows)
        expected = announce(f"warm start of the tiny policy on {get_task(task).name}: "
                            f"{counted(settings.steps, 'step')} of {counted(settings.batch_size, 'worked answer')} "
                            f"(about {tokens:.0f} tokens each)",
                            expected_seconds("warm start", sum(p.numel() for p in model.parameters()),
                                             steps=settings.steps, batch=settings.batch_size, tokens=tokens),
                            "--warm-steps shortens it; it is cached, once per task and settings")
    config = SFTConfig(output_dir=str(output_dir), max_steps=settings.steps,
                       per_device_train_batch_size=settings.batch_size, learning_rate=settings.learning_rate,
                       lr_scheduler_type="cosine", warmup_steps=min(10, settings.steps // 10), weight_decay=0.0,
                       max_length=settings.max_length, logging_steps=max(1, settings.steps // 10), save_strategy="no",
                       report_to="none", use_cpu=not cuda_available(), bf16=False, gradient_checkpointing=False,
                       seed=settings.seed, disable_tqdm=True)
    trainer = SFTTrainer(model=model, args=config, train_dataset=rows, processing_class=tokenizer)
    bar = step_bar(trainer, "warm start", "loss", enabled=progress, expected=expected)
    try:
        trainer.train()
    finally:
        bar.close()
    model.save_pretrained(str(output_dir))
    tokenizer.save_pretrained(str(output_dir))
    return trainer.state.log_history


@dataclass(frozen=True)
class TinyPolicy:
    """The kit's tiny policy warm-started on a task: everything that shapes it, and where it is cached.

    Attributes:
        task: the task whose train split trains its tokenizer and its warm start.
        warm: the warm start's settings.
        spec: the model's shape.
        seed: seeds the weights' initialisation.
        cache_dir: the parent folder of the cache (:attr:`folder`).
    """

    task: Task
    warm: WarmStart = WarmStart()
    spec: TinyPolicySpec = TinyPolicySpec()
    seed: int = 0
    cache_dir: str = DEFAULT_CACHE_DIR

    @property
    def folder(self) -> Path:
        """The cache folder, named by a hash of everything that shapes the policy."""
        shape = {"warm": dataclasses.asdict(self.warm), "spec": dataclasses.asdict(self.spec), "seed": self.seed,
                 "task": self.task.name, "format": 4,
                 **({"data": sorted(self.task.digest.values())} if self.task.digest is not None else {})}
        key = hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:12]
        return Path(self.cache_dir) / f"tiny-policy-{self.task.name}-{key}"

    @property
    def shipped(self) -> Path | None:
        """The copy of this policy shipped with the kit (:data:`SHIPPED_DIR`), or ``None``."""
        path = SHIPPED_DIR / self.folder.name
        return path if (path / _COMPLETE).is_file() else None

    @property
    def cached(self) -> bool:
        """Whether a complete cache folder exists (one killed while being written is not). A policy shipped with the
        kit counts: its copy is placed in the cache folder (whole or not at all) the first time this is asked."""
        if (self.folder / _COMPLETE).is_file():
            return True
        if self.shipped is None:
            return False
        with saved_whole(self.folder, _COMPLETE) as building:  # another process restoring it too: the same files
            shutil.copytree(self.shipped, building, dirs_exist_ok=True)
        return True

    def request(self) -> dict[str, Any]:
        """Everything that builds it, as JSON (what a worker process receives)."""
        return {"task": self.task.ref, "warm": dataclasses.asdict(self.warm), "spec": dataclasses.asdict(self.spec),
                "seed": self.seed, "cache_dir": str(self.cache_dir)}

    @classmethod
    def from_request(cls, request: dict[str, Any]) -> TinyPolicy:
        """The inverse of :meth:`request`. A request comes from the process that built this policy from a task it
        had loaded, with the user's consent where the task file names Python of its own: the worker reads it
        trusted."""
        return cls(get_task(request["task"], trust_remote_code=True), WarmStart(**request["warm"]),
                   TinyPolicySpec(**request["spec"]), request["seed"], request["cache_dir"])


def warm_started_tiny_policy(tiny: TinyPolicy, train: Any = None, progress: bool = True) -> tuple[Any, Any, bool]:
    """The kit's tiny offline policy, warm-started on a task's train split; built once, then cached.

    The tokenizer is trained on the train questions and solutions plus the system prompt
    (``tokenizer_texts`` in :attr:`grpo_kit.tasks.Task.extras`); the warm start runs :func:`warm_start` (about 3
    minutes on 2 CPU cores with the defaults). The cache is written into a temporary folder and renamed into place
    when complete, so a run killed while building it leaves nothing that a later run would trust.

    Args:
        tiny: what shapes the policy and where it is cached.
        train: the task's train rows; default its bundled train split.
        progress: show the warm start's progress bar.

    Returns:
        ``(model, tokenizer, cached)``, ``cached`` telling whether it came from the cache.
    """
    shipped = not (tiny.folder / _COMPLETE).is_file() and tiny.shipped is not None
    if tiny.cached:
        model, tokenizer = load_policy(tiny.folder, dtype="float32")
        log.info(f"tiny policy for {tiny.task.name}: " + ("the copy shipped with the kit" if shipped else
                                                         "warm-started earlier") + f", loaded from {tiny.folder}")
        return model, tokenizer, True
    return (*_build_cache(tiny, train, progress), False)


def _build_cache(tiny: TinyPolicy, train: Any = None, progress: bool = True) -> tuple[Any, Any]:
    """Train ``tiny`` and write its cache folder whole (a temporary folder renamed into place)."""
    train = tiny.task.load("train") if train is None else train
    model, tokenizer = build_tiny_policy(tiny.task.extras["tokenizer_texts"](train), seed=tiny.seed, spec=tiny.spec)
    # another process building the same cache writes the same files (deterministic); on Ctrl-C nothing is left
    with saved_whole(tiny.folder, _COMPLETE) as building:
        warm_start(model, tokenizer, train, building, tiny.warm, progress=progress, task=tiny.task)
        (building / _COMPLETE).write_text(json.dumps(tiny.request(), indent=1), encoding="utf-8")
    return model, tokenizer


def _build(request: dict[str, Any]) -> str:
    """Worker handler: build the cache described by ``request`` (:meth:`TinyPolicy.request`); return its folder."""
    tiny = TinyPolicy.from_request(request)
    warm_started_tiny_policy(tiny, progress=False)
    return str(tiny.folder)


#: Variables of a multi-process launch (torchrun, accelerate) that a separate single-process Python must not see.
_LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                     "MASTER_PORT", "TORCHELASTIC_RUN_ID")


def build_in_a_process_of_its_own(tiny: TinyPolicy) -> Path:
    """Build the tiny policy's cache (:func:`warm_started_tiny_policy`) in a separate single-process Python.

    Under ``accelerate launch`` the warm start's own trainer would join the launch's process group and
    wait for the other processes, which are waiting for the cache: the main process builds it in a
    worker (:class:`grpo_kit.system.workers.Worker`) outside the launch instead. Returns the cache folder.

    Raises:
        grpo_kit.system.workers.WorkerError: the warm start failed (with what it printed).
    """
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARIABLES and not k.startswith("ACCELERATE_")}
    with Worker(f"{__name__}:_build", env=env, stderr="inherit") as worker:
        return Path(worker.call([tiny.request()]))


def ship(tiny: TinyPolicy, shipped_dir: str | Path = SHIPPED_DIR) -> Path:
    """Rebuild ``tiny`` from scratch (its warm start, with :data:`SHIP_THREADS` torch threads) and put it in
    ``shipped_dir``: what ``make tiny-weights`` runs for the demo's policy. The cache folder ``tiny.cache_dir`` must
    not hold it already (a rebuild, not a copy).

    Returns:
        The shipped folder (``shipped_dir / tiny.folder.name``), replaced whole.

    Raises:
        ValueError: ``tiny``'s cache already holds the policy (pass an empty ``cache_dir``).
    """
    import torch

    if (tiny.folder / _COMPLETE).is_file():
        raise ValueError(f"{tiny.folder} exists: rebuild into an empty cache_dir")
    threads = torch.get_num_threads()
    torch.set_num_threads(SHIP_THREADS)
    try:
        _build_cache(tiny, progress=False)  # trained even where a shipped copy exists
    finally:
        torch.set_num_threads(threads)
    out = Path(shipped_dir) / tiny.folder.name
    with saved_whole(out, _COMPLETE) as staging:
        shutil.copytree(tiny.folder, staging, dirs_exist_ok=True)
        marker = staging / _COMPLETE  # what built it, without the build's scratch folder
        marker.write_text(json.dumps({**tiny.request(), "cache_dir": DEFAULT_CACHE_DIR}, indent=1), encoding="utf-8")
    return out

