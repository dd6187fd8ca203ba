"""What the connector tasks of one run share in this process: the client, the credit ledger, the output layout.

Tasks receive plain data (a run id and a query) and look the shared parts up here, so their inputs stay
serialisable and Prefect never hashes or pickles a connection pool.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from connectors.catalog import Endpoint
from connectors.client import ServiceClient
from connectors.ledger import CreditLedger
from connectors.page_request import Attempt
from connectors.pager import QuerySpec
from tasks.attemptlog import AttemptLogWriter
from tasks.layout import OutputLayout


class AttemptLogs:
    """The client's attempt hook: every HTTP attempt, paid or not, goes to its query's attempt log."""

    def __init__(self, fsync: bool = False) -> None:
        self.fsync = fsync
        self.writers: dict[str, AttemptLogWriter] = {}

    def open(self, query_id: str, path: Path) -> None:
        self.writers[query_id] = AttemptLogWriter(path, fsync=self.fsync)

    def close(self, query_id: str) -> None:
        writer = self.writers.pop(query_id, None)
        if writer is not None:
            writer.close()

    def log(self, attempt: Attempt) -> None:
        writer = self.writers.get(attempt.query_id)
        if writer is not None:
            writer.append(attempt)


@dataclass
class RunContext:
    run_id: str
    started: datetime
    layout: OutputLayout
    endpoints: dict[str, Endpoint]
    client: ServiceClient
    ledger: CreditLedger
    attempts: AttemptLogs
    incremental: bool = True
    """False under `--full`: incremental queries page fully this once."""
    on_records: Callable[[QuerySpec, Mapping[str, list[Any]], int, int, bool], None] = (
        lambda spec, records, kept, credits, replayed: None
    )
    """Per landed page: its records (as sent), how many were kept, its credits and whether it was replayed
    (dependents and progress)."""

    @property
    def fsync(self) -> bool:
        return self.attempts.fsync


_RUNS: dict[str, RunContext] = {}


def register(ctx: RunContext) -> None:
    _RUNS[ctx.run_id] = ctx


def unregister(run_id: str) -> None:
    _RUNS.pop(run_id, None)


def lookup(run_id: str) -> RunContext:
    try:
        return _RUNS[run_id]
    except KeyError:
        raise RuntimeError(f"run {run_id} has no context in this process") from None
