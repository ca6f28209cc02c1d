"""Supervised warm start ("cold start" in DeepSeek-R1) on worked solutions, with TRL's SFTTrainer.

GSM8K's solutions come with the data; Countdown's come from the solver
(:func:`grpo_kit.countdown.solve`); each task says how (:attr:`grpo_kit.tasks.Task.demonstration`).

R1 fine-tuned on a little chain-of-thought data before RL; R1-Zero did not (seed 002
discusses both). Here the warm start also sets up what GRPO should teach: only
``xml_share`` of the targets use the XML format, the rest GSM8K's own ``#### N`` style, so
the policy knows the XML format exists but rarely picks it under greedy decoding.

Greedy decoding picks the single most likely first token. The XML targets all open with
``<reasoning>``; the plain targets open with one fixed lead-in (``plain_lead``, by default
the zero-shot chain-of-thought trigger of Kojima et al. 2022), so the plain style stays the
greedy choice while a sizeable ``xml_share`` still shows up in sampled GRPO groups.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_kit.data import solution_reasoning
from grpo_kit.models import TinyPolicySpec, cuda_available
from grpo_kit.tasks import Task, get_task

__all__ = [
    "WarmStart",
    "format_completion",
    "render_completion",
    "tiny_policy_dir",
    "warm_start",
    "warm_start_dataset",
    "warm_started_tiny_policy",
]

@dataclass(frozen=True)
class WarmStart:
    """Warm-start settings. Defaults fit the tiny CPU policy (REFERENCE section 6: AdamW 3e-3,
    cosine); ``steps`` are optimiser steps of ``batch_size`` examples."""

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


def render_completion(solution: str, answer: str, xml: bool, reasoning: str = "equations",
                      plain_lead: str = "") -> str:
    """Render a GSM8K worked solution as a completion, in the XML format or GSM8K's own.

    Args:
        solution: GSM8K's worked solution (ending ``#### N``).
        answer: the gold final answer.
        xml: ``True`` for ``<reasoning>``/``<answer>`` blocks, ``False`` for ``steps\\n#### N``.
        reasoning: ``"full"`` (the solution's text, calculator annotations removed) or
            ``"equations"`` (only the annotations, one per line; the text when it has none).
        plain_lead: a line put before the steps of a plain (non-XML) completion.

    >>> render_completion("Half is 48/2 = <<48/2=24>>24.\\n#### 24", "24", xml=True)
    '<reasoning>\\n48/2=24\\n</reasoning>\\n<answer>\\n24\\n</answer>'
    >>> render_completion("Half is 48/2 = <<48/2=24>>24.\\n#### 24", "24", xml=False, reasoning="full")
    'Half is 48/2 = 24.\\n#### 24'
    >>> render_completion("<<2*3=6>>6 eggs\\n#### 6", "6", xml=False, plain_lead="Step by step:")
    'Step by step:\\n2*3=6\\n#### 6'
    """
    return format_completion(solution_reasoning(solution, reasoning), answer, xml, plain_lead)


def format_completion(steps: str, answer: str, xml: bool, plain_lead: str = "") -> str:
    """A completion from reasoning steps and a final answer: XML blocks, or ``steps\\n#### answer``.

    >>> format_completion("17+79=96\\n96-60=36", "(17+79)-60", xml=True)
    '<reasoning>\\n17+79=96\\n96-60=36\\n</reasoning>\\n<answer>\\n(17+79)-60\\n</answer>'
    """
    if xml:
        return f"<reasoning>\n{steps}\n</reasoning>\n<answer>\n{answer}\n</answer>"
    lead = f"{plain_lead}\n" if plain_lead else ""
    return f"{lead}{steps}\n#### {answer}"


def warm_start_dataset(dataset: Any, settings: WarmStart = WarmStart(), task: str | Task = "gsm8k") -> Any:
    """Build the prompt/completion dataset: each row's solution in XML with probability ``xml_share``.

    Args:
        dataset: train rows of ``task`` (GSM8K: ``prompt``, ``solution``, ``answer``; Countdown:
            ``prompt``, ``nums``, ``target``, solved here).
        settings: the share of XML targets, the reasoning style and the seed.
        task: a :class:`grpo_kit.tasks.Task` (or its name) with a demonstration.

    Returns:
        ``datasets.Dataset`` with conversational ``prompt`` and ``completion`` columns and a
        boolean ``xml`` column.
    """
    from datasets import Dataset

    task = get_task(task)
    demonstrate = task.demonstration
    if demonstrate is None:
        raise ValueError(f"task {task.name!r} has no worked solutions to warm-start from")
    rng = random.Random(settings.seed)
    rows = []
    for row in dataset:
        xml = rng.random() < settings.xml_share
        demo = demonstrate(row, settings.reasoning)
        if demo is None:  # an unsolvable puzzle teaches nothing
            continue
        text = format_completion(*demo, xml, settings.plain_lead)
        rows.append({"prompt": row["prompt"], "completion": [{"role": "assistant", "content": text}], "xml": xml})
    return Dataset.from_list(rows)


def warm_start(model: Any, tokenizer: Any, dataset: Any, output_dir: str | Path,
               settings: WarmStart = WarmStart(), progress: bool = True, task: str | Task = "gsm8k") -> Any:
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
        progress: show TRL's progress bar.
        task: the task the rows belong to.

    Returns:
        The trainer's ``log_history`` (``list[dict]``, loss per logging step).
    """
    from trl import SFTConfig, SFTTrainer

    from grpo_kit.training import quiet_progress

    config = SFTConfig(
        output_dir=str(output_dir),
        max_steps=settings.steps,
        per_device_train_batch_size=settings.batch_size,
        learning_rate=settings.learning_rate,
        lr_scheduler_type="cosine",
        warmup_steps=min(10, settings.steps // 10),
        weight_decay=0.0,
        max_length=settings.max_length,
        logging_steps=max(1, settings.steps // 10),
        save_strategy="no",
        report_to="none",
        use_cpu=not cuda_available(),
        bf16=False,
        gradient_checkpointing=False,
        seed=settings.seed,
        disable_tqdm=not progress,
    )
    trainer = SFTTrainer(model=model, args=config, train_dataset=warm_start_dataset(dataset, settings, task),
                         processing_class=tokenizer)
    quiet_progress(trainer).train()
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(output_dir))
    tokenizer.save_pretrained(str(output_dir))
    return trainer.state.log_history


def tiny_policy_dir(cache_dir: str | Path, settings: WarmStart = WarmStart(), spec: TinyPolicySpec = TinyPolicySpec(),
                    seed: int = 0, task: str | Task = "gsm8k") -> Path:
    """Cache folder of a warm-started tiny policy, keyed by everything that shapes it."""
    task = get_task(task).name
    shape = {"warm": dataclasses.asdict(settings), "spec": dataclasses.asdict(spec), "seed": seed, "format": 3}
    if task != "gsm8k":  # GSM8K policies keep the keys they had before tasks existed
        shape["task"] = task
    key = json.dumps(shape, sort_keys=True)
    prefix = "tiny-policy" if task == "gsm8k" else f"tiny-policy-{task}"
    return Path(cache_dir) / f"{prefix}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def warm_started_tiny_policy(cache_dir: str | Path = ".cache/grpo_kit", settings: WarmStart = WarmStart(),
                             spec: TinyPolicySpec = TinyPolicySpec(), seed: int = 0, train: Any = None,
                             progress: bool = True, task: str | Task = "gsm8k") -> tuple[Any, Any, bool]:
    """The kit's tiny offline policy, warm-started on a task's train split; built once, then cached.

    The tokenizer is trained on the train questions and solutions plus the system prompt
    (:attr:`grpo_kit.tasks.Task.texts`); the warm start runs :func:`warm_start` with
    ``settings`` (about 3 minutes on 2 CPU cores with the defaults).

    Args:
        cache_dir: parent folder of the cache (see :func:`tiny_policy_dir`).
        settings, spec, seed, task: what shapes the policy (all part of the cache key).
        train: the task's train rows; default its bundled train split.
        progress: show the warm start's progress bar.

    Returns:
        ``(model, tokenizer, cached)``, ``cached`` telling whether it came from the cache.
    """
    from grpo_kit.models import build_tiny_policy, load_policy

    task = get_task(task)
    path = tiny_policy_dir(cache_dir, settings, spec, seed, task)
    if (path / "config.json").is_file():
        model, tokenizer = load_policy(path, dtype="float32")
        return model, tokenizer, True
    train = task.load("train") if train is None else train
    model, tokenizer = build_tiny_policy(task.texts(train), seed=seed, spec=spec)
    warm_start(model, tokenizer, train, path, settings, progress=progress, task=task)
    return model, tokenizer, False


#: Variables of a multi-process launch (torchrun, accelerate) that a separate single-process Python must not see.
_LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                     "MASTER_PORT", "TORCHELASTIC_RUN_ID")


