"""Past one device: `accelerate launch -m grpo_kit train` on two CPU processes (gloo), the shipped accelerate
configs, and the multi-GPU presets' checks (issue 13).

On a CPU, accelerate 1.15 runs several processes only through its multi-GPU launcher (torchrun): `--cpu`
starts one process unless mpirun is used. With a `use_cpu` preset (cpu-tiny) those processes join with gloo
as MULTI_CPU data parallelism, which is what these tests run, with configs/accelerate/ddp.yaml itself.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from grpo_kit.cli import main
from grpo_kit.presets import PRESETS, check_settings, get_preset

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs" / "accelerate"
ACCELERATE = str(Path(sys.executable).with_name("accelerate"))


def _launch(config: str, processes: int, model: Path | str, run_dir: Path, *extra: str) -> list[str]:
    """`accelerate launch ... -m grpo_kit train` on ``model`` (a folder), or with ``model="tiny:<cache folder>"``
    on the kit's tiny policy, warm-started (one step) into that cache."""
    policy = ["--warm-steps", "1", "--cache-dir", model[5:]] if str(model).startswith("tiny:") else ["--model",
                                                                                                    str(model)]
    return [ACCELERATE, "launch", "--config_file", str(CONFIGS / config), "--num_processes", str(processes),
            "--mixed_precision", "no", "-m", "grpo_kit", "train", "--preset", "cpu-tiny", *policy,
            "--run-dir", str(run_dir), "--max-steps", "4", "--save-steps", "2", "--train-size", "32",
            "--set", "per_device_train_batch_size=8", "--set", "max_completion_length=12",
            "--rewards", "strict_format_reward_func", "xmlcount_reward_func",
            "tests.prompt_recorder:record_prompts=0", *extra]


def _run(command: list[str], log: Path, kill_at: str | None = None) -> tuple[int, str]:
    env = {**os.environ, "GRPO_KIT_PROMPT_LOG": str(log), "PYTHONUNBUFFERED": "1"}
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env,
                             start_new_session=True)
    seen = []
    for line in child.stdout:
        seen.append(line)
        if kill_at is not None and kill_at in line:
            os.killpg(child.pid, signal.SIGKILL)  # the launcher and both training processes, at once
            break
    child.wait(timeout=300)
    return child.returncode, "".join(seen)


def _steps(run_dir: Path) -> list[int]:
    history = json.loads((run_dir / "log_history.json").read_text())
    return [row["step"] for row in history if "reward" in row]


def test_two_processes_train_one_run_folder_and_resume_after_a_kill(tiny_policy_files, tmp_path):
    run_dir, log = tmp_path / "run", tmp_path / "prompts"
    # the tiny policy: the main process warm-starts it outside the launch, then both train it
    code, out = _run(_launch("ddp.yaml", 2, f"tiny:{tmp_path / 'cache'}", run_dir), log)
    assert code == 0, out[-3000:]
    ranks = {p.name: p.read_text().splitlines() for p in log.iterdir()}
    assert sorted(ranks) == ["rank-0.txt", "rank-1.txt"]
    assert ranks["rank-0.txt"] and ranks["rank-1.txt"] and set(ranks["rank-0.txt"]) != set(ranks["rank-1.txt"])
    assert not set(ranks["rank-0.txt"][:4]) & set(ranks["rank-1.txt"][:4])  # step 1: each process its own prompts
    assert out.count("[grpo_kit] wrote") == 1 and _steps(run_dir) == [1, 2, 3, 4]
    checkpoint = run_dir / "checkpoints" / "checkpoint-4"
    assert {"rng_state_0.pth", "rng_state_1.pth"} <= {p.name for p in checkpoint.iterdir()}
    assert (run_dir / "model" / "model.safetensors").is_file() and len(list(tmp_path.iterdir())) == 3

    killed = tmp_path / "killed"
    code, out = _run(_launch("ddp.yaml", 2, tiny_policy_files, killed), log, kill_at="step 3/4")
    assert "step 3/4" in out and not (killed / "model").exists()
    code, out = _run(_launch("ddp.yaml", 2, tiny_policy_files, killed, "--resume"), log)
    assert code == 0 and "resuming from" in out, out[-3000:]
    assert _steps(killed) == [1, 2, 3, 4]


