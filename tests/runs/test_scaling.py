"""Past one device: `accelerate launch -m grpo_kit train` on two CPU processes (gloo) with DDP, DeepSpeed ZeRO-2
and ZeRO-3, the shipped accelerate configs, and the multi-GPU presets' checks.

The launches run `accelerate-launch`, accelerate's own name for `accelerate launch` (the same `launch_command`, with
the same arguments and environment) without the `accelerate` command's other subcommands, whose imports (transformers,
scikit-learn) cost the launcher about 4 CPU seconds. They train on sum3, whose 2,100 train rows are one line each:
the tiny policy's warm start and each process's prompt-length filter read those, not GSM8K's 7,473 worded problems.

On a CPU, accelerate 1.15 runs several processes only through its multi-GPU launcher (torchrun): `--cpu`
starts one process (and drops a DeepSpeed config) unless mpirun is used. Through that launcher a DDP config
joins the processes as MULTI_CPU data parallelism over gloo, and a DeepSpeed config runs DeepSpeed's engine
on its CPU accelerator (gloo too). FSDP is engaged only on GPUs. DeepSpeed comes from `make install-deepspeed`
(a folder beside .venv, put on these launches' PYTHONPATH only; GRPO_KIT_DEEPSPEED names it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from grpo_kit.cli import main
from grpo_kit.tasks import get_task
from grpo_kit.training.checks import check_settings
from grpo_kit.training.presets import PRESETS, get_preset

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "accelerate"
ACCELERATE = str(Path(sys.executable).with_name("accelerate-launch"))
DEEPSPEED = Path(os.environ.get("GRPO_KIT_DEEPSPEED", ROOT / ".deepspeed"))


def _launch(config: str, processes: int, model: Path | str, run_dir: Path, *extra: str) -> list[str]:
    """`accelerate launch ... -m grpo_kit train` on ``model`` (a folder), or with ``model="tiny:<cache folder>"``
    on the kit's tiny policy, warm-started (one step) into that cache."""
    policy = ["--warm-steps", "1", "--cache-dir", model[5:]] if str(model).startswith("tiny:") else \
        ["--model_name_or_path", str(model)]
    return [ACCELERATE, "--config_file", str(CONFIGS / config), "--num_processes", str(processes),
            "--mixed_precision", "no", "-m", "grpo_kit", "train", "--preset", "cpu-tiny", "--task", "sum3", *policy,
            "--run-dir", str(run_dir), "--max-steps", "4", "--save-steps", "2", "--train-size", "32",
            "--per_device_train_batch_size", "8", "--max_completion_length", "12",
            "--rewards", "strict_format_reward_func", "xmlcount_reward_func",
            "tests.launch_rewards:record_prompts=0", "tests.launch_rewards:digit_share", *extra]


def _kill_launch(launcher: subprocess.Popen) -> None:
    """SIGKILL the launcher and every process it started, at once. torchrun starts each training process in a
    session of its own (torch.distributed.elastic's subprocess handler), so the launcher's process group does
    not hold them: kill each process group under the launcher."""
    import psutil  # accelerate's dependency

    root = psutil.Process(launcher.pid)
    groups = set()
    for process in [root, *root.children(recursive=True)]:
        try:
            groups.add(os.getpgid(process.pid))
        except ProcessLookupError:  # ended since it was listed
            continue
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            continue


def _run(command: list[str], log: Path, kill_at: str | None = None) -> tuple[int, str]:
    """Run ``command``; with ``kill_at``, SIGKILL the launch as soon as that text is logged (the kit's log goes to
    standard error, read here together with standard output)."""
    env = {**os.environ, "GRPO_KIT_PROMPT_LOG": str(log), "PYTHONUNBUFFERED": "1"}
    if any(c.endswith(("zero2.yaml", "zero3.yaml")) for c in command):
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(DEEPSPEED), env.get("PYTHONPATH")]))
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env,
                             start_new_session=True)
    seen = []
    for line in child.stdout:
        seen.append(line)
        if kill_at is not None and kill_at in line:
            _kill_launch(child)  # the launcher and both training processes, at once
            break
    child.wait(timeout=300)
    child.stdout.close()
    return child.returncode, "".join(seen)


