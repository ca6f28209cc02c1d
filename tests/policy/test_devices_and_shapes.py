"""Where the weights go on a faked GPU and launch, the vLLM server's health probe, one LoRA request per Unsloth
backend, and the shipped model shapes (shapes on the meta device)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import types
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from grpo_kit.policy import devices
from grpo_kit.policy.devices import Launch, gpus, placement

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake_cuda(monkeypatch):
    """Torch.cuda as a machine with GPUs would report it: count, names, memory, bfloat16 support."""
    import torch

    def install(count=2, name="NVIDIA A100-SXM4-80GB", memory_gib=79.2, bf16=True):
        props = types.SimpleNamespace(name=name, total_memory=int(memory_gib * 2**30), major=8 if bf16 else 7,
                                      minor=0 if bf16 else 5)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # counts emulation: not read

    return install


def test_ddp_puts_each_process_on_its_own_gpu_not_device_map_auto(fake_cuda, monkeypatch):
    """Each DDP process loads on its own GPU: accelerate 1.15 refuses device_map='auto' in any distributed mode."""
    fake_cuda(count=2)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert placement() == {"dtype": "bfloat16", "device_map": {"": 1}}
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert placement()["device_map"] == {"": 0}


@pytest.mark.parametrize("env", [{"ACCELERATE_USE_FSDP": "true"},
                                 {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"}])
def test_sharded_launches_leave_placement_to_the_engine(fake_cuda, monkeypatch, env):
    fake_cuda(count=4)
    for key, value in {"WORLD_SIZE": "4", "RANK": "2", "LOCAL_RANK": "2", **env}.items():
        monkeypatch.setenv(key, value)
    assert placement(trains_all_weights=True) == {"dtype": "float32", "device_map": None}


def test_zero2_is_a_replica_per_gpu(fake_cuda, monkeypatch):
    fake_cuda(count=2)
    for key, value in {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "ACCELERATE_USE_DEEPSPEED": "true",
                       "ACCELERATE_DEEPSPEED_ZERO_STAGE": "2"}.items():
        monkeypatch.setenv(key, value)
    assert placement()["device_map"] == {"": 0}


def test_one_process_may_spread_over_the_gpus(fake_cuda, monkeypatch):
    fake_cuda(count=2)
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "ACCELERATE_USE_FSDP", "ACCELERATE_DEEPSPEED_ZERO_STAGE"):
        monkeypatch.delenv(key, raising=False)
    assert placement() == {"dtype": "bfloat16", "device_map": "auto"}


def test_a_card_without_bfloat16_gets_float16_not_bfloat16(fake_cuda):
    """A card without bfloat16 (T4, V100) loads in float16."""
    fake_cuda(count=1, name="Tesla T4", memory_gib=14.7, bf16=False)
    gpu = devices.first_gpu()
    assert (gpu.name, round(gpu.memory_gib, 1), gpu.bf16) == ("Tesla T4", 14.7, False)
    assert placement(launch=Launch())["dtype"] == "float16"
    assert placement(trains_all_weights=True, launch=Launch())["dtype"] == "float32"


def test_the_card_table():
    from grpo_kit.policy.devices import CARDS, card

    assert set(CARDS) >= {"a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb", "l4-24gb", "t4-16gb"}
    assert [name for name, gpu in CARDS.items() if not gpu.bf16] == ["t4-16gb"]
    assert card("a100-40gb").memory_gib < card("a100-80gb").memory_gib
    assert all(gpu.bandwidth_gbs for gpu in CARDS.values()) and card("h200-141gb").bandwidth_gbs == 4800
    with pytest.raises(ValueError, match="unknown card 'v100'.*t4-16gb"):
        card("v100")
    with pytest.raises(ValueError, match="unknown card 'h200': did you mean h200-141gb"):
        card("h200")


def test_a_card_found_here_takes_its_bandwidth_from_the_one_table(fake_cuda):
    """Issue 56: policy/devices.CARDS had no H200 while training/cost.BANDWIDTH_GBS had one; the bandwidth the time
    estimates scale by is now the card table's, for a card this machine has as for one planned by name."""
    from grpo_kit.policy import devices

    fake_cuda(count=1, name="NVIDIA H200", memory_gib=139.8, bf16=True)
    assert devices.first_gpu().bandwidth_gbs == 4800
    fake_cuda(count=1, name="NVIDIA A100-PCIE-40GB", memory_gib=39.4, bf16=True)
    assert devices.first_gpu().bandwidth_gbs is None  # unknown to the table: no bandwidth scaling, said in the basis


