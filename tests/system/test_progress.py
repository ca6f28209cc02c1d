"""Long phases are announced in one line (what, how long here, what shortens it) and show a labelled bar that moves."""

from __future__ import annotations

import io
import logging
import time

import pytest

from grpo_kit.policy.generation import Sampling, TransformersBackend
from grpo_kit.system import progress
from grpo_kit.system.progress import CORRECT_BEYOND, announce, correction, duration, expected_seconds, phase_bar


def test_the_ticker_redraws_a_bar_while_one_unit_runs(monkeypatch):
    import sys

    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.setattr(stream, "isatty", lambda: True, raising=False)
    with phase_bar("GRPO", 3, "step", enabled=True):  # tqdm writes to sys.stderr: the stream above
        time.sleep(2.3)  # one long step: the elapsed time must still move
    frames = [f for f in stream.getvalue().split("\r") if f.strip()]
    assert len({f for f in frames if f.startswith("GRPO")}) >= 2, frames


def test_a_phase_is_announced_with_its_time_here_and_what_shortens_it(caplog):
    with caplog.at_level(logging.INFO, logger="grpo_kit"):
        announce("warm start of the tiny policy on capitals: 75 steps", 95.0, "--warm-steps shortens it")
    assert caplog.messages == ["warm start of the tiny policy on capitals: 75 steps: about 2 min on this machine "
                               "(--warm-steps shortens it)"]
    assert duration(4) == "a few seconds" and duration(600) == "about 10 min"


def test_estimates_grow_with_the_size_of_the_phase(monkeypatch):
    monkeypatch.setattr(progress, "machine_factor", lambda: 1.0)
    warm = expected_seconds("warm start", steps=75, batch=16, tokens=91)
    assert expected_seconds("warm start", steps=150, batch=16, tokens=91) == pytest.approx(2 * warm)
    greedy = expected_seconds("generate", sequences=20, batches=1, new_tokens=64)
    assert expected_seconds("generate", sequences=80, batches=1, new_tokens=64) > greedy
    assert expected_seconds("generate", 1.1e9, sequences=20, batches=1, new_tokens=64) == pytest.approx(1000 * greedy)
    sampled = expected_seconds("generate", sequences=80, batches=1, new_tokens=64)  # 80 prompts
    shared = expected_seconds("generate", sequences=80, batches=1, new_tokens=64, samples=8)  # 10 prompts, 8 each
    assert greedy < shared < sampled  # a prompt encoded once for its samples
    with pytest.raises(ValueError, match="unknown phase kind"):
        expected_seconds("nap")


def test_timing_the_machine_leaves_torch_s_random_numbers_alone():
    # Timed on the first estimate of a process, after the trainer's set_seed: drawing from torch's global generator
    # there made a process's first run sample other completions than its later runs (a resumed run then matched
    # the uninterrupted one only where both were first, or both not).
    import torch

    progress.machine_factor.cache_clear()
    torch.manual_seed(7)
    before = torch.get_rng_state()
    assert progress.machine_factor() >= 0.05
    assert torch.equal(torch.get_rng_state(), before)


def test_generation_says_greedy_or_sampled_and_moves_per_token(tiny_policy, monkeypatch, caplog):
    import sys

    model, tokenizer = tiny_policy
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.setattr(progress, "machine_factor", lambda: 1000.0)  # a slow machine: the line is printed
    prompts = [[{"role": "user", "content": f"What is {i} + 1?"}] for i in range(3)]
    backend = TransformersBackend(model, tokenizer, batch_size=2, progress=True)
    with caplog.at_level(logging.INFO, logger="grpo_kit"):
        backend.generate(prompts, Sampling(max_new_tokens=5))
        backend.generate(prompts, Sampling(temperature=1.0, n=2, max_new_tokens=5))
    lines = [m for m in caplog.messages if "on this machine" in m]
    assert lines[0].startswith("greedy completions of 3 questions (up to 5 new tokens each, 2 batches)")
    assert lines[1].startswith("sampled (2 per question) completions of 3 questions")
    assert "shorten it" in lines[0]
    drawn = stream.getvalue()
    assert "greedy: 100%" in drawn and "10/10" in drawn and "sampled (2 per question): 100%" in drawn


