"""Evaluation throughput on a CPU: the kit's batched, cached evaluation against a per-question loop.

The loop is how notebooks usually evaluate: one `model.generate` call per question. The kit
batches prompts (sorted by length, left padded) and caches every completion, so a rerun
generates nothing. Where vLLM's CPU build is installed (the stack environment), the kit's vLLM
route (``vllm.LLM`` in a subprocess, float32) runs on the same questions too: its engine start
and its generation are timed apart, and its greedy completions are compared with batched
transformers'. Same policy (the kit's warm-started tiny policy), same GSM8K test questions,
greedy, the same token budget.

Run: .venv/bin/python benchmarks/eval_throughput.py [--questions 200] [--max-new-tokens 64]
     .venv-stack/bin/python benchmarks/eval_throughput.py   (adds the vLLM row)
Targets (issue 4): batched >= 5x the loop; fully cached rerun >= 50x.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from grpo_kit.evaluation.scoring import evaluate
from grpo_kit.policy.generation import Sampling, TransformersBackend
from grpo_kit.policy.vllm import SubprocessVLLMBackend, vllm_usable
from grpo_kit.policy.warm_start import TinyPolicy, warm_started_tiny_policy
from grpo_kit.tasks import get_task
from grpo_kit.tasks.data import take_slice
from grpo_kit.tasks.gsm8k import load_gsm8k


def per_question_loop(model, tokenizer, prompts, max_new_tokens):
    """The usual notebook loop: one generate call per question. Returns generated tokens."""
    tokens = 0
    model.eval()
    for prompt in prompts:
        text = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
        enc = tokenizer(text, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id)
        new = out[0, enc["input_ids"].shape[1]:].tolist()
        tokenizer.decode(new, skip_special_tokens=True)
        tokens += len(new)
    return tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--cache-dir", default=".cache/grpo_kit", help="where the warm-started tiny policy is cached")
    args = parser.parse_args()

    tiny = TinyPolicy(get_task("gsm8k"), cache_dir=args.cache_dir)
    model, tokenizer, _ = warm_started_tiny_policy(tiny)
    questions = take_slice(load_gsm8k("test"), n=args.questions, seed=0)
    prompts = list(questions["prompt"])
    greedy = Sampling(max_new_tokens=args.max_new_tokens)
    print(f"torch threads: {torch.get_num_threads()}; {len(prompts)} questions; greedy; "
          f"up to {args.max_new_tokens} new tokens")

    start = time.perf_counter()
    loop_tokens = per_question_loop(model, tokenizer, prompts, args.max_new_tokens)
    loop_s = time.perf_counter() - start

    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "generations.jsonl"
        backend = TransformersBackend(model, tokenizer, batch_size=args.batch_size, progress=False)
        start = time.perf_counter()
        first = evaluate(backend, questions, greedy, cache=cache)
        batched_s = time.perf_counter() - start
        start = time.perf_counter()
        evaluate(backend, questions, greedy, cache=cache)
        cached_s = time.perf_counter() - start
    kit_tokens = sum(r["num_tokens"] for r in first.records)

    rows = [("per-question loop", loop_s, loop_tokens), (f"kit, batched ({args.batch_size})", batched_s, kit_tokens),
            ("kit, cached rerun", cached_s, kit_tokens)]
    if vllm_usable():
        backend = SubprocessVLLMBackend(tiny.folder, max_model_len=512)
        start = time.perf_counter()
        with_vllm = evaluate(backend, questions, greedy)
        vllm_total = time.perf_counter() - start
        vllm_s = backend.timings["generate_s"]
        same = sum(a["completion"] == b["completion"] for a, b in zip(with_vllm.records, first.records))
        rows.append(("kit, vLLM CPU (generation)", vllm_s, sum(r["num_tokens"] for r in with_vllm.records)))
    print(f"{'':28s} {'seconds':>9s} {'questions/s':>12s} {'tokens/s':>10s}")
    for name, seconds, tokens in rows:
        print(f"{name:28s} {seconds:9.2f} {len(prompts) / seconds:12.1f} {tokens / seconds:10.0f}")
    print(f"batched vs loop: {loop_s / batched_s:.1f}x questions/s (target >= 5x)")
    if vllm_usable():
        print(f"vLLM (CPU, float32): import {backend.timings['import_s']:.1f} s, engine start "
              f"{backend.timings['start_s']:.1f} s, generation {vllm_s:.1f} s ({batched_s / vllm_s:.1f}x the batched "
              f"transformers generation; {vllm_total:.1f} s in all); greedy completions identical to batched "
              f"transformers on {same} of {len(prompts)} questions")
    print(f"cached rerun vs loop: {loop_s / cached_s:.0f}x (target >= 50x); vs the batched first run: "
          f"{batched_s / cached_s:.0f}x")


if __name__ == "__main__":
    main()
