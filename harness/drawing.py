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

import contextlib
import ctypes
import gc
import multiprocessing
import pickle
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import matplotlib
import pyarrow as pa

Call = tuple[Callable[..., Any], tuple[Any, ...]]

#: how a report's PNGs are written (``savefig(..., pil_kwargs=PNG)``): zlib level 3, not Pillow's 6, encodes
#: a figure in 60% of the time for 0.5% more bytes (the report of every archive writes 400 of them)
PNG: dict[str, Any] = {"compress_level": 3}
#: the matplotlib settings a report draws with (:func:`style`): glyphs unhinted, as matplotlib's own image
#: tests draw them; FreeType's hinting of every glyph took a quarter of a label-heavy figure's time
RC: dict[str, Any] = {"text.hinting": "none"}
#: calls a worker of :func:`run` makes before a fresh one replaces it
TASKS_PER_WORKER = 20
#: the calls of the running :func:`run`, set before its workers fork
_CALLS: Sequence[Call] = ()


def run(calls: Sequence[Call], workers: int, progress: str | None = None) -> list[Any]:
    """Each ``(function, arguments)`` call's result, in order; a call's exception is raised here.

    With ``workers`` > 1 (and fork available) the calls run in that many forked processes, taken in
    order as each worker frees up: list the long ones first. Every call draws with :data:`RC`. With
    ``progress`` (a name), how many calls are done is printed to stderr after each batch of workers.
    """
    with style():
        return _run(calls, workers, progress)


def _run(calls: Sequence[Call], workers: int, progress: str | None = None) -> list[Any]:
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
        # fresh workers every TASKS_PER_WORKER calls each (forked afresh from the parent): the reference
        # counts a call touches copy the parent's pages into its worker, whose heap keeps growing with what
        # matplotlib and pandas cache (34 MB private after the fork, 250-300 MB after 250 calls, every
        # archive's report). A pool per batch, not multiprocessing.Pool(maxtasksperchild=...): that pool
        # waits forever for the call of a worker the kernel killed, this one raises BrokenProcessPool.
        context = multiprocessing.get_context("fork")
        batch = workers * TASKS_PER_WORKER
        results: list[Any] = []
        started = time.monotonic()
        for start in range(0, len(calls), batch):
            with ProcessPoolExecutor(workers, mp_context=context) as executor:
                results.extend(executor.map(_call, range(start, min(start + batch, len(calls)))))
            if progress:
                print(f"{progress}: {len(results)}/{len(calls)} done, {time.monotonic() - started:.0f} s",
                      file=sys.stderr, flush=True)  # fmt: skip
        return results
    finally:
        gc.unfreeze()
        _CALLS = ()


def style() -> contextlib.AbstractContextManager[Any]:
    """The report's drawing settings (:data:`RC`) for the ``with`` block (:func:`run` draws inside it; a
    figure drawn outside it, the verdict matrix, takes it itself)."""
    return matplotlib.rc_context(RC)


def apart(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` in one forked process, its result pickled back (here when fork is missing):
    what the call allocates and frees stays out of this process's heap. The summary of every archive's
    260 000 units leaves 400 MB of freed lists that glibc cannot give back, and every worker forked
    after would share those pages (and count them).

    The result comes back through a file, streamed: through the pool's pipe it is one message, held
    whole as bytes on each side while it is pickled and read back (the summary's 200 MB, twice, at the
    report's peak)."""
    return apart_all([(function, args)], 1)[0]


def apart_all(calls: Sequence[Call], workers: int) -> list[Any]:
    """Each call's result, in order, as :func:`apart` computes one: in forked processes, ``workers`` at a
    time (the report's summary in runs of experiments side by side, where one fork left the other core
    idle)."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return [function(*args) for function, args in calls]
    global _CALLS
    _CALLS = calls
    try:
        with tempfile.TemporaryDirectory(prefix="harness-apart-") as tmp:
            paths = [Path(tmp) / f"result-{i}.pickle" for i in range(len(calls))]
            context = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(max(1, min(workers, len(calls))), mp_context=context) as executor:
                for done in [executor.submit(_call_into, i, path) for i, path in enumerate(paths)]:
                    done.result()
            results = []
            for path in paths:
                with path.open("rb") as fh:
                    results.append(pickle.load(fh))
                path.unlink()  # each result's file gone once read: the disk holds one at a time
            return results
    finally:
        _CALLS = ()


def _call_into(i: int, path: Path) -> None:
    """:func:`_call`, its result pickled into ``path``."""
    result = _call(i)
    with path.open("wb") as fh:
        pickle.dump(result, fh, protocol=pickle.HIGHEST_PROTOCOL)


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
