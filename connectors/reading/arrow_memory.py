"""Which allocator Arrow's buffers come from while harvest makes many small Arrow tables it lets go at once.

mimalloc (Arrow's default pool here) keeps the pages of small arrays freed: a 100 MB answer's conversion peaked
at 5.4x its size instead of 3.3x (`bench/answer_steps.py`), and the load of a 40,000-query night (its
`query_state` and `requests` rows, 500 a table) at 395 MB instead of 347 MB. The system allocator hands them
back; over the 2,000 pages of a 200,000-record night it was no faster and no smaller.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow as pa


@contextmanager
def system_allocator() -> Iterator[None]:
    """The pool is the process's, set back at once: what runs meanwhile runs on one thread (a large answer's
    slices on the event loop, a load), and a buffer is freed by the pool that allocated it, whichever is set
    (two flows of a team's process at once may leave the system one set: only the speed differs)."""
    pool = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        yield
    finally:
        pa.set_memory_pool(pool)
