"""Scoring, the blog post's table, before/after comparison, paired statistics, the transformers backend."""

from __future__ import annotations

import math

import pytest

from grpo_kit.evaluation.compare import compare, compare_markdown, flipped, flips, paired_test
from grpo_kit.evaluation.report import format_only_sentence
from grpo_kit.evaluation.scoring import EvalResult, evaluate, score
from grpo_kit.evaluation.stats import mcnemar_exact
from grpo_kit.evaluation.summary import sampled_metrics, summarize
from grpo_kit.policy.generation import Generation, Sampling, TransformersBackend
from grpo_kit.tasks import get_task

GSM8K = get_task("gsm8k")

GOOD = "<reasoning>\n2+2=4\n</reasoning>\n<answer>\n4\n</answer>"
EXAMPLES = [{"prompt": [{"role": "user", "content": f"q{i}"}], "answer": "4", "question": f"q{i}"} for i in range(4)]


class ScriptedBackend:
    """Returns fixed completions, one list per prompt, to test evaluation without a model."""

    def __init__(self, texts):
        self.texts = texts

    def generate(self, prompts, sampling):
        assert len(prompts) == len(self.texts)
        return [[Generation(t, num_tokens=len(t), truncated=False)] for t in self.texts]


def test_score_records_and_summary_table():
    records = score(EXAMPLES[:2], [[GOOD], ["4"]])
    assert [r["correctness_reward_func"] for r in records] == [1.0, 1.0]  # "4" untagged still equals gold
    assert records[0]["total"] == pytest.approx(4.0)
    assert records[1]["extracted"] == "4" and records[1]["final_answer"] == "4"
    table = summarize(records, GSM8K)
    assert list(table.index) == ["Strict accuracy", "Flexible accuracy", "Hard correctness", "Soft correctness",
                                 "Integer", "Soft format", "Strict format", "XML tag count",
                                 "Sum of rewards (unweighted)"]
    assert list(table.columns) == ["value", "ci_low", "ci_high", "max"]
    assert table.loc["Strict format", "value"] == pytest.approx(0.25)
    assert table.loc["Sum of rewards (unweighted)", "max"] == 4.0


def test_evaluate_and_compare_with_paired_statistics():
    before = evaluate(ScriptedBackend(["4", "5", "5", "5"]), EXAMPLES)
    after = evaluate(ScriptedBackend([GOOD, GOOD, GOOD, "5"]), EXAMPLES)
    table = compare(before, after)
    assert list(table.columns)[:5] == ["metric", "before", "after", "delta", "max"]
    row = table.set_index("metric").loc["Hard correctness"]
    assert (row["before"], row["after"], row["delta"]) == (0.25, 0.75, 0.5)
    assert table.attrs["wrong_to_right"] == 2 and table.attrs["right_to_wrong"] == 0
    assert table.attrs["mcnemar_p"] == pytest.approx(0.5)
    assert "| Hard correctness" in table.to_markdown(index=False)
    assert paired_test(before, after, "strict_format_reward_func")["wrong_to_right"] == 3


def test_eval_result_writes_jsonl(tmp_path):
    result = evaluate(ScriptedBackend([GOOD] * 4), EXAMPLES)
    path = result.to_jsonl(tmp_path / "sub" / "records.jsonl")
    assert len(path.read_text().splitlines()) == 4


def test_mcnemar_exact_against_hand_computation():
    # b=10, c=2: p = 2 * sum_{k<=2} C(12,k) / 2^12 = 2 * 79 / 4096
    assert mcnemar_exact(10, 2) == pytest.approx(2 * 79 / 4096)
    assert mcnemar_exact(2, 10) == mcnemar_exact(10, 2)
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(5, 5) == 1.0
    assert mcnemar_exact(20, 0) == pytest.approx(2 * 0.5 ** 20)
    assert math.isclose(mcnemar_exact(1, 0), 1.0)


