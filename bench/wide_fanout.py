"""The wide fan-out contender: one harvest query over N handles, each handle one page, against a plain script.

For each N the sandbox (its own process, no quirks, pages cached) serves every handle one page of up to 100
records; a first crawl builds and caches all N pages so neither contender pays for building them. Then, once
each:
- harvest: `harvest run` of one query with `for_each: {handle: [N handles]}` and `concurrency: 10`, against
  the running Prefect server the bench started;
- `bench/plain_fanout.py`: 10 worker coroutines on one queue of handles, one shared httpx client;
- the same script run as one Prefect flow on the same server (`--prefect-flow`): the floor any tool pays that
  runs its work as a Prefect flow, so that what harvest costs on top of Prefect can be told from Prefect's own.
Recorded per contender: wall, CPU and peak RSS (`measure.run_measured`), records landed, the files left behind
(harvest: under `parquet/` and under `raw/<run_id>/`, separately; the script: its Parquet files), and, as the
processes the contender's run drove, the CPU seconds of the sandbox and (harvest) of the Prefect server. A
harvest run that fails or times out is recorded (exit code, run status, the queries' statuses and errors), not
raised: it is what the contender is here to find.

    python bench/run.py --fanout-only [--sizes 2000,10000]    # writes bench/results/fanout.json
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil
from measure import Measured, run_measured
from run import (
    HARVEST,
    KEY,
    PATH,
    PYTHON,
    ROOT,
    SANDBOX_PIDS,
    cpu_seconds,
    env_for,
    harvest_spec,
    records_in,
    sandbox,
    summary,
)

SIZES = (2_000, 10_000)
LATENCY_S = 0.05
"""A fast real service's time per page: 2,000 pages over 10 connections take the script ~10 s."""
QUICK_SIZES = (200, 500)
"""`--quick`: harvest took 23 s at 200 handles and 131 s at 2,000 on a loaded 2-core machine (50-65 ms a
handle); these keep the fan-out part of `--quick` near 2 minutes."""
WARM_UP = 20
"""Handles of a first run that is not recorded: the first flow run against a new Prefect server pays its
registration (~1.3 s more start: 3.5 s against 2.1 s after it, 2026-11-27), which a nightly job against a
running server paid once, long ago."""
WORKERS = 10
"""harvest's `concurrency` and the script's worker count."""
PAGE_SIZE = 100
TIMEOUT_S = 3_600
"""Per run: a harvest run that has not ended by then is killed and recorded as timed out."""


def fanout_handles(n: int) -> list[str]:
    return [f"fan{i:05d}" for i in range(n)]


def fanout_spec(work: Path, base_url: str, names: list[str], output: Path) -> Path:
    return harvest_spec(work, base_url, names, output, job="fanout", concurrency=WORKERS)


async def _warm(base_url: str, names: list[str]) -> None:
    """Every handle's page once, so the sandbox has built and cached them all before a contender asks."""
    queue: asyncio.Queue[str] = asyncio.Queue()
    for name in names:
        queue.put_nowait(name)
    limits = httpx.Limits(max_connections=WORKERS)
    async with httpx.AsyncClient(base_url=base_url, headers={"x-api-key": KEY}, limits=limits) as client:

        async def fetch() -> None:
            while not queue.empty():
                answer = await client.get(PATH, params={"handle": queue.get_nowait(), "sort_by": "latest"})
                answer.raise_for_status()

        await asyncio.gather(*(fetch() for _ in range(WORKERS)))


def _files(root: Path) -> int:
    return sum(1 for p in root.rglob("*") if p.is_file()) if root.is_dir() else 0


def _cpu(pid: int | None) -> float:
    """`run.cpu_seconds`, 0 for a process that is not there (any more)."""
    if pid is None:
        return 0.0
    try:
        return cpu_seconds(pid)
    except psutil.Error:
        return 0.0


def _prefect_server_pid() -> int | None:
    """The `prefect server start` this process started (`run.prefect_server`), to read its CPU time."""
    for child in psutil.Process().children(recursive=True):
        try:
            cmd = child.cmdline()
        except psutil.Error:
            continue
        if "server" in cmd and "start" in cmd and any(c.endswith("prefect") for c in cmd):
            return child.pid
    return None