def test_off_a_terminal_a_bar_is_lines_and_a_log_line_is_never_glued_to_it(monkeypatch, kit_log_on_stderr):
    """Case 19 of issue 44: in a log file, bars were redrawn with carriage returns and block characters, and log
    lines were glued onto them. A process that imported ipykernel without running a kernel (papermill, this test
    run) writes lines too."""
    import sys

    import ipykernel  # noqa: F401

    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    with phase_bar("greedy", 10, "token", enabled=True) as bar:
        bar.update(4)
        logging.getLogger("grpo_kit.test").info("a line logged meanwhile")
        bar.update(6)
    text = stream.getvalue()
    assert "\r" not in text and "\u2588" not in text, repr(text)
    lines = text.splitlines()
    assert lines[0].startswith("greedy:   0% 0/10 tokens [") and lines[-1].startswith("greedy: 100% 10/10 tokens [")
    assert "[grpo_kit] a line logged meanwhile" in lines
    stream.seek(0)
    stream.truncate()
    file = progress._Lines(25.0)  # the ticker's redraw and tqdm's own, a second apart: one line
    for text in ("\rGRPO: 10%", "\rGRPO: 11%", "\r   "):
        file.write(text)
    file.every = 0.0  # the bar closed: its last line is written
    file.write("\rGRPO: 100%")
    assert stream.getvalue().splitlines() == ["GRPO: 10%", "GRPO: 100%"]


def test_off_a_terminal_a_finished_bar_writes_its_last_line_once(monkeypatch, kit_log_on_stderr):
    """The warm start's log ended with its 100% line twice: a redraw of the finished bar (the 30 s ticker's, or
    tqdm's own at the last step) and the bar's closing line, a second later and so with another elapsed time."""
    import sys
    import time
    import types

    clock = iter(range(0, 10**6, 100))  # every redraw passes the 25 s gate between lines
    monkeypatch.setattr(progress, "time", types.SimpleNamespace(monotonic=lambda: next(clock)))
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    with phase_bar("warm start", 4, "step", enabled=True) as bar:
        bar.update(4)
        bar.refresh()  # what the ticker draws while the finished bar waits to close
        time.sleep(1.1)  # the closing line shows another elapsed time
    finished = [line for line in stream.getvalue().splitlines() if line.startswith("warm start: 100%")]
    assert len(finished) == 1 and "[00:01<" in finished[0], stream.getvalue()


def test_the_announced_time_is_corrected_from_the_measured_rate(monkeypatch, caplog):
    """Issue 46: "about 9 min" announced, 22 taken on a loaded machine, and nothing said meanwhile."""
    import sys

    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.setattr(stream, "isatty", lambda: True, raising=False)
    with caplog.at_level(logging.INFO, logger="grpo_kit"), \
            phase_bar("GRPO", 100, "step", initial=40, expected=300.0) as bar:
        bar.start_t -= 156  # 12 steps measured in 156 s after the 40 a resumed run had done
        bar.update(12)
        time.sleep(1.5)  # the ticker's next round
    said = [m for m in caplog.messages if m.startswith("GRPO: ")]
    assert said == ["GRPO: about 13 min in all at 13 s per step measured, about 10 min left (was about 5 min)"], said
    assert "52/100" in stream.getvalue()  # the bar's own time left is tqdm's, from the same rate


def test_a_correction_waits_for_a_measure_and_a_real_difference():
    meter = {"n": 12, "initial": 0, "total": 100, "elapsed": 120.0, "rate": 0.1, "unit": "step"}
    assert correction(1000.0, meter) is None  # 1000 s in all measured: as announced
    assert correction(1000.0 * CORRECT_BEYOND * 1.1, meter)[0] == pytest.approx(1000.0)  # slower than measured too
    assert correction(100.0, {**meter, "n": 1}) is None and correction(100.0, {**meter, "elapsed": 5.0}) is None
    assert correction(100.0, {**meter, "total": None}) is None


def test_a_load_that_comes_and_goes_does_not_swing_the_announced_time():
    """A 1,000-step phase at 0.2 s a step on average, in bursts of fast and slow units: tqdm's smoothed rate
    follows each burst (0.05 then 0.9 s a step), the mean does not; the time said is corrected once, not every
    round."""
    said, lines = 60.0, []
    for n in range(20, 1000, 20):
        burst = 0.9 if (n // 100) % 2 else 0.05  # the rate tqdm's smoothing would report in this round
        meter = {"n": n, "initial": 0, "total": 1000, "elapsed": 0.2 * n, "rate": 1 / burst, "unit": "step"}
        if (found := correction(said, meter)) is not None:
            said = found[0]
            lines.append(found[1])
    assert len(lines) == 1 and said == pytest.approx(200.0), lines
