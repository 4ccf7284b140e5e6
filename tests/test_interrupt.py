"""Stopping from outside (harness/interrupt.py): the flag, the message, and forked children (a
multiprocessing pool's workers) that still die on SIGTERM, as Pool.terminate() needs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from harness import interrupt


@pytest.fixture
def handlers():
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR2)}
    interrupt.reset()
    yield
    interrupt.reset()
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


BUSY = """
import os, signal, sys, time
from harness import interrupt
interrupt.GRACE_S = float(sys.argv[1])
interrupt.stop_on_signals()
print("ready", flush=True)
while True:  # a long phase that never reaches a compile or a kernel launch (no check)
    sum(range(10000))
"""


@pytest.mark.parametrize("signals, grace", [(1, 1.0), (2, 60.0)])
def test_a_stop_that_meets_no_safe_point_ends_the_process_after_the_grace_or_a_second_signal(
    signals: int, grace: float
) -> None:
    """``harness loop-strings`` ranked 1000 strings with its cache model for a minute after a SIGTERM: the
    flag waited for a compile. Now the grace period (1 s here) or a second signal ends it, with the line."""
    proc = subprocess.Popen([sys.executable, "-c", BUSY, str(grace)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    for _ in range(signals):
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)  # a second signal sent while the first is pending would merge with it
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 2, err
    assert err.count("harness: error: stopped by SIGTERM") == 1 and "Traceback" not in err
    assert ("second stop signal" if signals == 2 else "no safe point within 1 s") in err


def test_a_compiler_stopped_by_a_stop_signal_names_it_even_before_the_handler_ran(tmp_path) -> None:
    """CI's SLURM time-limit test: SIGUSR2, sent to the whole job, reached gcc before the harness's handler
    set its flag, and the run stopped with "the compiler was killed by signal 12". A stop signal is named."""
    from harness.build import CompilerConfig, build
    from kernels.candidate import KernelSource

    cc = tmp_path / "cc"
    cc.write_text('#!/bin/sh\nif [ "$1" = "--version" ]; then echo "fake 1.0"; exit 0; fi\nkill -USR2 $$\n')
    cc.chmod(0o755)
    interrupt.reset()
    src = KernelSource(code="int kernel(void) { return 0; }", target="any")
    with pytest.raises(interrupt.Interrupted, match=r"the compiler \(building .*\) was stopped by SIGUSR2"):
        build(src, CompilerConfig(cc=str(cc)), tmp_path / "so")
