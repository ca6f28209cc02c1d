"""The kit's child-process protocol (grpo_kit.system.workers): results, streams, errors, and children that die with
their parent (a worker once kept computing 81 s after its parent was SIGKILLed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from grpo_kit.system.workers import Worker, WorkerError

ROOT = Path(__file__).resolve().parents[2]


def add(a, b=0):
    return a + b


def count(n):
    yield from range(n)


def fail():
    raise KeyError("boom")


def test_calls_take_lists_as_arguments_and_dicts_as_keywords():
    with Worker(f"{__name__}:add") as worker:
        assert worker.call([2, 3]) == 5
        assert worker.call({"a": 2, "b": 5}) == 7
        assert worker.call(4) == 4


def test_a_stream_yields_every_item_even_when_they_arrive_together():
    # 2000 small lines reach the pipe in bursts: a buffered readline after select() would hold some and hang
    with Worker(f"{__name__}:count") as worker:
        assert list(worker.stream(2000)) == list(range(2000))
        assert list(worker.stream(3)) == [0, 1, 2]  # the worker serves on after a stream


def test_a_handler_error_is_raised_with_its_traceback_and_the_worker_lives_on():
    with Worker(f"{__name__}:fail") as worker:
        with pytest.raises(WorkerError, match="KeyError: 'boom'"):
            worker.call()
        assert worker.running


def test_a_child_that_does_not_start_in_time_is_killed_and_said():
    worker = Worker(f"{__name__}:add")
    worker.start_timeout_s = 0.001  # less than the interpreter takes to start
    with pytest.raises(WorkerError, match="did not start within"):
        worker.call([1, 2])
    assert not worker.running


def test_a_request_to_a_child_that_died_since_it_started_is_said(monkeypatch):
    worker = Worker(f"{__name__}:add")
    worker.start()
    os.killpg(worker._process.pid, signal.SIGKILL)
    worker._process.wait()
    monkeypatch.setattr(worker, "start", lambda: None)  # it died between its start and the request
    with pytest.raises(WorkerError, match="died during the request"):
        worker.call([1, 2])  # a short request stays in the pipe's buffer: closing it must not raise BrokenPipeError


def test_a_handler_that_cannot_be_imported_is_said_at_start():
    with pytest.raises(WorkerError, match="raised ModuleNotFoundError"):
        Worker("tests.system.no_such_module:add").start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is dead
        return f.read().split(") ")[1][0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_child_dies_when_its_parent_is_sigkilled():
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys, time
        from grpo_kit.system.workers import Worker
        worker = Worker("tests.system.test_workers:add")
        print(worker.call([1, 2]), flush=True)
        print(worker._process.pid, flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert parent.stdout.readline().strip() == "3"
    child = int(parent.stdout.readline())
    assert _alive(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child), "the worker outlived its SIGKILLed parent"
