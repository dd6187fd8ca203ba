"""What a run did, as the command line prints it and Prefect's final state carries it; which of its queries ended
without a page, and why (`never_started`, `unsendable`), as its end says them.

Typed, so that the places that read it (the printed summary, the exit code, the state and its message, the
artifacts) read fields a type checker knows, not string keys. The queries inside stay the per-query summaries the
manifest and the journal hold (`tasks.output.query_summary`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, overload

from harvest.connectors.paging.pager import base_id
from harvest.connectors.plurals import counted
from harvest.connectors.reading.extraction_report import ExtractionReport
from harvest.tasks.output.manifest import RunManifest
from harvest.tasks.output.packed_summaries import PackedSummaries


class QueryList(Sequence[dict[str, Any]]):
    """The run's per-query summaries where Prefect does not look into them. The flow's final state carries the
    `RunSummary`, and Prefect walks a flow's returned value item by item for futures (`resolve_futures_to_states`
    visits every list, dict and dataclass inside): 2,000 summaries of ~20 fields were ~0.3 s of the run's end,
    10,000 five times that. A Sequence that is not a list is not walked; it iterates, indexes and pickles like
    the list it holds."""

    __slots__ = ("items",)

    def __init__(self, items: Iterable[dict[str, Any]] = ()) -> None:
        self.items: Sequence[dict[str, Any]] = items if isinstance(items, PackedSummaries) else list(items)
        """A run's own summaries stay packed (`PackedSummaries`): unpacked, 10,000 are ~37 MB at its end."""

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        return self.items[index] if isinstance(index, int) else list(self.items[index])

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
    budget_before: int | None = None
    """The earlier budget, when a resume lowered the budget below what the run had spent (`RunManifest`'s)."""
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
    load_held: str | None = None
    """Another process still held the DuckDB file after the load waited `HARVEST_DUCKDB_LOCK_WAIT_SECONDS` for
    it (the message, with the command that loads it): the night exits 1 and its flow run is Failed."""
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
            budget_before=manifest.budget_before,
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
    then: str = "loads them and runs"
    """What `harvest run` does once the fault is fixed: the line's end (`not_started`)."""

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
    by_spec: dict[str, list[tuple[str, str, str, bool, int, int, int]]] = {}
    for q in queries:  # a row each, not the summaries: a run's own are packed, 20,000 unpacked were ~74 MB
        status = "; ".join([q["status"], *ExtractionReport.notes_of(q.get("extraction"))])
        row = (
            q["query_id"],
            q["status"],
            status,
            q["status"] in ok_statuses,
            q["pages"],
            q["records"],
            q["credits"],
        )
        by_spec.setdefault(base_id(q["query_id"]), []).append(row)
    for spec_query, rows in sorted(by_spec.items()):
        rows.sort(key=lambda row: row[0])
        if len(rows) > WIDE:
            counted = Counter(row[1] for row in rows)
            said = ", ".join(f"{n} {status}" for status, n in counted.most_common())
            yield (f"{spec_query} ({len(rows)} queries)", said, set(counted) <= set(ok_statuses),
                   sum(r[4] for r in rows), sum(r[5] for r in rows), sum(r[6] for r in rows))  # fmt: skip
            rows = [row for row in rows if not row[3]][:WIDE]
        for query_id, _status, status, ok, pages, records, credits in rows:
            yield query_id, status, ok, pages, records, credits


NAMED = 3
"""Queries of a fan-out named in these lines before the rest are counted."""


def unsendable(q: dict[str, Any]) -> bool:
    """A query that ended without a page because one request costs more than its whole `max_credits` (the
    ledger's refusal says so: `cap_below_price`): no run can send it, neither `--continue` nor a larger budget."""
    return q["status"] == "budget_exhausted" and not q["pages"] and bool(q.get("cap_below_price"))


