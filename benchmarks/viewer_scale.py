"""The run viewer at full scale: its file size and how soon it becomes interactive in headless Chromium, and the
size of the training groups a run keeps.

Writes a run folder of GSM8K's 1,319 test questions evaluated before and after (greedy completions of about
900 characters, the length of a 256-token answer), a 250-step log history with held-out accuracy every 25 steps,
and 250 kept steps of 16 groups of 8 completions (``--groups``), then ``python -m grpo_kit view``'s page of it. The
completions are made of the question's own words and numbers in a reasoning layout, so they compress about as much
as a model's do. It also writes the groups the default keeps of the blog post's a100 run (2 groups of 8 a step).

Prints: the kept groups' size for both runs (target: the a100 run under 50 MB), the page's size (target: at most
20 MB), the time to write it, and the time until the page has drawn itself in headless Chromium, from the start of
navigation (``performance.now()`` when its script finished; target: at most 2 s; median of ``--repeat`` loads), and
when the training groups, inflated after that, are ready.

Run: PYTHONPATH=. .venv/bin/python benchmarks/viewer_scale.py [--steps 250] [--groups 16] [--repeat 3]
Needs /usr/bin/chromium and /usr/bin/chromedriver (apt-get install chromium chromium-driver) and selenium.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402

from grpo_kit.evaluation.scoring import score  # noqa: E402
from grpo_kit.runs.folder import RunFolder  # noqa: E402
from grpo_kit.runs.measure import evaluated_with  # noqa: E402
from grpo_kit.runs.view import write_view  # noqa: E402
from grpo_kit.tasks import get_task  # noqa: E402
from grpo_kit.tasks.answer_format import render  # noqa: E402
from grpo_kit.training.groups import groups_frame  # noqa: E402

REWARDS = ["xmlcount_reward_func", "soft_format_reward_func", "strict_format_reward_func", "int_reward_func",
           "correctness_reward_func"]


def reasoning(question: str, rng: random.Random, chars: int) -> str:
    """A reasoning text of about ``chars`` characters from the question's words and numbers."""
    words = re.findall(r"[A-Za-z]+|\d+", question) or ["step"]
    out, n = [], 0
    while n < chars:
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(6, 14)))
        a, b = rng.randint(2, 400), rng.randint(2, 60)
        line = f"{sentence.capitalize()}: {a} * {b} = {a * b}."
        out.append(line)
        n += len(line) + 1
    return "\n".join(out)


def completion(row: dict, rng: random.Random, right: float, chars: int) -> str:
    answer = row["answer"] if rng.random() < right else str(rng.randint(1, 999))
    return render(reasoning(row["question"], rng, chars), answer)


def write_groups(folder: Path, rows: list[dict], steps: int, groups: int, generations: int, chars: int,
                 seed: int = 0) -> int:
    """Kept steps as the trainer writes them; returns their total size in bytes."""
    rng = random.Random(seed)
    (folder / "groups").mkdir(parents=True, exist_ok=True)
    for step in range(1, steps + 1):
        raw: dict[str, list] = {"prompt": [], "completion": [], **{r: [] for r in REWARDS}, "advantage": []}
        for g in range(groups):
            row = rows[(step * groups + g) % len(rows)]
            right = [rng.random() < 0.4 for _ in range(generations)]
            totals = [3.5 * r + 0.5 for r in right]
            mean = sum(totals) / generations
            for r in right:
                raw["prompt"].append([{"role": "system", "content": "Respond in the format..."},
                                      {"role": "user", "content": row["question"]}])
                raw["completion"].append([{"role": "assistant", "content": completion(row, rng, float(r), chars)}])
                for name in REWARDS:
                    raw[name].append(2.0 * r if name == "correctness_reward_func" else 0.5 * r)
            raw["advantage"] += [t - mean for t in totals]
        frame = groups_frame(pd.DataFrame(raw), step, REWARDS, [1.0] * len(REWARDS), generations, groups)
        frame.to_parquet(folder / "groups" / f"step-{step:06d}.parquet", index=False)
    return sum(p.stat().st_size for p in (folder / "groups").iterdir())


def write_run(folder: Path, steps: int, groups: int, chars: int) -> int:
    task = get_task("gsm8k")
    rows = list(task.load("test"))
    rng = random.Random(1)
    settings = {"task": "gsm8k", "preset": "a100", "slice": {"n": len(rows)}, "seed": 0, "questions": len(rows),
                "base_model": "unsloth/Meta-Llama-3.1-8B-Instruct", "base_fingerprint": "x", "system_prompt": "S",
                "max_new_tokens": 256, "samples": 0, "temperature": 0.7, "route": "vllm", "warm": None,
                "tiny_spec": None}
    folder.mkdir(parents=True)
    (folder / "eval_settings.json").write_text(json.dumps(settings))
    for name, right in (("baseline.jsonl", 0.55), ("trained.jsonl", 0.7)):
        records = score(rows, [[completion(r, rng, right, chars)] for r in rows], task=task)
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in records))
    history = [{"step": s, "reward": 1 + s / steps, "completions/mean_length": 200 - s / 5,
                **{f"rewards/{r}/mean": s / steps for r in REWARDS}} for s in range(1, steps + 1)]
    history += [{"step": s, "eval/strict_accuracy": 0.5 + s / 1000, "eval/strict_accuracy_ci_low": 0.45,
                 "eval/strict_accuracy_ci_high": 0.8} for s in range(0, steps + 1, 25)]
    (folder / "log_history.json").write_text(json.dumps(history))
    (folder / "train_settings.json").write_text(json.dumps({"identity": {}, "max_steps": steps}))
    size = write_groups(folder, rows, steps, groups, 8, chars)
    run = RunFolder(folder)
    (folder / "model").mkdir()
    (folder / "model" / "model.safetensors").write_text("weights")
    run.mark_finished(steps)
    run.mark_evaluated(steps, run.check_model(), evaluated_with(settings))
    return size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=250)
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--chars", type=int, default=900, help="characters per completion (256 tokens)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from tests import browser

    with tempfile.TemporaryDirectory() as tmp:
        a100 = write_groups(Path(tmp) / "a100", list(get_task("gsm8k").load("train"))[:500], args.steps, 2, 8,
                            args.chars)
        print(f"groups kept by default of the a100 run ({args.steps} steps x 2 groups x 8): {a100 / 2**20:.2f} MB "
              "(target < 50 MB)")
        run = Path(tmp) / "run"
        size = write_run(run, args.steps, args.groups, args.chars)
        print(f"groups kept of {args.steps} steps x {args.groups} groups x 8: {size / 2**20:.2f} MB")
        start = time.perf_counter()
        page = write_view([run])
        print(f"view page: {page.stat().st_size / 2**20:.2f} MB (target <= 20 MB), written in "
              f"{time.perf_counter() - start:.1f} s")
        driver = browser.chromium()
        try:
            times, groups = [], []
            for _ in range(args.repeat):
                times.append(browser.open_page(driver, page))
                groups.append(browser.wait_for(driver, "viewGroupsMs"))
            errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        finally:
            driver.quit()
        print(f"interactive after {statistics.median(times) / 1000:.2f} s in headless Chromium (median of "
              f"{args.repeat}: {', '.join(f'{t / 1000:.2f}' for t in times)}; target <= 2 s); console errors: "
              f"{len(errors)}")
        print(f"training groups inflated after {statistics.median(groups) / 1000:.2f} s (median; the Training tab "
              "shows them from then on)")


if __name__ == "__main__":
    main()
