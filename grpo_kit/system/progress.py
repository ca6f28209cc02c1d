"""Long phases announced and moving: before a phase of more than a few seconds, one line says what it is, about how
long it takes on this machine and which setting shortens it; then a labelled tqdm bar moves while it runs.

The time is an estimate from the phase's size (steps, questions, tokens) and the model's size, at rates the kit
measured for its tiny policy (``benchmarks/own_task.py`` prints each estimate beside the time taken), scaled by
:func:`machine_factor`: a 0.1-second torch workload of the tiny policy's shape, timed once per process with the
threads torch will use, so a slower or busier machine gets a longer estimate. Large models on a GPU are estimated
the same way, only more loosely: the bar's own rate and remaining time take over once it moves.

A bar whose unit takes longer than a second (a GRPO step, a warm-start step on a busy machine) is redrawn every
second by a ticker thread, so its elapsed time moves between updates. Where standard error is not a terminal (a log
file, a pipe) a bar is a line of text instead, written every 30 seconds on a line of its own (:class:`_Lines`): no
carriage returns redrawing it in place, no block characters, no log line glued onto it.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

__all__ = ["TINY_PARAMETERS", "announce", "duration", "expected_seconds", "machine_factor", "on_a_terminal",
           "phase_bar", "quiet_library_bars_off_a_terminal"]

log = logging.getLogger(__name__)

#: Parameters of the kit's tiny policy (about 1.1M): the rates below are per model of that size.
TINY_PARAMETERS = 1.1e6
#: What :func:`machine_factor`'s workload took where the rates were measured (s).
_REFERENCE_PROBE_S = 0.05
#: Seconds per unit for the tiny policy where the probe took :data:`_REFERENCE_PROBE_S`: a warm-start step per
#: example-token; a generated token per running sequence, plus a fixed cost per decoding step; a GRPO step's
#: training per completion-token (the generation inside a GRPO step is the decoding rates').
_RATES = {"warm_token": 2.0e-4, "decode_step": 2.5e-3, "decode_sequence": 4.0e-4, "train_token": 2.0e-4}


@lru_cache(maxsize=1)
def machine_factor() -> float:
    """How much slower this machine (its cores as torch uses them now, load included) runs the tiny policy's kind of
    work than where the kit's rates were measured: 1.0 there, 2.0 on a machine half as fast. Timed once per process
    (about 0.1 s); at least 0.05."""
    import torch

    a, b = torch.randn(256, 128), torch.randn(128, 512)
    (a @ b).sum()  # first-call setup
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(40):
            c = a @ b
            (c @ b.T).sum()
        best = min(best, time.perf_counter() - start)
    return max(0.05, best / _REFERENCE_PROBE_S)


def expected_seconds(kind: str, parameters: float = TINY_PARAMETERS, **size: float) -> float:
    """A phase's expected wall time on this machine, in seconds.

    Args:
        kind: ``"warm start"`` (``steps``, ``batch``, ``tokens``: mean tokens per example), ``"generate"``
            (``sequences``: completions generated together in one batch, ``batches``, ``new_tokens``: the budget
            per completion) or ``"grpo step"`` (``completions`` per step, ``new_tokens``, ``prompt_tokens``), per
            step.
        parameters: the model's parameter count; time grows with it in proportion (the rates are the tiny policy's).
        size: the phase's size, as named for its kind.

    Raises:
        ValueError: an unknown kind.
    """
    scale = machine_factor() * max(1.0, parameters / TINY_PARAMETERS)
    if kind == "warm start":
        return scale * size["steps"] * size["batch"] * size["tokens"] * _RATES["warm_token"]
    if kind == "generate":
        per_step = _RATES["decode_step"] + _RATES["decode_sequence"] * size["sequences"]
        return scale * size["batches"] * size["new_tokens"] * per_step
    if kind == "grpo step":
        generate = size["new_tokens"] * (_RATES["decode_step"] + _RATES["decode_sequence"] * size["completions"])
        train = size["completions"] * (size["new_tokens"] + size.get("prompt_tokens", 0)) * _RATES["train_token"]
        return scale * (generate + train)
    raise ValueError(f"unknown phase kind {kind!r}")


def duration(seconds: float) -> str:
    """A time to read at a glance.

    >>> duration(4), duration(75), duration(3 * 3600)
    ('a few seconds', 'about 1 min', 'about 3 h')
    """
    if seconds < 10:
        return "a few seconds"
    if seconds < 60:
        return f"about {round(seconds, -1):.0f} s"
    if seconds < 5400:
        return f"about {round(seconds / 60):.0f} min"
    return f"about {seconds / 3600:.0f} h"


def announce(what: str, seconds: float, shorten: str) -> None:
    """Log the line that opens a phase: ``<what>: <duration> on this machine (<shorten>)``.

    Args:
        what: the phase and its size ("warm start of the tiny policy on capitals: 120 steps of 16 examples").
        seconds: :func:`expected_seconds`.
        shorten: the setting that shortens it ("--warm-steps shortens it").
    """
    log.info(f"{what}: {duration(seconds)} on this machine ({shorten})")


def on_a_terminal() -> bool:
    """Whether progress is drawn in place: standard error is a terminal, or a notebook shows it (tqdm's widget)."""
    return "ipykernel" in sys.modules or (hasattr(sys.stderr, "isatty") and sys.stderr.isatty())


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
    glue every redraw, and the log lines written between them, into one line). Writes to whatever ``sys.stderr`` is
    at the time, as the kit's log handler does."""

    def __init__(self) -> None:
        self.last = ""

    def write(self, text: str) -> int:
        line = text.replace("\r", "").strip()
        if line and line != self.last:  # tqdm's erasures (spaces) and an unchanged redraw add nothing to a log
            sys.stderr.write(line + "\n")
            self.last = line
        return len(text)

    def flush(self) -> None:
        sys.stderr.flush()