def _killed_and_resumed(config: str, model: Path, run_dir: Path) -> tuple[str, str]:
    """Train 4 steps on two processes, SIGKILL both at step 3 (checkpoint-2 is the newest), resume."""
    killed, out = _run(_launch(config, 2, model, run_dir), run_dir.parent / "prompts", kill_at="step 3/4")
    assert "step 3/4" in out and not (run_dir / "model").exists(), out[-3000:]
    code, resumed = _run(_launch(config, 2, model, run_dir, "--resume"), run_dir.parent / "prompts")
    assert code == 0 and "resuming from" in resumed, resumed[-3000:]
    return out, resumed


def _history(run_dir: Path) -> list[dict]:
    return [row for row in json.loads((run_dir / "log_history.json").read_text()) if "reward" in row]


def _weights(model: Path) -> dict:
    """The tensors of a saved full model (a run folder's ``model/``, or any model folder)."""
    from safetensors.torch import load_file

    return load_file(model / "model.safetensors")


def _assert_trains_like(run_dir: Path, reference: Path) -> None:
    """The same steps, rewards and (to float32 rounding) weights as the reference run."""
    import torch

    assert [r["step"] for r in _history(run_dir)] == [1, 2, 3, 4]
    assert [r["reward"] for r in _history(run_dir)] == pytest.approx([r["reward"] for r in _history(reference)],
                                                                     abs=1e-6)
    weights, expected = _weights(run_dir / "model"), _weights(reference / "model")
    for name, tensor in expected.items():  # ZeRO-2 also writes the tied lm_head.weight: compare the reference's
        torch.testing.assert_close(weights[name], tensor, rtol=0, atol=1e-5)


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    """A DDP run on two processes of the kit's tiny policy (warm-started, one step, by the main process outside
    the launch), killed at step 3 and resumed. The ZeRO runs must reproduce it: the training rewards move the
    weights (tests/launch_rewards.py). Returns the folder holding the run, the policy, and both outputs."""
    root = tmp_path_factory.mktemp("ddp")
    killed, resumed = _killed_and_resumed("ddp.yaml", f"tiny:{root / 'cache'}", root / "run")
    (policy,) = (root / "cache").glob("tiny-policy-*")
    return root, policy, killed, resumed


def _require_deepspeed() -> None:
    """Skip (fail where ``make test`` names the folder) without a DeepSpeed built for this Python: ``.deepspeed`` is
    built for ``.venv``'s Python, and its compiled op does not load in another (``make test-py313``)."""
    ours, folder = sysconfig.get_config_var("EXT_SUFFIX"), DEEPSPEED / "deepspeed"
    built = {path.name[path.name.index(".cpython"):] for path in folder.rglob("*.cpython-*.so")} \
        if folder.is_dir() else None
    problem = "holds no deepspeed" if built is None else \
        f"holds a DeepSpeed built for {', '.join(sorted(built))}, not {ours}" if built and ours not in built else None
    if problem is not None:
        if "GRPO_KIT_DEEPSPEED" in os.environ:  # make test names it: missing there is a failure, not a skip
            pytest.fail(f"GRPO_KIT_DEEPSPEED={DEEPSPEED} {problem}: make install-deepspeed")
        pytest.skip(f"{DEEPSPEED} {problem}: make install-deepspeed (with this Python)")