def warm_start_in_a_process_of_its_own(cache_dir: str | Path, settings: WarmStart = WarmStart(),
                                       spec: TinyPolicySpec = TinyPolicySpec(), seed: int = 0,
                                       task: str | Task = "gsm8k") -> Path:
    """Build the tiny policy's cache (:func:`warm_started_tiny_policy`) in a separate single-process Python.

    Under ``accelerate launch`` the warm start's own trainer would join the launch's process group and
    wait for the other processes, which are waiting for the cache: the main process builds it here
    instead, outside the launch (``python -m grpo_kit.warm_start``). Returns the cache folder.

    Raises:
        subprocess.CalledProcessError: the warm start failed (its output was shown).
    """
    import os
    import subprocess
    import sys

    task = get_task(task)
    request = json.dumps({"cache_dir": str(cache_dir), "settings": dataclasses.asdict(settings),
                          "spec": dataclasses.asdict(spec), "seed": seed, "task": task.name})
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARIABLES and not k.startswith("ACCELERATE_")}
    subprocess.run([sys.executable, "-m", "grpo_kit.warm_start", request], check=True, env=env)
    return tiny_policy_dir(cache_dir, settings, spec, seed, task)


if __name__ == "__main__":
    import sys

    _request = json.loads(sys.argv[1])
    warm_started_tiny_policy(_request["cache_dir"], WarmStart(**_request["settings"]),
                             TinyPolicySpec(**_request["spec"]), _request["seed"], progress=False,
                             task=_request["task"])
