"""Stand-ins for record kinds in the landing tests: a table name, a key and a schema are all landing needs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from harvest.connectors.catalog.fields import TIMESTAMP
from harvest.connectors.catalog.records import META_COLUMNS

TS = TIMESTAMP
META = list(META_COLUMNS)
"""The columns every record table ends with, exactly as the connectors produce them."""


@dataclass(frozen=True)
class Kind:
    table: str
    primary_key: tuple[str, ...]
    schema: pa.Schema


# --- one-transaction wrappers the load step composes itself (flows/run/load_step.py); tests call them one at a time --
def load_tables(
    db: Path | str, batches: Any, *, data_dir: Path | None = None, rerun: str = "harvest load ..."
) -> Any:
    from harvest.tasks.database.connection import write_connection
    from harvest.tasks.database.record_tables import merge_batches

    with write_connection(db, data_dir=data_dir, rerun=rerun) as con:
        return merge_batches(con, batches)


def record_run_start(db: Path | str, run: Any = None, **fields: Any) -> None:
    from harvest.tasks.database.bookkeeping import RUN_FIELDS, as_fields, upsert_run
    from harvest.tasks.database.connection import transaction, write_connection

    row = {**(as_fields(run, RUN_FIELDS) if run is not None else {}), **fields}
    row.setdefault("status", "running")
    row.setdefault("finished", None)
    with write_connection(db) as con, transaction(con):
        upsert_run(con, row)


def record_run_end(db: Path | str, run: Any = None, **fields: Any) -> None:
    from harvest.tasks.database.bookkeeping import RUN_FIELDS, as_fields, upsert_run
    from harvest.tasks.database.connection import transaction, write_connection

    row = {**(as_fields(run, RUN_FIELDS) if run is not None else {}), **fields}
    with write_connection(db) as con, transaction(con):
        upsert_run(con, row)


def load_requests(db: Path | str, run_id: str, paths: Any) -> int:
    from harvest.tasks.database.bookkeeping import insert_requests
    from harvest.tasks.database.connection import transaction, write_connection

    with write_connection(db) as con, transaction(con):
        return insert_requests(con, run_id, paths)


def save_query_states(db: Path | str, run_id: str, states: Any) -> int:
    from harvest.tasks.database.bookkeeping import upsert_query_states
    from harvest.tasks.database.connection import transaction, write_connection

    with write_connection(db) as con, transaction(con):
        return upsert_query_states(con, run_id, states)
