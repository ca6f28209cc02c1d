"""Generation tokens/s on the CPU: the policy's plain ``generate`` against transformers' continuous batching
(``generate_batch``, as TRL's ``use_transformers_continuous_batching`` calls it: a new manager each call), at 16 and 64
sequences. A CPU figure: it says what each path costs on this machine, not what a GPU does (no CUDA graphs here).

Both paths get the same GSM8K prompts in the chat template, sample at temperature 1 (GRPO's) and generate exactly
``--tokens`` tokens per sequence (no end-of-sequence token, so both count the same tokens); the median of
``--repeats`` timed calls after one untimed call of each. The models are built from nothing with random weights: the
kit's tiny policy (:class:`grpo_kit.policy.tiny.TinyPolicySpec`, about 1M parameters plus its embedding) and, with
``--hidden``/``--layers``, a larger one of the same architecture.

Run: ``PYTHONPATH=. OMP_NUM_THREADS=1 .venv/bin/python benchmarks/generation_speed.py [--sizes 16 64] [--tokens 64]``
"""

from __future__ import annotations

import argparse
import functools
import math
import statistics
import time
from typing import Any

#: The paged KV cache's block (transformers' default) and tokens per forward pass: the cache holds every sequence's
#: prompt and completion, as the kit asks a CPU recipe to size it (grpo_kit.training.generators).
BLOCK, BATCH_TOKENS = 256, 2048


def build(hidden: int | None, layers: int | None) -> tuple[Any, Any, str]:
    """The tiny policy (or one of ``hidden``/``layers``) with random weights, its tokenizer and a label."""
    import dataclasses

    from grpo_kit.policy.tiny import TinyPolicySpec, build_tiny_policy
    from grpo_kit.tasks.gsm8k import load_gsm8k, tokenizer_texts

    spec = TinyPolicySpec()
    if hidden:
        spec = dataclasses.replace(spec, hidden_size=hidden, num_layers=layers or spec.num_layers,
                                   num_heads=hidden // 64, num_kv_heads=max(1, hidden // 256),
                                   intermediate_size=4 * hidden)
    model, tokenizer = build_tiny_policy(tokenizer_texts(load_gsm8k("train").select(range(2000))), seed=0, spec=spec)
    params = sum(p.numel() for p in model.parameters()) / 1e6
    return model.eval(), tokenizer, (f"Qwen2 hidden {spec.hidden_size}, {spec.num_layers} layers, "
                                     f"{params:.1f}M parameters, float32")


def prompts(tokenizer: Any, n: int) -> list[list[int]]:
    """``n`` GSM8K test questions in the chat template, as token ids."""
    from grpo_kit.tasks.gsm8k import load_gsm8k

    questions = load_gsm8k("test")["question"][:n]
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                           tokenize=False) for q in questions]
    return [tokenizer(t)["input_ids"] for t in texts]


def plain(model: Any, tokenizer: Any, ids: list[list[int]], config: Any) -> int:
    """One left-padded batch through ``generate``; returns the tokens generated."""
    import torch

    batch = tokenizer.pad({"input_ids": ids}, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**batch, generation_config=config)
    return int(out[:, batch["input_ids"].shape[1]:].numel())


def continuous(model: Any, ids: list[list[int]], config: Any, tokens: int) -> int:
    """One ``generate_batch`` call as TRL makes it; returns the tokens generated."""
    import torch
    from transformers.generation import ContinuousBatchingConfig

    blocks = len(ids) * math.ceil((max(map(len, ids)) + tokens) / BLOCK)
    sizes = ContinuousBatchingConfig(num_blocks=blocks, max_batch_tokens=BATCH_TOKENS, max_memory_percent=0.5)
    with torch.no_grad():
        out = model.generate_batch(ids, generation_config=config, continuous_batching_config=sizes,
                                   progress_bar=False)
    return sum(len(o.generated_tokens) for o in out.values())


def timed(call: Any, repeats: int) -> tuple[float, int]:
    """The median seconds of ``repeats`` calls after one untimed call, and the tokens one call generates."""
    count = call()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        assert call() == count
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 64], help="sequences per call")
    parser.add_argument("--tokens", type=int, default=64, help="tokens generated per sequence")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=None, help="a larger model: its hidden size (64 per head)")
    parser.add_argument("--layers", type=int, default=None)
    args = parser.parse_args()

    import torch
    from transformers import GenerationConfig

    torch.manual_seed(0)
    model, tokenizer, label = build(args.hidden, args.layers)
    config = GenerationConfig(max_new_tokens=args.tokens, do_sample=True, temperature=1.0, top_k=0,
                              eos_token_id=None, pad_token_id=tokenizer.pad_token_id)
    print(f"CPU figures ({torch.get_num_threads()} torch threads; no CUDA graphs on a CPU): {label}, "
          f"{args.tokens} tokens per sequence, median of {args.repeats}")
    print(f"{'sequences':>9}  {'generate tok/s':>14}  {'generate_batch tok/s':>20}  {'ratio':>5}")
    for n in args.sizes:
        ids = prompts(tokenizer, n)
        plain_s, plain_tokens = timed(functools.partial(plain, model, tokenizer, ids, config), args.repeats)
        batch_s, batch_tokens = timed(functools.partial(continuous, model, ids, config, args.tokens), args.repeats)
        print(f"{n:>9}  {plain_tokens / plain_s:>14,.0f}  {batch_tokens / batch_s:>20,.0f}  "
              f"{plain_s / batch_s:>5.2f}")


if __name__ == "__main__":
    main()
