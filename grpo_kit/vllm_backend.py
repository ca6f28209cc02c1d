"""vLLM generation backends (GPU), behind the same interface as the transformers backend.

Two routes:

- :class:`UnslothVLLMBackend`: the colocated vLLM engine of an Unsloth policy loaded with
  ``fast_inference=True`` (``model.fast_generate``); a trained adapter is applied as a LoRA
  request (``model.load_lora(path)``), so the same engine evaluates before and after training.
- :class:`SubprocessVLLMBackend`: ``vllm.LLM`` on a saved or merged checkpoint, run in a
  child process (``python -m grpo_kit.vllm_backend``) so that all of its GPU memory is
  returned when it ends.

Both send all ``n`` samples of a question in one request, map :class:`grpo_kit.generation.Sampling`
to ``vllm.SamplingParams`` with :func:`sampling_params`, and report results per chunk so the
generation cache keeps everything finished before a crash. Prompts go to vLLM as token ids
rendered exactly as the transformers backend renders them: a rendered chat text sent as a string
would get a second BOS token from vLLM's tokenizer (vllm #27486), and the two backends would score
different prompts. ``vllm`` is imported only here, lazily.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grpo_kit.generation import Generation, OnResult, Prompt, Sampling

__all__ = ["SubprocessVLLMBackend", "UnslothVLLMBackend", "generations_of", "sampling_params", "token_prompts"]


def sampling_params(sampling: Sampling) -> dict[str, Any]:
    """Keyword arguments of ``vllm.SamplingParams`` for ``sampling``: all ``n`` samples in one request.

    ``temperature=0`` is vLLM's greedy decoding; ``seed`` makes sampled requests repeatable.

    >>> sampling_params(Sampling(temperature=0.7, top_p=0.9, n=4, max_new_tokens=128, seed=1))
    {'n': 4, 'temperature': 0.7, 'top_p': 0.9, 'max_tokens': 128, 'seed': 1}
    """
    return {"n": sampling.n, "temperature": sampling.temperature, "top_p": sampling.top_p,
            "max_tokens": sampling.max_new_tokens, "seed": sampling.seed}


def generations_of(request_output: Any) -> list[Generation]:
    """The kit's generations from one ``vllm.RequestOutput`` (its ``outputs``, in sample order).

    A completion stopped by the token limit (``finish_reason == "length"``) is truncated.
    """
    return [Generation(text=o.text, num_tokens=len(o.token_ids), truncated=o.finish_reason == "length")
            for o in request_output.outputs]


def token_prompts(tokenizer: Any, prompts: Sequence[Prompt]) -> list[dict[str, list[int]]]:
    """vLLM ``TokensPrompt`` dicts: the chat template's text, tokenized without adding special tokens.

    The template already holds the BOS token where the model wants one (Llama 3's
    ``<|begin_of_text|>``); tokenizing with ``add_special_tokens=False`` keeps it single.
    """
    texts = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts]
    return [{"prompt_token_ids": ids} for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def _file_digest(folder: Path) -> str:
    """A digest of a saved model folder: file names, sizes and the first MiB of each file."""
    digest = hashlib.sha256()
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(f"{file.relative_to(folder)}:{file.stat().st_size}".encode())
        with file.open("rb") as f:
            digest.update(f.read(1 << 20))
    return digest.hexdigest()[:16]


class UnslothVLLMBackend:
    """Generation through an Unsloth policy's colocated vLLM engine (``fast_inference=True``).

    Args:
        model: a policy from :func:`grpo_kit.models.load_unsloth_policy` with ``fast_inference``.
        tokenizer: its tokenizer.
        lora_path: a saved adapter to apply (``model.save_lora`` / ``save_policy``); ``None``
            generates with the base weights (the baseline). vLLM does not see adapter weights
            trained in memory until they are saved and loaded as a LoRA request.
        chunk_size: prompts per ``fast_generate`` call (results reach the cache per chunk).
    """

    def __init__(self, model: Any, tokenizer: Any, lora_path: str | Path | None = None, chunk_size: int = 256):
        if not hasattr(model, "fast_generate"):
            raise ValueError("this model has no fast_generate: load it with grpo_kit.models.load_unsloth_policy("
                             "..., fast_inference=True), or use TransformersBackend")
        self.model, self.tokenizer, self.chunk_size = model, tokenizer, chunk_size
        self.lora_path = Path(lora_path) if lora_path is not None else None

    def identity(self) -> str:
        """Base model name plus the adapter file's digest (or ``base`` without one)."""
        name = getattr(getattr(self.model, "config", None), "_name_or_path", "") or "unsloth-model"
        adapter = _file_digest(self.lora_path) if self.lora_path else "base"
        return f"vllm:{name}@{adapter}"

    def generate(self, prompts: Sequence[Prompt], sampling: Sampling,
                 on_result: OnResult | None = None) -> list[list[Generation]]:
        """``sampling.n`` completions per prompt, in prompt order (see the Backend protocol)."""
        from vllm import SamplingParams

        params = SamplingParams(**sampling_params(sampling))
        lora = self.model.load_lora(str(self.lora_path)) if self.lora_path else None
        requests = token_prompts(self.tokenizer, prompts)
        results: list[list[Generation]] = []
        for start in range(0, len(requests), self.chunk_size):
            outputs = self.model.fast_generate(requests[start:start + self.chunk_size], sampling_params=params,
                                               lora_request=lora)
            for offset, output in enumerate(outputs):
                results.append(generations_of(output))
                if on_result is not None:
                    on_result(start + offset, results[-1])
        return results


