"""GRPO step time and peak GPU memory: Unsloth LoRA against plain TRL + peft, same shape (GPU only).

Each route runs in its own child process (Unsloth patches transformers/TRL when imported, so the
Unsloth child imports it before anything else; and peak memory must not carry over): the same
architecture built from a config with random weights (no Hub), the same LoRA (rank, alpha,
modules), ``--batch`` completions per optimiser step (no gradient accumulation), prompt and
completion lengths (completions forced to full length with ``min_new_tokens``), generation with
transformers in both (no vLLM) so the comparison is the training step. Prints the median step time, the peak
GPU memory (``torch.cuda.max_memory_allocated``) and the ratios.

Run (on a CUDA machine; `make test-gpu` builds .venv-gpu from requirements.txt):
  .venv-gpu/bin/python benchmarks/grpo_step.py [--hidden 2048 --layers 16 --steps 6 --batch 16 --completion 256]
Target, from Unsloth's published claims: at least 40% less peak memory than plain TRL.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def build_checkpoint(folder: Path, hidden: int, layers: int) -> None:
    """A Llama-architecture model with random weights and the kit's tokenizer, saved to ``folder``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from grpo_kit.policy.tiny import train_tiny_tokenizer
    from grpo_kit.tasks.gsm8k import load_gsm8k, tokenizer_texts

    tokenizer = train_tiny_tokenizer(tokenizer_texts(load_gsm8k("train")), vocab_size=8192)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 27 // 8,
                         num_hidden_layers=layers, num_attention_heads=hidden // 128, num_key_value_heads=hidden // 512,
                         max_position_embeddings=2048, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def route_overrides(folder: str, args: argparse.Namespace) -> dict:
    """Recipe overrides shared by both routes: one optimiser step = ``args.batch`` completions (no gradient
    accumulation, whatever the preset's), ``args.completion``-token completions, no vLLM, no checkpoints."""
    return dict(model_name_or_path=folder, use_peft=True, lora_r=args.rank, lora_alpha=args.rank, load_in_4bit=False,
                fast_inference=False,
                max_steps=args.steps, per_device_train_batch_size=args.batch, gradient_accumulation_steps=1,
                num_generations=8, max_completion_length=args.completion, max_seq_length=args.completion + 512,
                max_prompt_tokens=512, learning_rate=1e-5, warmup_steps=0, optim="adamw_torch", save_steps=10**6,
                generation_kwargs={"min_new_tokens": args.completion})


def run_route(route: str, folder: str, args: argparse.Namespace) -> dict:
    """Child process: train ``args.steps`` GRPO steps through ``route``; return timings and peak memory."""
    if route == "unsloth":  # first, before anything imports transformers: Unsloth patches it on import
        from grpo_kit.policy.loading import import_unsloth

        import_unsloth()
    import torch
    from transformers import TrainerCallback

    from grpo_kit.tasks import RewardSet
    from grpo_kit.tasks.gsm8k import load_gsm8k
    from grpo_kit.training.presets import get_preset
    from grpo_kit.training.trainer import build_trainer

    overrides = route_overrides(folder, args)
    if route == "unsloth":
        from grpo_kit.policy.loading import load_unsloth_policy

        preset = get_preset("a100", **overrides)
        model, tokenizer = load_unsloth_policy(folder, preset.loading)
    else:
        from grpo_kit.policy.loading import load_policy

        preset = get_preset("a100", use_unsloth=False, **overrides)
        model, tokenizer = load_policy(folder, dtype="bfloat16", device_map="cuda")

    times: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.start = time.perf_counter()

        def on_step_end(self, *a, **k):
            torch.cuda.synchronize()
            times.append(time.perf_counter() - self.start)

    rewards = RewardSet(["xmlcount_reward_func", "soft_format_reward_func"])
    trainer = build_trainer(model, tokenizer, load_gsm8k("train").select(range(512)), preset, rewards,
                            tempfile.mkdtemp(), callbacks=[Timer()])
    torch.cuda.reset_peak_memory_stats()
    trainer.train()
    return {"route": route, "median_step_s": statistics.median(times[1:] or times),
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30, "steps": len(times),
            "completions_per_step": preset.per_device_train_batch_size * preset.gradient_accumulation_steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--rank", type=int, default=32)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=16, help="completions per optimiser step (no accumulation)")
    parser.add_argument("--completion", type=int, default=256, help="completion length in tokens")
    parser.add_argument("--child", nargs=2, metavar=("ROUTE", "FOLDER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(run_route(args.child[0], args.child[1], args)), flush=True)
        return

    import torch

    if not torch.cuda.is_available():
        sys.exit("benchmarks/grpo_step.py needs a CUDA GPU (it compares GPU memory); nothing was measured")
    with tempfile.TemporaryDirectory() as tmp:
        build_checkpoint(Path(tmp), args.hidden, args.layers)
        results = {}
        for route in ("trl_peft", "unsloth"):
            child = [sys.executable, __file__, "--child", route, tmp] + [
                f"--{k}={v}" for k, v in vars(args).items() if k != "child"]
            out = subprocess.run(child, capture_output=True, text=True)
            lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
            if out.returncode != 0 or not lines:
                print(f"{route}: failed (exit {out.returncode})\n" + "\n".join(out.stderr.splitlines()[-20:]))
                continue
            results[route] = json.loads(lines[-1][len("RESULT "):])
    print(f"shape: hidden {args.hidden}, {args.layers} layers, LoRA rank {args.rank}, {args.batch} completions x "
          f"{args.completion} tokens per optimiser step, {args.steps} steps; GPU {torch.cuda.get_device_name(0)}")
    for r in results.values():
        print(f"{r['route']:10s} median step {r['median_step_s']:.3f} s   peak memory {r['peak_gib']:.2f} GiB")
    if len(results) == 2:
        base, fast = results["trl_peft"], results["unsloth"]
        saving = 1 - fast["peak_gib"] / base["peak_gib"]
        print(f"unsloth / trl_peft: step time x{fast['median_step_s'] / base['median_step_s']:.2f}, peak memory "
              f"x{fast['peak_gib'] / base['peak_gib']:.2f} ({saving:.0%} less; target >= 40%)")


if __name__ == "__main__":
    main()