def _timed_out(cmd: list[str], seconds: float) -> Measured:
    return Measured(seconds, 0.0, 0.0, -9, "", f"{Path(cmd[0]).name} timed out after {seconds:.0f} s")


def _measure(
    cmd: list[str], env: dict[str, str], others: dict[str, int | None]
) -> tuple[Measured, dict[str, float]]:
    """One run, and the CPU seconds the other processes it drove (`others`: label -> pid) spent meanwhile."""
    before = {label: _cpu(pid) for label, pid in others.items()}
    try:
        m = run_measured(cmd, env, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        m = _timed_out(cmd, TIMEOUT_S)
    return m, {f"{label}_cpu_s": round(_cpu(pid) - before[label], 2) for label, pid in others.items()}


def harvest_outcome(out: Path) -> dict[str, Any]:
    """What the run's manifest says: its status, how many queries ended in each status, the first failures."""
    manifests = sorted((out / "raw").glob("*/manifest.json"))
    if not manifests:
        return {"run_status": None, "query_statuses": {}, "failures": [], "all_complete": False}
    m = orjson.loads(manifests[-1].read_bytes())
    statuses = Counter(q["status"] for q in m["queries"])
    failures = [
        {"query_id": q["query_id"], "status": q["status"], "error": q.get("error")}
        for q in m["queries"]
        if q["status"] != "complete"
    ]
    return {
        "run_id": m["run_id"],
        "run_status": m["status"],
        "run_error": m.get("error"),
        "queries": len(m["queries"]),
        "query_statuses": dict(statuses),
        "all_complete": bool(m["queries"]) and set(statuses) == {"complete"},
        "failures": failures[:5],
        "manifest_records": sum(int(q.get("records") or 0) for q in m["queries"]),
        "loaded": m.get("loaded"),
    }


def _records(db: Path) -> int | None:
    try:
        return records_in(db) if db.exists() else None
    except Exception:  # a failed run's database may lack the table
        return None


def one_size(work: Path, home: Path, api_url: str, n: int, latency: float = 0.0) -> dict[str, Any]:
    names = fanout_handles(n)
    load = [round(x, 2) for x in os.getloadavg()]
    with sandbox(1, PAGE_SIZE, latency) as base:
        asyncio.run(_warm(base, names))
        others: dict[str, int | None] = {
            "sandbox": SANDBOX_PIDS[base],
            "prefect_server": _prefect_server_pid(),
        }

        out = work / f"fanout-harvest-{n}"
        shutil.rmtree(out, ignore_errors=True)
        spec = fanout_spec(work, base, names, out)
        m, drove = _measure([HARVEST, "run", str(spec)], env_for(home, api_url), others)
        outcome = harvest_outcome(out)
        records = _records(out / "harvest.duckdb")
        raw_dir = out / "raw" / outcome["run_id"] if outcome.get("run_id") else None
        harvest: dict[str, Any] = {
            **summary([m], records or 0),
            "returncode": m.returncode,
            "records": records,
            "parquet_files": _files(out / "parquet"),
            "raw_files": _files(raw_dir) if raw_dir else 0,
            **drove,
            **outcome,
        }
        if m.returncode != 0 or not outcome["all_complete"]:  # what it said but its N lines of `: complete, `
            said = [line for line in (m.stderr + m.stdout).splitlines() if ": complete, " not in line]
            harvest["output_tail"] = "\n".join(said)[-3000:]

        script = _script(work / f"fanout-plain-{n}", base, names, dict(os.environ), others["sandbox"])
        in_flow = _script(
            work / f"fanout-plain-flow-{n}", base, names, env_for(home, api_url), others["sandbox"], flow=True
        )
    script_records = script["records"]
    if m.returncode == 0 and outcome["all_complete"]:
        assert records == script_records, f"harvest landed {records} records, the script {script_records}"
    shutil.rmtree(out, ignore_errors=True)
    return {
        "handles": n,
        "latency_s": latency,
        "load_avg_before": load,
        "harvest": harvest,
        "script": script,
        "script_in_prefect_flow": in_flow,
        "records_match": records == script_records,
        "ratio_wall": round(harvest["wall_s"] / script["wall_s"], 2),
        "prefect_floor_ratio": round(in_flow["wall_s"] / script["wall_s"], 2),
    }


def _script(
    out: Path, base: str, names: list[str], env: dict[str, str], sandbox_pid: int | None, flow: bool = False
) -> dict[str, Any]:
    """The plain script over the same handles; `flow`: run as one Prefect flow on the bench's server, the floor
    any tool pays that runs its work as a Prefect flow (its import, the flow run's start and end)."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [PYTHON, str(ROOT / "bench" / "plain_fanout.py"), "--workers", str(WORKERS)]
    cmd += ["--prefect-flow"] if flow else []
    s, drove = _measure([*cmd, base, KEY, str(out), *names], env, {"sandbox": sandbox_pid})
    if s.returncode != 0:
        raise RuntimeError(f"the plain fan-out script failed ({s.returncode}):\n{s.stderr[-2000:]}")
    records = records_in(out / "plain.duckdb")
    result = {
        **summary([s], records),
        "returncode": s.returncode,
        "records": records,
        "parquet_files": len(list(out.glob("*.parquet"))),
        **drove,
    }
    shutil.rmtree(out, ignore_errors=True)
    return result


def wide_fanout(work: Path, home: Path, api_url: str, sizes: tuple[int, ...]) -> dict[str, Any]:
    """`details["wide_fanout"]`: {"2000": {"harvest": {...}, "script": {...}, "ratio_wall": ...}, ...,
    "2000+50ms": {...}} (the smallest N again with `LATENCY_S` per page)."""
    one_size(work, home, api_url, WARM_UP)  # not recorded: see WARM_UP
    runs = {str(n): one_size(work, home, api_url, n) for n in sizes}
    n = min(sizes)
    runs[f"{n}+{LATENCY_S * 1000:.0f}ms"] = one_size(work, home, api_url, n, LATENCY_S)
    return runs


def headline(wide: dict[str, Any]) -> dict[str, Any]:
    """Top-level keys: `fanout_ratio_<N>` for every N (`fanout_ratio_2000+50ms` with latency); harvest's peak
    RSS and files (Parquet and raw together) at the largest N."""
    out: dict[str, Any] = {f"fanout_ratio_{n}": r["ratio_wall"] for n, r in wide.items()}
    out |= {
        f"fanout_prefect_floor_{n}": r["prefect_floor_ratio"]
        for n, r in wide.items()
        if "prefect_floor_ratio" in r
    }
    if wide:
        n = max(wide, key=lambda k: (wide[k]["handles"], -wide[k].get("latency_s", 0)))
        h = wide[n]["harvest"]
        out[f"fanout_rss_mb_{n}"] = h["rss_mb"]
        out[f"fanout_files_{n}"] = h["parquet_files"] + h["raw_files"]
    return out


def print_fanout(wide: dict[str, Any]) -> None:
    head = ("N", "contender", "wall s", "cpu s", "peak RSS MB", "parquet files", "raw files", "ratio")
    rows = [head]
    for n, r in wide.items():
        for name in ("harvest", "script", "script_in_prefect_flow"):
            m = r.get(name)
            if m is None:  # results written before the contender existed
                continue
            ratios = {
                "harvest": f"{r['ratio_wall']}x",
                "script_in_prefect_flow": f"{r.get('prefect_floor_ratio')}x",
            }
            ratio = ratios.get(name, "")
            raw = str(m.get("raw_files", "")) if name == "harvest" else ""
            row = (
                n,
                name.replace("_", " "),
                f"{m['wall_s']}",
                f"{m['cpu_s']}",
                f"{m['rss_mb']}",
                str(m["parquet_files"]),
                raw,
                ratio,
            )
            rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    print(
        "\nwide fan-out: one query over N handles, one page each (+ms: the service's time per page; "
        "ratio: wall / the script's wall; the script in a Prefect flow: the floor of any tool run as a Prefect flow)"
    )
    for row in rows:
        print(
            "  ".join(
                c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    for n, r in wide.items():
        h = r["harvest"]
        if h["returncode"] != 0 or not h["all_complete"]:
            landed = (
                ""
                if r["records_match"]
                else f", {h['records']} records vs the script's {r['script']['records']}"
            )
            print(
                f"  N={n}: harvest exited {h['returncode']}, run {h['run_status']}, "
                f"queries {h['query_statuses']}{landed}"
            )
            for f in h["failures"]:
                print(f"    {f['query_id']}: {f['status']}: {f['error']}")
