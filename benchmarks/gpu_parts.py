"""The GPU proof's memory routes, each run in a child process of its own by ``benchmarks/gpu_proof.py`` (``--child
NAME``): a route's GRPO steps (:func:`run_route`), and the helpers every part shares. The machine, the pipeline smoke
and the evaluation are in ``benchmarks/gpu_pipeline.py``, generation's measurements in
``benchmarks/gpu_generation.py``.

A part writes its row as it goes (:class:`Progress`), so a part killed at its time limit keeps what it measured and
the phase it was in. A part given a deadline (``--deadline``, seconds since the epoch) ends by itself before it: a
route's trainer is stopped between steps (:func:`stop_at_deadline` sets ``control.should_training_stop``), the
evaluation between batches, and the process exits normally, so what it compiled is in the caches for the next part
(``benchmarks/compile_cache.py``). Peak GPU memory is reset once the model is built, and each row says what its peak
covers (``peak_covers``).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: Scratch space: trainer output, the smoke's run folder, the compile caches and, for Unsloth's routes, the random
#: model saved once for its loader (16 GB at 8B).
WORK = Path(tempfile.gettempdir()) / "grpo_kit_gpu_proof"
#: Each route: the preset it takes its recipe from, the model whose shape it builds, the preset fields changed
#: so it runs without vLLM (and without bitsandbytes' 8-bit optimizer unless the route loads it), its loader.
#: ``continuous_batching``: after its steps, the same model generates through transformers' continuous batching with
#: CUDA graphs, as TRL's ``use_transformers_continuous_batching`` calls it (``benchmarks/gpu_generation.py``).
ROUTES: dict[str, dict[str, Any]] = {
    "a100-peft": {"preset": "a100", "model": "unsloth/Meta-Llama-3.1-8B-Instruct", "loader": "peft",
                  "dtype": "bfloat16", "continuous_batching": True,
                  "set": {"use_unsloth": False, "load_in_4bit": False, "fast_inference": False,
                          "optim": "adamw_torch"}},
    "a100-unsloth-16bit": {"preset": "a100", "model": "unsloth/Meta-Llama-3.1-8B-Instruct", "loader": "unsloth",
                           "dtype": "bfloat16",
                           "set": {"load_in_4bit": False, "fast_inference": False, "optim": "adamw_torch"}},
    "a100-unsloth-4bit": {"preset": "a100", "model": "unsloth/Meta-Llama-3.1-8B-Instruct", "loader": "unsloth",
                          "dtype": "bfloat16", "set": {"fast_inference": False}},
    "full-80gb": {"preset": "full-80gb", "model": "Qwen/Qwen2.5-1.5B-Instruct", "loader": "full",
                  "dtype": "float32", "set": {"use_vllm": False}},
    # the shipped recipe as it runs where vLLM is missing: Unsloth 4-bit LoRA r64, adamw_8bit, fp16
    "colab-t4": {"preset": "colab-t4", "model": "unsloth/Qwen2.5-3B-Instruct", "loader": "unsloth",
                 "dtype": "float16", "set": {"fast_inference": False}},
}
#: A toy architecture for ``--miniature`` (the CPU rehearsal and tests): the same code, shapes small enough for
#: seconds.
MINIATURE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": 512, "head_dim": 16}
#: What a route's peak memory covers (``torch.cuda.reset_peak_memory_stats`` once the model is built).
ROUTE_PEAK_COVERS = ("from the built model on (its weights as loaded; the random model's build and save before it "
                     "excluded): the trainer's set-up, generation, the loss's forward and backward, the optimizer")


class Progress:
    """A child's row so far, rewritten whole (:func:`grpo_kit.system.files.write_text`) at every phase and step into
    the file the parent named: a child killed at its time limit still has what it measured read back, with the phase
    it was in. Without a file (a part run by hand or by a test) it only keeps the row."""

    def __init__(self, path: str | None, row: dict[str, Any]) -> None:
        self.path, self.row = path, row

    def note(self, **fields: Any) -> None:
        from grpo_kit.system.files import write_text

        self.row.update(fields)
        if self.path:
            write_text(self.path, json.dumps(self.row, default=str))


def seconds_left(deadline: float | None) -> float:
    """Seconds until ``deadline`` (seconds since the epoch, shared by the parent and its children); infinite
    without one."""
    return float("inf") if deadline is None else deadline - time.time()


def word_tokenizer(vocab_size: int, eos_id: int) -> Any:
    """A tokenizer with one word per id (``w0`` .. ``w<vocab_size-1>``): every id a random policy samples
    decodes, and a prompt of ``n`` words is ``n`` tokens. A chat template joins the messages' contents."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({f"w{i}": i for i in range(vocab_size)}, unk_token="w0"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token=f"w{eos_id}", pad_token=f"w{eos_id}",
                                        unk_token="w0", padding_side="left")
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    return tokenizer