def never_started(queries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Queries that ended without a page because the budget (or their fan-out's `max_credits_total`) was spent
    before their turn: `--continue` starts them; the spec's `budget.unstarted_exit_code` says whether such a
    night exits 0. Not those whose own cap no request fits in (`unsendable`): no later turn starts them. Nor
    those that sent a request and got no page (an unbilled 500, the budget gone before the retry): rows of
    `requests`, they are stopped queries (`QuerySummary.sent`; a manifest older than it says none)."""
    return [
        q
        for q in queries
        if q["status"] == "budget_exhausted" and not q["pages"] and not q.get("sent") and not unsendable(q)
    ]


def sent_for_no_page(q: Mapping[str, Any]) -> list[str]:
    """A budget-stopped query's note when it sent requests and got no page (`QuerySummary.sent`): its line is
    printed, not left to the never-started line it is not in."""
    if q.get("status") != "budget_exhausted" or q.get("pages") or not q.get("sent"):
        return []
    return [f"{counted(int(q['sent']), 'request')} sent, no page"]


def _per_spec_query(
    summary: RunSummary,
    chosen: list[dict[str, Any]],
    note: Callable[[list[dict[str, Any]]], str] | None = None,
) -> str:
    """The chosen queries per spec query: their count among the run's queries of it and the first few ids (a
    fan-out of thousands is not printed whole); `note(queries)` adds words of their own before the ids."""
    total = Counter(base_id(q["query_id"]) for q in summary.queries)
    by_spec: dict[str, list[dict[str, Any]]] = {}
    for q in chosen:
        by_spec.setdefault(base_id(q["query_id"]), []).append(q)
    parts = []
    for spec_query, queries in by_spec.items():
        ids = [q["query_id"] for q in queries]
        named = ", ".join(ids[:NAMED]) + (f" and {len(ids) - NAMED} more" if len(ids) > NAMED else "")
        said = f"{note(queries)}: " if note else ""
        parts.append(f"{len(ids)} of {total[spec_query]} {spec_query} ({said}{named})")
    return "; ".join(parts)


def account_short(queries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Queries the account could not pay for (its balance at `budget.min_balance`, or empty), before their first
    page or after some: no budget or `--continue` goes on with them until a person tops the account up or lowers
    the floor, so the night fails (exit 1, Prefect's Failed) where a budget's shortfall does not."""
    return [
        q
        for q in queries
        if q["status"] == "budget_exhausted" and "budget.min_balance" in (q.get("error") or "")
    ]


def unstarted_words(summary: RunSummary) -> str | None:
    """The never-started queries in a few words for a one-line headline (Prefect's state message)."""
    unstarted = never_started(summary.queries)
    if not unstarted:
        return None
    short = len(account_short(unstarted))
    why = "the account at its balance floor" if short == len(unstarted) else "the budget or a cap spent"
    if short and short != len(unstarted):
        why = f"{short} of them for the account at its balance floor"
    return f"{counted(len(unstarted), 'query')} never started ({why})"


def never_started_line(summary: RunSummary) -> str | None:
    """How many queries never started, and which: per spec query, its count among the run's queries of it and
    the first few ids."""
    unstarted = never_started(summary.queries)
    if not unstarted:
        return None
    many = len(unstarted) != 1
    whys = dict.fromkeys(_why_unstarted(q.get("error") or "", many) for q in unstarted)
    return (
        f"{counted(len(unstarted), 'query')} never started, {' or '.join(sorted(whys))} before "
        f"{'their' if many else 'its'} turn: " + _per_spec_query(summary, unstarted)
    )


def _why_unstarted(error: str, many: bool) -> str:
    """What left a query unstarted, as its refusal says: the account's floor is not the budget (a larger budget
    does not start it; the account must be topped up or the floor lowered)."""
    if "budget.min_balance" in error:
        return "the account at its balance floor (budget.min_balance)"
    if "max_credits_total" in error:
        return f"{'their' if many else 'its'} fan-out's cap (max_credits_total) spent"
    return "the run's budget spent"


def _cap_and_price(queries: list[dict[str, Any]]) -> str:
    """The caps of one spec query's unsendable queries (one, unless a resume changed it) and the highest price."""
    limit = "budget" if "budget" in queries[0]["cap_below_price"] else "max_credits"
    caps = {q["cap_below_price"][limit] for q in queries}
    price = max(q["cap_below_price"]["price"] for q in queries)
    said = "a budget of" if limit == "budget" else "max_credits"
    return f"{said} {'/'.join(map(str, sorted(caps)))}, a request {price} credits"


def unsendable_named(summary: RunSummary) -> str | None:
    """The queries no request fits in, per spec query with their cap and the price (`2 of 3 q (max_credits 2, a
    request 3 credits: q[handle=a], q[handle=b])`); None when there are none. The Prefect state's message says it
    (`flows.orchestrator.final_state`), the run's end in a sentence of its own (`unsendable_line`)."""
    stuck = [q for q in summary.queries if unsendable(q)]
    return _per_spec_query(summary, stuck, _cap_and_price) if stuck else None


def unsendable_line(summary: RunSummary) -> str | None:
    """The queries no run can fetch, their own `max_credits` below what one request costs (`harvest validate`
    refuses that against the cost table; here the service charged more than it says), and what to change."""
    named, count = unsendable_named(summary), sum(unsendable(q) for q in summary.queries)
    if named is None:
        return None
    many = count != 1
    if all("budget" in q["cap_below_price"] for q in summary.queries if unsendable(q)):
        return (
            f"{counted(count, 'query')} could not send a request, one costing more than the run's whole "
            f"budget: {named}. No run with this budget fetches {'them' if many else 'it'}, `--continue` "
            "neither: raise the budget (`--budget`, `budget.credits`) to at least a request's price"
        )
    return (
        f"{counted(count, 'query')} could not send a request, {'their' if many else 'its'} "
        f"max_credits below what one request costs: {named}. No run "
        f"fetches {'them' if many else 'it'}, neither `--continue` nor a larger budget: raise max_credits to at "
        "least a request's price (and set `costs:` to what the service charges, when it charged more than the "
        "cost table says)"
    )
