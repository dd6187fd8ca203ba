"""An incremental query's known keys for Dask workers that cannot read the job's DuckDB (`runner.staging`).

Locally, an incremental query stops paging at the first page of items earlier runs landed; the stop's data is
the query's known keys, read from the job's DuckDB (`tasks.database.known_keys`). A staging worker has no such
file, and without the keys it would page to the end: pay for pages the local runner does not. So the flow reads
them as the local runner would and puts them in the store, one object per query and flow session, before the
query's first round; every round reads it before it pays::

    <staging>/<job>/<run_id>/known/<session>-<query hash>.json.z

An object, not the round's parameters: a query's key set grows with what it collected (~24 bytes a key as
JSON: 1k keys 24 KB, 10k 240 KB, 100k 2.4 MB, measured), and parameters travel with every round through the
scheduler. zlib takes that to ~40% (10k keys: 94 KB, 12 ms to compress once, 3 ms to read back per round);
the round's parameters carry only the name and its sha256. The object goes with the run's stages when the run
ends (`StagedRun.sweep` deletes the run's prefix).

A round that cannot read the object whole pays nothing and stops the run like a failing store (exit 75,
resumable): paging on without it would pay for pages the local runner does not.
"""

from __future__ import annotations

import errno
import hashlib
import json
import zlib
from typing import Any

from harvest.connectors.catalog.endpoints import Endpoint
from harvest.connectors.paging.known_items import KnownKeys
from harvest.connectors.paging.pager import QuerySpec
from harvest.tasks.database.known_keys import query_known_keys
from harvest.tasks.output.layout import query_hash
from harvest.tasks.output.machine_fault import MachineFault
from harvest.tasks.output.staging import StagingStore
from harvest.tasks.staged_commit import StagedRun

KNOWN = "known"


def stage_known(
    staged: StagedRun, spec: QuerySpec, endpoint: Endpoint, incremental: bool
) -> dict[str, Any] | None:
    """The query's known keys put in the store; what a round needs to find and check them. None when the query
    would page fully locally too (not incremental, `--full`, no database yet or one that cannot be read)."""
    known = query_known_keys(staged.layout.db, spec, endpoint.kinds, incremental)
    if known is None:
        return None
    data = zlib.compress(json.dumps(known.as_plain(), separators=(",", ":")).encode())
    name = f"{KNOWN}/{staged.session}-{query_hash(spec.query_id)}.json.z"
    staged.store.put(f"{staged.prefix}/{name}", data)
    return {"name": name, "sha256": hashlib.sha256(data).hexdigest(), "keys": known.size, "bytes": len(data)}


def read_known(store: StagingStore, run_prefix: str, ref: dict[str, Any]) -> KnownKeys:
    """The keys `stage_known` put, checked whole, on the worker before its round pays."""
    key = f"{run_prefix}/{ref['name']}"
    try:
        data = store.get(key)
    except FileNotFoundError:
        raise MachineFault(
            store.url_of(key), "the query's known keys are not in the staging store", errno.EIO
        ) from None
    if hashlib.sha256(data).hexdigest() != ref["sha256"]:
        raise MachineFault(
            store.url_of(key), "the staging store returned other bytes than written", errno.EIO
        )
    return KnownKeys.from_plain(json.loads(zlib.decompress(data)))
