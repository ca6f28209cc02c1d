"""Where a policy comes from: a Hub or local model, or the kit's tiny policy warm-started on a task.

:class:`PolicySource` is the one place that tells the two apart: its name as run folders record it,
how it loads (for training or evaluation), its tokenizer without the weights, and the folder vLLM
serves. Everything else takes a source and asks it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_kit.policy.loading import Loading, load_policy, transformers_load_kwargs
from grpo_kit.policy.tiny import DEFAULT_CACHE_DIR, TinyPolicySpec, train_tiny_tokenizer
from grpo_kit.policy.warm_start import (
    TinyPolicy,
    WarmStart,
    build_in_a_process_of_its_own,
    warm_started_tiny_policy,
    warm_steps_for,
)
from grpo_kit.system.hub import is_repo_id
from grpo_kit.tasks import Task

__all__ = ["PolicySource"]


@dataclass(frozen=True)
class PolicySource:
    """A policy to start from: ``model`` (a Hub id or a local folder), or ``tiny`` (the kit's tiny policy).

    Build it with :meth:`of`. Exactly one of the two is set.
    """

    model: str | None = None
    tiny: TinyPolicy | None = None

    def __post_init__(self) -> None:
        if (self.model is None) == (self.tiny is None):
            raise ValueError("a policy source is a model (Hub id or folder) or the tiny policy, exactly one")

    @classmethod
    def of(cls, model: str | Path | None, task: Task, seed: int = 0, warm: WarmStart | None = None,
           warm_steps: int | None = None, spec: TinyPolicySpec | None = None,
           cache_dir: str = DEFAULT_CACHE_DIR) -> PolicySource:
        """The source for ``model``, or without one the tiny policy warm-started on ``task``.

        Args:
            model: a Hub id (``owner/name``) or an existing folder; ``None`` for the tiny policy.
            task, seed, warm, warm_steps, spec, cache_dir: what shapes the tiny policy (``warm_steps``
                replaces the default warm start's steps, :func:`grpo_kit.policy.warm_start.warm_steps_for` the task;
                ``warm`` the whole warm start).

        Raises:
            ValueError: ``model`` is neither an existing folder nor a well-formed Hub id (checked before
                anything loads; a Hub id is not looked up here); no model and a task the tiny policy cannot be
                warm-started on (no train split or no demonstrations).
        """
        if model is not None:
            text = str(model)
            if not Path(text).is_dir() and (text.startswith((".", "/", "~")) or not is_repo_id(text)):
                raise ValueError(f"model {text!r} is neither an existing folder nor a Hub id (owner/name): give the "
                                 "path of a saved model or an id such as Qwen/Qwen2.5-0.5B-Instruct")
            return cls(model=text)
        if not task.trains or task.extras.get("demonstration") is None:
            raise ValueError(f"the kit's tiny policy is warm-started on a task's train split with demonstrations, and "
                             f"task {task.name!r} has none: give a model (--model_name_or_path, or a preset with one), "
                             "or evaluate on a task the tiny policy can learn")
        warm = warm or WarmStart(steps=warm_steps if warm_steps is not None else warm_steps_for(task))
        return cls(tiny=TinyPolicy(task, warm, spec or TinyPolicySpec(), seed, str(cache_dir)))

    @property
    def name(self) -> str:
        """The name run folders record: the Hub id or path, or ``tiny:<cache folder name>`` (the folder name
        encodes the tiny policy's shape, warm start, seed and task)."""
        return self.model if self.model is not None else f"tiny:{self.tiny.folder.name}"

    def load(self, loading: Loading = Loading(), progress: bool = True) -> tuple[Any, Any]:
        """Load the policy for training: ``(model, tokenizer)``.

        The tiny policy is warm-started once and then read from its cache. A model loads through Unsloth
        when ``loading.use_unsloth`` (Unsloth imported first; LoRA applied, vLLM colocated with
        ``fast_inference``), else with transformers: on a GPU in bfloat16 for LoRA and in float32 master
        weights for full fine-tuning (training autocasts to bfloat16), float32 on a CPU; on the GPU of this
        process under a launch (:func:`grpo_kit.policy.devices.placement`); the recipe's ``from_pretrained`` keys
        (``dtype``, ``attn_implementation``, ``revision``, ...) over those.

        Raises:
            RuntimeError: Unsloth asked for without a CUDA GPU (the message names the CPU alternative).
        """
        if self.tiny is not None:
            model, tokenizer, _ = warm_started_tiny_policy(self.tiny, progress=progress)
            return model, tokenizer
        if loading.use_unsloth:
            from grpo_kit.policy.loading import load_unsloth_policy

            return load_unsloth_policy(self.model, loading)
        from grpo_kit.policy.devices import placement, zero3_loading

        sharding = zero3_loading()  # noqa: F841 - ZeRO-3: each process loads its shard only; kept alive while loading
        return load_policy(self.model, **transformers_load_kwargs(loading, placement(loading.trains_all_weights)))

    def build(self, in_own_process: bool = False) -> None:
        """Make sure the tiny policy's cache exists (nothing to do for a model); ``in_own_process`` builds it
        outside a multi-process launch (:func:`grpo_kit.policy.warm_start.build_in_a_process_of_its_own`)."""
        if self.tiny is None or self.tiny.cached:
            return
        if in_own_process:
            build_in_a_process_of_its_own(self.tiny)
        else:
            warm_started_tiny_policy(self.tiny, progress=False)

    def tokenizer(self) -> Any:
        """The policy's tokenizer, without loading the weights.

        For the tiny policy this is its cache's tokenizer, or, before the cache exists, the same
        deterministic tokenizer trained on the task's train split (a few seconds).
        """
        if self.tiny is not None and not self.tiny.cached:
            task = self.tiny.task
            return train_tiny_tokenizer(task.extras["tokenizer_texts"](task.load("train")), self.tiny.spec.vocab_size)
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(self.served_path())

    def served_path(self) -> str:
        """What vLLM (or ``from_pretrained``) loads: the Hub id or folder, or the tiny policy's cache folder
        (built first when missing)."""
        if self.tiny is None:
            return self.model
        self.build()
        return str(self.tiny.folder)
