"""What a run did, as the command line prints it and Prefect's final state carries it.

Typed, so that the places that read it (the printed summary, the exit code, the state and its message, the
artifacts) read fields a type checker knows, not string keys. The queries inside stay the per-query summaries the
manifest and the journal hold (`tasks.output.query_summary`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from connectors.paging.pager import base_id
from tasks.output.manifest import RunManifest


@dataclass
class RunSummary:
    run_id: str
    job: str
    status: str
    service: str
    budget: int
    credits_spent: int
    records: int
    queries: list[dict[str, Any]]
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
    export: dict[str, Any] | None = None
    """What the spec's export did (`flows.handoff.export_after_run`), when the spec has one."""

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
            queries=manifest.queries,
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

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    queries: list[dict[str, Any]], ok_statuses: Collection[str]
) -> Iterator[tuple[str, str, bool, int, int, int]]:
    """(query, status, ended well, pages, records, credits) per row of the run's table."""
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
            yield q["query_id"], q["status"], ok, q["pages"], q["records"], q["credits"]
