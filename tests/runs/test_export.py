"""Exports you can trust: a run's trained policy merged and as GGUF, each loaded back by the runtime that serves it and
checked against the trained policy; a tampered export refused; the model card's table is the run's report; the Hub
upload checked up to the client call (the Hub cannot be reached from the test machines).

One full fine-tune run (baseline, 2 GRPO steps, evaluation after: the real pipeline, on conftest's small random
policy) is built once; the LoRA runs reuse its folder with an adapter on the same base, one of them with
``modules_to_save=["lm_head"]`` on the tied embeddings (the case unsloth #3454 lost). The GGUF tests need llama.cpp
built by ``make install-llama`` (``GRPO_KIT_LLAMA``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from grpo_kit.cli import main
from grpo_kit.runs.export import export, push_to_hub
from grpo_kit.runs.folder import RunFolder, RunFolderBusy
from grpo_kit.runs.model_card import model_card
from grpo_kit.runs.pipeline import export_steps
from grpo_kit.runs.verification import Verification, verify_export
from tests.llama import needs_llama

QUESTIONS = 8


@pytest.fixture(scope="module")
def full_run(tiny_policy_files, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("export") / "full"
    common = ["--run-dir", str(run_dir)]
    assert main(["eval", "--before", "--preset", "cpu-tiny", "--model_name_or_path", str(tiny_policy_files),
                 "--eval-size", "8", "--max-new-tokens", "24", *common]) == 0
    assert main(["train", "--preset", "cpu-tiny", "--model_name_or_path", str(tiny_policy_files), "--max-steps", "2",
                 "--save-steps", "2", "--train-size", "16", "--per_device_train_batch_size", "8",
                 "--max_completion_length", "16", "--learning_rate", "0.02", *common]) == 0
    assert main(["eval", *common]) == 0
    return run_dir


def _adapter_run(full_run: Path, base: Path, folder: Path, modules_to_save: list[str] | None) -> Path:
    """The full run's folder with model/ replaced by a LoRA adapter on the same base whose weights moved (a seeded
    perturbation stands in for training: what is checked is that the export answers like the adapter)."""
    from peft import LoraConfig, get_peft_model

    from grpo_kit.policy.loading import load_policy

    shutil.copytree(full_run, folder, ignore=shutil.ignore_patterns("checkpoints", "export"))
    shutil.rmtree(folder / "model")
    model, tokenizer = load_policy(base, dtype="float32")
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"],
                        modules_to_save=modules_to_save)
    peft_model = get_peft_model(model, config)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
            elif "modules_to_save" in name:
                param.add_(torch.randn(param.shape, generator=generator) * 0.5)
    peft_model.save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    RunFolder(folder).mark_finished(2)  # as training records what it wrote (the trained weights' digest)
    return folder


@pytest.fixture(scope="module")
def lora_run(full_run, tiny_policy_files, tmp_path_factory):
    return _adapter_run(full_run, tiny_policy_files, tmp_path_factory.mktemp("export") / "lora", None)


@pytest.fixture(scope="module")
def head_run(full_run, tiny_policy_files, tmp_path_factory):
    return _adapter_run(full_run, tiny_policy_files, tmp_path_factory.mktemp("export") / "head", ["lm_head"])


def test_a_full_fine_tune_exports_merged_and_is_identical(full_run):
    folder, verification = export(full_run, "merged", questions=QUESTIONS)
    assert verification.passed and verification.identical == QUESTIONS and verification.dtype == "float32"
    assert verification.weights["max_abs_diff"] == 0 and not verification.weights["differing"]
    names = {p.name for p in folder.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "README.md",
            "verification.json"} <= names
    assert json.loads((folder / "verification.json").read_text())["passed"] is True


@pytest.mark.parametrize("which", ["lora_run", "head_run"])
def test_a_lora_adapter_merges_into_a_model_that_answers_like_it(which, request, tiny_policy_files, tmp_path_factory):
    run = request.getfixturevalue(which)
    folder, verification = export(run, "merged", questions=QUESTIONS)
    assert verification.passed and verification.identical == QUESTIONS, verification.side_by_side()
    assert _local_paths(folder, tmp_path_factory.getbasetemp()) == []  # the adapter's base path stays home
    mask = os.umask(0)
    os.umask(mask)  # safetensors wrote the weights 0600; the export gives every file the umask's mode
    assert {oct(p.stat().st_mode & 0o777) for p in folder.iterdir() if p.is_file()} == {oct(0o666 & ~mask)}
    from safetensors.torch import load_file

    from grpo_kit.policy.loading import load_policy

    merged, base = load_file(folder / "model.safetensors"), load_file(Path(tiny_policy_files) / "model.safetensors")
    assert not torch.equal(merged["model.layers.0.self_attn.q_proj.weight"],
                           base["model.layers.0.self_attn.q_proj.weight"])  # the adapter is in the weights
    if which == "head_run":  # the trained head is kept apart from the embedding, not overwritten by the tie
        config = json.loads((folder / "config.json").read_text())
        assert config["tie_word_embeddings"] is False and "lm_head.weight" in merged
        reloaded, _ = load_policy(folder, dtype="float32")
        assert not torch.equal(reloaded.lm_head.weight, reloaded.model.embed_tokens.weight)


def test_saving_the_head_adapter_tied_loses_the_training_and_is_refused(head_run, tmp_path):
    """What an exporter that keeps the tie writes (the embedding only, the trained head dropped): verify-export must
    catch it."""
    from safetensors.torch import load_file, save_file

    folder, _ = export(head_run, "merged", out=tmp_path / "good", questions=QUESTIONS)
    tied = tmp_path / "tied"
    shutil.copytree(folder, tied)
    weights = load_file(tied / "model.safetensors")
    del weights["lm_head.weight"]
    save_file(weights, tied / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((tied / "config.json").read_text())
    (tied / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": True}))
    verification = verify_export(tied, head_run, questions=QUESTIONS)
    assert not verification.passed and verification.identical < QUESTIONS
    assert verification.first_difference is not None and "lm_head.weight" in verification.weights["missing"]


def test_a_tampered_export_fails_verify_export(full_run, tmp_path, capsys):
    from safetensors.torch import load_file, save_file

    folder, _ = export(full_run, "merged", out=tmp_path / "good", questions=QUESTIONS)
    # case 19 of issue 44: into a log file (not a terminal) the kit's bars are lines, and no library draws its own
    done = subprocess.run([sys.executable, "-m", "grpo_kit", "verify-export", str(folder), "--against",
                           str(full_run), "--questions", str(QUESTIONS)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "PASSED" in done.stdout
    assert "\r" not in done.stderr and "Loading weights" not in done.stderr and "\u2588" not in done.stderr
    assert re.search(r"^the export, greedy: 100% \d+/\d+ tokens \[", done.stderr, re.MULTILINE), done.stderr
    tampered = tmp_path / "tampered"
    shutil.copytree(folder, tampered)
    weights = load_file(tampered / "model.safetensors")
    name = "model.layers.1.mlp.down_proj.weight"
    weights[name] = weights[name] * 1.05  # one tensor changed by 5%
    save_file(weights, tampered / "model.safetensors", metadata={"format": "pt"})
    assert main(["verify-export", str(tampered), "--against", str(full_run), "--questions", str(QUESTIONS)]) == 1
    captured = capsys.readouterr()
    assert "REFUSED" in captured.out
    verification = verify_export(tampered, full_run, questions=QUESTIONS)
    assert verification.weights["differing"] == [name]


def test_the_model_card_carries_the_runs_report_table(full_run, capsys, kit_log_on_stderr, tmp_path_factory):
    import pandas as pd
    from huggingface_hub import ModelCard

    assert main(["export", str(full_run), "--format", "merged", "--questions", str(QUESTIONS)]) == 0
    printed = capsys.readouterr()
    assert "merged export (float32)" in printed.out
    assert (printed.out + printed.err).count("PASSED") == 1  # the verdict once, not logged and printed
    folder = full_run / "export" / "merged"
    verification = Verification(**json.loads((folder / "verification.json").read_text()))
    card = (folder / "README.md").read_text()
    report = (full_run / "report.md").read_text()
    table = [line for line in report.split("## Greedy")[1].split("\n## ")[0].splitlines() if line.startswith("|")]
    card_table = [line for line in card.split("## Before and after")[1].split("\n## ")[0].splitlines()
                  if line.startswith("|")]
    assert table and card_table == table
    settings = json.loads((full_run / "train_settings.json").read_text())
    assert "McNemar" in card and "grpo_kit 0.1.0" in card
    for reward, weight in settings["identity"]["rewards"].items():
        assert f"{reward} ({weight})" in card
    assert "learning_rate=0.02" in card and "2 steps" in card and verification.summary() in card
    algorithm = settings["algorithm"]  # named as the recipe ran it (case 8 of issue 46: not just "GRPO")
    assert f"{algorithm['name']} (loss_type={algorithm['fields']['loss_type']})" in card
    assert model_card(full_run, verification) == card
    # The trained model's own card (model/README.md) comes from the same builder, without the export's sections.
    trained = (full_run / "model" / "README.md").read_text()
    assert trained == model_card(full_run)
    heads = [text[text.index("\n# "):text.index("\n## Algorithm")] for text in (trained, card)]
    assert heads[0] == heads[1]  # the same title, base model, rewards and settings
    assert "16 train questions" in card and "full fine-tuning" in card and "## Verification" not in trained
    # The Hub's metadata: YAML front matter with this model's numbers as model-index evaluation results (the Hub shows
    # them as the model's own: the base model's before-training numbers stay in the text's table).
    data = ModelCard(card).data
    assert data.base_model is None  # a local folder, named in the text (`tiny-policy...`), not a Hub id
    assert data.model_name == "full" and "grpo" in data.tags and data.license
    results = {(r.metric_name, r.dataset_name, r.dataset_split, r.task_type): r.metric_value
               for r in data.eval_results}
    numbers = pd.read_csv(full_run / "comparison.csv")
    assert len(results) == len(numbers)
    for row in numbers.itertuples():
        assert results[(row.metric, "gsm8k", "test", "text-generation")] == row.after
    assert {r.dataset_type for r in data.eval_results} == {"gsm8k"} and "lora_r=None" not in card
    # Nothing of this machine in anything the Hub would receive (case 8 of issue 46), nor in the trained model's card.
    assert _local_paths(folder, tmp_path_factory.getbasetemp()) == []
    assert _local_paths(full_run / "model", tmp_path_factory.getbasetemp()) == []
    assert verification.run == "../.." and verification.export == "merged"  # the run, relative to the export
    # A recipe's Hub data set (open-r1's dataset_name keys) is the card's data set, linked on the Hub.
    copy = tmp_path_factory.mktemp("card") / "full"
    shutil.copytree(full_run, copy, ignore=shutil.ignore_patterns("checkpoints", "export"))
    settings["identity"]["preset"].update(dataset_name="openai/gsm8k", dataset_config="main", dataset_test_split="test")
    (copy / "train_settings.json").write_text(json.dumps(settings))
    data = ModelCard(model_card(copy, verification)).data
    assert data.datasets == "openai/gsm8k" and {(r.dataset_type, r.dataset_config, r.dataset_split)
                                                  for r in data.eval_results} == {("openai/gsm8k", "main", "test")}


def _local_paths(folder: Path, root: Path) -> list[str]:
    """The text files of ``folder`` that hold ``root`` (this test session's temporary folder, where every model and
    run of these tests lies)."""
    texts = [p for p in folder.iterdir() if p.suffix in (".md", ".json", ".jinja", ".txt")]
    return [p.name for p in texts if str(root) in p.read_text() or str(root.resolve()) in p.read_text()]


def test_bad_export_requests_fail_before_any_model_loads(full_run, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="format must be one of"):
        export(full_run, "onnx")
    with pytest.raises(ValueError, match="sets a GGUF's type: add --format gguf"):
        export(full_run, "merged", quant="q8_0")
    with pytest.raises(ValueError, match="quant must be one of"):
        export(full_run, "gguf", quant="q3_z")
    with pytest.raises(FileNotFoundError, match="no run folder"):
        export(tmp_path / "nowhere")
    unfinished = tmp_path / "unfinished"  # killed while saving model/: no finished.json
    shutil.copytree(full_run, unfinished, ignore=shutil.ignore_patterns("checkpoints", "export"))
    (unfinished / "finished.json").unlink()
    with pytest.raises(ValueError, match="has not finished"):
        export(unfinished)
    with pytest.raises(ValueError, match="owner/name"):
        next(export_steps(full_run, ["merged"], push_to_hub="not a repo"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr("huggingface_hub.get_token", lambda: None)
    with pytest.raises(PermissionError, match="no Hugging Face token"):  # said before the export, not after it
        next(export_steps(full_run, ["merged"], push_to_hub="you/tiny-grpo"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConnectionError, match="HF_HUB_OFFLINE is set"):
        next(export_steps(full_run, ["merged"], push_to_hub="you/tiny-grpo"))
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with pytest.raises(ValueError, match="threshold must be a share"):
        export(full_run, threshold=1.5)
    monkeypatch.setenv("GRPO_KIT_LLAMA", str(tmp_path / "no-llama"))
    with pytest.raises(FileNotFoundError, match="make install-llama"):
        export(full_run, "gguf")
    assert not (full_run / "export" / "gguf-q8_0.partial").exists()  # refused before anything was written


class _FakeApi:
    def __init__(self, fail_whoami: bool = False) -> None:
        self.calls: list[str] = []
        self.fail_whoami = fail_whoami

    def whoami(self):
        self.calls.append("whoami")
        if self.fail_whoami:
            raise OSError("Name or service not known")
        return {"name": "you"}

    def create_repo(self, repo_id, private, exist_ok, repo_type):
        self.calls.append(f"create_repo {repo_id} private={private}")
        return f"https://huggingface.co/{repo_id}"

    def upload_folder(self, folder_path, repo_id, repo_type, commit_message):
        self.calls.append(f"upload_folder {Path(folder_path).name} -> {repo_id}")


def test_the_hub_upload_refuses_unverified_and_fails_before_uploading(full_run, tmp_path, monkeypatch):

    folder, _ = export(full_run, "merged", out=tmp_path / "ship", questions=QUESTIONS)
    api = _FakeApi()
    monkeypatch.setattr("huggingface_hub.HfApi", lambda token: api)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr("huggingface_hub.get_token", lambda: None)  # no login cached on this machine either
    with pytest.raises(PermissionError, match="no Hugging Face token"):
        push_to_hub(folder, "you/tiny-grpo")
    assert api.calls == []
    offline = _FakeApi(fail_whoami=True)
    monkeypatch.setattr("huggingface_hub.HfApi", lambda token: offline)
    with pytest.raises(ConnectionError, match="cannot reach the Hugging Face Hub"):
        push_to_hub(folder, "you/tiny-grpo", token="hf_x")
    assert offline.calls == ["whoami"]  # nothing created, nothing uploaded
    monkeypatch.setattr("huggingface_hub.HfApi", lambda token: api)
    assert push_to_hub(folder, "you/tiny-grpo", token="hf_x") == "https://huggingface.co/you/tiny-grpo"
    assert api.calls == ["whoami", "create_repo you/tiny-grpo private=True", "upload_folder ship -> you/tiny-grpo"]
    unverified = tmp_path / "unverified"
    shutil.copytree(folder, unverified)
    (unverified / "verification.json").unlink()
    with pytest.raises(ValueError, match="never verified"):
        push_to_hub(unverified, "you/tiny-grpo", token="hf_x")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConnectionError, match="HF_HUB_OFFLINE is set"):
        push_to_hub(folder, "you/tiny-grpo", token="hf_x")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    record = json.loads((folder / "verification.json").read_text())  # the run is found from the export's folder
    (folder / "verification.json").write_text(json.dumps({**record, "model_digest": "0" * 64}))
    with pytest.raises(ValueError, match="trained further or replaced"):
        push_to_hub(folder, "you/tiny-grpo", token="hf_x")
    (folder / "verification.json").write_text(json.dumps(record))
    (folder / "generation_config.json").write_text("{}")  # changed after the check
    with pytest.raises(ValueError, match="changed since it was verified"):
        push_to_hub(folder, "you/tiny-grpo", token="hf_x")


@needs_llama
@pytest.mark.parametrize("which,quant", [("head_run", "f16"), ("lora_run", "q4_k_m")])
def test_gguf_exports_load_in_llama_cpp_and_answer_like_the_trained_policy(which, quant, request, monkeypatch):
    """Each exported as a model above F32_GGUF_LIMIT parameters (1B) is: a type the converter writes directly (f16),
    or a quantized one through a 16-bit GGUF, not a float32 one (an 8B model's float32 GGUF would be 32 GB of disk in
    between). A small model's quantized GGUF through float32 is the disk test's q4_k_m below."""
    import grpo_kit.policy.llama_cpp
    import grpo_kit.runs.export_formats

    real, outtypes = grpo_kit.policy.llama_cpp.convert_to_gguf, []
    monkeypatch.setattr(grpo_kit.policy.llama_cpp, "convert_to_gguf",
                        lambda model_dir, out_file, outtype="f16": outtypes.append(outtype) or real(
                            model_dir, out_file, outtype))
    monkeypatch.setattr(grpo_kit.runs.export_formats, "F32_GGUF_LIMIT", 0)
    run = request.getfixturevalue(which)
    folder, verification = export(run, "gguf", quant=quant, questions=QUESTIONS)
    assert verification.passed, verification.summary() + "\n" + verification.side_by_side()
    assert verification.kind == "gguf" and verification.dtype == quant
    assert [p.name for p in folder.glob("*.gguf")] == [f"{run.name}-{quant}.gguf"]
    assert outtypes == ["f16"]  # the tiny policy is float32: a 16-bit GGUF, not f32, before the quantizer
    if quant == "f16":  # the unquantized rule: a share of identical completions
        assert verification.identical_share >= 0.75 and "identical completions" in verification.rule


@needs_llama
def test_a_gguf_of_another_policy_is_refused(full_run, tiny_policy_files, tmp_path):
    """The base model converted (training lost, as in unsloth #1763): its answers differ and the check says so."""
    from grpo_kit.policy.llama_cpp import convert_to_gguf

    convert_to_gguf(tiny_policy_files, tmp_path / "base-q8_0.gguf", "q8_0")
    verification = verify_export(tmp_path / "base-q8_0.gguf", full_run, questions=QUESTIONS)
    assert not verification.passed and verification.first_difference is not None


def test_an_export_that_fails_its_check_is_refused_and_kept_apart(full_run, tmp_path, monkeypatch):
    """A merge that goes wrong on the way to disk (one tensor scaled) is refused by export itself."""
    from safetensors.torch import load_file, save_file

    import grpo_kit.runs.export_formats as formats
    from grpo_kit.runs.export import ExportRefused

    saved = formats.write_merged

    def broken_merge(reference, folder, base=None):
        saved(reference, folder, base)
        weights = load_file(folder / "model.safetensors")
        weights["model.norm.weight"] = weights["model.norm.weight"] * 3
        save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
        return folder

    monkeypatch.setattr(formats, "write_merged", broken_merge)
    with pytest.raises(ExportRefused, match="REFUSED") as refused:
        export(full_run, "merged", out=tmp_path / "ship", questions=QUESTIONS)
    assert refused.value.verification.weights["differing"] == ["model.norm.weight"]
    assert not (tmp_path / "ship").exists() and (tmp_path / "ship.refused" / "verification.json").is_file()
    assert not (tmp_path / "ship.refused" / "README.md").exists()  # no model card for a refused export
    assert not [p.name for p in tmp_path.iterdir() if ".building-" in p.name or ".old-" in p.name]  # none left


def _as_unsloth_4bit_run(lora_run: Path, folder: Path) -> Path:
    """The LoRA run as an Unsloth QLoRA run records itself (preset use_unsloth, load_in_4bit)."""
    shutil.copytree(lora_run, folder, ignore=shutil.ignore_patterns("export"))
    settings = json.loads((folder / "train_settings.json").read_text())
    settings["identity"]["preset"].update(use_unsloth=True, load_in_4bit=True, lora_rank=4)
    (folder / "train_settings.json").write_text(json.dumps(settings))
    return folder


def test_a_4bit_unsloth_run_is_merged_by_unsloth_into_the_16bit_original_and_checked_by_its_answers(
        lora_run, tmp_path, monkeypatch):
    """The adapter of an Unsloth 4-bit run sits on a `*-bnb-4bit` base; peft's merge_and_unload would re-quantize it
    (peft tuners/lora/bnb.py). The export loads the run through Unsloth, as the after-table did, and lets Unsloth's
    save_pretrained_merged(..., "merged_16bit") merge into the 16-bit original; 16-bit weights are not the 4-bit
    ones the policy ran on, so the check is on its answers. (Unsloth's loader needs CUDA: faked here.)"""
    import grpo_kit.policy.loading
    from grpo_kit.policy.loading import load_policy

    run = _as_unsloth_4bit_run(lora_run, tmp_path / "qlora")
    calls = []

    def load_unsloth_policy(name, loading):
        calls.append(("load", loading.load_in_4bit, loading.fast_inference))
        model, tokenizer = load_policy(name, dtype="float32")
        next(p for n, p in model.named_parameters() if "q_proj.base_layer" in n).quant_state = object()  # "4-bit"

        def save_pretrained_merged(folder, tokenizer, save_method):
            calls.append(("save_pretrained_merged", save_method))
            model.merge_and_unload().save_pretrained(folder)
            tokenizer.save_pretrained(folder)

        model.save_pretrained_merged = save_pretrained_merged
        return model, tokenizer

    monkeypatch.setattr(grpo_kit.policy.loading, "load_unsloth_policy", load_unsloth_policy)
    out, verification = export(run, "merged", questions=QUESTIONS, out=tmp_path / "merged")
    assert calls == [("load", True, False), ("save_pretrained_merged", "merged_16bit")]
    assert "4-bit base" in verification.rule and verification.weights is None and verification.passed
    assert (out / "config.json").is_file() and verification.agreement == 1.0


def _as_unsloth_hub_run(lora_run: Path, folder: Path) -> Path:
    """An Unsloth QLoRA run whose adapter sits on Unsloth's pre-quantized Hub repository, as a real one does."""
    run = _as_unsloth_4bit_run(lora_run, folder)
    adapter = run / "model" / "adapter_config.json"
    config = json.loads(adapter.read_text())
    config["base_model_name_or_path"] = "unsloth/Meta-Llama-3.1-8B-Instruct-bnb-4bit"
    adapter.write_text(json.dumps(config))
    RunFolder(run).mark_finished(2)
    return run


def _no_model_loads(monkeypatch):
    import grpo_kit.policy.loading

    for name in ("load_unsloth_policy", "load_policy"):
        monkeypatch.setattr(grpo_kit.policy.loading, name, lambda *a, **k: pytest.fail("a model loaded"))


def test_an_unsloth_runs_export_offline_is_refused_in_one_line_before_anything_loads(lora_run, tmp_path, monkeypatch,
                                                                                    capsys):
    """Unsloth's merged_16bit merge reads the 16-bit original from the Hub (unsloth 2026.10.7 save.py
    unsloth_generic_save_pretrained_merged -> unsloth_zoo saving_utils.py merge_and_overwrite_lora,
    determine_base_model_source: the literal path and the working folder, never the Hugging Face cache), and offline
    it raised "could not reach the Hugging Face Hub" after the reference had loaded, as a traceback."""
    import grpo_kit.runs.unsloth_base

    run = _as_unsloth_hub_run(lora_run, tmp_path / "qlora")
    _no_model_loads(monkeypatch)
    monkeypatch.setattr(grpo_kit.runs.unsloth_base, "_cached_snapshot", lambda repo: None)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["export", str(run), "--out", str(tmp_path / "merged")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unsloth/Meta-Llama-3.1-8B-Instruct," in err
    assert "HF_HUB_OFFLINE is set" in err and "--base PATH" in err
    assert not (tmp_path / "merged").exists()
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(grpo_kit.runs.unsloth_base, "hub_offline", lambda: False)

    def unreachable(repo):
        raise OSError("Name or service not known")

    monkeypatch.setattr(grpo_kit.runs.unsloth_base, "_hub_weights_bytes", unreachable)
    with pytest.raises(ConnectionError, match=r"the Hub does not answer for it \(OSError\): pass --base PATH"):
        export(run, "merged", questions=QUESTIONS, out=tmp_path / "merged")


def test_an_unsloth_runs_export_says_how_much_it_downloads(lora_run, tmp_path, monkeypatch, caplog):
    import grpo_kit.runs.unsloth_base
    from grpo_kit.runs.unsloth_base import merge_base

    run = _as_unsloth_hub_run(lora_run, tmp_path / "qlora")
    monkeypatch.setattr(grpo_kit.runs.unsloth_base, "_cached_snapshot", lambda repo: None)
    monkeypatch.setattr(grpo_kit.runs.unsloth_base, "hub_offline", lambda: False)
    monkeypatch.setattr(grpo_kit.runs.unsloth_base, "_hub_weights_bytes", lambda repo: 16_060_522_496)
    with caplog.at_level("WARNING", logger="grpo_kit.runs.unsloth_base"):
        assert merge_base(run) is None  # Unsloth downloads it
    assert "downloads the 16-bit base unsloth/Meta-Llama-3.1-8B-Instruct from the Hugging Face Hub (16.1 GB)" \
        in caplog.text


def test_an_unsloth_runs_base_is_taken_from_the_hugging_face_cache_offline(lora_run, tiny_policy_files, tmp_path,
                                                                           monkeypatch):
    import huggingface_hub.constants

    from grpo_kit.runs.unsloth_base import merge_base

    run = _as_unsloth_hub_run(lora_run, tmp_path / "qlora")
    repo = tmp_path / "hub" / "models--unsloth--Meta-Llama-3.1-8B-Instruct"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0123abcd")
    shutil.copytree(tiny_policy_files, repo / "snapshots" / "0123abcd")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert merge_base(run) == repo / "snapshots" / "0123abcd"


def test_base_hands_unsloths_merge_a_local_16bit_copy(lora_run, tiny_policy_files, tmp_path, monkeypatch):
    """--base PATH becomes the config's _name_or_path while Unsloth merges: merge_and_overwrite_lora maps that name
    (get_model_name) and determine_base_model_source takes a local folder holding safetensors first (priority 1)."""
    import grpo_kit.policy.loading
    from grpo_kit.policy.loading import load_policy

    run = _as_unsloth_hub_run(lora_run, tmp_path / "qlora")
    seen = []

    def load_unsloth_policy(name, loading):  # the adapter on the tiny policy, named as on the Hub
        from peft import PeftModel

        base, tokenizer = load_policy(tiny_policy_files, dtype="float32")
        model = PeftModel.from_pretrained(base, name)
        model.config._name_or_path = "unsloth/Meta-Llama-3.1-8B-Instruct-bnb-4bit"

        def save_pretrained_merged(folder, tokenizer, save_method):
            seen.append(model.config._name_or_path)
            model.merge_and_unload().save_pretrained(folder)
            tokenizer.save_pretrained(folder)

        model.save_pretrained_merged = save_pretrained_merged
        return model, tokenizer

    monkeypatch.setattr(grpo_kit.policy.loading, "load_unsloth_policy", load_unsloth_policy)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["export", str(run), "--out", str(tmp_path / "merged"), "--questions", str(QUESTIONS), "--base",
                 str(tiny_policy_files)]) == 0
    assert seen == [str(Path(tiny_policy_files).resolve())] and (tmp_path / "merged" / "config.json").is_file()


def test_a_base_that_cannot_serve_is_refused_before_anything_loads(lora_run, tmp_path, monkeypatch, capsys):
    run = _as_unsloth_hub_run(lora_run, tmp_path / "qlora")
    _no_model_loads(monkeypatch)
    (tmp_path / "empty").mkdir()
    assert main(["export", str(run), "--base", str(tmp_path / "empty")]) == 2
    assert "is not a folder holding an unquantized model" in capsys.readouterr().err
    assert main(["export", str(lora_run), "--base", str(tmp_path / "empty")]) == 2  # not an Unsloth run
    assert "--base is for a LoRA run trained through Unsloth" in capsys.readouterr().err


def test_a_library_runtime_error_is_one_line_not_a_traceback(lora_run, tmp_path, monkeypatch, capsys):
    import grpo_kit.policy.loading

    run = _as_unsloth_4bit_run(lora_run, tmp_path / "qlora")

    def load_unsloth_policy(name, loading):
        raise RuntimeError("Unsloth: could not reach the Hugging Face Hub while checking (ConnectError)")

    monkeypatch.setattr(grpo_kit.policy.loading, "load_unsloth_policy", load_unsloth_policy)
    assert main(["export", str(run), "--out", str(tmp_path / "merged")]) == 1
    assert capsys.readouterr().err.startswith("error: Unsloth: could not reach")


def test_verification_generates_on_the_gpu_after_the_reference_is_freed(lora_run, tmp_path, monkeypatch):
    """The export was loaded with no device placement, so an 8B model answered on the CPU (hours). Now on
    the first GPU, once the reference is gone, bfloat16 as float16 on a card without it (a T4 faked here)."""
    import gc
    import weakref

    import grpo_kit.policy.devices
    import grpo_kit.policy.loading
    from grpo_kit.policy.devices import Gpu
    from grpo_kit.runs.export_reference import generation_placement

    monkeypatch.setattr(grpo_kit.policy.devices, "first_gpu", lambda: Gpu("Tesla T4", 14.7, False))
    assert generation_placement("bfloat16") == {"dtype": "float16", "device_map": {"": 0}}
    real, loaded = grpo_kit.policy.loading.load_policy, []

    def load_policy(path, dtype="auto", device_map=None):
        if loaded:
            gc.collect()
            assert loaded[0][2]() is None, "the reference still held while the export loads"
        model, tokenizer = real(path, dtype="float32")  # no CUDA here: the CPU stands in for the card
        loaded.append((Path(path), (dtype, device_map), weakref.ref(model)))
        return model, tokenizer

    monkeypatch.setattr(grpo_kit.policy.loading, "load_policy", load_policy)
    out, verification = export(lora_run, "merged", questions=QUESTIONS, out=tmp_path / "merged")
    assert verification.passed and [where for _, where, _ in loaded] == [("auto", {"": 0})] * 2
    assert loaded[0][0] == lora_run / "model" and loaded[1][0].name.startswith(".merged.building-")
    monkeypatch.setattr(grpo_kit.policy.devices, "first_gpu", lambda: None)
    assert generation_placement("bfloat16") == {"dtype": "auto"}  # a CPU: as today


def test_an_export_the_disk_cannot_hold_is_refused_before_writing(full_run, tmp_path, monkeypatch):
    import grpo_kit.runs.export

    monkeypatch.setattr(grpo_kit.runs.export.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(1, 1, 1000))
    # "needs about 0.0 GB free ... and 0.0 GB are"
    with pytest.raises(ValueError, match=r"this merged export needs about [\d.]+(kB|MB) of free space under .*, "
                                         r"which has 1.00kB: free some space"):
        export(full_run, "merged", questions=QUESTIONS, out=tmp_path / "x")
    assert not list(tmp_path.glob(".x.building-*"))  # the folder it was to be built in is gone
    assert not (tmp_path / "x").exists()


@needs_llama
@pytest.mark.parametrize("quant", ["q8_0", "q4_k_m"])
def test_the_disk_a_gguf_export_asks_for_is_what_it_writes(full_run, quant, tmp_path, monkeypatch):
    """The free space checked before a GGUF export is what is on disk at once: the merged model and the converter's
    GGUF (q8_0 written directly), or for a type only the quantizer writes, the converter's float32 GGUF and the
    quantizer's; not twice a 16-bit copy on top of the merged model."""
    import grpo_kit.policy.llama_cpp
    import grpo_kit.runs.export

    asked, written = [], []
    real_check = grpo_kit.runs.export._check_disk
    monkeypatch.setattr(grpo_kit.runs.export, "_check_disk", lambda where, needed, fmt: asked.append(needed) or
                        real_check(where, needed, fmt))

    def sizes(folder):
        return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())

    def recording(real):
        def step(source, out, *args):
            result = real(source, out, *args)
            written.append(sizes(Path(out).parent))  # the merged model and every GGUF there now
            return result
        return step

    for name in ("convert_to_gguf", "quantize_gguf"):
        monkeypatch.setattr(grpo_kit.policy.llama_cpp, name, recording(getattr(grpo_kit.policy.llama_cpp, name)))
    export(full_run, "gguf", quant=quant, questions=QUESTIONS, out=tmp_path / "gguf")
    assert len(written) == (1 if quant == "q8_0" else 2)
    assert max(written) <= asked[0] <= 1.2 * max(written), (asked, written)