def test_flips_needs_paired_lists():
    assert flips([True, False], [False, True]) == (1, 1)
    with pytest.raises(ValueError):
        flips([True], [True, False])


def test_sampling_settings_are_checked():
    with pytest.raises(ValueError, match="greedy"):
        Sampling(temperature=0.0, n=4)
    with pytest.raises(ValueError):
        Sampling(max_new_tokens=0)


def test_transformers_backend_greedy_is_deterministic_and_batch_independent(tiny_policy, gsm8k_train_small):
    model, tokenizer = tiny_policy
    prompts = gsm8k_train_small["prompt"][:5]
    greedy = Sampling(max_new_tokens=12)
    one = TransformersBackend(model, tokenizer, batch_size=1, progress=False).generate(prompts, greedy)
    many = TransformersBackend(model, tokenizer, batch_size=4, progress=False).generate(prompts, greedy)
    assert [g[0].text for g in one] == [g[0].text for g in many]  # left padding does not change outputs
    assert all(len(g) == 1 for g in one)
    # A random policy rarely emits EOS in 12 tokens: such a completion is reported as truncated.
    assert all(g[0].truncated == (g[0].num_tokens == 12) for g in one)


def test_transformers_backend_samples_n_per_prompt(tiny_policy, gsm8k_train_small):
    model, tokenizer = tiny_policy
    prompts = gsm8k_train_small["prompt"][:3]
    sampled = Sampling(temperature=1.0, n=4, max_new_tokens=8, seed=1)
    out = TransformersBackend(model, tokenizer, batch_size=2, progress=False).generate(prompts, sampled)
    assert [len(g) for g in out] == [4, 4, 4]
    again = TransformersBackend(model, tokenizer, batch_size=2, progress=False).generate(prompts, sampled)
    assert [[s.text for s in g] for g in out] == [[s.text for s in g] for g in again]
    assert len({s.text for g in out for s in g}) > 3  # samples differ


