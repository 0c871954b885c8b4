"""Copying many big rows into one output array on a few threads.

numpy releases the GIL while it copies a large block, so on a multi-core machine two threads
fill a big batch (e.g. 256 images of 150,528 floats: 154 MB) almost twice as fast as one:
both the copying and the first-touch page faults of a fresh output run in parallel. The
compiled gather (``ofindex._native.gather_bytes``) releases the GIL for big rows too.
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from ofindex._threads import ProcessPool

#: Below this many bytes in total, one thread copies everything (threads cost ~50 us).
PARALLEL_COPY_BYTES = 8 << 20


#: Threads that copy big outputs.
_POOL = ProcessPool("ofindex-copy")


def _executor() -> cf.ThreadPoolExecutor | None:
    """This process's pool: threads that copy big outputs (``None`` on one core)."""
    return _POOL.get()


def fill_parallel(n: int, nbytes: int, fill: Callable[[list[Any], int, int], None],
                  *arrays: Any, least: int = PARALLEL_COPY_BYTES) -> None:
    """``fill(job, lo, hi)`` over parts of ``range(n)``, where ``job`` is ``list(arrays)``: on a
    few threads when ``nbytes`` is at least ``least`` (``fill`` must release the GIL to gain
    from them)."""
    pool = _executor() if nbytes >= least and n > 1 else None
    job = list(arrays)
    if pool is None:
        fill(job, 0, n)
        return
    parts = min(pool._max_workers, n)
    bounds = np.linspace(0, n, parts + 1).astype(int).tolist()
    try:
        for f in [pool.submit(fill, job, lo, hi) for lo, hi in itertools.pairwise(bounds)]:
            f.result()
    finally:
        # the workers reach the arrays only through ``job``: a pool thread that has not yet
        # dropped its task must not keep an output alive (its memory may be recycled)
        job.clear()


def _copy_part(job: list[Any], lo: int, hi: int) -> None:
    out, rows = job
    for i in range(lo, hi):
        out[i] = rows[i]


def copy_rows(out: np.ndarray, rows: list[np.ndarray]) -> None:
    """``out[i] = rows[i]`` for every row, split over a few threads when the copy is big."""
    fill_parallel(len(rows), out.nbytes, _copy_part, out, rows)