# --- nothing lost after training: --out, two exporters, an edited model/ ----------------------------------------


def _no_traceback(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err


def test_export_refuses_an_out_that_is_not_new_empty_or_an_export_and_replaces_its_own(full_run, tmp_path, capsys):
    mine = tmp_path / "mine"
    (mine / "photos").mkdir(parents=True)
    (mine / "thesis.txt").write_text("four years")
    a_file = tmp_path / "notes.txt"
    a_file.write_text("keep")
    model_before = RunFolder(full_run).check_model()
    for out in (mine, full_run, full_run / "model", full_run / "checkpoints", a_file, full_run.parent):
        assert main(["export", str(full_run), "--out", str(out), "--questions", "2"]) == 2
        assert str(out) in _no_traceback(capsys)
    assert (mine / "thesis.txt").read_text() == "four years" and (mine / "photos").is_dir()
    assert a_file.read_text() == "keep" and RunFolder(full_run).check_model() == model_before
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["export", str(full_run), "--out", str(empty), "--questions", "2"]) == 0
    first = json.loads((empty / "verification.json").read_text())
    assert main(["export", str(full_run), "--out", str(empty), "--questions", "3"]) == 0  # its own: replaced whole
    assert json.loads((empty / "verification.json").read_text())["questions"] == 3 != first["questions"]
    assert sorted(p.name for p in tmp_path.iterdir() if "partial" in p.name or ".old-" in p.name) == []


