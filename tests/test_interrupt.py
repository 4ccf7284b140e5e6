"""Stopping from outside (harness/interrupt.py): the flag, the message, and forked children (a
multiprocessing pool's workers) that still die on SIGTERM, as Pool.terminate() needs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from harness import interrupt


@pytest.fixture
def handlers():
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR2)}
    interrupt._requested.clear()
    yield
    interrupt._requested.clear()
    for s, h in saved.items():
        signal.signal(s, h)


def test_sigterm_sets_the_flag_and_the_next_check_stops_with_one_line(handlers: None) -> None:
    interrupt.stop_on_signals()
    interrupt.check()  # nothing requested yet
    os.kill(os.getpid(), signal.SIGUSR2)
    with pytest.raises(interrupt.Interrupted, match="stopped by SIGUSR2 .the scheduler's warning"):
        interrupt.check()


POOL = """
import multiprocessing as mp, time
from harness import interrupt
interrupt.stop_on_signals()
pool = mp.get_context("fork").Pool(2)
pool.map_async(time.sleep, [60, 60])
time.sleep(1)  # both workers busy: only terminate()'s SIGTERM can stop them now
pool.terminate()
pool.join()
interrupt.check()
print("done")
"""


def test_a_forked_pool_still_terminates_its_workers() -> None:
    """The permutation study's simulation pool (fork, then terminate() on leaving ``with``): workers that
    inherited the handler ignored terminate()'s SIGTERM and the pool waited for them forever (make quick
    hung in CI's permutations job). In a child process, so a regression fails on the timeout."""
    out = subprocess.run([sys.executable, "-c", POOL], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.strip() == "done", out.stderr[-2000:]