def test_two_processes_score_different_prompts_and_write_one_run_folder(ddp_run):
    root, policy, killed, resumed = ddp_run
    ranks = {p.name: p.read_text().splitlines() for p in (root / "prompts").iterdir()}
    assert sorted(ranks) == ["rank-0.txt", "rank-1.txt"]
    assert ranks["rank-0.txt"] and ranks["rank-1.txt"] and set(ranks["rank-0.txt"]) != set(ranks["rank-1.txt"])
    # the main process's first two lines are the reward probe's (RunSpec.resolve calls each reward once on two
    # training rows before anything loads); then step 1: each process its own prompts
    probed, first = ranks["rank-0.txt"][:2], ranks["rank-0.txt"][2:6]
    assert len(probed) == 2 and not set(first) & set(ranks["rank-1.txt"][:4])
    assert resumed.count("[grpo_kit] wrote") == 1 and sorted(p.name for p in root.iterdir()) == [
        "cache", "prompts", "run"]
    checkpoint = root / "run" / "checkpoints" / "checkpoint-4"
    assert {"rng_state_0.pth", "rng_state_1.pth"} <= {p.name for p in checkpoint.iterdir()}
    assert (root / "run" / "model" / "model.safetensors").is_file()


def test_a_run_killed_across_both_processes_resumes_and_logs_every_step_once(ddp_run):
    root, policy, killed, resumed = ddp_run
    assert "resuming from" in resumed and "checkpoint-2 (step 2 of 4)" in resumed
    assert [r["step"] for r in _history(root / "run")] == [1, 2, 3, 4]
    assert any(not (w == v).all() for w, v in zip(_weights(root / "run" / "model").values(),
                                                  _weights(policy).values()))


def test_zero3_shards_over_two_processes_resumes_after_a_kill_and_trains_what_ddp_trains(ddp_run, tmp_path):
    _require_deepspeed()
    run_dir = tmp_path / "run"
    _killed_and_resumed("zero3.yaml", ddp_run[1], run_dir)
    # DeepSpeed's own checkpoint: under ZeRO-3 each process holds its shard of the weights and optimizer state
    shards = {p.name for p in (run_dir / "checkpoints" / "checkpoint-4" / "global_step4").iterdir()}
    assert {f"zero_pp_rank_{r}_mp_rank_00_{kind}_states.pt" for r in (0, 1) for kind in ("model", "optim")} <= shards
    _assert_trains_like(run_dir, ddp_run[0] / "run")  # the saved model is the gathered, whole policy
    # the base weights' digest is taken from the gathered shards: the same as the unsharded run's
    fingerprints = [json.loads((d / "train_settings.json").read_text())["base_fingerprint"]
                    for d in (run_dir, ddp_run[0] / "run")]
    assert fingerprints[0] == fingerprints[1]


def test_zero2_over_two_processes_trains_what_ddp_trains(ddp_run, tmp_path):
    _require_deepspeed()
    run_dir = tmp_path / "run"
    code, out = _run(_launch("zero2.yaml", 2, ddp_run[1], run_dir), tmp_path / "prompts")
    assert code == 0, out[-3000:]
    shards = {p.name for p in (run_dir / "checkpoints" / "checkpoint-4" / "global_step4").iterdir()}
    assert {"mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt",
            "zero_pp_rank_1_mp_rank_00_optim_states.pt"} <= shards  # weights whole, optimizer state sharded
    _assert_trains_like(run_dir, ddp_run[0] / "run")