def test_a_failed_export_leaves_no_partial_folder(full_run, tmp_path, monkeypatch):
    import grpo_kit.runs.export_formats as formats

    def broken(reference, folder, base=None):
        raise OSError("disk full")

    monkeypatch.setattr(formats, "write_merged", broken)
    with pytest.raises(OSError, match="disk full"):
        export(full_run, "merged", out=tmp_path / "ship", questions=2)
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".ship.lock")] == []


def test_two_exports_into_one_out_cannot_both_run(full_run, tmp_path):
    import subprocess
    import sys
    import textwrap

    out = tmp_path / "shared"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from pathlib import Path
        from grpo_kit.runs.export import _export_lock
        with _export_lock(Path({str(out)!r})):
            print("holding", flush=True)
            time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(RunFolderBusy, match=f"{out} is being written by process {holder.pid}"):
            export(full_run, "merged", out=out, questions=2)
        assert not out.exists() and not list(tmp_path.glob("*partial*"))
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("edit", ["base weights copied in", "adapter pointed elsewhere", "tokenizer deleted"])
def test_a_model_folder_edited_after_training_is_refused_by_every_reader(edit, full_run, lora_run, tiny_policy_files,
                                                                        tmp_path, capsys):
    source = lora_run if edit == "adapter pointed elsewhere" else full_run
    run = tmp_path / "run"
    shutil.copytree(source, run, ignore=shutil.ignore_patterns("export"))
    if edit == "base weights copied in":  # another run's (here: the untrained base's) weights
        shutil.copy(Path(tiny_policy_files) / "model.safetensors", run / "model" / "model.safetensors")
        name = "model.safetensors"
    elif edit == "adapter pointed elsewhere":
        config = json.loads((run / "model" / "adapter_config.json").read_text())
        config["base_model_name_or_path"] = str(tmp_path / "another-base")
        (run / "model" / "adapter_config.json").write_text(json.dumps(config))
        name = "adapter_config.json"
    else:
        (run / "model" / "tokenizer.json").unlink()
        name = "tokenizer.json"
    for args in (["export", str(run), "--questions", "2"], ["eval", "--run-dir", str(run)],
                 ["verify-export", str(full_run / "model"), "--against", str(run), "--questions", "2"]):
        assert main(args) == 2, args
        err = _no_traceback(capsys)
        assert str(run / "model" / name) in err and "training wrote" in err
    assert not (run / "export").exists()


