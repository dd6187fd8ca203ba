"""What the connector tasks of one run share in this process: the client, the credit ledger, the output layout.

Tasks receive plain data (a run id and a query) and look the shared parts up here, so their inputs stay
serialisable and Prefect never hashes or pickles a connection pool.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harvest.connectors.catalog.endpoints import Endpoint
from harvest.connectors.credits.ledger import CreditLedger
from harvest.connectors.http.auth import ApiKey
from harvest.connectors.http.client import RetryPolicy, ServiceClient, Timeouts
from harvest.connectors.http.pace import DEFAULT_MAX_WAIT, Pace
from harvest.connectors.paging.known_items import KnownKeys
from harvest.connectors.paging.page_request import Attempt
from harvest.connectors.paging.pager import QuerySpec
from harvest.tasks.output.attempt_log import AttemptLogWriter
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.machine_fault import DiskRoom, FaultStop
from harvest.tasks.output.parquet_sink import MultiTableSink
from harvest.tasks.output.raw_store import RawIndex, RawPageWriter

if TYPE_CHECKING:
    from harvest.tasks.query_line import QueryLine


OnRecords = Callable[[QuerySpec, Mapping[str, Sequence[Any]], int, int, bool, int], None]
"""Called per landed page with its records (as sent), how many were kept, its credits, whether it was
replayed from the raw store and the pages it counts as collected (0: an answer damaged on the wire, billed and
kept, whose page a later run asks for again: the progress the user watches counts pages as the summary does)."""


@dataclass(frozen=True)
class ClientSettings:
    """How a run talks to the service, as plain data: the flow reads it from the spec once, and a Dask worker
    gets it with its round, so both build their client the same way (`service_client`)."""

    timeout_seconds: float
    attempts: int
    concurrency: int
    max_answer_bytes: int
    per_second: float | None = None
    """The service's known rate limit; a Dask round divides it among its tasks."""
    max_wait_seconds: float = DEFAULT_MAX_WAIT
    idle_seconds: float = 0.0
    """Seconds the run has gone without an accepted answer (a Dask round: as the flow knows it from the rounds
    before), counted against `max_wait_seconds` (`Pace`)."""


def service_client(
    url: str, key: ApiKey, ledger: CreditLedger, attempts: AttemptLogs, settings: ClientSettings
) -> ServiceClient:
    timeout = settings.timeout_seconds
    return ServiceClient(
        url,
        key,
        ledger,
        timeouts=Timeouts(read=timeout, total=2 * timeout),
        retry=RetryPolicy(attempts=settings.attempts),
        on_attempt=attempts.log,
        max_answer_bytes=settings.max_answer_bytes,
        max_in_flight=settings.concurrency,
        pace=Pace(settings.per_second, settings.max_wait_seconds, idle_for=settings.idle_seconds),
    )


class AttemptLogs:
    """The client's attempt hook: every HTTP attempt, paid or not, goes to its query's attempt log.

    A log that cannot be written for a reason of this machine (a full disk) stops the run (`faults`) without
    costing the page the attempt brought: the raw store, not the log, is the receipt."""

    def __init__(self, fsync: bool = False, faults: FaultStop | None = None) -> None:
        self.fsync = fsync
        self.writers: dict[str, AttemptLogWriter] = {}
        self.faults = faults
        self.shared: AttemptLogWriter | None = None
        """The session's one log (the flow's process): every query's attempts, each line naming its query."""
        self.sent: Counter[str] = Counter()
        """Attempts per query, rows of `requests`: a query with one is never "never started" (`QuerySummary.sent`)."""

    def share(self, path: Path) -> None:
        self.shared = AttemptLogWriter(path, fsync=self.fsync)

    def end_sharing(self) -> None:
        if self.shared is not None:
            self.shared.close()

    def open(self, query_id: str, path: Path) -> None:
        self.writers[query_id] = self.shared or AttemptLogWriter(path, fsync=self.fsync)

    def close(self, query_id: str) -> None:
        writer = self.writers.pop(query_id, None)
        if writer is not None and writer is not self.shared:
            writer.close()

    def log(self, attempt: Attempt) -> None:
        self.sent[attempt.query_id] += 1
        writer = self.writers.get(attempt.query_id)
        if writer is None:
            return
        try:
            writer.append(attempt)
        except OSError as exc:
            if self.faults is None or not self.faults.caught(exc, writer.path):
                raise


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
    faults: FaultStop = field(default_factory=FaultStop)
    """The run's machine fault, if one stopped it (a full disk)."""
    on_records: OnRecords = lambda spec, records, kept, credits, replayed, pages: None
    """Per landed page (dependents and progress; `OnRecords`)."""

    raw: RawPageWriter | None = None
    """The session's one raw file (the flow's process); None: each query writes its own (Dask rounds)."""
    raw_index: RawIndex | None = None
    """Where the pages of a resumed run are, found once (`tasks.output.raw_store.RawIndex`)."""
    sink: MultiTableSink | None = None
    """The run's one Parquet writer (the flow's process); None: each query writes its own files (Dask rounds)."""
    lines: dict[str, QueryLine] = field(default_factory=dict)
    """The run's query lines by name, one per task run (`tasks.query_line`)."""
    known: KnownKeys | None = None
    """A staged round's query's known keys, read by the flow (the worker has no DuckDB: `tasks.staged_known`);
    None: an incremental query reads them from the layout's database."""
    room: DiskRoom | None = None
    """Room on the output's disk for the answers in flight, shared by the run's queries (`disk_room`)."""

    def raw_path(self, query_id: str) -> Path:
        """Where the query's paid pages go: the session's file, or its own (a Dask round)."""
        return self.raw.path if self.raw is not None else self.layout.raw_file(self.run_id, query_id)

    def requests_path(self, query_id: str) -> Path:
        shared = self.attempts.shared
        return shared.path if shared is not None else self.layout.requests_file(self.run_id, query_id)

    def disk_room(self) -> DiskRoom:
        """What every query looks at before it pays: room for the answers the client may have in flight."""
        if self.room is None:
            self.room = DiskRoom(self.layout.root, self.client.max_in_flight)
        return self.room

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