def prompts(vocab_size: int, length: int, count: int, seed: int = 0) -> list[str]:
    """``count`` prompts of ``length`` random words each (ids above 1000, clear of special tokens)."""
    import random

    rng = random.Random(seed)
    low = min(1000, vocab_size // 2)
    return [" ".join(f"w{rng.randrange(low, vocab_size)}" for _ in range(length)) for _ in range(count)]


def distinct_words(completions: list[Any], **kwargs: Any) -> list[float]:
    """The reward: distinct words in a completion (varies within every group of a random policy)."""
    return [float(len(set(str(c).split()))) for c in completions]


def model_config(route: dict[str, Any], miniature: bool) -> dict[str, Any]:
    """The route's shipped ``config.json`` (at :data:`MINIATURE` sizes with ``miniature``), with an end-of-sequence
    id inside the vocabulary and no beginning-of-sequence token."""
    from grpo_kit.policy.shapes import model_config as shipped

    config = shipped(route["model"])
    if miniature:
        config = {**config, **MINIATURE, "max_position_embeddings": 2048}
    eos = config.get("eos_token_id")
    eos = eos[0] if isinstance(eos, list) else eos
    if eos is None or eos >= config["vocab_size"]:
        eos = config["vocab_size"] - 1
    config.update(eos_token_id=eos, bos_token_id=None, pad_token_id=eos)
    return config


def route_preset(route: dict[str, Any], miniature: bool, steps: int) -> tuple[Any, dict[str, str]]:
    """The route's recipe for ``steps`` GRPO steps, and what ``--miniature`` replaced that only a GPU runs. The
    miniature keeps the recipe's gradient checkpointing (its generation's KV cache is checked under it)."""
    from grpo_kit.training.presets import get_preset

    changes = dict(route["set"], max_steps=steps, save_steps=10**6, logging_steps=1, report_to="none")
    replaced: dict[str, str] = {}
    if miniature:  # the CPU: no mixed precision, short sequences, no bitsandbytes kernels
        changes.update(use_cpu=True, bf16=False, fp16=False, max_prompt_tokens=8, max_completion_length=8,
                       max_seq_length=16)
        recipe = get_preset(route["preset"], **changes)
        if recipe.load_in_4bit:
            replaced["load_in_4bit"] = "16-bit weights: bitsandbytes' 4-bit kernels need CUDA"
        if "8bit" in str(recipe.optim):
            replaced["optim"] = f"adamw_torch for {recipe.optim}: bitsandbytes' 8-bit optimizers need CUDA"
        changes.update(load_in_4bit=False, optim="adamw_torch" if "optim" in replaced else recipe.optim)
    return get_preset(route["preset"], **changes), replaced


def peak(estimate_gib: float | None = None) -> dict[str, Any]:
    """Peak GPU memory since the last reset (allocated and reserved, GiB) and the reserved peak over ``plan``'s
    estimate; ``{}`` without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return {}
    allocated = torch.cuda.max_memory_allocated() / 2**30
    reserved = torch.cuda.max_memory_reserved() / 2**30
    out = {"peak_allocated_gib": round(allocated, 2), "peak_reserved_gib": round(reserved, 2)}
    if estimate_gib:
        out["peak_reserved_over_estimate"] = round(reserved / estimate_gib, 2)
    return out


def reset_peak() -> None:
    """Start the peak over from what is allocated now (after a model is built), where there is a GPU."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def step_callbacks(progress: Progress, steps: int, times: list[float], generated: dict[str, Any],
                   estimate_gib: float | None, deadline: float | None, step_s: float) -> list[Any]:
    """The route's callbacks: a clock that notes each step's seconds, rates and peak as it ends (and the phase as
    each starts), and, with a ``deadline``, :class:`StopAtDeadline` expecting steps of ``step_s`` seconds."""
    import torch
    from transformers import TrainerCallback

    from benchmarks.gpu_generation import rates

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()
            progress.note(phase=f"training: step {len(times) + 1}")

        def on_substep_end(self, args, state, control, **kwargs):  # a gradient-accumulation micro-step
            progress.note(phase=f"training: step {len(times) + 1}, a micro-step's backward done",
                          **peak(estimate_gib))

        def on_step_end(self, args, state, control, **kwargs):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            times.append(time.perf_counter() - self.start)
            progress.note(phase=f"training: step {len(times)} of {steps} done", steps=len(times),
                          step_times_s=[round(t, 3) for t in times], **rates(times, generated),
                          **peak(estimate_gib))

    return [Clock()] + ([stop_at_deadline(deadline, step_s, times, progress)] if deadline is not None else [])


