"""A run's memory: the cyclic collector kept off the hot path, and memory handed back before the load.

Used by the `collect_job` flow (`flows/collect.py`) around a run and between collecting and loading.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow as pa


@contextmanager
def quiet_gc() -> Iterator[None]:
    """Keep CPython's cyclic collector off the hot path: every page allocates thousands of short-lived,
    acyclic objects (freed by reference counting), and each collection walked every object Prefect and the
    imports keep alive; it cost more CPU than decoding the pages. Objects alive now are moved out of its
    reach, and it runs a tenth as often. No collection first: it walks every object the process holds (in a
    long-lived process, ~0.1-0.5 s a run), and what garbage is frozen with the rest is collectable again once
    the run ends."""
    with _QUIET.lock:
        _QUIET.runs += 1
        if _QUIET.runs == 1:  # the first of runs under way at once (a team's flow awaiting two jobs)
            gc.freeze()
            _QUIET.threshold = gc.get_threshold()
            gc.set_threshold(max(_QUIET.threshold[0], 10_000), *_QUIET.threshold[1:])
    try:
        yield
    finally:  # the last: what the runs leave is collectable again (native objects must be freed before exit)
        with _QUIET.lock:
            _QUIET.runs -= 1
            if _QUIET.runs == 0:
                gc.set_threshold(*_QUIET.threshold)
                gc.unfreeze()


class _Quiet:
    """The collector's settings before the first of the runs under way; the last puts them back (each run
    putting back what it found left a raised threshold behind two overlapping runs)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs = 0
        self.threshold: tuple[int, ...] = gc.get_threshold()


_QUIET = _Quiet()


def release_memory() -> None:
    """Hand what collecting used back to the system before DuckDB takes its share: the peak of a run is
    then the larger of the two steps, not their sum."""
    from harvest.tasks.output.parquet_sink import stop_writer_thread

    stop_writer_thread()  # every Parquet file of the run is closed by now
    gc.collect()
    pa.default_memory_pool().release_unused()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # glibc only; elsewhere the allocator keeps its pages