def test_what_a_user_gets_wrong_after_training_ends_in_one_line(full_run, tiny_policy_files, tmp_path, monkeypatch,
                                                                capsys):
    import sys

    seeded = tmp_path / "seeded"
    shutil.copytree(full_run, seeded, ignore=shutil.ignore_patterns("export", "checkpoints"))
    settings = json.loads((seeded / "eval_settings.json").read_text())
    (seeded / "eval_settings.json").write_text(json.dumps({**settings, "seed": "abc"}))
    base = tmp_path / "base"  # an adapter whose base model was moved away after training
    shutil.copytree(tiny_policy_files, base)
    moved = _adapter_run(full_run, base, tmp_path / "moved", None)
    shutil.rmtree(base)
    planned = tmp_path / "planned"
    planned.mkdir()
    (planned / "train_settings.json").write_text("[]")
    gguf = tmp_path / "x.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setenv("GRPO_KIT_LLAMA", str(tmp_path / "no-llama"))
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # llama-cpp-python not built
    cases = [(["export", str(seeded), "--questions", "2"], "seed = 'abc', not a whole number"),
             (["export", str(moved), "--questions", "2"], "cannot load the trained model"),
             (["verify-export", str(gguf), "--against", str(full_run)], "llama-cpp-python is not installed"),
             (["plan", "--run-dir", str(planned), "--resume"], "train_settings.json is damaged or was edited"),
             (["train", "--preset", "cpu-tiny", "--model_name_or_path", str(tiny_policy_files), "--run-dir",
               str(tmp_path / "t"), "--report_to", "tensorboard"],
              "report_to = 'tensorboard': tensorboard is not installed")]
    for args, message in cases:
        assert main(args) == 2, args
        err = _no_traceback(capsys)
        assert message in err, err


