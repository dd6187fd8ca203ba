"""The baseline for a wide fan-out: `plain_script.py` with a fixed pool of workers, not a task per handle.

10 worker coroutines pull handles from one queue and share one httpx client (10 connections); each page goes
through the same parsing and Arrow columns as `plain_script.py`. Each worker streams its own Parquet file in
10k-row groups (one file per worker, not per handle: thousands of one-page handles would otherwise make
thousands of tiny files), then one DuckDB table deduplicated on the key. Prints the same last line as
`plain_script.py`.

`--prefect-flow`: the same script run as one Prefect flow (Prefect imported, a flow run created and ended on
the configured server, nothing else of Prefect used): what any tool that runs its work as a Prefect flow pays
before doing anything of its own, so that harvest's own cost can be told from Prefect's.

    python bench/plain_fanout.py [--workers 10] [--prefect-flow] BASE_URL API_KEY OUTPUT HANDLE [HANDLE ...]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from plain_script import GROUP_ROWS, SCHEMA, load_duckdb, page_tables

PHASES: dict[str, float] = {}


async def worker(n: int, client: httpx.AsyncClient, queue: asyncio.Queue[str], out: Path) -> int:
    writer = pq.ParquetWriter(out / f"worker-{n:02d}.parquet", SCHEMA, compression="zstd")
    buffered: list[pa.Table] = []
    held = rows = 0
    try:
        while True:
            try:
                handle = queue.get_nowait()
            except asyncio.QueueEmpty:
                break
            async for table in page_tables(client, handle):
                buffered.append(table)
                held += table.num_rows
                rows += table.num_rows
                if held >= GROUP_ROWS:
                    writer.write_table(pa.concat_tables(buffered))
                    buffered, held = [], 0
        if buffered:
            writer.write_table(pa.concat_tables(buffered))
    finally:
        writer.close()
    return rows


async def main(base_url: str, key: str, out: Path, handles: list[str], workers: int) -> int:
    out.mkdir(parents=True, exist_ok=True)
    paging = time.monotonic()
    queue: asyncio.Queue[str] = asyncio.Queue()
    for handle in handles:
        queue.put_nowait(handle)
    limits = httpx.Limits(max_connections=workers, max_keepalive_connections=workers)
    async with httpx.AsyncClient(
        base_url=base_url, headers={"x-api-key": key}, limits=limits, timeout=60
    ) as c:
        counts = await asyncio.gather(*(worker(n, c, queue, out) for n in range(workers)))
    loading = time.monotonic()
    PHASES["paging_s"] = loading - paging
    load_duckdb(out)
    PHASES["loading_s"] = time.monotonic() - loading
    return sum(counts)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=10)
    parser.add_argument("--prefect-flow", action="store_true")
    parser.add_argument("base_url")
    parser.add_argument("key")
    parser.add_argument("output", type=Path)
    parser.add_argument("handles", nargs="+")
    args = parser.parse_args()
    gc.freeze()  # parsed pages are short-lived: the cyclic GC would only walk them
    started = datetime.now(UTC)
    fanout = main(args.base_url, args.key, args.output, args.handles, args.workers)
    if args.prefect_flow:
        from prefect import flow

        @flow(name="plain-fanout", persist_result=False)
        async def in_a_flow() -> int:
            return await fanout

        total = asyncio.run(in_a_flow())
    else:
        total = asyncio.run(fanout)
    seconds = (datetime.now(UTC) - started).total_seconds()
    print(orjson.dumps({"records": total, "seconds": seconds, **PHASES}).decode())
