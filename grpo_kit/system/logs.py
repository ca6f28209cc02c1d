"""The kit's logging: one ``grpo_kit`` logger, configured once by the command line or a notebook.

Every module logs through ``logging.getLogger(__name__)``, so all of them sit under the ``grpo_kit``
logger. A library user's own logging setup is left alone: :func:`configure_logging` only adds a
handler when none of the kit's is there yet. Progress bars stay tqdm's; a line logged while one is drawn is written
above it.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

__all__ = ["ROOT", "configure_logging", "counted"]

#: The logger every module of the kit logs under.
ROOT = "grpo_kit"


class _Handler(logging.StreamHandler):
    """A stream handler that, without a stream of its own, writes to whatever ``sys.stderr`` is at the time
    (a notebook or a test may replace it after logging was configured); with ``info_to_stdout``, records below
    warnings go to ``sys.stdout`` instead."""

    def __init__(self, stream: TextIO | None = None, info_to_stdout: bool = False) -> None:
        super().__init__(stream)
        self.fixed, self.info_to_stdout = stream, info_to_stdout

    def emit(self, record: logging.LogRecord) -> None:
        below_warning = self.info_to_stdout and record.levelno < logging.WARNING
        self.stream = self.fixed if self.fixed is not None else sys.stdout if below_warning else sys.stderr
        from tqdm import tqdm

        with tqdm.external_write_mode(file=self.stream):  # a line under a progress bar, not into it
            super().emit(record)


class _Format(logging.Formatter):
    """``[grpo_kit] message``; warnings and errors say so (``[grpo_kit] WARNING: ...``)."""

    def format(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno < logging.WARNING else f"{record.levelname}: "
        return f"[{ROOT}] {level}{record.getMessage()}"


def configure_logging(level: int = logging.INFO, stream: TextIO | None = None,
                      info_to_stdout: bool = False) -> logging.Logger:
    """Show the kit's log records at ``level`` and above on ``stream`` (default standard error); return the logger.

    ``info_to_stdout`` (the notebooks): without ``stream``, information goes to standard output and only warnings and
    errors to standard error, which Jupyter draws in red as an error would be.

    Idempotent: a second call replaces the handler the first call added.
    Records do not propagate to the root logger, so nothing is printed twice where the root logger
    has a handler of its own (Jupyter, pytest).
    """
    logger = logging.getLogger(ROOT)
    logger.setLevel(level)
    logger.propagate = False
    for old in [h for h in logger.handlers if isinstance(h, _Handler)]:
        logger.removeHandler(old)
    handler = _Handler(stream, info_to_stdout)
    handler.setFormatter(_Format())
    logger.addHandler(handler)
    return logger


def counted(n: int | float, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, singular for exactly 1, as the kit's messages say a count: "1 step", "2 steps".

    Args:
        n: the count.
        noun: the singular noun.
        plural: the plural where it is not ``noun + "s"`` ("processes").

    >>> counted(1, "step"), counted(3, "question"), counted(2, "process", "processes"), counted(0, "run")
    ('1 step', '3 questions', '2 processes', '0 runs')
    """
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