def test_export_during_a_training_names_the_process_that_holds_the_run(full_run, tmp_path, capsys):
    import subprocess
    import sys
    import textwrap

    run = tmp_path / "training"
    shutil.copytree(full_run, run, ignore=shutil.ignore_patterns("export"))
    (run / "finished.json").unlink()  # a training extending it is under way
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from grpo_kit.runs.folder import RunFolder
        with RunFolder({str(run)!r}).lock("train"):
            print("holding", flush=True)
            time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
    try:
        assert holder.stdout.readline().strip() == "holding"
        assert main(["export", str(run), "--questions", "2"]) == 2
        err = _no_traceback(capsys)
        assert f"being written by process {holder.pid}" in err and "(train, since" in err and "--resume" not in err
    finally:
        holder.kill()
        holder.wait()


def test_verify_export_record_never_writes_into_a_run_folders_model_or_over_a_users_file(tmp_path, capsys):
    """--record into the run's own model/ made eval and export refuse the run from then on."""
    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)
    (run / "model" / "model.safetensors").write_text("weights")
    (run / "train_settings.json").write_text("{}")
    RunFolder(run).mark_finished(3)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "verification.json").write_text("my notes")
    for export_dir, says in ((run / "model", f"into the run folder {run.resolve()}'s own model"),
                             (run, f"into the run folder {run.resolve()},"),
                             (elsewhere, "which the kit did not write")):
        assert main(["verify-export", str(export_dir), "--against", str(run), "--record"]) == 2
        assert says in _no_traceback(capsys)
    assert not (run / "model" / "verification.json").exists() and not (run / "verification.json").exists()
    assert (elsewhere / "verification.json").read_text() == "my notes"
    RunFolder(run).check_model()  # model/ holds what training wrote