def test_a_sharded_config_on_a_cpu_is_refused_not_silently_replicated(tiny_policy_files, tmp_path, monkeypatch):
    """accelerate engages FSDP and DeepSpeed only on GPUs; on a CPU it would quietly run plain DDP."""
    code, out = _run(_launch("fsdp2.yaml", 2, tiny_policy_files, tmp_path / "run"), tmp_path / "prompts")
    assert code != 0 and "configured for FSDP, which shards only on GPUs" in out, out[-3000:]
    assert not (tmp_path / "run" / "checkpoints").exists()
    # DeepSpeed is not installed here (accelerate launch refuses zero2/zero3.yaml itself); where it is, the
    # processes would reach the kit with these variables set, and be refused the same way.
    from grpo_kit.pipeline import TrainRun, check_run
    from grpo_kit.tasks import get_task

    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    with pytest.raises(ValueError, match="configured for DEEPSPEED, which shards only on GPUs"):
        check_run(TrainRun(preset=get_preset("cpu-tiny"), task=get_task("gsm8k"), run_dir=tmp_path / "ds"))


@pytest.mark.parametrize("name, kind, shards", [("ddp", "MULTI_GPU", None), ("zero2", "DEEPSPEED", 2),
                                                ("zero3", "DEEPSPEED", 3), ("fsdp2", "FSDP", 2)])
def test_each_shipped_config_builds_accelerates_plugin_as_launch_reads_it(name, kind, shards, monkeypatch):
    """What a CPU can validate of a config: accelerate's launcher reads it, and the plugin it describes builds."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils import DeepSpeedPlugin, FullyShardedDataParallelPlugin
    from accelerate.utils.launch import prepare_multi_gpu_env

    args = launch_command_parser().parse_args(["--config_file", str(CONFIGS / f"{name}.yaml"), "train.py"])
    args, defaults, _ = _validate_launch_command(args)
    assert defaults.distributed_type.name == kind and defaults.mixed_precision == "bf16"
    assert "pick it" in (CONFIGS / f"{name}.yaml").read_text().lower()
    if kind == "DEEPSPEED":
        plugin = DeepSpeedPlugin(**{k: v for k, v in defaults.deepspeed_config.items()
                                    if k in ("zero_stage", "zero3_init_flag", "gradient_accumulation_steps",
                                             "gradient_clipping", "offload_optimizer_device",
                                             "offload_param_device")})
        assert plugin.deepspeed_config["zero_optimization"]["stage"] == shards
        return
    for key, value in prepare_multi_gpu_env(args).items():
        monkeypatch.setenv(key, value)
    if kind == "FSDP":
        plugin = FullyShardedDataParallelPlugin()  # reads the FSDP_* variables the launcher set
        assert plugin.fsdp_version == 2 and plugin.reshard_after_forward is True
        assert plugin.state_dict_type.name == "SHARDED_STATE_DICT"


def test_unsloth_on_several_processes_is_refused_with_the_presets_to_use(monkeypatch, capsys):
    with pytest.raises(ValueError, match="multi-gpu-lora"):
        check_settings(get_preset("a100"), num_processes=2)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["train", "--preset", "colab-t4"]) == 2
    assert "unsloth #2435" in capsys.readouterr().err


def test_the_multi_gpu_presets():
    lora, full = PRESETS["multi-gpu-lora"], PRESETS["multi-gpu-full"]
    assert not lora.use_unsloth and lora.lora_rank == 32 and lora.use_vllm and lora.vllm_mode == "colocate"
    assert not full.use_unsloth and full.lora_rank is None and full.use_vllm and full.vllm_mode == "server"
    for preset in (lora, full):
        check_settings(preset, num_processes=8)


class _Health(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health/" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_the_vllm_server_is_checked_before_the_model_loads(tmp_path, capsys):
    from grpo_kit.routes import check_vllm_server

    server = HTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        check_vllm_server("127.0.0.1", server.server_port)  # answers: fine
    finally:
        server.shutdown()
    with pytest.raises(ConnectionError, match="trl vllm-serve"):
        check_vllm_server("127.0.0.1", server.server_port, timeout_s=1)
    assert main(["train", "--preset", "multi-gpu-full", "--set", "vllm_server_port=9", "--run-dir",
                 str(tmp_path / "run")]) == 2
    assert "the vLLM server at http://127.0.0.1:9/health/ did not answer" in capsys.readouterr().err