class _OnlyHealth(BaseHTTPRequestHandler):
    """A vLLM server in dev mode as far as the probe is concerned: 200 at /health and at /get_world_size (a
    weight-sync route), 404 anywhere else (also /health/)."""

    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200 if self.path in ("/health", "/get_world_size") else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_the_server_probe_asks_where_vllm_and_trl_ask():
    """The server probe asks /health, as trl 1.15's client does (vLLM's server does not answer /health/)."""
    from grpo_kit.policy.vllm import check_vllm_server

    server = HTTPServer(("127.0.0.1", 0), _OnlyHealth)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        check_vllm_server("127.0.0.1", server.server_address[1], timeout_s=5)
    finally:
        server.shutdown()
        server.server_close()


class _NoDevMode(_OnlyHealth):
    """VLLM's server started without VLLM_SERVER_DEV_MODE=1: /health answers, the weight-sync routes do not exist."""

    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()


def test_a_server_without_dev_mode_is_refused_before_the_model_loads():
    from grpo_kit.policy.vllm import check_vllm_server

    server = HTTPServer(("127.0.0.1", 0), _NoDevMode)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(ConnectionError, match=r"answers /health but not /get_world_size \(404\): it was started "
                                                  r"without VLLM_SERVER_DEV_MODE=1.*VLLM_SERVER_DEV_MODE=1 vllm serve"):
            check_vllm_server("127.0.0.1", server.server_address[1], timeout_s=5)
    finally:
        server.shutdown()
        server.server_close()


def test_an_absent_server_is_told_the_command_trl_1_15_runs():
    import socket

    from grpo_kit.policy.vllm import check_vllm_server

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectionError) as e:
        check_vllm_server("127.0.0.1", port, timeout_s=1, model="m", max_model_len=512)
    message = str(e.value)
    assert "trl vllm-serve" not in message
    assert "VLLM_SERVER_DEV_MODE=1 vllm serve m" in message and "--max-model-len 512" in message
    assert """--weight-transfer-config '{"backend": "nccl"}' --logprobs-mode processed_logprobs --max-logprobs -1""" \
        in message


class _FakeUnslothModel:
    """Fast_generate and load_lora as Unsloth's model has them; load_lora hands out a new id each call."""

    def __init__(self):
        self.loads, self.requests = 0, []
        self.config = types.SimpleNamespace(_name_or_path="fake")

    def load_lora(self, path):
        self.loads += 1
        return f"lora-{self.loads}"

    def fast_generate(self, requests, sampling_params=None, lora_request=None):
        self.requests.append(lora_request)
        output = types.SimpleNamespace(text="x", token_ids=[1], finish_reason="stop")
        return [types.SimpleNamespace(outputs=[output]) for _ in requests]


class _Tokenizer:
    def apply_chat_template(self, prompt, add_generation_prompt=True, tokenize=False):
        return str(prompt)

    def __call__(self, texts, add_special_tokens=False):
        return {"input_ids": [[1, 2] for _ in texts]}


def test_the_unsloth_backend_loads_its_adapter_once(monkeypatch, tmp_path):
    """The Unsloth backend makes one LoRA request for its life, not a new adapter id per generate call."""
    from grpo_kit.policy.generation import Sampling
    from grpo_kit.policy.vllm import UnslothVLLMBackend

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(SamplingParams=lambda **kw: kw))
    model = _FakeUnslothModel()
    backend = UnslothVLLMBackend(model, _Tokenizer(), lora_path=tmp_path, chunk_size=1)
    for _ in range(3):
        backend.generate([[{"role": "user", "content": "1+1"}], [{"role": "user", "content": "2+2"}]],
                         Sampling(temperature=0.0, max_new_tokens=4))
    assert model.loads == 1 and set(model.requests) == {"lora-1"}
    base = _FakeUnslothModel()
    UnslothVLLMBackend(base, _Tokenizer()).generate([[{"role": "user", "content": "1"}]], Sampling(temperature=0.0))
    assert base.loads == 0 and base.requests == [None]


