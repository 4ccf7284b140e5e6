"""Stopping a run from outside: a user's kill or Ctrl-C, a batch scheduler's cancel or time limit.

None of these is a candidate's fault, so nothing is recorded for the candidate they cut short; every row
stored before stays (rows are written whole or not at all) and the same command run again measures only
what is missing. SIGTERM only sets a flag (raising from a signal handler can land inside logging's or
pyarrow's internals, where the exception is swallowed); the run stops at its next compile or kernel
launch, the two places every measurement passes through.
"""

from __future__ import annotations

import signal

_requested: list[str] = []


class Interrupted(Exception):
    """A compiler or a kernel's driver was stopped from outside, or the run was asked to stop: the run
    stops without recording a row for the candidate at hand. Not a RuntimeError, which the harness turns
    into an error row in places."""


def _request(signum: int, frame: object) -> None:
    _requested.append(signal.Signals(signum).name)


def stop_on_sigterm() -> None:
    """Make SIGTERM stop this run at its next compile or kernel launch, with one line. Without it a plain
    process dies at once (also safe), but submitit's SLURM jobs ignore SIGTERM and measure on until the
    SIGKILL that follows a cancel or a time limit."""
    signal.signal(signal.SIGTERM, _request)


def check() -> None:
    """Raise :class:`Interrupted` if a stop was requested."""
    if _requested:
        raise Interrupted(
            f"stopped by {_requested[0]} (a kill, a scheduler's cancel or time limit): every row stored "
            "before is kept; run the same command again to measure what is missing"
        )
