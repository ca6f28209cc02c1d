"""A small run folder written from scored completions (no model), with everything the viewer shows: a baseline
(greedy and sampled), an evaluation after training, a log history with held-out accuracy, an alarm, and kept
training groups (one with zero reward variance, one completion holding a ``<script>``)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd

from grpo_kit.evaluation.scoring import score
from grpo_kit.runs.folder import RunFolder
from grpo_kit.runs.measure import evaluated_with
from grpo_kit.tasks import get_task
from grpo_kit.tasks.answer_format import render
from grpo_kit.tasks.data import take_slice
from grpo_kit.training.groups import groups_frame

#: The completion that must show as text, never run.
SCRIPT = "<script>document.title = 'ran'; window.__ran = true;</script><img src=x onerror=\"window.__ran=true\">"
#: Text only question 3's completion after training holds.
NEEDLE = "a needle only this completion holds"
REWARDS = ["strict_format_reward_func", "correctness_reward_func"]


def answer_length(completions=None, **kwargs):
    """A reward of the user's own that the run trained with (weight 0: logged) and the task's metrics lack."""
    return [min(1.0, len(c[-1]["content"]) / 100) for c in completions]


#: What the run trained with, as train_settings.json records it: a set other than the task's six.
TRAINED = {"rewards": {"correctness_reward_func": 2.0, "strict_format_reward_func": 1.0, "answer_length": 0.0},
           "reward_functions": {"answer_length": "tests.viewer_run:answer_length"}}


def questions(n: int) -> list[dict]:
    return list(take_slice(get_task("gsm8k").load("test"), n=n, seed=0))


def _completions(rows: list[dict], right: float, seed: int, samples: int = 1) -> list[list[str]]:
    rng = random.Random(seed)
    return [[render(f"work {i}", r["answer"]) if rng.random() < right else render(f"work {i}", "-1")
             for i in range(samples)] for r in rows]


def _trl_step(rows: list[dict], step: int, groups: int, generations: int) -> pd.DataFrame:
    """What TRL's log_completions writes for one step: conversations, one column per reward, the advantage."""
    data: dict[str, list] = {"step": [], "prompt": [], "completion": [], **{r: [] for r in REWARDS}, "advantage": []}
    for g in range(groups):
        row = rows[(step * groups + g) % len(rows)]
        scores = [0.0] * generations if g == 0 else [float((i + g + step) % 2) for i in range(generations)]
        mean = sum(scores) / generations
        for i, s in enumerate(scores):
            text = SCRIPT if (step, g, i) == (1, 1, 0) else render(f"step {step} try {i}", row["answer"] if s else "7")
            data["step"].append(step)
            data["prompt"].append([{"role": "system", "content": "S"}, {"role": "user", "content": row["question"]}])
            data["completion"].append([{"role": "assistant", "content": text}])
            data["strict_format_reward_func"].append(0.5)
            data["correctness_reward_func"].append(2.0 * s)
            data["advantage"].append(2.0 * (s - mean))
    return pd.DataFrame(data)


def write_run(folder: Path, n: int = 40, steps: int = 4, groups: int = 3, generations: int = 4, seed: int = 1,
              right: float = 0.6, samples: int = 4) -> Path:
    """Write the run folder (module docstring); returns it."""
    rows = questions(n)
    task = get_task("gsm8k")
    folder.mkdir(parents=True, exist_ok=True)
    settings = {"task": "gsm8k", "preset": "cpu-tiny", "slice": {"n": n}, "seed": 0, "questions": n,
                "base_model": "tiny", "base_fingerprint": "abc", "system_prompt": "S", "max_new_tokens": 64,
                "samples": samples, "temperature": 0.7, "route": "transformers", "warm": None, "tiny_spec": None}
    before = _completions(rows, 0.3, 0)
    before[0] = [SCRIPT]  # a completion that must show as text
    after = _completions(rows, right, seed)
    after[3] = [render(NEEDLE, rows[3]["answer"])]  # what the search must find
    for name, completions in {"baseline.jsonl": before, "trained.jsonl": after,
                              "baseline_sampled.jsonl": _completions(rows, 0.3, 5, samples)}.items():
        records = score(rows, completions, task=task, rewards=REWARDS if "sampled" in name else None)
        if name == "trained.jsonl":  # eval after training scores the run's own reward too (runs.measure)
            for r in records:
                r["answer_length"] = answer_length([[{"content": r["completion"]}]])[0]
                r["total"] += r["answer_length"]
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in records))
    # written last, with the records' SHA-256, as the baseline writes it (grpo_kit.runs.measure)
    (folder / "eval_settings.json").write_text(json.dumps({**settings, "files": RunFolder(folder).baseline_files()}))
    (folder / "train_settings.json").write_text(json.dumps({"identity": {"preset": {"name": "cpu-tiny"},
                                                            "rewards": TRAINED["rewards"]},
                                                            **TRAINED, "max_steps": steps}))
    history = [{"step": s, "reward": 0.5 + 0.1 * s, "rewards/correctness_reward_func/mean": 0.1 * s,
                "completions/mean_length": 40 - s} for s in range(1, steps + 1)]
    history += [{"step": s, "eval/strict_accuracy": 0.3 + 0.05 * s, "eval/strict_accuracy_ci_low": 0.1,
                 "eval/strict_accuracy_ci_high": 0.7} for s in range(0, steps + 1, 2)]
    (folder / "log_history.json").write_text(json.dumps(history))
    (folder / "alarms.jsonl").write_text(json.dumps({"kind": "reward_hacking", "step": 2, "rule": "strict",
                                                     "reward_before": 0.5, "reward_after": 0.7,
                                                     "accuracy_before": 0.4, "accuracy_after": 0.2,
                                                     "right_to_wrong": 5, "wrong_to_right": 0,
                                                     "mcnemar_p": 0.06}) + "\n")
    for step in range(1, steps + 1):
        frame = groups_frame(_trl_step(rows, step, groups, generations), step, REWARDS, [1.0, 1.0],
                             generations, groups)
        (folder / "groups").mkdir(exist_ok=True)
        frame.to_parquet(folder / "groups" / f"step-{step:06d}.parquet", index=False)
    run = RunFolder(folder)
    (folder / "model").mkdir(exist_ok=True)
    (folder / "model" / "model.safetensors").write_text(f"the weights of {folder.name}")
    run.mark_finished(steps)
    run.mark_evaluated(steps, run.check_model(), evaluated_with(settings))
    return folder
