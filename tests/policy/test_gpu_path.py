"""The GPU path's logic that a CPU can check: settings, errors without CUDA, adapters, merging, vLLM mapping.

What needs a GPU (Unsloth, vLLM) is in tests/gpu and skips here.
"""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

import grpo_kit
from grpo_kit.policy.generation import Sampling
from grpo_kit.policy.source import PolicySource
from grpo_kit.policy.vllm import UnslothVLLMBackend, generations_of, sampling_params
from grpo_kit.tasks import get_task
from grpo_kit.training.checks import check_settings
from grpo_kit.training.presets import get_preset
from grpo_kit.training.trainer import grpo_config

GSM8K = get_task("gsm8k")


def test_nothing_imports_unsloth_or_vllm():
    code = ("import pkgutil, importlib, sys, grpo_kit\n"
            "for m in pkgutil.walk_packages(grpo_kit.__path__, 'grpo_kit.'):\n"
            "    if not m.name.endswith('.__main__'):\n"
            "        importlib.import_module(m.name)\n"
            "print(sorted(k for k in sys.modules if k.split('.')[0] in ('unsloth', 'vllm', 'unsloth_zoo')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    walked = {m.name for m in pkgutil.walk_packages(grpo_kit.__path__, "grpo_kit.")}
    assert walked >= {"grpo_kit.policy.vllm", "grpo_kit.policy.loading", "grpo_kit.policy.routes",
                      "grpo_kit.training.trainer"}


@pytest.mark.parametrize("overrides, message", [
    (dict(use_peft=False), "cannot combine full fine-tuning with fast_inference"),
    (dict(use_unsloth=False), "fast_inference is Unsloth's"),
    (dict(fast_inference=False, use_vllm=True), "use_vllm is for the plain transformers path"),
])
def test_gpu_route_conflicts_are_caught_before_loading(overrides, message):
    with pytest.raises(ValueError, match=message):
        check_settings(get_preset("a100", bf16=False, **overrides), GSM8K.reward_set())


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message a CPU-only user gets")
def test_unsloth_on_a_cpu_names_the_cpu_alternative():
    from grpo_kit.policy.loading import load_unsloth_policy

    preset = get_preset("a100")
    with pytest.raises(RuntimeError, match="cpu-tiny"):
        PolicySource.of(preset.model, GSM8K, seed=preset.seed).load(preset.loading)
    with pytest.raises(RuntimeError, match="needs an NVIDIA GPU"):
        load_unsloth_policy("unsloth/Qwen2.5-3B-Instruct")
    assert "unsloth" not in sys.modules


def test_presets_for_each_card(tmp_path):
    assert get_preset("a100").model == "unsloth/Meta-Llama-3.1-8B-Instruct"
    t4 = grpo_config(get_preset("colab-t4"), str(tmp_path), GSM8K.reward_set())
    assert t4.fp16 and not t4.bf16 and t4.num_generations == 6
    full = get_preset("full-80gb")
    assert full.lora_rank is None and not full.use_unsloth
    config = grpo_config(get_preset("full-80gb", bf16=False), str(tmp_path), GSM8K.reward_set())
    assert config.use_vllm and config.vllm_mode == "colocate"


def test_an_untrained_adapter_is_caught(tiny_policy, tmp_path):
    from peft import LoraConfig, get_peft_model

    from grpo_kit.policy.loading import check_adapter_trained

    model, _ = tiny_policy
    peft_model = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    peft_model.save_pretrained(tmp_path / "untrained")
    with pytest.raises(ValueError, match="all zeros"):
        check_adapter_trained(tmp_path / "untrained")
    with torch.no_grad():
        next(p for n, p in peft_model.named_parameters() if "lora_B" in n).add_(0.01)
    peft_model.save_pretrained(tmp_path / "trained")
    check_adapter_trained(tmp_path / "trained")
    with pytest.raises(FileNotFoundError):
        check_adapter_trained(tmp_path)


def test_merged_model_matches_base_plus_adapter(tiny_policy, tmp_path):
    from peft import LoraConfig, get_peft_model

    from grpo_kit.policy.loading import load_policy, save_merged

    model, tokenizer = tiny_policy
    peft_model = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    ids = tokenizer("48/2=24", return_tensors="pt")
    with torch.no_grad():
        expected = peft_model(**ids).logits
    merged, _ = load_policy(save_merged(peft_model, tokenizer, tmp_path / "merged"), dtype="float32")
    assert not (tmp_path / "merged" / "adapter_config.json").exists()
    with torch.no_grad():
        assert torch.allclose(merged(**ids).logits, expected, atol=1e-4)


def test_vllm_sampling_and_outputs_map_to_the_kit():
    assert sampling_params(Sampling()) == {"n": 1, "temperature": 0.0, "top_p": 1.0, "max_tokens": 256, "seed": 0}
    output = SimpleNamespace(outputs=[SimpleNamespace(text="a", token_ids=[1, 2], finish_reason="stop"),
                                      SimpleNamespace(text="b", token_ids=[1, 2, 3], finish_reason="length")])
    generations = generations_of(output)
    assert [(g.text, g.num_tokens, g.truncated) for g in generations] == [("a", 2, False), ("b", 3, True)]
    with pytest.raises(ValueError, match="fast_generate"):
        UnslothVLLMBackend(object(), None)
    importlib.import_module("grpo_kit.policy.vllm")  # importable without vllm installed


_FAKE_VLLM = '''
import sys
from types import SimpleNamespace

class SamplingParams:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)

class LLM:
    def __init__(self, model, **kwargs):
        self.model = model

    def generate(self, prompts, params, use_tqdm=True):
        sys.stderr.write("vllm log line " * 20000)  # more than a pipe buffer holds
        return [SimpleNamespace(outputs=[SimpleNamespace(text=f"{len(p['prompt_token_ids'])} tokens, sample {k}",
                                                         token_ids=[1] * (k + 1), finish_reason="stop")
                                         for k in range(params.n)]) for p in prompts]
'''


def test_subprocess_vllm_backend_protocol(tiny_policy, tiny_policy_files, tmp_path, monkeypatch):
    """The child process, its JSON lines and a chatty stderr, with a stand-in ``vllm`` module."""
    import grpo_kit.policy.vllm
    from grpo_kit.policy.vllm import SubprocessVLLMBackend, token_prompts

    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text(_FAKE_VLLM)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setattr(grpo_kit.policy.vllm, "vllm_usable", lambda: True)
    _, tokenizer = tiny_policy
    prompts = [[{"role": "user", "content": "What is 2 + 2?"}], [{"role": "user", "content": "And 3 + 3 + 3?"}]]
    seen = []
    backend = SubprocessVLLMBackend(tiny_policy_files, tokenizer=tokenizer, chunk_size=1)
    results = backend.generate(prompts, Sampling(temperature=0.7, n=3), on_result=lambda i, g: seen.append(i))
    lengths = [len(p["prompt_token_ids"]) for p in token_prompts(tokenizer, prompts)]
    assert [[g.text for g in r] for r in results] == [[f"{n} tokens, sample {k}" for k in range(3)] for n in lengths]
    assert seen == [0, 1]
    assert backend.identity().startswith("vllm:") and "@" in backend.identity()
    with pytest.raises(ValueError, match="save_merged"):
        SubprocessVLLMBackend(tmp_path, tokenizer=tokenizer)  # a folder without config.json


def test_token_prompts_match_the_transformers_rendering(tiny_policy):
    from grpo_kit.policy.generation import TransformersBackend
    from grpo_kit.policy.vllm import token_prompts

    _, tokenizer = tiny_policy
    prompt = [{"role": "system", "content": "Answer."}, {"role": "user", "content": "1 + 1?"}]
    text = TransformersBackend(None, tokenizer)._render(prompt)
    assert token_prompts(tokenizer, [prompt]) == [{"prompt_token_ids": tokenizer(text, add_special_tokens=False)
                                                   ["input_ids"]}]


def test_eval_backend_routes_on_a_cpu(tiny_policy, tmp_path):
    from peft import LoraConfig, get_peft_model

    from grpo_kit.policy.generation import TransformersBackend
    from grpo_kit.policy.routes import load_eval_backend

    model, tokenizer = tiny_policy
    model.save_pretrained(tmp_path / "full")
    tokenizer.save_pretrained(tmp_path / "full")
    tiny = get_preset("cpu-tiny")
    source = PolicySource.of(tiny.model, GSM8K, seed=tiny.seed, cache_dir=str(tmp_path / "cache"))
    backend = load_eval_backend(source, tiny.loading, trained=tmp_path / "full")
    assert isinstance(backend, TransformersBackend)
    get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained(tmp_path / "untrained")
    with pytest.raises(ValueError, match="all zeros"):
        load_eval_backend(source, tiny.loading, trained=tmp_path / "untrained")
    with pytest.raises(FileNotFoundError, match="notebook 03"):
        load_eval_backend(source, tiny.loading, trained=tmp_path / "missing")
    assert not (tmp_path / "cache").exists()  # evaluating a trained model never builds the tiny policy
    if not torch.cuda.is_available():
        a100 = get_preset("a100")
        with pytest.raises(RuntimeError, match="cpu-tiny"):
            load_eval_backend(PolicySource.of(a100.model, GSM8K, seed=a100.seed), a100.loading)
        assert "unsloth" not in sys.modules
