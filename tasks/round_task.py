"""One round of a query on a Dask worker: pay for at most the credits the flow granted, land, report back.

Nothing here relies on the flow's process: the task gets plain data (the run, the query, where paging stands, the
grant), opens its own client with a ledger capped at the grant, writes raw pages, attempt logs and Parquet under
the run's output directory (a path every worker reaches), and returns its summary, where paging stands now, and
the values its records hold for dependent queries. The API key is read on the worker (its environment or the
Prefect Secret block the spec names), never passed: task parameters are stored by Prefect.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from connectors.catalog import endpoints as catalog
from connectors.catalog.shape_overrides import shapes_of
from connectors.credits.ledger import CreditLedger
from connectors.http.auth import aload_api_key
from connectors.paging.pager import PagerStart, QuerySpec
from connectors.reading.extraction import ExtractionReport
from tasks.landing import page_query, task_end
from tasks.output.layout import OutputLayout
from tasks.run_context import AttemptLogs, ClientSettings, RunContext, service_client


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
    )


def _values(wanted: list[list[str]], params: dict[str, Any], endpoint_path: str) -> Any:
    """A page hook collecting the values of the (table, field) pairs dependent queries start from."""
    endpoint = catalog.get(endpoint_path)
    found: dict[str, list[Any]] = {f"{t}.{f}": [] for t, f in wanted}
    readers = []
    for table, fld in wanted:
        read = endpoint.field_reader(table, fld, params)
        if read is not None:
            readers.append((table, f"{table}.{fld}", read))

    def hook(spec: QuerySpec, records: Any, kept: int, credits: int, replayed: bool) -> None:
        for table, key, read in readers:
            found[key].extend(v for v in map(read, records.get(table, [])) if v not in (None, ""))

    return found, hook


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
) -> Any:
    spec = QuerySpec(**query)
    key = await aload_api_key(env_var=run["api_key_env"], secret_block=run["api_key_secret"])
    ledger = CreditLedger(grant, run.get("min_balance"), policy="greedy")  # the floor holds here too
    attempts = AttemptLogs(fsync=run["fsync"])
    client = service_client(run["base_url"], key, ledger, attempts, ClientSettings(**run["client"]))
    client.key_accepted = True  # the flow proved the key before granting anything
    async with client:
        ctx = RunContext(
            run["run_id"], datetime.fromisoformat(run["started"]), OutputLayout(Path(run["output"])),
            catalog.endpoints(run["costs"], shapes_of(run.get("shapes"))), client, ledger, attempts,
            incremental=run["incremental"],
        )  # fmt: skip
        found, ctx.on_records = _values(wanted, spec.params, spec.endpoint)
        paged = await page_query(ctx, spec, part, state_from_plain(state))
    summary = paged.summary
    result = {
        "summary": summary.as_dict(),
        "state": state_to_plain(paged.state, summary.pages, summary.records, summary.extraction),
        "spent": ledger.spent,
        "balance": ledger.account_remaining,  # the last balance the service reported, for the flow's floor
        "refusal": (r.reason if (r := ledger.refusal(spec.query_id)) else None),
        "found": found,
    }
    return task_end(result["summary"], result)