def test_export_merged_and_gguf_without_llama_cpp_says_so_before_building_anything(tmp_path, monkeypatch, capsys):
    """The merged export was built (46 s) before llama.cpp was found missing."""
    import grpo_kit.runs.export as export_module

    monkeypatch.setenv("GRPO_KIT_LLAMA", str(tmp_path / "no-llama"))
    monkeypatch.setattr(export_module, "open_trained_run", lambda *a, **k: pytest.fail("an export began"))
    assert main(["export", str(tmp_path / "run"), "--format", "merged", "gguf"]) == 2
    err = _no_traceback(capsys)
    assert "llama.cpp's converter is not in" in err


def test_an_out_that_is_a_link_is_called_a_link(tmp_path):
    """A symlink to a folder was called "a file"."""
    from grpo_kit.runs.export import check_out

    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "out").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ValueError, match=r"--out: .*out is a link, and an export is a folder of its own"):
        check_out(tmp_path / "out", "merged")


def test_a_card_names_a_task_file_by_its_tasks_name_never_its_path(tmp_path):
    """A journey of issue 46: the card named a user's task `task.yaml` (its file) in its title and its model-index."""
    from grpo_kit.tasks.task_file import task_name as _task_name

    (tmp_path / "task.yaml").write_text("name: units\nquestion: q\nanswer: a\n")
    assert _task_name(str(tmp_path / "task.yaml")) == "units" and _task_name("gsm8k") == "gsm8k"
    assert _task_name(str(tmp_path / "moved.yaml")) == "moved"  # a file gone since: its stem, not its path


def test_the_llama_cpp_advice_gives_the_route_that_works_outside_a_clone_first(tmp_path, monkeypatch):
    """Issue 57: `export --format gguf` outside a clone named `make install-llama` first, which only a clone has."""
    from grpo_kit.policy import llama_cpp

    monkeypatch.setenv("GRPO_KIT_LLAMA", str(tmp_path))
    with pytest.raises(FileNotFoundError) as missing:
        llama_cpp._converter()
    said = str(missing.value)
    pins = (Path(__file__).resolve().parents[2] / "requirements-llama.txt").read_text()
    assert f"llama-cpp-python=={llama_cpp.LLAMA_CPP_PYTHON}\n" in pins
    assert said.index(f"pip install llama-cpp-python=={llama_cpp.LLAMA_CPP_PYTHON}") < \
        said.index("pip download --no-deps --no-binary :all:") < said.index("make install-llama")
    assert f"GRPO_KIT_LLAMA=$PWD/llama-src/llama_cpp_python-{llama_cpp.LLAMA_CPP_PYTHON}/vendor" in said
