"""What the notebooks' cells do, one call per step: install the stack, check the GPU, plan the baseline, plan the
training run, open a trained run, export it, plan a comparison, log to wandb, show the run viewer; the ``cpu_demo``
switch that runs a notebook on a CPU with the kit's tiny policy; and the doctor
(:func:`grpo_kit.training.doctor.doctor`, also ``python -m grpo_kit doctor``): the installed stack, the driver and
the GPU against a recipe.

Importing this module imports no third-party package but PyYAML (a dependency the kit installs with itself), so
the install cell can call it right after installing the kit itself. It is one of the three front doors, beside the
command line and the demo: its calls translate a notebook's parameters into the pipeline's steps
(:mod:`grpo_kit.runs.pipeline`), whose defaults they keep, and it imports neither of the other doors.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from grpo_kit.system.logs import counted
from grpo_kit.training.doctor import _disk_version, _live_version, doctor, format_doctor, nvidia_driver

__all__ = ["CHEAP_SAMPLES", "TORCH_FAMILY", "Comparison", "CpuDemo", "RunView", "cpu_demo_settings", "doctor",
           "export_run", "format_doctor", "gpu_check", "install_stack", "log_to_wandb", "nvidia_driver", "open_run",
           "plan_baseline", "plan_comparison", "plan_training", "route_summary", "view_runs"]

def install_stack(gpu: bool = True, driver: Any = nvidia_driver, keep_torch: bool = False) -> bool:
    """Install what the notebooks need beside the runtime's torch (the notebooks' first cell).

    With ``gpu`` the plan of :func:`grpo_kit.system.install.install_plan` for this runtime's torch and driver is
    shown first; where no GPU route exists it stops in one line (driver found, what it needs, what to do) before
    anything downloads. The plan's packages are installed by pip with torch held at the runtime's version (a
    constraint: pip refuses rather than replaces it), then every version is read back from what is installed. Where
    the plan replaces the runtime's torch for vLLM (its release built for another CUDA, on a driver that runs the
    vLLM's: Colab's torch 2.11.0+cu128 on driver 580), PyPI's torch of that release and the torchvision and torchaudio
    the vLLM pins replace the runtime's first (``--force-reinstall --no-deps``: pip would take the runtime's
    ``2.11.0+cu128`` as ``2.11.0``), then the rest is installed with those held. The kit's other packages (pandas,
    matplotlib, ...) are installed only where missing, so a runtime's own stay. Then the route, the card and the
    hours of the preset the notebooks take here are printed (:func:`route_summary`, in a process of its own: this
    kernel must import Unsloth before transformers). Without ``gpu`` (notebook 01: a tokenizer and the data) only
    transformers, datasets and the kit's other packages are installed where missing, on any runtime; so is a runtime
    without an NVIDIA driver, where the notebooks run the kit's tiny policy on the CPU.

    Afterwards it says whether the runtime must be restarted: a package imported in this kernel stays the old one
    until then (unslothai/notebooks #337 shows what replacing packages under a live kernel breaks).

    Args:
        gpu: install the GPU stack (Unsloth, TRL, vLLM where one fits, ...); ``False``: only what runs on a CPU.
        driver: returns the NVIDIA driver's version or ``None`` (default: :func:`nvidia_driver`; tests fake it).
        keep_torch: keep the runtime's torch where the plan would replace it for vLLM (no vLLM then).

    Returns:
        Whether anything was installed.

    Raises:
        RuntimeError: no GPU route for this runtime (one line, from the plan's first problem); a version read back
            after installing differs from the plan's (the packages named).
        subprocess.CalledProcessError: pip failed (its output was shown).
    """
    from grpo_kit.system.install import install_plan, install_table

    table = install_table()
    torch = _disk_version("torch")
    found = driver() if gpu else None
    if gpu and found is None:
        print("No NVIDIA GPU here: installing what runs on a CPU (the notebooks then use preset cpu-tiny, the kit's "
              "tiny policy; on Colab a GPU is Runtime > Change runtime type > GPU).")
        gpu = False
    plan = None
    if gpu:
        plan = install_plan(torch, found, keep=keep_torch)
        if plan.fatal:
            raise RuntimeError(plan.problems[0])
        print(plan.describe())
        wanted, xformers = _pins(plan.install), plan.xformers
    else:
        row = next(r for r in table["rows"] if r["torch_minor"] == table["pinned"])
        wanted, xformers = {name: row["packages"][name] for name in ("transformers", "datasets")}, None
    held = {name: v for name, v in wanted.items() if name in TORCH_FAMILY} if plan and plan.replaces else \
        ({"torch": torch} if torch is not None else {})
    installed = _install(wanted, xformers, held, table, plan)
    if plan is not None:
        print(_route_here())
    return installed


#: torch and the packages built against one torch build, which a replaced torch takes with it.
TORCH_FAMILY = ("torch", "torchvision", "torchaudio")


def _install(wanted: dict[str, str], xformers: str | None, held: dict[str, str], table: dict[str, Any],
             plan: Any) -> bool:
    """:func:`install_stack`'s pip calls and read-back: ``wanted`` ({name: version}), the ``xformers`` pin from
    ``plan``'s index, with ``held`` ({name: version}) as pip's constraints (replaced first where ``plan`` replaces
    the runtime's torch); returns whether anything was installed."""
    missing = {name: version for name, version in wanted.items() if _disk_version(name) != version}
    missing |= {name: version for name, version in _pins(table["kit"]).items() if _disk_version(name) is None}
    xformers = xformers if xformers and _disk_version("xformers") != _pins([xformers])["xformers"] else None
    wanted |= _pins([xformers] if xformers else [])
    if not missing and xformers is None:
        print("Everything the notebook needs is installed; nothing to do.")
        return False
    before = {name: _live_version(_module_of(name)) for name in [*missing, *(["xformers"] if xformers else [])]}
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    replacing = [f"{name}=={version}" for name, version in held.items() if name in missing] \
        if plan is not None and plan.replaces else []
    with tempfile.TemporaryDirectory() as folder:
        constraints = Path(folder) / "constraints.txt"  # keep the runtime's torch: pip fails instead of replacing it
        constraints.write_text("".join(f"{name}=={version}\n" for name, version in held.items()))
        keep = ["-c", str(constraints)]
        if replacing:  # the runtime's 2.11.0+cu128 meets ==2.11.0: only a forced reinstall takes PyPI's build
            subprocess.check_call([*pip, "--force-reinstall", "--no-deps", *replacing])
        if xformers is not None:  # first, from PyTorch's index for this CUDA: unsloth's own `xformers>=0.0.27.post2`
            subprocess.check_call([*pip, "--no-deps", "--index-url", plan.xformers_index_url, xformers, *keep])
        if missing:  # is then met, and pip takes no CUDA 12.8 build of it from PyPI
            subprocess.check_call([*pip, *(f"{n}=={v}" for n, v in missing.items()), *keep])
    wrong = [f"{name} {_disk_version(name)} (wanted {version})" for name, version in wanted.items()
             if _disk_version(name) != version]
    kept = held.get("torch") if plan is None or not plan.replaces else None
    if kept is not None and _disk_version("torch") != kept:
        wrong.append(f"torch {_disk_version('torch')} (the runtime's {kept} was to stay)")
    if wrong:
        raise RuntimeError(f"after installing, {', '.join(wrong)}: another package changed them; install these "
                           "versions by hand (pip install NAME==VERSION) or start from a fresh runtime")
    stale = [name for name, live in before.items() if live is not None and live != _disk_version(name)]
    print(f"RESTART the runtime now (Colab: Runtime > Restart session), then run the notebook from the top: this "
          f"kernel still runs the old {', '.join(stale)}." if stale else "Installed; no restart needed.")
    return True


def _route_here() -> str:
    """:func:`route_summary` for this machine, from a process of its own (the stack just installed is imported there,
    not in this kernel); one line saying why where it could not run."""
    done = subprocess.run([sys.executable, "-c", "from grpo_kit.notebook import route_summary; print(route_summary())"],
                          capture_output=True, text=True, timeout=900)
    if done.returncode == 0:
        return done.stdout.strip()
    return "the route and hours could not be planned here: " + (done.stderr.strip().splitlines() or ["no output"])[-1]


def route_summary(preset: Any = None, model: str | None = None, steps: int | None = None) -> str:
    """The card, the route and the hours of training ``preset`` on this machine, as ``python -m grpo_kit plan``
    reckons them (:func:`grpo_kit.training.cost.estimate_time`): what the install cell, the GPU check and notebook
    03's plan print before a long phase.

    Args:
        preset: a preset name or :class:`grpo_kit.training.presets.Recipe` (``None``: the one the notebooks take here).
        model: a Hub id or folder instead of the preset's model.
        steps: the steps to train (``None``: the preset's ``max_steps``).

    Returns:
        A few lines; empty without a GPU or for a preset that runs on the CPU.
    """
    from grpo_kit.policy.speed import route_words
    from grpo_kit.system.install import installed_version
    from grpo_kit.training.plan import make_plan

    overrides = {**({"model_name_or_path": model} if model else {}), **({"max_steps": steps} if steps else {})}
    plan = make_plan(preset, overrides)
    device, time = plan.device, plan.time
    if device is None or time is None:
        return ""
    here = time[time["applies"]]
    generator = f"vLLM {installed_version('vllm')} generating" if time["applies"] == "with_vllm" else \
        "no vLLM here: " + (route_words(here["route"]) if here else plan.without_vllm)
    lines = [f"card: {device.name} ({device.memory_gib:.0f} GiB); preset {plan.preset} ({plan.model}), "
             f"route {plan.route}, {generator}",
             f"time: about {here['hours']:.1f} h for {counted(time['steps'], 'GRPO step')} (an estimate, "
             f"{here['basis']})" if here else "time: no estimate for this route"]
    return "\n".join(lines + ([f"  {time['session']}"] if time["session"] else []))


def _pins(requirements: list[str]) -> dict[str, str]:
    """``["name==version", ...]`` as ``{name: version}``."""
    return dict(requirement.split("==") for requirement in requirements)


def _module_of(name: str) -> str:
    """The module a distribution installs (``unsloth_zoo``, ``sklearn`` for scikit-learn)."""
    return {"scikit-learn": "sklearn"}.get(name, name.replace("-", "_"))


def gpu_check(preset: Any = None, preset_overrides: Mapping[str, Any] | None = None, cpu_demo: Any = False) -> Any:
    """The notebooks' GPU check: say what this machine has and which preset fits it, resolve the preset, show
    the kit's log, and import the GPU stack in the order it needs (Unsloth first on its routes).

    Args:
        preset: a preset name or :class:`grpo_kit.training.presets.Recipe`; ``None``: the one that fits this
            machine (T4: ``colab-t4``, L4: ``colab-l4``, A100/H100: ``a100``, no GPU: ``cpu-tiny``;
            :func:`grpo_kit.training.presets.preset_for_device`). On a GPU it prints :func:`route_summary`.
        preset_overrides: preset fields to replace.
        cpu_demo: the notebooks' switch (:func:`cpu_demo_settings`): when on, the preset is ``cpu-tiny`` (the kit's
            tiny policy on the CPU) with the switch's ``preset_overrides`` applied after ``preset_overrides``.

    Returns:
        The :class:`grpo_kit.training.presets.Recipe`.

    Raises:
        ValueError: an unknown preset or field (before any model loads).
        RuntimeError: transformers, TRL or peft were imported before Unsloth on an Unsloth route (restart the
            kernel and run the cells in order).
    """
    from grpo_kit.policy.devices import first_gpu
    from grpo_kit.policy.routes import prepare_stack
    from grpo_kit.system.logs import configure_logging
    from grpo_kit.training.presets import device_preset, get_preset

    configure_logging(info_to_stdout=True)  # Jupyter draws standard error red: warnings only
    cpu = cpu_demo_settings(cpu_demo)
    overrides = {**(preset_overrides or {}), **(cpu.preset_overrides if cpu else {})}
    config = get_preset("cpu-tiny" if cpu else preset, **overrides)
    gpu = first_gpu()
    if gpu is None:
        print("No CUDA GPU: everything runs on the CPU. The preset that fits: 'cpu-tiny' (the kit's tiny offline "
              "policy); the GPU presets need a CUDA GPU (on Colab: Runtime > Change runtime type > GPU).")
    else:
        why = "bfloat16 available" if gpu.bf16 else "no bfloat16 on this card"
        print(f"CUDA GPU: {gpu.name}, {gpu.memory_gib:.0f} GiB ({why}). The preset that fits: '{device_preset()}' "
              "(used when the parameters cell leaves preset = None).")
    prepare_stack(config.loading)
    print(f"preset: {config.name} ({config.model or 'the kit tiny policy'})")
    if gpu is not None and not config.use_cpu:
        print(route_summary(config))
    return config


def log_to_wandb(project: str | None, mode: str | None, name: str, job_type: str, tables: Mapping[str, Any]) -> None:
    """Log data frames to a wandb run of their own, if a project is set (never prompting, never blocking:
    :func:`grpo_kit.training.tracking.setup_wandb`).

    Args:
        project: the wandb project; ``None`` logs nothing.
        mode: ``"online"``, ``"offline"``, ``"disabled"`` or ``None`` (see ``setup_wandb``).
        name, job_type: the wandb run's name and job type.
        tables: ``{key: pandas.DataFrame}``, each logged as a ``wandb.Table`` (columns that mix types are
            logged as text).

    Returns nothing (a notebook cell ending in the call shows no value); one line says what was logged where.
    """
    from grpo_kit.training.tracking import setup_wandb

    if setup_wandb(project, mode) != "wandb":
        return
    import wandb

    wandb.init(project=project, name=name, job_type=job_type)
    for key, frame in tables.items():  # a column that mixes types is logged as text
        wandb.log({key: wandb.Table(dataframe=frame.astype({c: str for c in frame if frame[c].dtype == object}))})
    wandb.finish()
    print(f"logged {', '.join(tables)} to wandb project {project} (run {name})")


@dataclass(frozen=True)
class CpuDemo:
    """What the notebooks' ``cpu_demo`` switch sets: the kit's tiny policy on a CPU, on small slices, so a notebook
    runs end to end in minutes without a GPU (what ``make test`` runs). ``cpu_demo = True`` takes these defaults;
    ``cpu_demo = {"eval_size": 20, ...}`` changes some.

    Attributes:
        warm_start_steps: the tiny policy's supervised warm-start steps (``None``: the kit's default, sized to a task
            file's rows by :func:`grpo_kit.policy.warm_start.warm_steps_for`, whose result is cached under ``.cache/``).
        eval_size: test questions evaluated (replaces the notebook's share of the test split).
        max_new_tokens: each completion's budget in tokens (the ``cpu-tiny`` preset's completions are 64).
        batch_size: prompts per generate call (``None``: the baseline plan's, :class:`grpo_kit.runs.measure.EvalPlan`).
        train_size: training questions to sample from (``None``: all).
        preset_overrides: ``cpu-tiny`` preset fields to replace.
    """

    warm_start_steps: int | None = None
    eval_size: int = 100
    max_new_tokens: int = 64
    batch_size: int | None = None
    train_size: int | None = None
    preset_overrides: Mapping[str, Any] = field(default_factory=dict)

    def eval_settings(self) -> dict[str, Any]:
        """What the switch sets in notebook 02's baseline plan, by :func:`grpo_kit.runs.pipeline.baseline_plan`'s
        names: the tiny policy (no ``model``), ``eval_size`` questions (not the notebook's share), the budget, and the
        batch and warm start where the switch gives them."""
        return {"model": None, "eval_size": self.eval_size, "eval_fraction": None,
                "max_new_tokens": self.max_new_tokens, **_given(batch_size=self.batch_size, warm=self.warm())}

    def train_settings(self) -> dict[str, Any]:
        """What the switch sets in notebook 03's run, by :meth:`grpo_kit.runs.spec.RunSpec.resolve`'s names: the tiny
        policy (no ``model``), and the training questions and warm start where the switch gives them."""
        return {"model": None, **_given(train_size=self.train_size, warm=self.warm())}

    def warm(self) -> Any:
        """The tiny policy's :class:`grpo_kit.policy.warm_start.WarmStart` (``None``: the kit's default)."""
        from grpo_kit.policy.warm_start import WarmStart

        return WarmStart(steps=self.warm_start_steps) if self.warm_start_steps is not None else None


def _given(**settings: Any) -> dict[str, Any]:
    """``settings`` less those left ``None`` (a call's default then applies)."""
    return {name: value for name, value in settings.items() if value is not None}


def cpu_demo_settings(cpu_demo: Any) -> CpuDemo | None:
    """The notebooks' ``cpu_demo`` switch read: ``False``/``None`` -> off (``None``), ``True`` -> :class:`CpuDemo`'s
    defaults, a mapping -> those fields changed.

    Raises:
        ValueError: a mapping with a key that is not a :class:`CpuDemo` field (the message lists them).

    >>> cpu_demo_settings(False) is None, cpu_demo_settings(True).eval_size
    (True, 100)
    >>> cpu_demo_settings({"eval_size": 8}).eval_size
    8
    """
    if cpu_demo is None or cpu_demo is False:
        return None
    if cpu_demo is True:
        return CpuDemo()
    if isinstance(cpu_demo, Mapping):
        known = [f.name for f in fields(CpuDemo)]
        unknown = sorted(set(cpu_demo) - set(known))
        if unknown:
            raise ValueError(f"cpu_demo has no setting {', '.join(map(repr, unknown))}: it takes True, False or a "
                             f"dict of {', '.join(known)}")
        return CpuDemo(**cpu_demo)
    raise ValueError(f"cpu_demo = {cpu_demo!r}: set it to True, False or a dict of settings")


#: Notebook 02's sampled completions per question where they cost little (``samples = None``): enough for pass@8,
#: maj@8 and the reward check's zero-variance share over GRPO-sized groups.
CHEAP_SAMPLES = 8


def _default_samples(plan: Any, tiny: bool) -> Any:
    """``plan`` with :data:`CHEAP_SAMPLES` samples where generating them costs little (vLLM, or the tiny policy on a
    CPU), else none; one line says which and why."""
    from grpo_kit.policy.routes import eval_route

    route = eval_route(plan.preset.loading, plan.backend)
    why = "the kit's tiny policy" if tiny else f"route {route}"
    if tiny or route in ("vllm", "unsloth-vllm"):
        print(f"samples = None: {CHEAP_SAMPLES} sampled completions per question ({why} generates them quickly), "
              "for pass@k, maj@k and the reward check")
        return replace(plan, samples=CHEAP_SAMPLES)
    print(f"samples = None: greedy only, since without vLLM ({why}) {CHEAP_SAMPLES} samples a question would "
          f"generate {CHEAP_SAMPLES} times the greedy pass's tokens; set samples = {CHEAP_SAMPLES} for pass@k, maj@k "
          "and the reward check")
    return plan


def plan_baseline(task: str, config: Any, *, run_dir: str, eval_questions: float | None = None,
                  samples: int | None = None, cpu_demo: Any = False, use_drive: bool | None = None,
                  **plan_settings: Any) -> tuple[Any, Any]:
    """Notebook 02's plan: which questions, how they are decoded, where the results go. Nothing loads. The plan is
    the one ``python -m grpo_kit eval --before`` measures (:func:`grpo_kit.runs.pipeline.baseline_plan`), and
    ``plan_settings`` are its settings under their own names.

    Args:
        task: the task's name (``grpo_kit.tasks``).
        config: the preset (:func:`gpu_check`).
        run_dir: the run folder notebooks 02, 03 and 04 share (on Google Drive in Colab:
            :func:`grpo_kit.runs.folder.resolve_run_dir`).
        eval_questions: a share of the test split (a float in (0, 1]; ``None``: the blog post's 0.5) or a number of
            questions (an int): ``eval --before``'s ``--eval-fraction`` or ``--eval-size``.
        samples: sampled completions per question for avg@k / pass@k / maj@k and the reward check (0: greedy only);
            ``None``: :data:`CHEAP_SAMPLES` where they cost little (vLLM generates, or the kit's tiny policy on a
            CPU), else 0, said in one line either way.
        cpu_demo: the notebooks' switch (:func:`cpu_demo_settings`): its settings replace the notebook's
            (:meth:`CpuDemo.eval_settings`).
        use_drive: ``None``: Drive in Colab only.
        plan_settings: :class:`grpo_kit.runs.measure.EvalPlan`'s fields and ``baseline_plan``'s keywords by name:
            ``model`` (a Hub id or folder instead of the preset's), ``max_new_tokens``, ``temperature``, ``seed``
            (the slice's: the same questions in notebook 04), ``batch_size``, ``backend``, ``warm_steps``,
            ``trust_remote_code`` (the task file may import and run the Python it names outside ``grpo_kit``: the
            command line's ``--trust-task-code``), ...; ``None`` keeps the plan's default.

    Returns:
        ``(plan, run)``: the :class:`grpo_kit.runs.measure.EvalPlan` and the :class:`grpo_kit.runs.folder.RunFolder`.

    Raises:
        ValueError: a setting the plan has no field for (one line naming those it has); ``eval_questions`` that is
            neither a share in (0, 1] nor a whole number >= 1; whatever :class:`grpo_kit.runs.measure.EvalPlan`
            refuses.
    """
    from grpo_kit.runs.folder import RunFolder, resolve_run_dir
    from grpo_kit.runs.pipeline import baseline_plan

    _refuse_unknown("plan_baseline", plan_settings, _plan_names() - {"eval_size", "eval_fraction", "samples"},
                    "eval_questions, samples and baseline_plan's (EvalPlan's fields)",
                    instead={"eval_size": "eval_questions", "eval_fraction": "eval_questions"})
    cpu = cpu_demo_settings(cpu_demo)
    plan = baseline_plan(task, config, samples=samples,
                         **{**plan_settings, **_questions(eval_questions), **(cpu.eval_settings() if cpu else {})})
    if samples is None:
        plan = _default_samples(plan, tiny=cpu is not None)
    run = RunFolder(resolve_run_dir(run_dir, use_drive))
    print(f"greedy, up to {plan.max_new_tokens} new tokens"
          + (f", and {counted(plan.samples, 'sample')} each at temperature {plan.temperature}" if plan.samples
             else ""))
    if cpu is None and (line := _generation_line(plan)):
        print(line)
    print(f"run folder: {run.path}")
    return plan, run


def _questions(eval_questions: Any) -> dict[str, Any]:
    """Notebook 02's ``eval_questions`` by :func:`grpo_kit.runs.pipeline.baseline_plan`'s names: a whole number as
    ``eval_size``, a share as ``eval_fraction`` (``None``: neither, the plan's default share).

    Raises:
        ValueError: neither a share in (0, 1] nor a whole number >= 1.
    """
    if eval_questions is None:
        return {}
    if isinstance(eval_questions, bool) or not isinstance(eval_questions, int | float) or eval_questions <= 0 \
            or (isinstance(eval_questions, float) and eval_questions > 1):
        raise ValueError(f"eval_questions = {eval_questions!r}: set a share of the test split in (0, 1] (0.5 is "
                         "the blog post's half) or a whole number of questions")
    return {"eval_size": eval_questions} if isinstance(eval_questions, int) else {"eval_fraction": eval_questions}


def _plan_names() -> set[str]:
    """The settings :func:`grpo_kit.runs.pipeline.baseline_plan` takes by name: its keywords and
    :class:`grpo_kit.runs.measure.EvalPlan`'s fields, less the task, the preset and the slice it builds."""
    import inspect

    from grpo_kit.runs.measure import EvalPlan
    from grpo_kit.runs.pipeline import baseline_plan

    keywords = {p.name for p in inspect.signature(baseline_plan).parameters.values() if p.kind is p.KEYWORD_ONLY}
    return (keywords | {f.name for f in fields(EvalPlan)}) - {"task", "preset", "slice"}


def _refuse_unknown(call: str, settings: Mapping[str, Any], known: set[str], whose: str,
                    instead: Mapping[str, str] | None = None) -> None:
    """Refuse in one line a setting ``call`` does not take, naming the nearest (``instead``: ``{name: what the call
    takes for it}``, else the closest spelling) and those it takes (``whose``: where their names come from).

    Raises:
        ValueError: a name of ``settings`` is not in ``known``.
    """
    import difflib

    unknown = sorted(set(settings) - known)
    if unknown:
        near = (instead or {}).get(unknown[0]) or next(iter(difflib.get_close_matches(unknown[0], known, n=1)), None)
        hint = f" (did you mean {near}?)" if near else ""
        raise ValueError(f"{call} has no setting {', '.join(map(repr, unknown))}{hint}: it takes {whose} "
                         f"{', '.join(sorted(known))}")


def _generation_line(plan: Any) -> str | None:
    """How long the baseline's generation takes on this GPU at most, by the route it takes, as the kit's arithmetic
    reckons it (:func:`grpo_kit.policy.speed.generation_seconds`); ``None`` without a GPU or a model shape."""
    from grpo_kit.policy.devices import first_gpu
    from grpo_kit.policy.routes import eval_route
    from grpo_kit.policy.shapes import model_shape
    from grpo_kit.policy.speed import generation_seconds
    from grpo_kit.system.progress import duration

    gpu = None if plan.preset.use_cpu else first_gpu()
    if gpu is None or plan.source.tiny is not None:
        return None
    try:
        parameters = model_shape(plan.source.name).parameters
    except (LookupError, ValueError):
        return None
    route = eval_route(plan.preset.loading, plan.backend)
    questions = len(plan.questions())
    tokens = questions * (1 + plan.samples) * plan.max_new_tokens
    seconds, basis = generation_seconds("vllm" if route in ("vllm", "unsloth-vllm") else "transformers", tokens,
                                        parameters, gpu)
    return (f"generation: {counted(questions, 'question')}, {duration(seconds)} at most on {gpu.name} by route "
            f"{route} (an estimate, {basis})")


def plan_training(config: Any, task: str, *, run_dir: str, cpu_demo: Any = False, use_drive: bool | None = None,
                  **run_settings: Any) -> Any:
    """Notebook 03's run, resolved and checked before anything loads by what ``python -m grpo_kit train`` resolves
    it with (:meth:`grpo_kit.runs.spec.RunSpec.resolve`, whose arguments ``run_settings`` are, under their own
    names), and said in two lines (:meth:`grpo_kit.runs.spec.RunSpec.describe`).

    Args:
        config: the preset (:func:`gpu_check`).
        task: the task's name.
        run_dir: the run folder (on Google Drive in Colab: :func:`grpo_kit.runs.folder.resolve_run_dir`).
        cpu_demo: the notebooks' switch (:func:`cpu_demo_settings`): its settings replace the notebook's
            (:meth:`CpuDemo.train_settings`).
        use_drive: ``None``: Drive in Colab only.
        run_settings: ``RunSpec.resolve``'s arguments by name: ``model`` (a Hub id or folder instead of the
            preset's), ``algorithm``, ``rewards`` (a :class:`grpo_kit.tasks.RewardSet` or ``{reward name: weight}``),
            ``resume``, ``eval_steps``, ``eval_size``, ``seed``, ``wandb_project``, ``trust_remote_code`` (the task
            file may import and run the Python it names outside ``grpo_kit``: the command line's
            ``--trust-task-code``), ...; any other name is a preset field (``max_steps``, ``learning_rate``, ...), as
            the command line's ``--key value``. ``None`` keeps the default.

    Returns:
        The :class:`grpo_kit.runs.spec.RunSpec` that :func:`grpo_kit.runs.train.train` runs.

    Raises:
        ValueError: a name that is neither ``RunSpec.resolve``'s nor a preset field (one line naming the nearest), and
            whatever ``RunSpec.resolve`` refuses.
    """
    from grpo_kit.runs.folder import resolve_run_dir
    from grpo_kit.runs.spec import RunSpec

    cpu = cpu_demo_settings(cpu_demo)
    run_settings = {**_given(**run_settings), **(cpu.train_settings() if cpu else {})}
    spec = RunSpec.resolve(config, task, run_dir=resolve_run_dir(run_dir, use_drive), **run_settings)
    print("\n".join(spec.describe()))
    if not spec.preset.use_cpu and (summary := route_summary(spec.preset, model=run_settings.get("model"))):
        print(summary)
    return spec


def open_run(run_dir: str, use_drive: bool | None = None, trust_remote_code: bool = False) -> tuple[Any, Any]:
    """Notebook 04's first step: the run folder notebooks 02 and 03 wrote, the plan its baseline measured, and the
    GPU check for that plan's preset (Unsloth first on its routes). ``trust_remote_code``: the run's task file may
    import and run Python of its own (:func:`grpo_kit.tasks.task_file.check_task_code`).

    Returns:
        ``(run, plan)``: the :class:`grpo_kit.runs.folder.RunFolder` and its :class:`grpo_kit.runs.measure.EvalPlan`.

    Raises:
        RuntimeError / ValueError: no such folder, or no finished baseline in it (the message names what to run).
    """
    from grpo_kit.runs.folder import BASELINE_STEP, RunFolder, resolve_run_dir
    from grpo_kit.runs.measure import plan_from_settings

    run = RunFolder.existing(resolve_run_dir(run_dir, use_drive))  # a mistyped run_dir is named, not created
    plan = plan_from_settings(run.read_json(run.eval_settings, written_by=BASELINE_STEP),
                              trust_remote_code=trust_remote_code)
    gpu_check(plan.preset)
    print(f"run folder {run.path}: task {plan.task.name}")
    return run, plan


def export_run(run: Any, formats: Any = ("merged",), **export_settings: Any) -> str:
    """Notebook 04's export, the step ``python -m grpo_kit export`` runs (:func:`grpo_kit.runs.pipeline.export_steps`,
    whose settings ``export_settings`` are, under their own names): each format checked against the trained policy on
    held-out questions, and the export (the merged one of several) uploaded to the Hub when asked.

    Args:
        run: the run (:func:`open_run`'s :class:`grpo_kit.runs.folder.RunFolder`) or its folder.
        formats: a format or several (:data:`grpo_kit.runs.export_formats.FORMATS`).
        export_settings: ``export_steps``' and :func:`grpo_kit.runs.export.export`'s by name: ``questions`` (the
            held-out questions each export must answer like the trained policy; default 32), ``push_to_hub`` (an
            ``owner/name`` repository the verified export is uploaded to, private unless ``private=False``), ``base``
            (a local folder holding the 16-bit base an Unsloth LoRA run merges into:
            :func:`grpo_kit.runs.unsloth_base.merge_base`), ``trust_remote_code`` (the run's task file may import and
            run Python of its own: :func:`grpo_kit.tasks.task_file.check_task_code`), ``quant``, ``threshold``,
            ``out``.

    Returns:
        One line per export: its folder and its verification's summary (and the upload's address).

    Raises:
        grpo_kit.runs.export.ExportRefused: an export that does not answer like the trained policy.
        ValueError: a setting the export has none of (one line naming those it has); ``push_to_hub`` with several
            formats and no merged one.
    """
    import inspect

    from grpo_kit.runs.export import export
    from grpo_kit.runs.pipeline import export_steps

    known = {name for call in (export_steps, export) for name in inspect.signature(call).parameters}
    _refuse_unknown("export_run", export_settings, known - {"run_dir", "formats", "format", "settings"},
                    "export_steps'")
    formats = [formats] if isinstance(formats, str) else list(formats)
    return "\n".join(export_steps(getattr(run, "path", run), formats, **export_settings))


@dataclass
class Comparison:
    """Notebook 05's plan (:func:`plan_comparison`): one run per variant, one baseline plan, one folder."""

    specs: dict[str, Any]
    plan: Any
    root: Path


def plan_comparison(task: str, config: Any, *, run_dir: str, variants: Mapping[str, Mapping[str, Any]] | None = None,
                    eval_size: int | None = None, max_new_tokens: int | None = None, samples: int | None = None,
                    cpu_demo: Any = False, use_drive: bool | None = None, **run_settings: Any) -> Comparison:
    """Notebook 05's variants, each resolved and checked before anything loads by what ``python -m grpo_kit train``
    resolves a run with (:meth:`grpo_kit.runs.spec.RunSpec.resolve`), and the baseline they share, planned as
    ``eval --before`` plans one (:func:`grpo_kit.runs.pipeline.baseline_plan`).

    On the CPU demo the recipe is the compare demo's (:class:`grpo_kit.runs.pipeline.CompareDemoConfig`: its warm start,
    learning rate, group size and budget), with the switch's ``preset_overrides`` over it.

    Args:
        task: the task's name; its ``compare_rewards`` are the default variants.
        config: the preset (:func:`gpu_check`).
        run_dir: the folder that holds one run folder per variant and the comparison.
        variants: ``{name: RunSpec.resolve arguments}`` (``rewards``, ``algorithm``, preset fields), over
            ``run_settings``; ``None``: the task's reward sets.
        eval_size, max_new_tokens, samples: the evaluation every run shares, as the compare demo names them (``None``:
            :class:`grpo_kit.runs.pipeline.CompareDemoConfig`'s, 300 test questions, 40 tokens, 8 samples; the CPU
            demo's ``max_new_tokens`` and ``batch_size`` replace the notebook's).
        cpu_demo: the notebooks' switch (:func:`cpu_demo_settings`).
        use_drive: ``None``: Drive in Colab only.
        run_settings: what every variant shares, by ``RunSpec.resolve``'s names: ``model``, ``seed``,
            ``trust_remote_code`` (the task file may import and run the Python it names outside ``grpo_kit``: the
            command line's ``--trust-task-code``), ..., and preset fields (``max_steps``: GRPO steps of every variant,
            ``None``: the preset's, or the compare demo's on the CPU demo); those the baseline plan takes too
            (``model``, ``seed``, ``trust_remote_code``, ...) go to it as well. ``None`` keeps the default.

    Raises:
        ValueError: fewer than two variants; a name that is neither ``RunSpec.resolve``'s nor a preset field (one line
            naming the nearest); whatever ``RunSpec.resolve`` refuses.
    """
    import inspect

    from grpo_kit.runs.folder import resolve_run_dir
    from grpo_kit.runs.pipeline import CompareDemoConfig, baseline_plan
    from grpo_kit.runs.spec import RunSpec
    from grpo_kit.tasks import get_task
    from grpo_kit.training.presets import get_preset

    cpu = cpu_demo_settings(cpu_demo)
    arguments = set(inspect.signature(RunSpec.resolve).parameters)
    preset_fields = {k: v for k, v in _given(**run_settings).items() if k not in arguments}
    run_settings = {k: v for k, v in _given(**run_settings).items() if k in arguments}
    trusted = bool(run_settings.get("trust_remote_code"))
    demo = CompareDemoConfig(task=task, seed=run_settings.get("seed", 0), trust_remote_code=trusted,
                             **({"grpo_steps": preset_fields["max_steps"]} if "max_steps" in preset_fields else {}))
    evaluation = {"eval_size": eval_size or demo.eval_size, "samples": demo.samples if samples is None else samples,
                  "max_new_tokens": max_new_tokens or demo.eval_max_new_tokens}
    demo_fields = {}
    if cpu is not None:
        demo_fields = {k: v for k, v in demo.preset_fields().items() if k not in cpu.preset_overrides}
        run_settings |= {"model": None, "warm": replace(demo.warm, steps=cpu.warm_start_steps or demo.warm.steps)}
        evaluation |= {"max_new_tokens": cpu.max_new_tokens, **_given(batch_size=cpu.batch_size)}
    config = get_preset(config, **{**demo_fields, **preset_fields})
    compare_rewards = get_task(task, trust_remote_code=trusted).extras.get("compare_rewards", {})
    chosen = variants if variants is not None else {name: {"rewards": dict(weights)}
                                                    for name, weights in compare_rewards.items()}
    if len(chosen) < 2:
        raise ValueError(f"compare two or more variants, got {list(chosen)}: set variants = {{name: {{...}}, ...}}")
    root = Path(resolve_run_dir(run_dir, use_drive))
    specs = {name: RunSpec.resolve(config, task, run_dir=root / name, **{**run_settings, **variant})
             for name, variant in chosen.items()}
    plan = baseline_plan(task, config, **{**{k: v for k, v in run_settings.items() if k in _plan_names()},
                                          **evaluation})
    print(f"{config.name}: {counted(config.max_steps, 'step')}, learning rate {config.learning_rate}, "
          f"{counted(config.prompts_per_step, 'prompt')} x {counted(config.num_generations, 'completion')}")
    for name, spec in specs.items():
        print(f"{name}: {spec.rewards}; algorithm {spec.preset.algorithm}")
    return Comparison(specs=specs, plan=plan, root=root)



@dataclass
class RunView:
    """The viewer page :func:`view_runs` wrote: ``path``, shown inline in a notebook (an ``<iframe>`` holding the
    page, so it needs no server and works on Colab and Jupyter alike)."""

    path: Path
    height: int = 760

    def _repr_html_(self) -> str:
        import html

        page = self.path.read_text(encoding="utf-8")
        return (f'<iframe srcdoc="{html.escape(page, quote=True)}" style="width:100%;height:{self.height}px;'
                f'border:1px solid #d0d7de" sandbox="allow-scripts"></iframe>'
                f"<p>{html.escape(str(self.path))}: the same page, to open in a browser or share.</p>")


def view_runs(run_dirs: Any, out: str | Path | None = None, names: Any = None, height: int = 760,
              trust_remote_code: bool = False) -> RunView:
    """Write the run viewer (``python -m grpo_kit view``: :func:`grpo_kit.runs.view.write_view`) and show it inline.

    Args:
        run_dirs: a run folder (a path or :class:`grpo_kit.runs.folder.RunFolder`) or several sharing a baseline.
        out: the HTML file (default ``view.html`` in the run folder; for several, ``comparison/view.html`` beside the
            first).
        names: the runs' names (default the folders' names).
        height: the inline frame's height in pixels.
        trust_remote_code: the runs' task file, and the rewards of your own they record, may import and run
            Python of their own (:func:`grpo_kit.tasks.user_code.check_trusted`).

    Returns:
        :class:`RunView` (the notebook shows it; ``.path`` is the file).

    Raises:
        FileNotFoundError, ValueError: see :func:`grpo_kit.runs.view.write_view`.
    """
    from grpo_kit.runs.view import write_view

    dirs = [run_dirs] if isinstance(run_dirs, (str, Path)) or hasattr(run_dirs, "path") else list(run_dirs)
    dirs = [getattr(d, "path", d) for d in dirs]
    return RunView(write_view(dirs, out=out, names=names, trust_remote_code=trust_remote_code), height)