def stop_at_deadline(deadline: float, step_s: float, times: list[float], progress: Progress) -> Any:
    """A ``TrainerCallback`` that stops the trainer after a step when the next one would not end before ``deadline``
    (seconds since the epoch): the next step is expected to take ``step_s`` (the plan's steady step) or the median of
    the steps after the first measured so far, whichever is longer. Training then ends as at its last step
    (``control.should_training_stop``), the row says why (``stopped``), and the process exits normally, writing what
    it compiled to the caches. ``times`` holds the steps' seconds so far (the clock callback, added before it,
    appends to it)."""
    from transformers import TrainerCallback

    class StopAtDeadline(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step >= state.max_steps:
                return control
            expected = max([step_s] + ([statistics.median(times[1:])] if len(times) > 1 else []))
            left = seconds_left(deadline)
            if left < expected:
                control.should_training_stop = True
                progress.note(stopped=f"at its deadline after step {state.global_step}: the next step needs about "
                                      f"{expected:.0f} s, {max(left, 0):.0f} s were left")
            return control

    return StopAtDeadline()


def run_route(name: str, steps: int, miniature: bool, workdir: Path, progress: Progress | None = None,
              deadline: float | None = None, step_s: float = 0.0, cb_s: float = 0.0) -> dict[str, Any]:
    """Train ``steps`` GRPO steps on route ``name`` in this process and measure them (see the module docstring of
    ``benchmarks/gpu_proof.py``); ``progress`` holds the row as it grows. With a ``deadline`` the trainer stops
    before it (:func:`stop_at_deadline`, steps expected to take ``step_s``), and a route with continuous batching
    runs it only with ``cb_s`` seconds left."""
    from benchmarks import gpu_generation as generation

    route = ROUTES[name]
    progress = progress or Progress(None, {"route": name})
    if route["loader"] == "unsloth":
        from grpo_kit.policy.loading import import_unsloth

        import_unsloth()  # before transformers, TRL and peft
    import torch

    from grpo_kit.training.trainer import build_trainer

    preset, replaced = route_preset(route, miniature, steps)
    config = model_config(route, miniature)
    estimate = _estimate(route, preset, config)
    progress.note(model_shape=route["model"], parameters=estimate.pop("parameters"), loader=route["loader"],
                  load_in_4bit=preset.load_in_4bit, optim=str(preset.optim), estimate=estimate,
                  gradient_checkpointing=preset.gradient_checkpointing,
                  miniature_replaced={**progress.row.get("miniature_replaced", {}), **replaced},
                  phase="building the model")
    tokenizer = word_tokenizer(config["vocab_size"], config["eos_token_id"])
    model = _build(route, preset, config, tokenizer, workdir, progress, miniature)
    if model is None:
        return progress.row
    reset_peak()
    progress.note(phase="building the trainer", peak_covers=ROUTE_PEAK_COVERS)
    data = _prompt_data(config["vocab_size"], preset.max_prompt_tokens)
    trainer = build_trainer(model, tokenizer, data, preset, [distinct_words], str(workdir / name / "out"))
    trainable = {n: t.detach().float().cpu().clone() for n, t in trainer.model.named_parameters() if t.requires_grad}
    times: list[float] = []
    generated = generation.time_generation(trainer, progress)
    # TRL's own generation only: Unsloth's trainer generates through its own fast path
    kv = generation.watch_kv_cache(trainer, generated) if route["loader"] != "unsloth" else None
    for callback in step_callbacks(progress, steps, times, generated, estimate.get("needed"), deadline, step_s):
        trainer.add_callback(callback)
    completions = preset.per_device_train_batch_size * preset.gradient_accumulation_steps
    progress.note(phase="training", trainable_tensors=len(trainable), completions_per_step=completions,
                  decode_bytes=generation.decode_bytes(trainer.model, config, completions, preset.max_prompt_tokens,
                                            preset.max_completion_length))
    trainer.train()
    after = dict(trainer.model.named_parameters())
    moved = [n for n, before in trainable.items() if not torch.equal(before, after[n].detach().float().cpu())]
    progress.note(phase="trained", moved_tensors=len(moved), every_trainable_moved=len(moved) == len(trainable),
                  **({"generation_kv_cache": kv.summary()} if kv else {}), **peak(estimate.get("needed")))
    if miniature and kv and preset.gradient_checkpointing and kv.summary()["kept"] is False:  # the rehearsal's check
        raise RuntimeError(f"TRL's generation did not keep its KV cache with gradient checkpointing on: "
                           f"{kv.summary()}")
    if route.get("continuous_batching"):
        generation.continuous_batching(trainer, tokenizer, data, config, progress, deadline, cb_s,
                                       generation.CB_CACHE_MINIATURE if miniature else generation.CB_CACHE)
    progress.note(phase="done")
    return progress.row


def _estimate(route: dict[str, Any], preset: Any, config: dict[str, Any]) -> dict[str, Any]:
    """``plan``'s memory estimate for the route without vLLM (:func:`grpo_kit.training.memory.estimate_memory`),
    with the model's parameter count under ``parameters``."""
    from grpo_kit.policy.devices import Gpu, first_gpu
    from grpo_kit.policy.shapes import ModelShape
    from grpo_kit.training.memory import estimate_memory
    from grpo_kit.training.presets import get_preset

    shape = ModelShape.from_config(config, route["model"])
    gpu = first_gpu() or Gpu("cpu", 0.0, False)
    estimate = estimate_memory(get_preset(preset, fast_inference=False, use_vllm=False), shape, gpu)
    return {**estimate, "parameters": shape.parameters}


def _prompt_data(vocab_size: int, length: int) -> Any:
    """256 random prompts of ``length`` words, as a ``datasets.Dataset`` with a ``prompt`` column."""
    from datasets import Dataset

    return Dataset.from_dict({"prompt": prompts(vocab_size, length, 256)})


def _build(route: dict[str, Any], preset: Any, config: dict[str, Any], tokenizer: Any, workdir: Path,
           progress: Progress, miniature: bool) -> Any:
    """The route's model with random weights: built on the device, or for Unsloth's routes saved once to a folder
    and loaded through the kit (:func:`_unsloth_model`). ``None`` where the miniature stops (Unsloth's loader reads
    the GPU's properties), said in the row."""
    from grpo_kit.policy.shapes import build_random

    if route["loader"] != "unsloth":
        return build_random(config, "cpu" if miniature else "cuda", "float32" if miniature else route["dtype"])
    dtype = "float16" if preset.fp16 else "bfloat16"
    folder = workdir / ("random-" + route["model"].replace("/", "--") + "-" + dtype)
    if miniature:
        save_random(config, folder, tokenizer, "cpu", "float32")
        progress.note(phase="done", only_on_a_gpu="Unsloth's loader: FastLanguageModel.from_pretrained reads the "
                      "GPU's properties (unsloth get_device_stats), so the rehearsal stops after saving the model")
        return None
    return _unsloth_model(config, preset, folder, tokenizer, progress, dtype)


def _unsloth_model(config: dict[str, Any], preset: Any, folder: Path, tokenizer: Any, progress: Progress,
                   dtype: str) -> Any:
    """Unsloth loads only from a folder: the random model is built on the GPU in ``dtype`` and saved there once (both
    Unsloth routes of a shape load it, and a later part on the same machine finds it; a ``.complete`` marker says the
    save finished), then loaded through the kit. The seconds of each part go into the row."""
    from grpo_kit.policy.loading import load_unsloth_policy

    start = time.perf_counter()
    saved = (folder / ".complete").is_file()
    save_random(config, folder, tokenizer, "cuda", dtype)
    progress.note(save_s=0.0 if saved else round(time.perf_counter() - start, 1), phase="loading through Unsloth")
    start = time.perf_counter()
    model, _ = load_unsloth_policy(str(folder), preset.loading)
    progress.note(load_s=round(time.perf_counter() - start, 1))
    return model


def save_random(config: dict[str, Any], folder: Path, tokenizer: Any, device: str, dtype: str) -> Path:
    """Build the model of ``config`` with random weights on ``device`` and save it with ``tokenizer`` into ``folder``,
    once: a folder whose ``.complete`` marker exists is kept. The GPU's memory is given back afterwards."""
    import shutil

    import torch

    from grpo_kit.policy.shapes import build_random

    if (folder / ".complete").is_file():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    model = build_random(config, device, dtype)
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    (folder / ".complete").write_text("saved whole\n")
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return folder
