"""What a run did, as the command line prints it and Prefect's final state carries it.

Typed, so that the places that read it (the printed summary, the exit code, the state and its message, the
artifacts) read fields a type checker knows, not string keys. The queries inside stay the per-query summaries the
manifest and the journal hold (`tasks.output.query_summary`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, overload

from harvest.connectors.paging.pager import base_id
from harvest.connectors.reading.extraction_report import ExtractionReport
from harvest.tasks.output.manifest import RunManifest


class QueryList(Sequence[dict[str, Any]]):
    """The run's per-query summaries where Prefect does not look into them. The flow's final state carries the
    `RunSummary`, and Prefect walks a flow's returned value item by item for futures (`resolve_futures_to_states`
    visits every list, dict and dataclass inside): 2,000 summaries of ~20 fields were ~0.3 s of the run's end,
    10,000 five times that. A Sequence that is not a list is not walked; it iterates, indexes and pickles like
    the list it holds."""

    __slots__ = ("items",)

    def __init__(self, items: Iterable[dict[str, Any]] = ()) -> None:
        self.items = list(items)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        return self.items[index]

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.items)

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, QueryList | list) else NotImplemented

    def __repr__(self) -> str:
        return f"QueryList({self.items!r})"


@dataclass
class RunSummary:
    run_id: str
    job: str
    status: str
    service: str
    budget: int
    credits_spent: int
    records: int
    queries: QueryList
    tables: dict[str, int]
    """Rows per table after the load; empty when the run was not loaded."""
    loaded: bool
    error: str | None = None
    continues: str | None = None
    resumes: int = 0
    balance_before: int | None = None
    balance_after: int | None = None
    service_billed: int | None = None
    bill_unknown: str | None = None
    rate_limit: dict[str, Any] | None = None
    machine_fault: str | None = None
    extraction: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    """Where the time went: paging, loading, exporting; the command line adds the total."""
    loaded_first: list[dict[str, Any]] = field(default_factory=list)
    """The job's earlier runs loaded into DuckDB before this one paid."""
    load_interrupted: bool = False
    load_refused: str | None = None
    """Why DuckDB refused to load the run (its memory limit), with the command that loads it."""
    ended_on_disk: bool = True
    """False when this machine could not write the run's end (its manifest still says `running`): the job's next
    run resumes it (and asks nothing it had), `harvest load` cannot load it until then."""
    export: dict[str, Any] | None = None
    """What the spec's export did (`flows.handoff.export_after_run`), when the spec has one."""
    unstarted_exit_code: int = 0
    """The spec's `budget.unstarted_exit_code`: the exit code when the budget left queries never started."""
    prefect_untold: str | None = None
    """Why Prefect could not be told how the run ended (its API did not answer): the run's data decides its exit
    code all the same, and what Prefect is owed waits in the output directory (`flows.orchestrator.prefect_record`)."""

    @classmethod
    def of(cls, manifest: RunManifest, tables: dict[str, int] | None) -> RunSummary:
        return cls(
            run_id=manifest.run_id,
            job=manifest.job,
            status=manifest.status,
            service=manifest.service,
            budget=manifest.budget,
            credits_spent=manifest.credits_spent,
            records=manifest.records,
            queries=QueryList(manifest.queries),
            tables=tables or {},
            loaded=tables is not None,
            error=manifest.error,
            continues=manifest.continues,
            resumes=manifest.resumes,
            balance_before=manifest.balance_before,
            balance_after=manifest.balance_after,
            service_billed=manifest.service_billed,
            bill_unknown=manifest.bill_unknown,
            rate_limit=manifest.rate_limit,
            machine_fault=manifest.machine_fault,
            extraction=manifest.extraction.totals(),
        )

    def __post_init__(self) -> None:
        if not isinstance(self.queries, QueryList):
            self.queries = QueryList(self.queries)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "queries": list(self.queries)}


@dataclass
class NoRun:
    """A `harvest run` that made no run: nothing left to `--continue`, or this machine could not load the job's
    earlier runs first (a full disk), so nothing was paid."""

    status: Literal["nothing_to_continue", "not_started"]
    message: str
    loaded_first: list[dict[str, Any]] = field(default_factory=list)
    machine_fault: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


WIDE = 20
"""A spec query that expanded to more queries than this is one row of the table (its statuses counted), then a
row for each of its queries that did not end well, up to `WIDE`: 10,000 accounts are not 10,000 lines."""


def query_rows(
    queries: Iterable[dict[str, Any]], ok_statuses: Collection[str]
) -> Iterator[tuple[str, str, bool, int, int, int]]:
    """(query, status, ended well, pages, records, credits) per row of the run's table; a query's status says
    what its pages held that did not land as records of its kinds (`ExtractionReport.notes_of`)."""
    by_spec: dict[str, list[dict[str, Any]]] = {}
    for q in sorted(queries, key=lambda q: q["query_id"]):
        by_spec.setdefault(base_id(q["query_id"]), []).append(q)
    for spec_query, qs in sorted(by_spec.items()):
        if len(qs) > WIDE:
            counted = Counter(q["status"] for q in qs)
            said = ", ".join(f"{n} {status}" for status, n in counted.most_common())
            yield (f"{spec_query} ({len(qs)} queries)", said, set(counted) <= set(ok_statuses),
                   *(sum(q[f] for q in qs) for f in ("pages", "records", "credits")))  # fmt: skip
            qs = [q for q in qs if q["status"] not in ok_statuses][:WIDE]
        for q in qs:
            ok = q["status"] in ok_statuses
            status = "; ".join([q["status"], *ExtractionReport.notes_of(q.get("extraction"))])
            yield q["query_id"], status, ok, q["pages"], q["records"], q["credits"]
