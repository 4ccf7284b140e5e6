"""Where a report's figures and sections are built: forked worker processes, or this process when there is
one worker.

Matplotlib spends most of a large report's time (the report of every archive draws about 250 figures),
and it runs in one thread. The calls are listed first and the workers forked after, so each inherits
the list (nothing but results is pickled) and the parent waits meanwhile: a parent that went on
building tables beside its forked workers would copy every shared page it writes (the report of every
archive took 2.9 GB in all, summed over the three processes, that way), so the sections' tables are
calls too.
"""

from __future__ import annotations

import ctypes
import gc
import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pyarrow as pa

Call = tuple[Callable[..., Any], tuple[Any, ...]]

#: the calls of the running :func:`run`, set before its workers fork
_CALLS: Sequence[Call] = ()


def run(calls: Sequence[Call], workers: int) -> list[Any]:
    """Each ``(function, arguments)`` call's result, in order; a call's exception is raised here.

    With ``workers`` > 1 (and fork available) the calls run in that many forked processes, taken in
    order as each worker frees up: list the long ones first.
    """
    if workers <= 1 or len(calls) <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [function(*args) for function, args in calls]
    global _CALLS
    _CALLS = calls
    # the heap the parent freed goes back to the system before the fork (glibc keeps it otherwise):
    # every archive's report, 2.2 GB in all (summed PSS) without, 1.9-2.0 GB with
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
    gc.freeze()  # a worker's collector would touch, and so copy, every page of the parent's objects
    try:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as executor:
            return list(executor.map(_call, range(len(calls))))
    finally:
        gc.unfreeze()
        _CALLS = ()


#: the C library when it is glibc (malloc_trim), else None
_LIBC: ctypes.CDLL | None = ctypes.CDLL(None)
if not hasattr(_LIBC, "malloc_trim"):
    _LIBC = None


def _call(i: int) -> Any:
    function, args = _CALLS[i]
    try:
        return function(*args)
    finally:
        # what the call freed goes back to the system: a worker's heap otherwise keeps its largest figure's
        # high-water mark for the rest of the report (the three processes summed 2.3 GB, PSS); Arrow's
        # pool (pandas' strings) keeps its own
        if _LIBC is not None:
            _LIBC.malloc_trim(0)
        pa.default_memory_pool().release_unused()
