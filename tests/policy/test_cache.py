"""The generation cache: resume after a crash, nothing generated twice, keys that track what matters."""

from __future__ import annotations

import pytest
import torch

from grpo_kit.evaluation.scoring import evaluate
from grpo_kit.policy.cache import GenerationCache
from grpo_kit.policy.generation import Sampling, TransformersBackend, model_fingerprint


class Crash(RuntimeError):
    pass


class CountingBackend(TransformersBackend):
    """Counts the prompts it is asked to generate for, and can die after `crash_after` prompts."""

    def __init__(self, *args, crash_after=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.crash_after = crash_after
        self.prompts_generated = 0

    def generate(self, prompts, sampling, on_result=None):
        done = 0

        def report(i, generations):
            nonlocal done
            on_result(i, generations)
            done += 1
            if self.crash_after is not None and done >= self.crash_after:
                raise Crash("killed")

        self.prompts_generated += len(prompts)
        return super().generate(prompts, sampling, on_result=report if on_result else None)


def test_an_interrupted_evaluation_resumes_without_losing_or_repeating_work(tiny_policy, gsm8k_train_small,
                                                                            tmp_path):
    model, tokenizer = tiny_policy
    data = gsm8k_train_small.select(range(10))
    greedy = Sampling(max_new_tokens=8)
    path = tmp_path / "cache.jsonl"

    dying = CountingBackend(model, tokenizer, batch_size=2, progress=False, crash_after=6)
    with pytest.raises(Crash):
        evaluate(dying, data, greedy, cache=path)
    assert len(GenerationCache(path)) == 6  # everything finished before the crash is on disk

    resumed = CountingBackend(model, tokenizer, batch_size=2, progress=False)
    result = evaluate(resumed, data, greedy, cache=path)
    assert resumed.prompts_generated == 4  # only the missing questions
    reference = evaluate(TransformersBackend(model, tokenizer, batch_size=2, progress=False), data, greedy)
    assert [r["completion"] for r in result.records] == [r["completion"] for r in reference.records]

    again = CountingBackend(model, tokenizer, batch_size=2, progress=False)
    evaluate(again, data, greedy, cache=path)
    assert again.prompts_generated == 0  # a full rerun generates nothing


def test_sampled_runs_cache_every_sample(tiny_policy, gsm8k_train_small, tmp_path):
    model, tokenizer = tiny_policy
    data = gsm8k_train_small.select(range(3))
    sampled = Sampling(temperature=1.0, n=4, max_new_tokens=6, seed=2)
    first = evaluate(TransformersBackend(model, tokenizer, progress=False), data, sampled, cache=tmp_path / "c.jsonl")
    backend = CountingBackend(model, tokenizer, progress=False)
    second = evaluate(backend, data, sampled, cache=tmp_path / "c.jsonl")
    assert backend.prompts_generated == 0
    assert [r["completion"] for r in first.records] == [r["completion"] for r in second.records]
    assert len(second.records) == 12


def test_keys_change_with_everything_that_shapes_a_completion():
    prompt = [{"role": "user", "content": "2+2?"}]
    base = GenerationCache.key("m@1", prompt, Sampling(), 0)
    variants = [
        GenerationCache.key("m@2", prompt, Sampling(), 0),
        GenerationCache.key("m@1", [{"role": "user", "content": "2+3?"}], Sampling(), 0),
        GenerationCache.key("m@1", prompt, Sampling(max_new_tokens=64), 0),
        GenerationCache.key("m@1", prompt, Sampling(temperature=0.7, seed=0), 0),
        GenerationCache.key("m@1", prompt, Sampling(temperature=0.7, seed=1), 0),
        GenerationCache.key("m@1", prompt, Sampling(temperature=0.7, top_p=0.9), 0),
        GenerationCache.key("m@1", prompt, Sampling(temperature=0.7, n=2), 1),
    ]
    assert len({base, *variants}) == len(variants) + 1
    assert GenerationCache.key("m@1", prompt, Sampling(), 0) == base


def test_model_fingerprint_tracks_weights_and_adapters(tiny_policy):
    model, _ = tiny_policy
    before = model_fingerprint(model)
    with torch.no_grad():
        next(model.parameters())[0, 0] += 1.0
    assert model_fingerprint(model) != before

    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False))
    adapter = model_fingerprint(peft_model)
    with torch.no_grad():
        next(p for n, p in peft_model.named_parameters() if "lora_B" in n).add_(1.0)
    assert model_fingerprint(peft_model) != adapter


def test_a_line_cut_by_a_crash_is_skipped(tmp_path):
    path = tmp_path / "cache.jsonl"
    path.write_text('{"key": "a", "text": "x", "num_tokens": 1, "truncated": false}\n{"key": "b", "te')
    cache = GenerationCache(path)
    assert len(cache) == 1 and cache.get("a").text == "x" and cache.get("b") is None
    cache.add("c", cache.get("a"))  # appended after the cut line, on a line of its own
    assert GenerationCache(path).get("c").text == "x"


def test_a_task_file_gets_a_warm_start_and_a_budget_sized_to_its_rows(tmp_path):
    import shutil
    from pathlib import Path

    from grpo_kit.policy.source import PolicySource
    from grpo_kit.policy.warm_start import completion_budget, warm_steps_for
    from grpo_kit.tasks import get_task

    example = Path(__file__).resolve().parents[2] / "examples" / "capitals"
    capitals = get_task(str(example / "task.yaml"))
    assert warm_steps_for(capitals) == 75  # 20 passes over 60 rows of 16 per step
    assert warm_steps_for(get_task("gsm8k")) == 300  # the kit's own tasks keep the shipped policy's warm start
    assert PolicySource.of(None, capitals).tiny.warm.steps == 75
    longest = max(len(f"Let's think step by step.\n\n#### {row['answer']}".encode()) for row in capitals.load("train"))
    assert completion_budget(capitals) >= longest + 8 and completion_budget(capitals) % 8 == 0
    folder = tmp_path / "big"
    shutil.copytree(example, folder)
    rows = (folder / "train.jsonl").read_text().splitlines()
    (folder / "train.jsonl").write_text("\n".join(rows * 10) + "\n")  # 600 rows: capped at 300 steps
    assert warm_steps_for(get_task(str(folder / "task.yaml"))) == 300


def test_train_trains_from_the_warm_start_the_baseline_measured(tmp_path):
    import json
    from pathlib import Path

    from grpo_kit.policy.source import PolicySource
    from grpo_kit.policy.warm_start import WarmStart
    from grpo_kit.runs.spec import RunSpec
    from grpo_kit.tasks import get_task

    example = Path(__file__).resolve().parents[2] / "examples" / "capitals" / "task.yaml"
    run = tmp_path / "run"
    run.mkdir()
    warm = {**WarmStart(steps=30).__dict__}
    measured = PolicySource.of(None, get_task(str(example)), warm=WarmStart(steps=30), cache_dir=str(tmp_path / "c"))
    (run / "eval_settings.json").write_text(json.dumps({"task": str(example), "warm": warm, "model_override": None,
                                                        "base_model": measured.name,
                                                        "cache_dir": str(tmp_path / "c")}))
    spec = RunSpec.resolve(task=None, run_dir=run, cache_dir=str(tmp_path / "c"))  # train's: the recorded task
    assert spec.policy.tiny.warm.steps == 30  # not the 75 a new run on this task would get
    with pytest.raises(ValueError, match="--warm-steps 30"):  # another warm start would not be what was measured
        RunSpec.resolve(task=None, run_dir=run, warm_steps=40)
