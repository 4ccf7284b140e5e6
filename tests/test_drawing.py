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


def test_more_calls_than_a_batch_of_workers_all_come_back_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # fresh workers every TASKS_PER_WORKER calls each: the batches' results are joined in the calls' order
    monkeypatch.setattr(drawing, "TASKS_PER_WORKER", 2)
    calls = [(_value_and_pid, (Unpicklable(v), 1)) for v in range(11)]
    got = drawing.run(calls, 2)
    assert [v for v, _ in got] == list(range(11))
    if "fork" in multiprocessing.get_all_start_methods():
        assert len({pid for _, pid in got}) > 2  # more than one batch of two workers


def test_apart_returns_the_result_and_raises_the_error() -> None:
    value, pid = drawing.apart(_value_and_pid, Unpicklable(7), 3)
    assert value == 21
    if "fork" in multiprocessing.get_all_start_methods():
        assert pid != os.getpid()
    with pytest.raises(ValueError, match="no summary"):
        drawing.apart(_fail, "no summary")
    assert drawing._CALLS == ()
