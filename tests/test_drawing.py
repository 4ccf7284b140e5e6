"""The figure-drawing runner (harness/drawing.py): every call's result comes back in order, and a call's
error reaches the caller, with one worker or several."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from harness import drawing


class Unpicklable:
    """An argument a pool could not send to a worker: the forked workers inherit the calls instead."""

    def __init__(self, value: int) -> None:
        self.value = value
        self.lock = multiprocessing.Lock()

    def __reduce__(self) -> tuple:
        raise TypeError("not picklable")


def _value_and_pid(thing: Unpicklable, scale: int) -> tuple[int, int]:
    return thing.value * scale, os.getpid()


def _fail(message: str) -> None:
    raise ValueError(message)


@pytest.mark.parametrize("workers", [1, 2])
def test_results_come_back_in_the_calls_order(workers: int) -> None:
    calls = [(_value_and_pid, (Unpicklable(v), 10)) for v in range(6)]
    got = drawing.run(calls, workers)
    assert [v for v, _ in got] == [0, 10, 20, 30, 40, 50]
    pids = {pid for _, pid in got}
    if workers == 1 or "fork" not in multiprocessing.get_all_start_methods():
        assert pids == {os.getpid()}
    else:
        assert os.getpid() not in pids


@pytest.mark.parametrize("workers", [1, 2])
def test_a_calls_error_is_raised_to_the_caller(workers: int) -> None:
    calls = [(_value_and_pid, (Unpicklable(1), 1)), (_fail, ("no figure",))]
    with pytest.raises(ValueError, match="no figure"):
        drawing.run(calls, workers)
    assert drawing._CALLS == ()  # nothing of the failed run is kept
