"""A resumable generation cache: every completion is appended to a JSONL file as soon as it exists.

Each line holds one completion under a key made of everything that shapes it: the model's
identity (its name plus a fingerprint of its weights or adapter, and the chat template), the
prompt, the sampling settings and the sample's index. A rerun generates only the missing
completions, so an evaluation killed half-way resumes with nothing lost and nothing
generated twice; change the model, the prompt or a sampling setting and the keys change.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Any

from grpo_kit.policy.generation import Generation, Sampling
from grpo_kit.system.files import append_jsonl, read_jsonl

__all__ = ["GenerationCache"]


class GenerationCache:
    """Completions by key, backed by an append-only JSONL file.

    Args:
        path: the JSONL file (created with its parents on the first write). Lines that do not
            parse (a write cut off by a crash) are skipped, so a killed run never poisons the cache.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._entries: dict[str, Generation] = {}
        for row in read_jsonl(self.path) if self.path.is_file() else []:
            with contextlib.suppress(KeyError, TypeError):  # a line of another shape is no completion: skipped
                self._entries[row["key"]] = Generation(row["text"], row["num_tokens"], row["truncated"])

    @staticmethod
    def key(model_id: str, prompt: Any, sampling: Sampling, sample_index: int) -> str:
        """The key of one completion: a SHA-256 of the model identity, the prompt, the settings that
        shape a completion (temperature, top_p, max_new_tokens, seed) and the sample index."""
        payload = json.dumps({"model": model_id, "prompt": prompt, "temperature": sampling.temperature,
                              "top_p": sampling.top_p, "max_new_tokens": sampling.max_new_tokens,
                              "seed": sampling.seed, "sample": sample_index}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()

    def get(self, key: str) -> Generation | None:
        """The cached completion for ``key``, or ``None``."""
        return self._entries.get(key)

    def add(self, key: str, generation: Generation) -> None:
        """Store one completion and append it to the file at once (a crash loses at most the line being written)."""
        self._entries[key] = generation
        append_jsonl(self.path, {"key": key, **vars(generation)}, sync=False)

    def __len__(self) -> int:
        return len(self._entries)
