"""Issue 21's GPU proof, what a CPU can check: the script runs its code at toy shapes and refuses without CUDA,
and the wheel bundle splits into parts that each travel in one device call (small fake wheels, no download)."""

from __future__ import annotations

import json
import zipfile

import pytest

from benchmarks import gpu_proof, wheel_bundle


def test_without_cuda_the_proof_refuses_clearly(capsys):
    assert gpu_proof.main(["--out", "unused"]) == 2
    assert "no CUDA GPU here" in capsys.readouterr().err


def test_a_route_at_toy_shapes_trains_every_trainable_tensor(tmp_path):
    row = gpu_proof.run_route("a100-peft", steps=2, miniature=True, workdir=tmp_path)
    assert row["every_trainable_moved"] and row["trainable_tensors"] == 2 * 2 * 7  # lora_A, lora_B x 2 layers x 7
    assert row["steps"] == 2 and row["generated_tokens_per_s"] > 0
    assert row["estimate"]["estimate"] and row["estimate"]["parts"]["vllm_weights"] == 0


def test_the_word_tokenizer_covers_every_id():
    tokenizer = gpu_proof.word_tokenizer(300, eos_id=299)
    assert tokenizer("w5 w17 w250")["input_ids"] == [5, 17, 250]
    assert tokenizer.decode([5, 17]) == "w5 w17" and tokenizer.eos_token_id == 299
    prompts = gpu_proof.prompts(300, 12, 3)
    assert all(len(tokenizer(p)["input_ids"]) == 12 for p in prompts)


def _fake_wheel(folder, name, size):
    path = folder / name
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr("payload", b"x" * size)
    return path


GROUPS = {"core": {"trl": None, "pyarrow": "26.0.1"}, "unsloth": {"unsloth": None, "bitsandbytes": None,
                                                                  "vllm": None}}


def test_the_bundle_splits_group_by_group_under_the_limit(tmp_path):
    versions = wheel_bundle.pins(groups=GROUPS)
    assert versions["core"] == {"trl": "1.15.0", "pyarrow": "26.0.1"}  # requirements.txt's pin and the listed one
    assert versions["unsloth"]["bitsandbytes"] == "0.50.2"
    sizes = {"trl-1.15.0-py3-none-any.whl": 900, "pyarrow-26.0.1-cp312-cp312-manylinux_2_28_x86_64.whl": 5200,
             "unsloth-2026.10.7-py3-none-any.whl": 3000, "bitsandbytes-0.50.2-py3-none-manylinux_2_24_x86_64.whl": 4100,
             "vllm-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl": 20000}
    for name, size in sizes.items():
        _fake_wheel(tmp_path, name, size)
    limit = 6400
    manifest = wheel_bundle.bundle(tmp_path, versions, limit)
    parts = manifest["parts"]
    assert [p["group"] for p in parts] == ["core", "unsloth", "unsloth"]  # core first: every route needs it
    assert all(p["bytes"] <= limit for p in parts)
    for part in parts:
        on_disk = sorted(f.name for f in (tmp_path / part["part"]).iterdir())
        assert on_disk == sorted(w["name"] for w in part["wheels"])
        assert sum((tmp_path / part["part"] / n).stat().st_size for n in on_disk) == part["bytes"]
    listed = [w["name"] for p in parts for w in p["wheels"]] + [w["name"] for w in manifest["too_large"]]
    assert sorted(listed) == sorted(sizes)  # every wheel once
    assert [w["name"] for w in manifest["too_large"]] == ["vllm-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl"]
    assert json.loads((tmp_path / "manifest.json").read_text()) == manifest
    again = wheel_bundle.bundle(tmp_path, versions, limit=100_000)  # re-split what is already in parts
    assert len(again["parts"]) == 2 and not again["too_large"]


def test_a_missing_or_stray_wheel_is_named(tmp_path):
    versions = wheel_bundle.pins(groups=GROUPS)
    _fake_wheel(tmp_path, "trl-1.15.0-py3-none-any.whl", 10)
    _fake_wheel(tmp_path, "left_over-1.0-py3-none-any.whl", 10)
    with pytest.raises(ValueError, match=r"no wheel for \['bitsandbytes', 'pyarrow', 'unsloth', 'vllm'\], and "
                                         r"wheels of no group \['left_over-1.0-py3-none-any.whl'\]"):
        wheel_bundle.bundle(tmp_path, versions)


def test_the_download_is_pinned_for_cpython_3_12_manylinux_without_dependencies(tmp_path):
    command = wheel_bundle.download_command(wheel_bundle.pins(), tmp_path)
    assert command[3:5] == ["download", "--no-deps"] and "--only-binary=:all:" in command
    assert command[command.index("--python-version") + 1] == "3.12"
    assert "trl==1.15.0" in command and "unsloth==2026.10.7" in command and "bitsandbytes==0.50.2" in command
    assert all("==" in arg for arg in command[command.index(str(tmp_path)) + 1:])
    with pytest.raises(ValueError, match="pins no exact version of \\['nothing'\\]"):
        wheel_bundle.pins(groups={"core": {"nothing": None}})
