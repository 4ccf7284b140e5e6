"""Worker processes for long simulations (cache models of thousands of loop nests), one place for how
they start.

Workers start from a fork server, not by forking the caller: a worker forked from a process with threads
could inherit a lock one of them held (pyarrow's, once a file is written) and wait on it forever; one such
worker hung a Table 4.2 run after 73 layers. A worker that dies raises BrokenProcessPool in the caller
instead of a silent hang.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor


class _Pool(ProcessPoolExecutor):
    """A pool that, left by an exception (a stop the user asked for, a failure), drops the work still
    queued instead of running it to the end: a stopped 720-order layer otherwise kept both workers busy
    after the harness had said it stopped."""

    def __exit__(self, exc_type: object, exc: object, tb: object) -> bool:
        self.shutdown(wait=True, cancel_futures=exc_type is not None)
        return False


def process_pool(jobs: int, preload: Sequence[str] = ()) -> ProcessPoolExecutor:
    """``jobs`` workers started from a fork server that has imported the ``preload`` modules once (numpy,
    pycachesim: each worker then starts with them loaded)."""
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(preload))
    return _Pool(jobs, mp_context=ctx)