# The published sizes: Meta's Llama 3.1 model card; Qwen's Qwen2.5 model cards (total, without embeddings).
PUBLISHED = {"meta-llama/Llama-3.1-8B-Instruct": (8.03e9, None), "Qwen/Qwen2.5-1.5B-Instruct": (1.54e9, 1.31e9),
             "Qwen/Qwen2.5-3B-Instruct": (3.09e9, 2.77e9)}


@pytest.mark.parametrize("model", sorted(PUBLISHED))
def test_the_shipped_shapes_build_on_meta_at_the_published_sizes(model):
    import torch

    from grpo_kit.policy.shapes import build_random, model_config, model_shape

    shape, config = model_shape(model), model_config(model)
    built = build_random(model)  # on the meta device
    assert all(t.device == torch.device("meta") for t in built.parameters())
    total, without_embeddings = PUBLISHED[model]
    assert abs(shape.parameters - total) / total < 0.005
    if without_embeddings is not None:
        body = shape.parameters - shape.vocab_size * shape.hidden_size
        assert abs(body - without_embeddings) / without_embeddings < 0.005
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    assert shape.linears["q_proj"] == layers * 2 * hidden  # in: hidden; out: every head's query, hidden in all
    assert (shape.hidden_size, shape.num_layers, shape.vocab_size) == (hidden, layers, config["vocab_size"])


def test_llama_3_1_8b_kv_cache_lora_and_quantized_weights():
    from grpo_kit.policy.shapes import model_shape

    shape = model_shape("unsloth/Meta-Llama-3.1-8B-Instruct")
    assert shape.kv_per_token * 2 == 128 * 1024  # bytes a token in bfloat16
    assert shape.lora_parameters(32, ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")) \
        == 83_886_080  # 32 layers x 32 x (4096+4096 + 4096+1024 + 4096+1024 + 4096+4096 + 3 x (4096+14336))
    assert shape.lora_parameters(32, "all-linear") == 83_886_080  # peft's shorthand: all but the output projection
    # 4-bit loading quantizes the decoder's linear layers: 7 projections, the output projection left 16-bit
    assert shape.linear_parameters == 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)


def test_an_unknown_model_says_how_to_give_its_config(tmp_path):
    from grpo_kit.policy.shapes import model_shape

    with pytest.raises(LookupError, match="no config.json for 'nobody/none'"):
        model_shape("nobody/none")
    (tmp_path / "config.json").write_text('{"model_type": "no-such-architecture", "hidden_size": 8}')
    with pytest.raises(ValueError, match="transformers cannot build a causal language model"):
        model_shape(tmp_path)


# Gemma 2 2B (Google's model card: 2.61B parameters, embedding tied) and Phi-3-mini (Microsoft's: 3.8B, fused
# qkv_proj and gate_up_proj), their config.json's sizes.
GEMMA2 = {"model_type": "gemma2", "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
          "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 256000,
          "max_position_embeddings": 8192, "tie_word_embeddings": True, "torch_dtype": "bfloat16"}
PHI3 = {"model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32064, "max_position_embeddings": 4096,
        "tie_word_embeddings": False, "pad_token_id": 32000, "torch_dtype": "bfloat16"}