class SubprocessVLLMBackend:
    """``vllm.LLM`` on a saved checkpoint, in a child process that gives its GPU memory back when done.

    Args:
        model_path: a full or merged checkpoint folder (see :func:`grpo_kit.models.save_merged`), or a
            Hub id.
        tokenizer: renders the chat prompts (default: loaded from ``model_path``).
        gpu_memory_utilization, max_model_len: passed to ``vllm.LLM``.
        chunk_size: prompts per ``LLM.generate`` call (results reach the cache per chunk).
    """

    def __init__(self, model_path: str | Path, tokenizer: Any = None, gpu_memory_utilization: float = 0.85,
                 max_model_len: int | None = None, chunk_size: int = 256):
        self.model_path = Path(model_path)
        if self.model_path.exists() and not (self.model_path / "config.json").is_file():
            raise ValueError(f"{self.model_path} holds no model (config.json); for a LoRA adapter merge it first "
                             "with grpo_kit.models.save_merged")
        if tokenizer is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(self.model_path))
        self.tokenizer = tokenizer
        self.gpu_memory_utilization, self.max_model_len, self.chunk_size = gpu_memory_utilization, max_model_len, \
            chunk_size

    def identity(self) -> str:
        """The checkpoint's path and file digest (a Hub id: the id)."""
        if not self.model_path.exists():
            return f"vllm:{self.model_path}"
        return f"vllm:{self.model_path.resolve()}@{_file_digest(self.model_path)}"

    def generate(self, prompts: Sequence[Prompt], sampling: Sampling,
                 on_result: OnResult | None = None) -> list[list[Generation]]:
        """``sampling.n`` completions per prompt, in prompt order (see the Backend protocol).

        Raises:
            RuntimeError: the child process failed (its last output lines are in the message).
        """
        from grpo_kit.models import require_cuda

        require_cuda("vLLM")
        with tempfile.TemporaryDirectory() as tmp:
            request = Path(tmp) / "request.json"
            request.write_text(json.dumps({
                "model": str(self.model_path), "prompts": token_prompts(self.tokenizer, prompts),
                "sampling": sampling_params(sampling), "gpu_memory_utilization": self.gpu_memory_utilization,
                "max_model_len": self.max_model_len, "chunk_size": self.chunk_size}))
            # vLLM logs a lot to stderr: into a file, since a full stderr pipe nobody reads would
            # block the child while this process waits on its stdout.
            log = Path(tmp) / "stderr.log"
            with log.open("w") as stderr:
                child = subprocess.Popen([sys.executable, "-m", "grpo_kit.vllm_backend", str(request)],
                                         stdout=subprocess.PIPE, stderr=stderr, text=True)
                results: list[list[Generation]] = []
                for line in child.stdout:
                    if not line.startswith("{"):
                        continue
                    row = json.loads(line)
                    results.append([Generation(**g) for g in row["generations"]])
                    if on_result is not None:
                        on_result(row["index"], results[-1])
                child.wait()
            if child.returncode != 0 or len(results) != len(prompts):
                tail = "\n".join(log.read_text().strip().splitlines()[-15:])
                raise RuntimeError(f"the vLLM worker failed (exit {child.returncode}, {len(results)} of "
                                   f"{len(prompts)} prompts done):\n{tail}")
        return results


def _worker(request_path: str) -> None:
    """Child process: generate for every text and print one JSON line per prompt, in order."""
    from vllm import LLM, SamplingParams

    request = json.loads(Path(request_path).read_text())
    kwargs = {"model": request["model"], "gpu_memory_utilization": request["gpu_memory_utilization"],
              "seed": request["sampling"]["seed"]}
    if request["max_model_len"]:
        kwargs["max_model_len"] = request["max_model_len"]
    llm = LLM(**kwargs)
    params = SamplingParams(**request["sampling"])
    prompts, chunk = request["prompts"], request["chunk_size"]
    for start in range(0, len(prompts), chunk):
        for offset, output in enumerate(llm.generate(prompts[start:start + chunk], params, use_tqdm=False)):
            generations = [dataclasses.asdict(g) for g in generations_of(output)]
            print(json.dumps({"index": start + offset, "generations": generations}), flush=True)


if __name__ == "__main__":
    _worker(sys.argv[1])
