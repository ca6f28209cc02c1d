"""The CPU experiment where the choice of reward changes correctness (task ``sum3``): one warm-started tiny policy,
one baseline, two GRPO runs on the same budget (the correctness reward set; a format-only set), one paired table.

    PYTHONPATH=. OMP_NUM_THREADS=2 python benchmarks/reward_choice.py [--steps 150] [--seed 0] [--runs-dir runs]
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

from grpo_kit.policy.generation import TransformersBackend
from grpo_kit.policy.warm_start import WarmStart, warm_started_tiny_policy
from grpo_kit.runs.compare import compare_runs
from grpo_kit.runs.measure import EvalPlan, measure_after, measure_before
from grpo_kit.runs.spec import RunSpec
from grpo_kit.runs.train import train
from grpo_kit.tasks import RewardSet, get_task
from grpo_kit.training.presets import get_preset

REWARD_SETS = {
    "correctness": RewardSet(["xmlcount_reward_func", "strict_format_reward_func", "correctness_reward_func"],
                             (1.0, 1.0, 2.0)),
    "format-only": RewardSet(["xmlcount_reward_func", "strict_format_reward_func", "int_reward_func"]),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warm-steps", type=int, default=300)
    parser.add_argument("--runs-dir", default="runs/reward-choice")
    args = parser.parse_args()
    task = get_task("sum3")
    warm = WarmStart(steps=args.warm_steps, batch_size=64, learning_rate=3e-3, seed=args.seed)
    preset = get_preset("cpu-tiny", max_steps=args.steps, per_device_train_batch_size=32, num_generations=8,
                        max_completion_length=40, temperature=0.7, learning_rate=args.lr, save_steps=10_000,
                        seed=args.seed)
    plan = EvalPlan(task=task, preset=preset, slice={"n": 300}, seed=args.seed, max_new_tokens=40, samples=8,
                    temperature=0.7, batch_size=100, backend="transformers", warm=warm)
    root = Path(args.runs_dir)
    shutil.rmtree(root, ignore_errors=True)
    start = time.perf_counter()
    specs = {name: RunSpec.resolve(preset, task, rewards=rewards, run_dir=root / name, seed=args.seed, warm=warm,
                                   progress="none") for name, rewards in REWARD_SETS.items()}
    model, tokenizer, _ = warm_started_tiny_policy(next(iter(specs.values())).policy.tiny, progress=False)
    print(f"warm start {time.perf_counter() - start:.0f} s", flush=True)
    backend = TransformersBackend(model, tokenizer, batch_size=100, progress=False)
    backend.route = "transformers"
    first = next(iter(specs.values())).folder
    measure_before(plan, first, backend)
    print(f"baseline {time.perf_counter() - start:.0f} s", flush=True)
    for name, spec in specs.items():
        if spec.folder != first:
            for path in (first.baseline, first.baseline_sampled, first.eval_settings):
                shutil.copy(path, spec.folder.path / path.name)
        from grpo_kit.policy.loading import load_policy

        fresh = load_policy(spec.policy.tiny.folder, dtype="float32")
        result = train(spec, policy=fresh)
        after = TransformersBackend(result.trainer.model, tokenizer, batch_size=100, progress=False)
        after.route = "transformers"
        measure_after(spec.folder, backend=after)
        print(f"{name} trained and measured {time.perf_counter() - start:.0f} s", flush=True)
    report = compare_runs([s.folder.path for s in specs.values()], out_dir=root / "comparison")
    print(report.markdown)
    for name, spec in specs.items():
        text = spec.folder.report.read_text()
        print(name, text[text.index("## Sampled"):].split("## Diagnostics")[0] if "## Sampled" in text else "")


if __name__ == "__main__":
    main()