@pytest.mark.parametrize("adapter", [False, True], ids=["model", "lora"])
def test_samples_continue_from_one_prompt_cache_and_are_the_samples_generate_draws(tiny_policy, gsm8k_train_small,
                                                                                   monkeypatch, adapter):
    """n samples per prompt encode each prompt once (its cache repeated n times) and draw exactly what
    generate(num_return_sequences=n) draws, prompts of different lengths left padded in one batch."""
    import torch

    import grpo_kit.policy.generation as generation

    model, tokenizer = tiny_policy
    if adapter:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    prompts = [gsm8k_train_small["prompt"][i] for i in (0, 1, 2, 3)]
    texts = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts]
    assert len({len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts}) > 1  # padded
    sampled = Sampling(temperature=1.0, n=4, max_new_tokens=10, seed=3)
    calls = []
    monkeypatch.setattr(generation, "_prefilled_once", lambda *a, _f=generation._prefilled_once: calls.append(a[2])
                        or _f(*a))
    shared = TransformersBackend(model, tokenizer, batch_size=4, progress=False).generate(prompts, sampled)
    assert calls == [4]
    monkeypatch.setattr(generation, "_shares_prompt_prefill", lambda model: False)
    repeated = TransformersBackend(model, tokenizer, batch_size=4, progress=False).generate(prompts, sampled)
    assert [[s.text for s in g] for g in shared] == [[s.text for s in g] for g in repeated]
    assert len({s.text for g in shared for s in g}) > 4  # samples differ
    enc = tokenizer(texts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    first = dict(max_new_tokens=3, do_sample=False, output_scores=True, return_dict_in_generate=True,
                 pad_token_id=tokenizer.pad_token_id)
    with torch.no_grad():
        plain = model.generate(**enc, **first).scores
        cached = model.generate(**generation._prefilled_once(model, enc, 2), **first).scores
    for step_plain, step_cached in zip(plain, cached, strict=True):  # the positions generate counts, each step
        torch.testing.assert_close(step_cached, step_plain.repeat_interleave(2, dim=0), atol=1e-5, rtol=1e-4)


def test_a_model_whose_forward_is_not_transformers_own_or_on_a_gpu_is_not_handed_a_prompt_cache(tiny_policy):
    """Unsloth replaces its models' forward with one keeping an inference cache of its own: such a model
    generates its samples as generate repeats them; so does a model on a GPU (a route not run there)."""
    import torch

    from grpo_kit.policy.generation import _shares_prompt_prefill

    model, _ = tiny_policy
    assert _shares_prompt_prefill(model)
    plain = type(model)

    class Replaced(plain):
        def forward(self, *args, **kwargs):
            return super().forward(*args, **kwargs)

    class OnAGpu(plain):
        device = torch.device("cuda", 0)

    for other in (Replaced, OnAGpu):
        model.__class__ = other
        assert not _shares_prompt_prefill(model), other


def test_evaluate_on_the_tiny_policy(tiny_policy, gsm8k_train_small):
    model, tokenizer = tiny_policy
    result = evaluate(TransformersBackend(model, tokenizer, progress=False), gsm8k_train_small.select(range(6)),
                      Sampling(max_new_tokens=8))
    assert isinstance(result, EvalResult)
    assert len(result.records) == 6
    assert result.summary.loc["Sum of rewards (unweighted)", "max"] == 4.0


def test_eval_result_round_trips_through_jsonl(tmp_path):
    result = evaluate(ScriptedBackend([GOOD, "5", GOOD, "4"]), EXAMPLES)
    again = EvalResult.from_jsonl(result.to_jsonl(tmp_path / "r.jsonl"))
    assert again.records == result.records
    assert again.summary.equals(result.summary)


def test_flipped_lists_changed_questions_with_both_completions():
    before = evaluate(ScriptedBackend(["4", "5", "4", "5"]), EXAMPLES)
    after = evaluate(ScriptedBackend(["5", GOOD, "4", "5"]), EXAMPLES)
    frame = flipped(before, after)
    assert list(frame["change"]) == ["wrong -> right", "right -> wrong"]
    assert list(frame["index"]) == [1, 0]
    assert frame.iloc[0]["before"] == "5" and frame.iloc[0]["after"] == GOOD
    assert frame.iloc[0]["extracted_after"] == "4"


def test_before_after_chart():
    import matplotlib.pyplot as plt

    from grpo_kit.evaluation.plots import plot_before_after

    before = evaluate(ScriptedBackend(["4", "5", "5", "5"]), EXAMPLES)
    after = evaluate(ScriptedBackend([GOOD, GOOD, GOOD, "5"]), EXAMPLES)
    fig = plot_before_after(compare(before, after))
    assert len(fig.axes[0].patches) == 2 * 9
    plt.close(fig)


def test_strict_and_flexible_rules_side_by_side():
    records = score(EXAMPLES[:3], [[GOOD], ["The answer is 4."], ["<answer>4</answer>"]])
    assert [r["strict_correct"] for r in records] == [1.0, 0.0, 0.0]
    assert [r["flexible_correct"] for r in records] == [1.0, 1.0, 1.0]
    assert records[0]["strict_answer"] == "4" and records[1]["strict_answer"] is None


def test_sampled_metrics_avg_pass_and_maj():
    # question 0 (gold 4): 2 of 4 samples right, "4" wins the vote; question 1 (gold 7): none right
    completions = [[GOOD, "5", GOOD, "3"], ["5", "5", "6", "3"]]
    examples = [dict(EXAMPLES[0]), dict(EXAMPLES[1], answer="7")]
    metrics = sampled_metrics(score(examples, completions))
    assert metrics.loc["avg@4 (flexible)", "value"] == pytest.approx((2 / 4 + 0) / 2)
    assert metrics.loc["pass@1 (flexible)", "value"] == pytest.approx(0.25)
    assert metrics.loc["pass@4 (flexible)", "value"] == pytest.approx(0.5)
    assert metrics.loc["pass@2 (strict)", "value"] == pytest.approx((1 - 1 / 6) / 2)
    assert metrics.loc["maj@4 (flexible)", "value"] == pytest.approx(0.5)
    assert list(metrics.columns) == ["value", "ci_low", "ci_high"]


def test_compare_reports_intervals_flips_and_format_only_gain():
    before = evaluate(ScriptedBackend(["4", "The answer is 4", "5", "5"]), EXAMPLES)
    after = evaluate(ScriptedBackend([GOOD, GOOD, "5", "5"]), EXAMPLES)
    table = compare(before, after).set_index("metric")
    assert table.loc["Strict accuracy", "delta"] == 0.5
    assert table.loc["Flexible accuracy", "delta"] == 0.0
    assert compare(before, after).attrs["format_only_gain"] == 0.5
    assert compare(before, after).attrs["format_only_questions"] == 2  # both were right, unformatted
    assert "+0.500 is format only" in format_only_sentence(compare(before, after))
    assert table.loc["Strict accuracy", "wrong_to_right"] == 2
    assert table.loc["Strict accuracy", "delta_low"] <= 0.5 <= table.loc["Strict accuracy", "delta_high"]
    assert math.isnan(table.loc["Sum of rewards (unweighted)", "mcnemar_p"])
    markdown = compare_markdown(compare(before, after))
    assert "| Strict accuracy | 0.000 [0.000, 0.000] | 0.500 [" in markdown


def test_the_format_only_part_never_exceeds_the_strict_gain():
    # the demo's case: strict +0.25, flexible -0.25; "strict - flexible" would call +0.5 of a +0.25 gain format only
    before = evaluate(ScriptedBackend(["4", "4", "5", "5"]), EXAMPLES)
    after = evaluate(ScriptedBackend([GOOD, "x", "5", "5"]), EXAMPLES)
    table = compare(before, after)
    assert table.attrs["strict_gain"] == 0.25 and table.attrs["flexible_gain"] == -0.25
    assert table.attrs["format_only_gain"] == 0.25
    assert "Of the strict-accuracy gain of +0.250, +0.250 is format only" in format_only_sentence(table)
    fell = compare(after, before)
    assert fell.attrs["format_only_gain"] == 0.0
    assert "did not rise (-0.250), so none of it is format only" in format_only_sentence(fell)


def test_diagnostics():
    result = evaluate(ScriptedBackend([GOOD, "4", GOOD, "x"]), EXAMPLES)
    d = result.diagnostics()
    assert d["has <answer>"] == 0.5 and d["truncation_rate"] == 0.0
    assert d["max_tokens"] == len(GOOD)


def test_training_curves_are_titled_in_words_with_their_maximum(tmp_path):
    import matplotlib.pyplot as plt

    from grpo_kit.evaluation.plots import plot_training_curves, smoothed
    from grpo_kit.tasks import RewardSet

    rewards = RewardSet({"xmlcount_reward_func": 1.0, "correctness_reward_func": 2.0})
    history = [{"step": s, "reward": s / 10, "completions/mean_length": 30.0, "rewards/xmlcount_reward_func/mean": 0.1,
                "rewards/correctness_reward_func/mean": s % 2} for s in range(1, 21)]
    fig = plot_training_curves(history, tmp_path / "curves.png", rewards=rewards, max_length=64)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    # 0.5 (XML tag count) x weight 1 + 1.0 (hard correctness) x weight 2
    assert titles == ["XML tag count, max 0.5", "Hard correctness, max 1",
                      "Weighted total reward (TRL's reward), max 2.5", "Completion length, max 64"]
    raw, mean = fig.axes[1].get_lines()[:2]  # the raw values faint, their running mean over 2 of 20 steps on top
    assert raw.get_alpha() < 1 and mean.get_alpha() is None and raw.get_linewidth() < mean.get_linewidth()
    assert list(mean.get_ydata()) == smoothed([s % 2 for s in range(1, 21)], 2)
    assert (tmp_path / "curves.png").stat().st_size > 10_000
    plt.close(fig)
