"""One round of a query on a Dask worker: pay for at most the credits the flow granted, land, report back.

Nothing here relies on the flow's process: the task gets plain data (the run, the query, where paging stands, the
grant), opens its own client with a ledger capped at the grant, writes raw pages, attempt logs and Parquet under
the run's output directory (a path every worker reaches) or, with `runner.staging`, to the staging store (each
page before it is read; the files when the round ends: `RoundStage`), and returns its summary, where paging
stands now, and the values its records hold for dependent queries. The API key is read on the worker (its environment or the
Prefect Secret block the spec names), never passed: task parameters are stored by Prefect.

Each round claims its name before it pays anything, in the staging store or, on a shared disk, in the run's
directory (`claim_shared`): Dask runs a task again when the worker holding its result dies (finished or not), and
that attempt must pay nothing, since the first may have paid anything up to the grant. It returns `{"rerun":
True}`; the flow lands what the first attempt stored (its raw pages are where the flow reads them, or staged)
and grants the query again from its last page.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any, TypedDict

from prefect import task
from prefect.cache_policies import NO_CACHE

from harvest.connectors.catalog.endpoints import Endpoint
from harvest.connectors.catalog.job_catalog import for_job
from harvest.connectors.catalog.shape_overrides import shapes_of
from harvest.connectors.credits.ledger import CreditLedger
from harvest.connectors.http.auth import aload_api_key
from harvest.connectors.paging.follow_ups import FollowUps
from harvest.connectors.paging.known_items import KnownKeys
from harvest.connectors.paging.page_request import Tried
from harvest.connectors.paging.pager import PagerStart, QuerySpec
from harvest.connectors.reading.extraction import ExtractionReport
from harvest.tasks.landing import page_query, task_end
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.machine_fault import FaultStop, MachineFault, as_machine_fault
from harvest.tasks.output.staging import FILES, STARTED, StagedPages, open_staging, plain_frames
from harvest.tasks.run_context import AttemptLogs, ClientSettings, RunContext, service_client
from harvest.tasks.staged_known import read_known


def state_to_plain(state: PagerStart, pages: int, records: int, extraction: dict[str, Any]) -> dict[str, Any]:
    return {
        "cursor": state.cursor,
        "index": state.index,
        "pages": pages,
        "records": records,
        "used": [list(map(list, key)) for key in sorted(state.used)],
        "previous": state.previous.hex() if state.previous else None,
        "extraction": extraction,
        "backfilling": state.backfilling,
        "follow": state.follow.plain(),
        "follow_asked": state.follow.asked,
        "tried": state.tried.plain(),
        "sent": state.sent,
    }


def state_from_plain(plain: dict[str, Any] | None) -> PagerStart | None:
    if not plain:
        return None
    return PagerStart(
        cursor=plain["cursor"],
        index=plain["index"],
        pages=plain["pages"],
        records=plain["records"],
        used={tuple(tuple(pair) for pair in key) for key in plain["used"]},
        previous=bytes.fromhex(plain["previous"]) if plain["previous"] else None,
        extraction=ExtractionReport.from_dict(plain["extraction"]),
        backfilling=bool(plain.get("backfilling")),
        follow=FollowUps.from_plain(plain.get("follow"), plain.get("follow_asked", 0)),
        tried=Tried.from_plain(plain.get("tried")),
        sent=plain.get("sent", 0),
    )


def values_hook(wanted: list[list[str]], params: dict[str, Any], endpoint: Endpoint) -> Any:
    """A page hook collecting the values of the (table, field) pairs dependent queries start from."""
    found: dict[str, list[Any]] = {f"{t}.{f}": [] for t, f in wanted}
    readers = []
    for table, fld in wanted:
        read = endpoint.field_reader(table, fld, params)
        if read is not None:
            readers.append((table, f"{table}.{fld}", read))

    def hook(spec: QuerySpec, records: Any, kept: int, credits: int, replayed: bool, pages: int) -> None:
        for table, key, read in readers:
            found[key].extend(v for v in map(read, records.get(table, [])) if v not in (None, ""))

    return found, hook


class RoundStage:
    """A round on a worker that cannot reach the output directory: pages go to the staging store one by one,
    Parquet and the attempt log to a scratch directory, shipped to the store when the round ends with their
    checksums (the flow verifies them before they enter the output directory)."""

    def __init__(self, run: dict[str, Any], stage: str, query_id: str) -> None:
        self.store = open_staging(run["staging"])
        self.run_key = self.store.run_prefix(run["job"], run["run_id"])
        self.key = f"{self.run_key}/{stage}"
        self.scratch = Path(tempfile.mkdtemp(prefix="harvest-round-"))
        self.layout = OutputLayout(self.scratch)
        self.pages = StagedPages(self.store, self.key, self.layout.raw_file(run["run_id"], query_id))

    def claim(self) -> bool:
        """False when an attempt of this round started before (Dask runs a task again when its worker died):
        that attempt may have paid anything up to the grant, so this one pays nothing; the flow commits what it
        staged and grants the query again."""
        marker = f"{self.key}/{STARTED}"
        if self.store.exists(marker):
            return False
        self.store.put(marker, b"")
        return True

    def ship(self, files: list[Any], requests: Path) -> list[dict[str, Any]]:
        shipped = [{**self._upload(rel), "table": table, "rows": rows} for table, rel, rows in files]
        if requests.exists():
            shipped.append(self._upload(self.layout.relative(requests)))
        return shipped

    def _upload(self, rel: str) -> dict[str, Any]:
        data = (self.scratch / rel).read_bytes()
        self.store.put(f"{self.key}/{FILES}/{rel}", data)
        return {"path": rel, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}

    def close(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)


def claim_shared(layout: OutputLayout, run_id: str, stage: str) -> bool:
    """The round's claim on a shared disk, as `RoundStage.claim` is in the store: an empty file made with O_EXCL
    (one attempt wins, on every worker that shares the disk), kept until the run's end. Raises `MachineFault` when
    this machine cannot make it (a full disk): nothing was paid."""
    claims = layout.round_claims(run_id)
    try:
        claims.mkdir(parents=True, exist_ok=True)
        os.close(os.open(claims / stage, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        return False
    except OSError as exc:
        fault = as_machine_fault(exc, claims / stage)
        if fault is None:
            raise
        raise fault from None
    return True


_PAYING: Counter[str] = Counter()
"""Rounds paying now in this worker process, per run id: a resume on a cluster the killed flow shared waits
until none of its run's are left (`flows.run.dask.killed_rounds`) before it reads the account's balance."""
_PAYING_LOCK = threading.Lock()


def rounds_paying(run_id: str) -> int:
    """Run on every worker by a resume (`Client.run`): how many rounds of `run_id` this worker is in."""
    with _PAYING_LOCK:
        return _PAYING[run_id]


def _paying(run_id: str, change: int) -> None:
    with _PAYING_LOCK:
        _PAYING[run_id] += change
        if _PAYING[run_id] <= 0:
            del _PAYING[run_id]


@task(
    name="collect_round",
    task_run_name="{query[query_id]} round {round_no}",
    retries=0,
    cache_policy=NO_CACHE,
    log_prints=False,
)
async def collect_round(
    run: dict[str, Any],
    query: dict[str, Any],
    state: dict[str, Any] | None,
    grant: int,
    part: int,
    round_no: int,
    wanted: list[list[str]],
    stage: str | None = None,
    known: dict[str, Any] | None = None,
) -> Any:
    """`stage`: the round's name, claimed before anything is paid: in the staging store (`runner.staging`), or in
    the run's directory on the shared disk. `known`: where the flow staged the query's known keys
    (`tasks.staged_known`), read before anything is paid."""
    spec = QuerySpec(**query)
    staged: RoundStage | None = None
    keys = None
    run_id = str(run["run_id"])
    _paying(run_id, 1)
    try:
        if stage is not None and not run.get("staging"):
            try:
                if not claim_shared(OutputLayout(Path(run["output"])), run["run_id"], stage):
                    return {"rerun": True}
            except MachineFault as fault:  # nothing was paid: the flow gives the grant back and stops the run
                return {"stop": fault_plain(fault), "spent": 0, "unpaid": True}
        elif stage is not None:
            try:  # a worker that cannot reach the store (no credentials) pays nothing either
                staged = RoundStage(run, stage, spec.query_id)
                if not staged.claim():
                    return {"rerun": True}
                keys = read_known(staged.store, staged.run_key, known) if known else None
            except MachineFault as fault:  # nothing was paid: the flow stops the run, resumable
                return {"stop": fault_plain(fault), "spent": 0, "unstaged": []}
        result = await _pay(run, spec, state, grant, part, wanted, staged, keys)
    finally:
        _paying(run_id, -1)
        if staged is not None:
            staged.close()
    return task_end(result["summary"], result)


async def _pay(
    run: dict[str, Any],
    spec: QuerySpec,
    state: dict[str, Any] | None,
    grant: int,
    part: int,
    wanted: list[list[str]],
    staged: RoundStage | None,
    known: KnownKeys | None = None,
) -> dict[str, Any]:
    # No key here raises `MissingApiKey` before anything is sent: the flow gives the grant back and stops the run.
    key = await aload_api_key(
        env_var=run["api_key_env"], secret_block=run["api_key_secret"], places=run.get("key_places")
    )
    ledger = CreditLedger(  # the floor holds here too, and the prices the flow's ledger learned (said there)
        grant,
        run.get("min_balance"),
        policy="greedy",
        prices=run.get("prices"),
        warn_prices=False,
        whole_run=False,
    )
    faults = FaultStop(ledger)  # a full disk stops the round like the run: said once, by the flow
    attempts = AttemptLogs(fsync=run["fsync"], faults=faults)
    client = service_client(run["base_url"], key, ledger, attempts, ClientSettings(**run["client"]))
    client.key_accepted = True  # the flow proved the key before granting anything
    layout = staged.layout if staged is not None else OutputLayout(Path(run["output"]))
    async with client:
        ctx = RunContext(
            run["run_id"], datetime.fromisoformat(run["started"]), layout,
            for_job(run.get("declared")).overridden(run["costs"], shapes_of(run.get("shapes"))), client, ledger,
            attempts,
            incremental=run["incremental"], faults=faults,
            raw=staged.pages if staged is not None else None,  # type: ignore[arg-type]
            known=known,
        )  # fmt: skip
        found, ctx.on_records = values_hook(wanted, spec.params, ctx.endpoints[spec.endpoint])
        paged = await page_query(ctx, spec, part, state_from_plain(state))
    summary = paged.summary
    result = {
        "summary": summary.as_dict(),
        "state": state_to_plain(paged.state, summary.pages, summary.records, summary.extraction),
        "spent": ledger.spent,
        "refused": ledger.refused_of(spec.query_id),  # of `spent`: refusals whose charge no answer named
        "lost": ledger.lost,  # of `spent` too: requests no status came back for (a dropped connection)
        "balance": ledger.account_remaining,  # the last balance the service reported, for the flow's floor
        "refusal": (r.reason if (r := ledger.refusal(spec.query_id)) else None),
        "found": found,
        "stop": fault_plain(ctx.faults.fault) if ctx.faults.fault is not None else None,
        "prices": ledger.answered_prices(),  # the flow's ledger learns, journals and grants by them
        "idle": client.pace.idle(),  # the flow's clock of the run's last accepted answer (`ClientSettings`)
        "stopped": stop.reason if (stop := ledger.stopped) is not None and stop.kind == "stopped" else None,
    }
    if staged is not None:
        _shipped(result, staged, ctx)
    return result


def _shipped(result: dict[str, Any], staged: RoundStage, ctx: RunContext) -> None:
    """The round's files in the store, and what the flow needs to verify and commit them."""
    stop = ctx.faults.fault
    files: list[dict[str, Any]] | None = None
    if stop is None:
        try:
            files = staged.ship(result["summary"]["files"], ctx.requests_path(result["summary"]["query_id"]))
        except MachineFault as fault:  # the pages are staged: the flow lands them again from there
            stop = fault
    result["staged"] = {"pages": staged.pages.staged, "files": files}
    result["unstaged"] = plain_frames(staged.pages.unstaged)
    result["stop"] = fault_plain(stop) if stop is not None else None


def fault_plain(fault: MachineFault) -> list[Any]:
    """A stop as plain data: the flow raises the same fault (`MachineFault(*plain)`), exit 75, resumable."""
    return [fault.path, fault.cause, fault.code]


class Unnamed(TypedDict):
    refused: int
    lost: int


def unnamed(result: dict[str, Any]) -> Unnamed:
    """Of a round's `spent`, what no answer named as a charge, as `CreditLedger.settle` takes it: its refusals
    (given back once the balance shows them unbilled) and its requests no status came back for (counted, as a
    local lost answer is). Neither is a charge the session was surely billed, so a killed session's fall is
    checked against the charges its answers named (`flows.run.bill`)."""
    return {"refused": result.get("refused", 0), "lost": result.get("lost", 0)}
