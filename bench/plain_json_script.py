"""The plainest baseline: asyncio + httpx + the standard library's json, rows as dicts, `pa.Table.from_pylist`.

What most scripts against a paged JSON API look like: one task per query over one httpx client, each answer
decoded with `json` (httpx's `response.json()`), its records flattened into dicts, a query's rows turned into
Arrow with `pa.Table.from_pylist` (the columns harvest's endpoint declares, `bench/video_table.py`) and written to one Parquet file per query, then one DuckDB table deduplicated
on the key (`plain_script.load_duckdb`). Same columns and the same table as `plain_script.py`, which does the
same work with orjson, columns built straight from the parsed lists, Parquet streamed in row groups and the
garbage collector frozen. No raw store, no retries, no budget, no bookkeeping.

    python bench/plain_json_script.py BASE_URL API_KEY OUTPUT HANDLE [HANDLE ...]
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
from plain_script import PATH, load_duckdb
from video_table import SCHEMA, row


async def crawl(client: httpx.AsyncClient, handle: str, out: Path) -> int:
    """Every page of one handle, its rows kept as dicts until the query ends, then one Parquet file."""
    rows: list[dict[str, Any]] = []
    params: dict[str, str] = {"handle": handle, "sort_by": "latest"}
    while True:
        response = await client.get(PATH, params=params)
        response.raise_for_status()
        body = json.loads(response.text)
        rows.extend(row(item, handle, json.dumps) for item in body["aweme_list"])
        if not body.get("has_more") or not body.get("max_cursor"):
            break
        params = {**params, "max_cursor": str(body["max_cursor"])}
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), out / f"{handle}.parquet", compression="zstd")
    return len(rows)


PHASES: dict[str, float] = {}


async def main(base_url: str, key: str, out: Path, handles: list[str]) -> int:
    out.mkdir(parents=True, exist_ok=True)
    paging = time.monotonic()
    limits = httpx.Limits(max_connections=len(handles), max_keepalive_connections=len(handles))
    async with httpx.AsyncClient(
        base_url=base_url, headers={"x-api-key": key}, limits=limits, timeout=60
    ) as client:
        counts = await asyncio.gather(*(crawl(client, h, out) for h in handles))
    loading = time.monotonic()
    PHASES["paging_s"] = loading - paging
    load_duckdb(out)
    PHASES["loading_s"] = time.monotonic() - loading
    return sum(counts)


if __name__ == "__main__":
    started = datetime.now(UTC)
    total = asyncio.run(main(sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4:]))
    seconds = (datetime.now(UTC) - started).total_seconds()
    print(json.dumps({"records": total, "seconds": seconds, **PHASES}))