def test_plan_estimates_architectures_other_than_llamas(tmp_path):
    import json

    from grpo_kit.policy.shapes import model_shape
    from grpo_kit.training.plan import make_plan
    from grpo_kit.training.presets import PRESETS

    folders = {}
    for name, config in (("gemma", GEMMA2), ("phi3", PHI3)):
        folders[name] = tmp_path / name
        folders[name].mkdir()
        (folders[name] / "config.json").write_text(json.dumps(config))
    gemma = model_shape(folders["gemma"])
    # by hand: the tied embedding; per layer 7 projections and 4 norms; the final norm
    layer = 2304 * 2048 + 2 * 2304 * 1024 + 2048 * 2304 + 3 * 2304 * 9216 + 4 * 2304
    assert gemma.parameters == 256000 * 2304 + 26 * layer + 2304 and abs(gemma.parameters - 2.61e9) < 0.01e9
    assert gemma.kv_per_token == 2 * 26 * 4 * 256
    plan = make_plan("multi-gpu-lora", overrides={"model_name_or_path": str(folders["gemma"])}, device="a100-80gb",
                     launch="zero3", processes=8)
    memory = plan.memory
    assert memory is not None and "2.61B parameters" in memory["basis"]
    assert memory["parts"]["weights"] == round(gemma.parameters * 2 / 8 / 2**30, 2)  # 16-bit, sharded by ZeRO-3
    phi3 = model_shape(folders["phi3"])
    assert set(phi3.linears) == {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}
    assert abs(phi3.parameters - 3.82e9) < 0.01e9
    # the recipe's LoRA targets name Llama's projections: as peft, those Phi-3 has (o_proj, down_proj) are counted
    plan = make_plan("multi-gpu-lora", overrides={"model_name_or_path": str(folders["phi3"])}, device="a100-80gb")
    lora = PRESETS["multi-gpu-lora"].lora_rank * 32 * (2 * 3072 + 8192 + 3072)
    assert plan.memory["parts"]["trainable"] == round(lora * 8 / 2**30, 2)  # float32 adapter and gradient
    plan = make_plan("multi-gpu-lora", overrides={"model_name_or_path": str(folders["phi3"]),
                                                  "lora_target_modules": ["q_proj"]}, device="a100-80gb")
    assert plan.memory is None
    assert any("name no linear layer" in p and "qkv_proj" in p for p in plan.problems)
    plan = make_plan("multi-gpu-lora", overrides={"model_name_or_path": str(folders["phi3"]),
                                                  "lora_target_modules": "all-linear"}, device="a100-80gb")
    assert plan.memory["parts"]["trainable"] > 0


@pytest.mark.skipif(not os.environ.get("GRPO_KIT_DEEPSPEED"), reason="DeepSpeed lives in .deepspeed (make test)")
def test_zero3_loading_makes_transformers_load_partitioned_while_kept():
    """Under ZeRO-3, transformers loads each process's shard only when DeepSpeed's config is live before
    from_pretrained; the kit makes it so (and only under ZeRO-3)."""
    code = ("from grpo_kit.policy.devices import Launch, zero3_loading\n"
            "from transformers.integrations import is_deepspeed_zero3_enabled\n"
            "assert zero3_loading(Launch(world_size=2, zero_stage=2)) is None and not is_deepspeed_zero3_enabled()\n"
            "kept = zero3_loading(Launch(world_size=2, zero_stage=3))\n"
            "assert is_deepspeed_zero3_enabled()\n"
            "del kept\nimport gc; gc.collect()\nassert not is_deepspeed_zero3_enabled()\nprint('ok')\n")
    env = {**os.environ, "ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ["GRPO_KIT_DEEPSPEED"]])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]


def test_bfloat16_is_read_from_the_compute_capability_not_from_torchs_emulation_answer(fake_cuda):
    """A T4 (7.5) answers yes to torch.cuda.is_bf16_supported() (it counts emulation: torch/cuda/__init__.py,
    including_emulation=True); the kit reads compute capability >= 8.0, so preset None is colab-t4 there."""
    from grpo_kit.training.presets import device_preset, get_preset

    fake_cuda(count=1, name="Tesla T4", memory_gib=14.7, bf16=False)
    assert gpus()[0].bf16 is False and device_preset() == "colab-t4" and get_preset(None).name == "colab-t4"
    assert placement(gpu=gpus()[0])["dtype"] == "float16"
    fake_cuda(count=1, name="NVIDIA A100-SXM4-40GB", memory_gib=39.4, bf16=True)
    assert device_preset() == "a100"
