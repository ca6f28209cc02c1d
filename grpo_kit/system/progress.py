"""Long phases announced and moving: before a phase of more than a few seconds, one line says what it is, about how
long it takes on this machine and which setting shortens it; then a labelled tqdm bar moves while it runs, with
tqdm's own rate and time left.

On a GPU the time comes from the kit's arithmetic for the card and route (:mod:`grpo_kit.policy.speed`, what
``python -m grpo_kit plan`` prints), with its basis. On a CPU it is an estimate from the phase's size (steps,
questions, tokens) and the model's size, at rates the kit measured for its tiny policy (``benchmarks/own_task.py``
prints each estimate beside the time taken), scaled by :func:`machine_factor`: a 0.1-second torch workload of the tiny
policy's shape, timed once per process with the threads torch will use, so a slower or busier machine gets a longer
estimate. A machine that gets busier later (or a GPU that runs faster or slower than the arithmetic says) runs at
another pace: once the bar has measured the rate over two units and 10 seconds, a line corrects the announced time
whenever the measured total strays beyond :data:`CORRECT_BEYOND` of it (issue 46: a demo announced at 9 min took 22
on a loaded machine).

A bar is redrawn every second by a ticker thread, so its elapsed time moves while one long unit runs (a GRPO step).
Where standard error is not a terminal (a log file, a pipe) a bar is a line of text instead, written every 30 seconds
on a line of its own (:class:`_Lines`), with the same time left: no carriage returns redrawing it in place, no block
characters, no log line glued onto it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import threading
import time
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

__all__ = ["CORRECT_BEYOND", "TINY_PARAMETERS", "announce", "correction", "duration", "expected_seconds",
           "machine_factor", "on_a_terminal", "phase_bar", "quiet_library_bars_off_a_terminal", "step_bar"]

log = logging.getLogger(__name__)

#: Parameters of the kit's tiny policy (about 1.1M): the rates below are per model of that size.
TINY_PARAMETERS = 1.1e6
#: What :func:`machine_factor`'s workload took where the rates were measured (s).
_REFERENCE_PROBE_S = 0.05
#: Seconds per unit for the tiny policy where the probe took :data:`_REFERENCE_PROBE_S`: a warm-start step per
#: example-token; a generated token per running sequence, plus a fixed cost per decoding step; a GRPO step's
#: training per completion-token (the generation inside a GRPO step is the decoding rates').
_RATES = {"warm_token": 2.0e-4, "decode_step": 2.5e-3, "decode_sequence": 4.0e-4, "train_token": 2.0e-4}
#: The part of a sampled sequence's decoding rate that is its prompt's encoding, which its prompt's other samples
#: share (:func:`grpo_kit.policy.generation._prefilled_once`): 8 samples of 100 sum3 prompts (43 tokens, 40 new)
#: took 2.7 s with the prompts encoded once against 4.3 s encoded 8 times, and 2 samples 0.82 against 0.99 s.
_PROMPT_SHARE = 0.4
#: The factor by which a phase's total time measured so far may differ from the last one announced before a line
#: corrects it: a bar's time left and the announced total then agree within it (issue 46 asks for 2).
CORRECT_BEYOND = 1.5


@lru_cache(maxsize=1)
def machine_factor() -> float:
    """How much slower this machine (its cores as torch uses them now, load included) runs the tiny policy's kind of
    work than where the kit's rates were measured: 1.0 there, 2.0 on a machine half as fast. Timed once per process
    (about 0.1 s), the middle of three timings (the fastest would forget a busy machine's load); at least 0.05."""
    import timeit

    import torch

    # Its own generator: drawing from torch's global one would move a run's sampling after the trainer's set_seed,
    # and the first run of a process would then generate other completions than the runs after it.
    generator = torch.Generator().manual_seed(0)
    a, b = torch.randn(256, 128, generator=generator), torch.randn(128, 512, generator=generator)
    (a @ b).sum()  # first-call setup
    timings = timeit.repeat(lambda: [(a @ b @ b.T).sum() for _ in range(40)], repeat=3, number=1)
    return max(0.05, sorted(timings)[1] / _REFERENCE_PROBE_S)


def expected_seconds(kind: str, parameters: float = TINY_PARAMETERS, **size: float) -> float:
    """A phase's expected wall time on this machine's CPU, in seconds (on a GPU, :mod:`grpo_kit.policy.speed`).

    Args:
        kind: ``"warm start"`` (``steps``, ``batch``, ``tokens``: mean tokens per example), ``"generate"``
            (``sequences``: completions generated together in one batch, ``batches``, ``new_tokens``: the budget
            per completion, ``samples``: completions per prompt that share its encoding, default 1) or
            ``"grpo step"`` (``completions`` per step, ``new_tokens``, ``prompt_tokens``), per step.
        parameters: the model's parameter count; time grows with it in proportion (the rates are the tiny policy's).
        size: the phase's size, as named for its kind.

    Raises:
        ValueError: an unknown kind.
    """
    scale = machine_factor() * max(1.0, parameters / TINY_PARAMETERS)
    if kind == "warm start":
        return scale * size["steps"] * size["batch"] * size["tokens"] * _RATES["warm_token"]
    if kind == "generate":
        sequences = size["sequences"] * (1 - _PROMPT_SHARE * (1 - 1 / size.get("samples", 1)))
        per_step = _RATES["decode_step"] + _RATES["decode_sequence"] * sequences
        return scale * size["batches"] * size["new_tokens"] * per_step
    if kind == "grpo step":
        generate = size["new_tokens"] * (_RATES["decode_step"] + _RATES["decode_sequence"] * size["completions"])
        train = size["completions"] * (size["new_tokens"] + size.get("prompt_tokens", 0)) * _RATES["train_token"]
        return scale * (generate + train)
    raise ValueError(f"unknown phase kind {kind!r}")


def duration(seconds: float) -> str:
    """A time to read at a glance.

    >>> duration(4), duration(75), duration(3 * 3600), duration(2.04 * 3600), duration(32.9 * 3600)
    ('a few seconds', 'about 1 min', 'about 3 h', 'about 2 h', 'about 33 h')
    >>> duration(6.3 * 3600)
    'about 6.3 h'
    """
    if seconds < 10:
        return "a few seconds"
    if seconds < 60:
        return f"about {round(seconds, -1):.0f} s"
    if seconds < 5400:
        return f"about {round(seconds / 60):.0f} min"
    hours = seconds / 3600  # to a tenth under 10 h, as plan says it
    return f"about {hours:.1f} h".replace(".0 h", " h") if hours < 10 else f"about {hours:.0f} h"


def announce(what: str, seconds: float, shorten: str, where: str = "on this machine",
             basis: str | None = None) -> float:
    """Log the line that opens a phase: ``<what>: <duration> <where> (<shorten>)``, and its basis on a line of its own.

    Args:
        what: the phase and its size ("warm start of the tiny policy on capitals: 120 steps of 16 examples").
        seconds: :func:`expected_seconds` on a CPU; on a GPU the kit's arithmetic for the card and route
            (:mod:`grpo_kit.policy.speed`).
        shorten: the setting that shortens it ("--warm-steps shortens it").
        where: the machine and route the time is for ("on NVIDIA L4, vLLM generating").
        basis: what the time rests on, said on a second line (``None``: nothing to add).

    Returns:
        ``seconds``, for the phase's bar to correct (:func:`phase_bar`'s ``expected``).
    """
    log.info(f"{what}: {duration(seconds)} {where} ({shorten})")
    if basis:
        log.info(f"  the time is an estimate, {basis}")
    return seconds


def correction(said: float, meter: dict[str, Any]) -> tuple[float, str] | None:
    """A phase's total time from its bar's measured rate, where it strays beyond :data:`CORRECT_BEYOND` of ``said``.

    Args:
        said: the total announced last (s), for the work left when the bar started.
        meter: the bar's ``tqdm.format_dict`` (``n``, ``initial``, ``total``, ``elapsed`` in s, ``unit``). The rate is
            the phase's mean (units done since the bar started over ``elapsed``), not tqdm's smoothed ``rate``: that
            one follows the last few units, so on a machine whose load comes and goes the total it gives swung past
            the factor and back every half minute (a 1,000-step warm start said 3, 6, 20, 12, ... 88, 55 min).

    Returns:
        ``(total s, "<duration> in all ..., <duration> left (...)")``; ``None`` before two units and 10 seconds are
        measured, for a bar of unknown length, or while the measured total is within the factor.

    >>> correction(540.0, {"n": 12, "initial": 0, "total": 100, "elapsed": 156.0, "unit": "step"})
    (1300.0, 'about 22 min in all at 13 s per step measured, about 19 min left (was about 9 min)')
    """
    done, elapsed, total = meter["n"] - meter["initial"], meter["elapsed"], meter["total"]
    if total is None or done < 2 or elapsed < 10:
        return None
    rate = done / elapsed
    left = (total - meter["n"]) / rate
    if 1 / CORRECT_BEYOND <= (elapsed + left) / max(said, 1e-9) <= CORRECT_BEYOND:
        return None
    return elapsed + left, (f"{duration(elapsed + left)} in all at {1 / rate:.2g} s per {meter['unit']} measured, "
                            f"{duration(left)} left (was {duration(said)})")


def on_a_terminal() -> bool:
    """Whether progress is drawn in place: standard error is a terminal, or a notebook shows it (tqdm's widget).

    A notebook is an IPython shell that is running (``IPython.get_ipython()``), not ``ipykernel`` merely imported:
    a process that imported it (papermill, a test run) may still write to a log file."""
    if hasattr(sys.stderr, "isatty") and sys.stderr.isatty():
        return True
    ipython = sys.modules.get("IPython")
    return ipython is not None and getattr(ipython, "get_ipython", lambda: None)() is not None


def quiet_library_bars_off_a_terminal() -> None:
    """Where standard error is not a terminal (a log file, a pipe), turn off the progress bars of the libraries the
    kit calls (transformers' weight loading and shard writing, datasets' maps, huggingface_hub's downloads): tqdm
    redraws them in place with carriage returns, which glue a log file's lines into one. Done through tqdm's own
    ``TQDM_DISABLE`` default, which tqdm (4.66 and later) reads once, when it is first imported: so call this before
    anything imports tqdm; nothing is imported here, so Unsloth can still be imported before transformers. A
    ``TQDM_DISABLE`` already set is kept. The kit's own bars (:func:`phase_bar`) say ``disable`` themselves and are
    written as lines."""
    import os

    if not on_a_terminal():
        os.environ.setdefault("TQDM_DISABLE", "1")


class _Lines:
    """What a tqdm bar writes to when standard error is not a terminal: each redraw as a whole line of its own, without
    the carriage returns and the blank-padding erasures that redraw a bar in place on a terminal (in a log file they
    glue every redraw, and the log lines written between them, into one line), at most one every ``every`` seconds
    (the ticker's redraws and tqdm's own would each write one every 30 s). A finished bar's redraws wait for its
    closing line, which is written whatever the time (``every`` 0): its last line once, not again a second later with
    another elapsed time. Writes to whatever ``sys.stderr`` is at the time, as the kit's log handler does."""

    def __init__(self, every: float) -> None:
        self.last, self.every, self.written = "", every, -math.inf
        self.bar: Any = None  # the tqdm bar drawn here, once made

    def write(self, text: str) -> int:
        line = text.replace("\r", "").strip()
        finished = self.every > 0 and self.bar is not None and self.bar.total is not None and \
            self.bar.n >= self.bar.total
        # tqdm's erasures (spaces), an unchanged or too early redraw and a finished bar's before it closes add nothing
        if line and not finished and line != self.last and time.monotonic() - self.written >= self.every:
            sys.stderr.write(line + "\n")
            self.last, self.written = line, time.monotonic()
        return len(text)

    def flush(self) -> None:
        sys.stderr.flush()


@contextlib.contextmanager
def phase_bar(label: str, total: float | None, unit: str = "it", enabled: bool = True, initial: int = 0,
              expected: float | None = None) -> Iterator[Any]:
    """A labelled tqdm bar (``tqdm.auto``: a widget in a notebook) that moves at least every second.

    Args:
        label: what runs ("greedy", "sampled (4 per question)", "warm start", "GRPO", "saving").
        total: units to do (``None``: unknown, the bar counts time).
        unit: what a unit is ("token", "step").
        enabled: ``False`` gives a bar that draws nothing (tqdm's ``disable``).
        initial: units already done (a resumed run's steps: not counted in the measured rate).
        expected: the seconds :func:`announce` said the phase takes, corrected by a line from the measured rate
            (:func:`correction`); ``None``: nothing to correct.

    Yields:
        The ``tqdm`` bar (``update``, ``set_postfix_str``).
    """
    from tqdm.auto import tqdm

    terminal = on_a_terminal()
    layout = None if total is not None else "{desc}: {elapsed}{postfix}"  # unknown length: it shows once it lasts 1 s
    if not terminal and total is not None:  # a line of text: where it is, how long it took and has left
        layout = "{desc}: {percentage:3.0f}% {n_fmt}/{total_fmt} " + unit + "s [{elapsed}<{remaining}, {rate_fmt}" \
            "{postfix}]"
    lines = None if terminal else _Lines(25.0)
    bar = tqdm(total=total, desc=label, unit=unit, disable=not enabled, dynamic_ncols=terminal, bar_format=layout,
               mininterval=0.5 if terminal else 30.0, delay=1.0 if total is None else 0.0, initial=initial,
               file=lines, ascii=not terminal)
    if lines is not None:
        lines.bar = bar
    stopped, said = threading.Event(), [expected]

    def tick() -> None:  # redraws the bar, so its elapsed time moves while one long unit runs, and corrects ``said``
        while not stopped.wait(1.0 if terminal else 30.0):
            with contextlib.suppress(Exception):  # a bar closed under it: nothing left to draw
                bar.refresh()
                if said[0] is not None and (found := correction(said[0], bar.format_dict)):
                    said[0] = found[0]
                    log.info(f"{label}: {found[1]}")

    ticker = threading.Thread(target=tick, daemon=True)
    if enabled:
        ticker.start()
    try:
        yield bar
    finally:
        stopped.set()
        if enabled:
            ticker.join()
        if lines is not None:
            lines.every = 0.0  # the last line, the bar closed, is always written
        bar.close()


def step_bar(trainer: Any, label: str, shows: str = "loss", enabled: bool = True,
             expected: float | None = None) -> Any:
    """Show a transformers ``Trainer``'s steps as a :func:`phase_bar` in place of its own progress display.

    transformers' ``ProgressCallback`` (or its notebook table, or with ``disable_tqdm`` its printed dicts) prints every
    log dict beside an unlabelled bar and counts a resumed run's steps as done in its first step; this bar shows
    tqdm's rate and time left from the steps run here, the last logged ``shows`` and "saving checkpoint-N" while a
    checkpoint is written, and is a line every 30 s in a log file.

    Args:
        trainer: the trainer (its own display is removed, this bar added after its other callbacks).
        label: what the steps are ("warm start", "GRPO").
        shows: the logged value shown beside the bar.
        enabled: ``False``: nothing is drawn.
        expected: the seconds announced for the steps to run (:func:`correction`).

    Returns:
        The callback; its ``close()`` ends the bar where training stopped early (an error, Ctrl-C).
    """
    import transformers.trainer
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback

    class StepBar(TrainerCallback):
        def __init__(self) -> None:
            self.bar, self.stack, self.value = None, contextlib.ExitStack(), None

        def on_train_begin(self, args, state, control, **kwargs):
            self.bar = self.stack.enter_context(phase_bar(label, state.max_steps, "step", enabled, state.global_step,
                                                          expected))

        def on_log(self, args, state, control, logs=None, **kwargs):
            if isinstance((logs or {}).get(shows), (int, float)):
                self.value = logs[shows]

        def on_step_end(self, args, state, control, **kwargs):
            if self.bar is not None:
                self.bar.update(state.global_step - self.bar.n)
                self.show(f"saving checkpoint-{state.global_step}" if control.should_save else "")

        def on_save(self, args, state, control, **kwargs):
            if self.bar is not None:
                self.show("")

        def show(self, saving: str) -> None:
            parts = ([f"{shows} {self.value:.3f}"] if self.value is not None else []) + ([saving] if saving else [])
            self.bar.set_postfix_str(", ".join(parts), refresh=False)

        def close(self, *event: Any, **kwargs: Any) -> None:
            self.stack.close()
            self.bar = None

        on_train_end = close

    own = PrinterCallback if trainer.args.disable_tqdm else transformers.trainer.DEFAULT_PROGRESS_CALLBACK
    trainer.pop_callback(own)  # the one display Trainer.__init__ added, chosen as it chose
    bar = StepBar()
    trainer.add_callback(bar)
    return bar