class _Ticker(threading.Thread):
    """Redraws a bar every ``interval`` seconds, so its elapsed time moves while one unit of work runs."""

    def __init__(self, bar: Any, interval: float) -> None:
        super().__init__(daemon=True)
        self.bar, self.interval, self.stopped = bar, interval, threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            with contextlib.suppress(Exception):  # a bar closed under it: nothing left to draw
                self.bar.refresh()


@contextlib.contextmanager
def phase_bar(label: str, total: float | None, unit: str = "it", enabled: bool = True) -> Iterator[Any]:
    """A labelled tqdm bar (``tqdm.auto``: a widget in a notebook) that moves at least every second.

    Args:
        label: what runs ("greedy", "sampled (4 per question)", "warm start", "GRPO step", "saving").
        total: units to do (``None``: unknown, the bar counts time).
        unit: what a unit is ("token", "step").
        enabled: ``False`` gives a bar that draws nothing (tqdm's ``disable``).

    Yields:
        The ``tqdm`` bar (``update``, ``set_postfix_str``).
    """
    from tqdm.auto import tqdm

    terminal = on_a_terminal()
    # A step bar's postfix says seconds per step itself; a bar of unknown length shows only once it lasts a second.
    layout = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}{postfix}]" if unit == "step" else \
        "{desc}: {elapsed}{postfix}" if total is None else None
    if not terminal and total is not None:  # a line of text: where it is, how long it took and has left
        layout = "{desc}: {percentage:3.0f}% {n_fmt}/{total_fmt} " + unit + "s [{elapsed}<{remaining}{postfix}]"
    bar = tqdm(total=total, desc=label, unit=unit, disable=not enabled, dynamic_ncols=terminal, bar_format=layout,
               mininterval=0.5 if terminal else 30.0, delay=1.0 if total is None else 0.0,
               file=None if terminal else _Lines(), ascii=not terminal)
    ticker = _Ticker(bar, 1.0 if terminal else 30.0) if enabled else None
    if ticker is not None:
        ticker.start()
    try:
        yield bar
    finally:
        if ticker is not None:
            ticker.stopped.set()
            ticker.join()
        bar.close()
