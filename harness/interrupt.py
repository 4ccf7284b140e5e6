"""Stopping a run from outside: a user's kill or Ctrl-C, a batch scheduler's cancel or time limit.

None of these is a candidate's fault, so nothing is recorded for the candidate they cut short; every row
stored before stays (rows are written whole or not at all) and the same command run again measures only
what is missing. SIGTERM (a kill, a cancel, a time limit) and SIGUSR2 (submitit's warning, 90 s before a
SLURM job's time limit) only set a flag: raising from a signal handler can land inside logging's or
pyarrow's internals, where the exception is swallowed (submitit's own USR2 handler raises, mid-kernel).
The run stops at its next compile or kernel launch, the two places every measurement passes through (and
wherever a long phase calls :func:`check`). A phase that calls neither (a model ranking thousands of
candidates) cannot hold the run hostage: :data:`GRACE_S` seconds after the signal, or at a second stop
signal, the process ends there with the same line (rows are written whole, so none is cut).
"""

from __future__ import annotations

import os
import signal
import sys
import threading

_requested: list[str] = []
_owner: list[int] = []  # the process that installed the handlers
#: seconds a requested stop waits for a safe point (a compile, a kernel launch) before ending the process
GRACE_S = 30.0
_timers: list[threading.Timer] = []
#: what each stop signal means to the user
WHY = {
    "SIGTERM": "a kill, a scheduler's cancel or time limit",
    "SIGUSR2": "the scheduler's warning that the job's time limit is near",
}


#: signals a user or a batch scheduler sends to stop a job (scancel, a time limit, Ctrl-C, a closed
#: terminal, and SIGUSR2: submitit's warning before a SLURM time limit, sent to the whole job step):
#: never a child process's own fault (a kernel's driver, the peak benchmark, the compiler)
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR2})


class Interrupted(Exception):
    """A compiler or a kernel's driver was stopped from outside, or the run was asked to stop: the run
    stops without recording a row for the candidate at hand. Not a RuntimeError, which the harness turns
    into an error row in places."""


def _request(signum: int, frame: object) -> None:
    if os.getpid() not in _owner:
        # a forked child (a multiprocessing pool's worker): the signal means what it always does there;
        # a pool's terminate() stops its workers with SIGTERM and waits for them to die
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    _requested.append(signal.Signals(signum).name)
    if len(_requested) > 1:
        _give_up("a second stop signal")
    else:
        timer = threading.Timer(GRACE_S, _give_up, args=(f"no safe point within {GRACE_S:g} s",))
        timer.daemon = True
        timer.start()
        _timers.append(timer)


def reset() -> None:
    """Forget a requested stop and cancel its grace timer (tests that signal their own process)."""
    for timer in _timers:
        timer.cancel()
    _timers.clear()
    _requested.clear()


def _give_up(why: str) -> None:
    """End the process now (from a timer thread or the handler): the one line, then exit status 2."""
    try:
        print(f"harness: error: {_message()} ({why}: stopped where it was)", file=sys.stderr, flush=True)
    finally:
        os._exit(2)


def _message() -> str:
    name = _requested[0]
    return (
        f"stopped by {name} ({WHY.get(name, 'a signal')}): every row stored before is kept; run the same "
        "command again to measure what is missing"
    )


def stop_on_signals() -> None:
    """Make SIGTERM and SIGUSR2 stop this run at its next compile or kernel launch, with one line. Without
    it a plain process dies at once on SIGTERM (also safe), but submitit's SLURM jobs ignore SIGTERM and
    measure on until the SIGKILL that follows a cancel or a time limit, and raise from their USR2 handler
    wherever the run happens to be."""
    _owner[:] = [os.getpid()]
    for sig in (signal.SIGTERM, signal.SIGUSR2):
        signal.signal(sig, _request)


def check() -> None:
    """Raise :class:`Interrupted` if a stop was requested."""
    if _requested:
        raise Interrupted(_message())


def raise_if_stopped(returncode: int, what: str) -> None:
    """Raise :class:`Interrupted` if a child process (``what``) died of a stop signal: the run stops with
    one line, and no row blames the candidate at hand."""
    if returncode < 0 and -returncode in STOP_SIGNALS:
        check()  # the run was asked to stop too: its message says why
        raise Interrupted(
            f"{what} was stopped by {signal.Signals(-returncode).name}; nothing was recorded for it: run "
            "the same command again to measure what is missing"
        )