def test_fsdp_on_a_cpu_is_refused_not_silently_replicated(tiny_policy_files, tmp_path, monkeypatch):
    """Accelerate engages FSDP only on GPUs; on a CPU it would quietly run plain DDP. Each process refuses it before
    it reads the recipe (which imports TRL) and before the run folder exists."""
    code, out = _run(_launch("fsdp2.yaml", 2, tiny_policy_files, tmp_path / "run"), tmp_path / "prompts")
    assert code != 0 and "configured for FSDP, which shards only on GPUs" in out, out[-3000:]
    assert not (tmp_path / "run").exists()
    from grpo_kit.runs import spec

    def read_recipe(*args, **kwargs):
        raise AssertionError("the recipe was read before FSDP was refused")

    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")  # what the launcher set in those processes
    with monkeypatch.context() as early:
        early.setattr(spec, "_resolve_recipe", read_recipe)
        with pytest.raises(ValueError, match="configured for FSDP, which shards only on GPUs"):
            spec.RunSpec.resolve("cpu-tiny", "sum3", run_dir=tmp_path / "run")
    monkeypatch.setattr(spec, "cuda_available", lambda: True)  # with a GPU: a recipe that trains on the CPU, once read
    with pytest.raises(ValueError, match="configured for FSDP, which shards only on GPUs"):
        spec.RunSpec.resolve("cpu-tiny", "sum3", run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_the_launchs_other_processes_leave_the_run_folders_lock_to_the_main_process(tiny_policy_files, tmp_path):
    """Only the main process writes the run folder and holds its lock (grpo_kit.runs.train). A slower process of the
    same launch that resolved its spec once the main process held the lock took it for another writer's and ended
    the launch ("is being written by process <the main process>"); the main process still refuses another writer."""
    from grpo_kit.policy.devices import Launch
    from grpo_kit.runs.folder import RunFolderBusy
    from grpo_kit.runs.spec import RunSpec

    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from grpo_kit.runs.folder import RunFolder
        with RunFolder({str(tmp_path / "run")!r}).lock("train"):
            print("holding", flush=True)
            time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert holder.stdout.readline().strip() == "holding"

        def resolve(rank: int) -> RunSpec:
            return RunSpec.resolve("cpu-tiny", "sum3", model=tiny_policy_files, run_dir=tmp_path / "run",
                                   launch=Launch(world_size=2, rank=rank, local_rank=rank))

        assert resolve(rank=1).folder.path == tmp_path / "run"
        with pytest.raises(RunFolderBusy, match=f"being written by process {holder.pid} on .* \\(train, since "):
            resolve(rank=0)
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


def test_held_out_evaluation_is_refused_when_the_weights_are_sharded(tmp_path, monkeypatch):
    from grpo_kit.runs.spec import RunSpec

    def resolve():
        return RunSpec.resolve(get_preset("cpu-tiny"), get_task("gsm8k"), run_dir=tmp_path / "run", eval_steps=2)

    assert resolve().eval_steps == 2  # one process, or DDP / ZeRO-2: a full copy of the policy on the main process
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    with pytest.raises(ValueError, match="weights are sharded: drop eval_steps"):
        resolve()


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
        check_settings(get_preset("a100"), get_task("gsm8k").reward_set(), num_processes=2)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["train", "--preset", "colab-t4"]) == 2
    assert "unsloth #2435" in capsys.readouterr().err


def test_the_multi_gpu_presets():
    lora, full = PRESETS["multi-gpu-lora"], PRESETS["multi-gpu-full"]
    assert not lora.use_unsloth and lora.lora_rank == 32 and lora.use_vllm and lora.vllm_mode == "colocate"
    assert not full.use_unsloth and full.lora_rank is None and full.use_vllm and full.vllm_mode == "server"
    for preset in (lora, full):
        check_settings(preset, get_task("gsm8k").reward_set(), num_processes=8)


class _Health(BaseHTTPRequestHandler):
    def do_GET(self):
        # vLLM's server: trl 1.15's client asks there
        self.send_response(200 if self.path in ("/health", "/get_world_size") else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_the_vllm_server_is_checked_before_the_model_loads(tmp_path, capsys):
    from grpo_kit.policy.vllm import check_vllm_server

    server = HTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        check_vllm_server("127.0.0.1", server.server_port)  # answers: fine
    finally:
        server.shutdown()
    with pytest.raises(ConnectionError, match="VLLM_SERVER_DEV_MODE=1 vllm serve"):
        check_vllm_server("127.0.0.1", server.server_port, timeout_s=1)
    assert main(["train", "--preset", "multi-gpu-full", "--vllm_server_port", "9", "--run-dir",
                 str(tmp_path / "run")]) == 2
    assert "the vLLM server at http://127.0.0.1:9/health did not answer" in capsys.readouterr().err
