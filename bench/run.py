"""`make bench`: harvest against a plain script and dlt on the same job, measured in one invocation.

The sandbox serves the job from its own process (no faults, no quirks): 10 short-video profiles x 200 pages x
100 records (200,000 records, ~106 MB of JSON). Each contender runs three times; the median counts:
- harvest end to end against a running Prefect server (`prefect server start`, started here), and against
  Prefect's temporary server;
- `bench/plain_script.py`, the fast script a careful engineer writes in an afternoon (orjson, Arrow columns);
- `bench/plain_json_script.py`, the plainest one (the standard library's json, rows as dicts);
- dlt's `rest_api` source into DuckDB with parquet loader files (`bench/dlt_pipeline.py`).
Then a scale series (harvest at 1x, 4x and 16x the pages of a smaller job, for memory), the fixed cost of a
one-page job, the sandbox's own capacity, a wide fan-out (one query over thousands of one-page handles
against a plain script's 10 workers, `bench/wide_fanout.py`), a blip of 429s against the quiet job
(`bench/blip.py`), one ~100 MB answer's peak RSS (`bench/answer_memory.py`) and where the main job's seconds
after its last page go (`bench/load_end.py`). Prints tables, then the figures the bench is judged by side by
side (`bench/summary.py`), and writes `bench/results/latest.json`.

    python bench/run.py [--quick]      # --quick: a small job, one repetition (checks the harness itself)
    python bench/run.py --fixed-only [--times N] [--variant LABEL:NAME=VALUE,...]
                                       # the one-page job alone, each repetition interleaved across contenders
    python bench/run.py --fanout-only [--sizes 2000,10000]
                                       # the wide fan-out alone: bench/results/fanout.json
    python bench/run.py --lakehouse-only [--rows 1000000]
    python bench/run.py --lanes-only [--times 3]
                                       # the client's lanes against one httpx client (bench/http_lanes.py)
                                       # the Delta/Iceberg export against the Parquet one (bench/lakehouse_export.py)
    python bench/run.py --end-to-end-only [--times 3]
                                       # the main job alone, harvest and both scripts interleaved round by round:
                                       # the end-to-end ratios and the RSS at 200k records (bench/results/end_to_end.json)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpcore
import httpx
import orjson
import psutil
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import Measured, run_measured
from summary import print_summary

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
HARVEST = str(BIN / "harvest")
PYTHON = sys.executable
KEY = "bench-key-0123456789abcdef"
PATH = "/v3/short-video/profile/videos"
RESULTS = ROOT / "bench" / "results"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


@contextmanager
def sandbox(pages: int, page_size: int = 100, latency: float = 0.0):  # type: ignore[no-untyped-def]
    port = free_port()
    cmd = [HARVEST, "sandbox", "--port", str(port), "--api-key", KEY, "--credits", str(10**12)]
    cmd += ["--pages", str(pages), str(pages), "--page-size", str(page_size), "--no-quirks", "--cache-pages"]
    cmd += ["--latency", str(latency)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    SANDBOX_PIDS[base] = proc.pid
    try:
        wait_http(f"{base}/v1/credit-balance")
        yield base
    finally:
        SANDBOX_PIDS.pop(base, None)
        proc.terminate()
        proc.wait(timeout=10)


SANDBOX_PIDS: dict[str, int] = {}
"""The sandbox process serving each base URL: its CPU time is what `sandbox_capacity` reads."""


@contextmanager
def prefect_server(home: Path):  # type: ignore[no-untyped-def]
    port = free_port()
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    cmd = [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{port}/api/health")
        yield f"http://127.0.0.1:{port}/api"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def handles(n: int) -> list[str]:
    return [f"maker{i:02d}" for i in range(n)]


def harvest_spec(
    work: Path,
    base_url: str,
    names: list[str],
    output: Path,
    job: str = "bench",
    concurrency: int | None = None,
) -> Path:
    """One query fanned out over `names` (`concurrency`: one connection per name unless given)."""
    spec = {
        "name": job,
        "service": {"base_url": base_url},
        "budget": {"credits": 10**9},
        "concurrency": concurrency or len(names),
        "output": str(output),
        "queries": [
            {"id": "videos", "endpoint": PATH, "params": {"sort_by": "latest"}, "for_each": {"handle": names}}
        ],
    }
    path = work / f"{job}-{len(names)}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def one_page_spec(work: Path, base_url: str, output: Path) -> Path:
    spec = {
        "name": "one-page",
        "service": {"base_url": base_url},
        "budget": {"credits": 10},
        "output": str(output),
        "queries": [{"id": "embed", "endpoint": "/v1/photo-app/user/embed", "params": {"handle": "nasa"}}],
    }
    path = work / "one-page.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def env_for(home: Path, api_url: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "HARVEST_"))}
    env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false", HARVEST_API_KEY=KEY)
    if api_url:
        env["PREFECT_API_URL"] = api_url
    return env


def repeat(times: int, once: Callable[[int], Measured]) -> list[Measured]:
    runs = []
    for n in range(times):
        m = once(n)
        if m.returncode != 0:
            raise RuntimeError(
                f"a benchmark run failed ({m.returncode}):\n{m.stdout[-2000:]}\n{m.stderr[-2000:]}"
            )
        runs.append(m)
    return runs


def summary(runs: list[Measured], records: int) -> dict[str, Any]:
    wall = statistics.median(m.wall_s for m in runs)
    out: dict[str, Any] = {
        "wall_s": round(wall, 2),
        "cpu_s": round(statistics.median(m.cpu_s for m in runs), 2),
        "rss_mb": round(max(m.peak_rss_mb for m in runs), 1),
        "rps": round(records / wall) if records else 0,
    }
    split = [p for p in (phases(m) for m in runs) if p is not None]
    if split:
        out["phases_s"] = {k: round(statistics.median(p[k] for p in split), 2) for k in split[0]}
    return out


TOOK = re.compile(r"took [\d.]+ s: ([\d.]+) s paging, ([\d.]+) s loading")


def phases(m: Measured) -> dict[str, float] | None:
    """Where one run's wall time went (paging, loading, the rest), from what harvest or the script printed."""
    if found := TOOK.search(m.stdout):
        paging, loading = map(float, found.groups())
    else:
        try:
            said = json.loads(m.stdout.strip().splitlines()[-1])
            paging, loading = said["paging_s"], said["loading_s"]
        except (ValueError, KeyError, IndexError):
            return None
    return {"paging": paging, "loading": loading, "start_and_end": max(0.0, m.wall_s - paging - loading)}


def records_in(db: Path, table: str = "short_video_videos") -> int:
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        return int(con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0])
    finally:
        con.close()


async def _fetch_all(base_url: str, names: list[str]) -> int:
    """Every page of every handle, through httpcore (one connection per handle): the lightest client."""
    pages = 0

    async def crawl(handle: str) -> None:
        nonlocal pages
        async with httpcore.AsyncConnectionPool(max_connections=1) as pool:
            params = {"handle": handle, "sort_by": "latest"}
            while True:
                url = f"{base_url}{PATH}?{urlencode(params)}"
                answer = await pool.request("GET", url, headers={"x-api-key": KEY})
                body = orjson.loads(answer.content)
                pages += 1
                if not body.get("has_more"):
                    return
                params = {**params, "max_cursor": str(body["max_cursor"])}

    await asyncio.gather(*(crawl(h) for h in names))
    return pages


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (psutil, as `bench/measure.py` reads the contenders)."""
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def sandbox_capacity(base_url: str, names: list[str]) -> tuple[float, float]:
    """(pages per CPU-second of the sandbox, pages per second of wall time) while a client only fetches.

    The first is the capacity: what the sandbox serves with one core to itself, which is what harvest leaves it
    on two. A wall-clock rate measures the fetching client as much as the sandbox: on this machine the sandbox
    used 24-42% of a core while the client, even one without httpx's client layer, used all of the other.
    The first crawl builds every page (the sandbox caches them, like the runs after it will find them)."""
    asyncio.run(_fetch_all(base_url, names))
    pid = SANDBOX_PIDS[base_url]
    cpu, t0 = cpu_seconds(pid), time.perf_counter()
    pages = asyncio.run(_fetch_all(base_url, names))
    wall, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu
    return pages / max(cpu, 0.01), pages / wall


class Bench:
    def __init__(self, quick: bool) -> None:
        self.quick = quick
        self.times = 1 if quick else 3
        self.pages = 10 if quick else 200
        self.names = handles(10)
        self.work = Path(tempfile.mkdtemp(prefix="harvest-bench-"))
        self.server_home = self.work / "prefect-server-home"
        self.temp_home = self.work / "prefect-temporary-home"
        """Two Prefect homes: the running server and the temporary servers must not share one SQLite file."""
        self.results: dict[str, Any] = {}
        self.fixed_times = self.times
        self.variants: dict[str, dict[str, str]] = {}

    def harvest(self, spec: Path, output: Path, env: dict[str, str]) -> Callable[[int], Measured]:
        def once(n: int) -> Measured:
            shutil.rmtree(output, ignore_errors=True)
            return run_measured([HARVEST, "run", str(spec)], env)

        return once

    def main_job(self, api_url: str) -> None:
        with sandbox(self.pages) as base:
            first, first_wall = sandbox_capacity(base, self.names)  # the Prefect server may still be starting
            out = self.work / "harvest"
            spec = harvest_spec(self.work, base, self.names, out)
            server_runs = repeat(self.times, self.harvest(spec, out, env_for(self.server_home, api_url)))
            records = records_in(out / "harvest.duckdb")
            warm = one_page_spec(
                self.work, base, self.work / "warm"
            )  # the temporary server's database exists
            repeat(1, self.harvest(warm, self.work / "warm", env_for(self.temp_home, None)))
            temp_runs = repeat(self.times, self.harvest(spec, out, env_for(self.temp_home, None)))
            plain_out = self.work / "plain"
            plain = [PYTHON, str(ROOT / "bench" / "plain_script.py"), base, KEY, str(plain_out), *self.names]
            plain_runs = repeat(self.times, lambda n: self._fresh(plain_out, plain))
            assert records_in(plain_out / "plain.duckdb") == records, "the script and harvest landed the same"
            json_out = self.work / "plain-json"
            plainer = [PYTHON, str(ROOT / "bench" / "plain_json_script.py"), base, KEY, str(json_out)]
            json_runs = repeat(self.times, lambda n: self._fresh(json_out, [*plainer, *self.names]))
            assert records_in(json_out / "plain.duckdb") == records, "the json script landed as many"
            dlt_out = self.work / "dlt"
            dlt = [PYTHON, str(ROOT / "bench" / "dlt_pipeline.py"), base, KEY, str(dlt_out), *self.names]
            dlt_runs = repeat(self.times, lambda n: self._fresh(dlt_out, dlt))
            last, last_wall = sandbox_capacity(base, self.names)
        # The sandbox's capacity is what it serves when nothing else competes for its core: the lower (the more
        # cautious) of a crawl before the contenders and one after, in pages per CPU-second of the sandbox.
        self.results["sandbox_pps_measured"] = [round(first), round(last)]
        self.results["sandbox_pps_wall"] = [round(first_wall), round(last_wall)]
        self.results["sandbox_pps"] = round(min(first, last))
        self.results["records"] = records
        self.results["harvest_server"] = summary(server_runs, records)
        self.results["harvest_temporary"] = summary(temp_runs, records)
        self.results["script"] = summary(plain_runs, records)
        self.results["script_json"] = summary(json_runs, records)
        self.results["dlt"] = summary(dlt_runs, records)

    def _fresh(self, out: Path, cmd: list[str]) -> Measured:
        shutil.rmtree(out, ignore_errors=True)
        return run_measured(cmd, {**os.environ, "RUNTIME__DLTHUB_TELEMETRY": "false"})

    def scale(self, api_url: str) -> None:
        base_pages = 2 if self.quick else 20
        for factor in (1, 4, 16):
            with sandbox(base_pages * factor) as base:
                out = self.work / f"scale-{factor}"
                spec = harvest_spec(self.work, base, self.names, out)
                (m,) = repeat(1, self.harvest(spec, out, env_for(self.server_home, api_url)))
            self.results[f"scale_{factor}x"] = summary([m], records_in(out / "harvest.duckdb"))

    def fixed_cost(self, api_url: str) -> None:
        """A one-page job against the running server and against the temporary one, and the import baseline.

        Each repetition runs every contender once, in turn, so a load that comes and goes on a shared machine
        weighs on all of them alike; a first run of each creates its Prefect database and is not counted.
        `self.variants`: more temporary-server contenders, each with its own environment (`--variant`)."""
        with sandbox(1, 10) as base:
            out = self.work / "one-page"
            spec = one_page_spec(self.work, base, out)
            contenders: dict[str, Callable[[int], Measured]] = {
                "import": lambda n: run_measured([PYTHON, "-c", "import flows.collect"]),
                "server": self.harvest(spec, out, env_for(self.server_home, api_url)),
                "temporary": self.harvest(spec, out, env_for(self.temp_home, None)),
            }
            for label, extra in self.variants.items():  # "{api_url}" in a value: the running server's
                extra = {name: value.replace("{api_url}", api_url) for name, value in extra.items()}
                home = self.server_home if "PREFECT_API_URL" in extra else self.temp_home
                contenders[label] = self.harvest(spec, out, {**env_for(home, None), **extra})
            for label in ("server", "temporary"):
                repeat(1, contenders[label])
            walls: dict[str, list[float]] = {label: [] for label in contenders}
            for _ in range(self.fixed_times):
                for label, once in contenders.items():
                    walls[label] += [m.wall_s for m in repeat(1, once)]
        self.results["import_s"] = round(statistics.median(walls["import"]), 2)
        for label in ("server", "temporary"):
            self.results[f"fixed_s_{label}"] = round(statistics.median(walls[label]), 2)
        self.results["fixed_walls"] = {label: [round(w, 2) for w in ws] for label, ws in walls.items()}

    def run(self) -> dict[str, Any]:
        with prefect_server(self.server_home) as api_url:
            self.main_job(api_url)
            self.results["load_end"] = self.load_end()
            self.scale(api_url)
            self.fixed_cost(api_url)
            self.results["wide_fanout"] = self.fanout(api_url)
            self.blip_and_answer(api_url)
        self.results["lakehouse_export"] = self.lakehouse(None)
        from http_lanes import http_lanes

        self.results["http_lanes"] = http_lanes(self.times)
        return self.report()

    def load_end(self) -> dict[str, Any]:
        """Where the main job's seconds after its last page go, on its landed output (`bench/load_end.py`)."""
        from load_end import load_end

        return load_end(self.work / "harvest", self.times)

    def blip_and_answer(self, api_url: str) -> None:
        """A blip of 429s against the quiet job (`bench/blip.py`), and one ~100 MB answer's peak RSS against the
        one-record job's (`bench/answer_memory.py`), on the running server."""
        from answer_memory import compare
        from blip import blip_recovery

        env = env_for(self.server_home, api_url)
        self.results["blip"] = blip_recovery(self.work, env, self.times, 0.05)
        large = 2_000 if self.quick else 75_000  # ~1,400 bytes a record: ~100 MB
        self.results["large_answer"] = compare(self.work, env, [large], 1 if self.quick else 2)["rows"][-1]

    def lakehouse(self, rows: int | None) -> dict[str, Any]:
        from lakehouse_export import lakehouse_export

        return lakehouse_export(self.work, rows or (50_000 if self.quick else 1_000_000), dict(os.environ))

    def fanout(self, api_url: str, sizes: tuple[int, ...] | None = None) -> dict[str, Any]:
        from wide_fanout import QUICK_SIZES, SIZES, wide_fanout  # it imports this module's helpers

        return wide_fanout(
            self.work, self.server_home, api_url, sizes or (QUICK_SIZES if self.quick else SIZES)
        )

    def run_fanout_only(self, sizes: tuple[int, ...] | None) -> dict[str, Any]:
        from wide_fanout import headline

        with prefect_server(self.server_home) as api_url:
            wide = self.fanout(api_url, sizes)
        return {**headline(wide), "details": {"wide_fanout": wide}, **machine()}

    def run_end_to_end_only(self) -> dict[str, Any]:
        """The main job's end-to-end figures alone: harvest (running server), the json script and the orjson + Arrow
        script, interleaved round by round (a load that comes and goes weighs on each alike), after one unrecorded
        harvest run that fills the sandbox's page cache and the server's first registration."""
        with prefect_server(self.server_home) as api_url, sandbox(self.pages) as base:
            out = self.work / "harvest"
            spec = harvest_spec(self.work, base, self.names, out)
            json_out, plain_out = self.work / "plain-json", self.work / "plain"
            script = str(ROOT / "bench" / "plain_script.py")
            json_script = str(ROOT / "bench" / "plain_json_script.py")
            contenders: dict[str, Callable[[int], Measured]] = {
                "harvest_server": self.harvest(spec, out, env_for(self.server_home, api_url)),
                "script_json": lambda n: self._fresh(
                    json_out, [PYTHON, json_script, base, KEY, str(json_out), *self.names]
                ),
                "script": lambda n: self._fresh(
                    plain_out, [PYTHON, script, base, KEY, str(plain_out), *self.names]
                ),
            }
            repeat(1, contenders["harvest_server"])
            runs: dict[str, list[Measured]] = {label: [] for label in contenders}
            for _ in range(self.times):
                for label, once in contenders.items():
                    runs[label] += repeat(1, once)
            records = records_in(out / "harvest.duckdb")
            assert records_in(json_out / "plain.duckdb") == records_in(plain_out / "plain.duckdb") == records
        r = {label: summary(ms, records) for label, ms in runs.items()}
        return {
            "ratio_script_json": round(r["harvest_server"]["rps"] / r["script_json"]["rps"], 2),
            "ratio_script": round(r["harvest_server"]["rps"] / r["script"]["rps"], 2),
            "rss_mb_200k": r["harvest_server"]["rss_mb"],
            "details": {
                **r,
                "records": records,
                "walls": {k: [round(m.wall_s, 2) for m in ms] for k, ms in runs.items()},
            },
            **machine(),
        }

    def run_fixed_only(self) -> dict[str, Any]:
        with prefect_server(self.server_home) as api_url:
            self.fixed_cost(api_url)
        return self.results

    def report(self) -> dict[str, Any]:
        from wide_fanout import headline

        r = self.results
        harvest_rps = r["harvest_server"]["rps"]
        out = {
            "harvest_rps": harvest_rps,
            "harvest_temporary_rps": r["harvest_temporary"]["rps"],
            "script_rps": r["script"]["rps"],
            "script_json_rps": r["script_json"]["rps"],
            "dlt_rps": r["dlt"]["rps"],
            "ratio_script": round(harvest_rps / r["script"]["rps"], 2),
            "ratio_script_json": round(harvest_rps / r["script_json"]["rps"], 2),
            "blip_after_vs_quiet": r["blip"]["after_vs_quiet"],
            "blip_recovered_s": r["blip"]["recovered_s"],
            "large_answer_per_mb": r["large_answer"]["per_answer_mb"],
            "ratio_dlt": round(harvest_rps / r["dlt"]["rps"], 2),
            "rss_mb_1x": r["scale_1x"]["rss_mb"],
            "rss_mb_16x": r["scale_16x"]["rss_mb"],
            "rss_mb_200k": r["harvest_server"]["rss_mb"],
            "fixed_s_server": r["fixed_s_server"],
            "fixed_s_temporary": r["fixed_s_temporary"],
            "import_s": r["import_s"],
            "sandbox_pps": r["sandbox_pps"],
            "harvest_pps": round(harvest_rps / 100),
            **headline(r["wide_fanout"]),
            "details": r,
            **machine(),
            "quick": self.quick,
        }
        return out


def machine() -> dict[str, Any]:
    return {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "system": platform.platform(),
        },
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def print_table(res: dict[str, Any]) -> None:
    d = res["details"]
    rows = [("contender", "wall s", "cpu s", "peak RSS MB", "records/s")]
    names = ("harvest_server", "harvest_temporary", "script", "script_json", "dlt")
    for name in (*names, "scale_1x", "scale_4x", "scale_16x"):
        m = d[name]
        rows.append((name, f"{m['wall_s']}", f"{m['cpu_s']}", f"{m['rss_mb']}", f"{m['rps']}"))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for row in rows:
        print(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    print(
        f"\nharvest / script: {res['ratio_script']}x   harvest / json script: {res['ratio_script_json']}x   "
        f"harvest / dlt: {res['ratio_dlt']}x   "
        f"RSS 16x / 1x: {res['rss_mb_16x'] / res['rss_mb_1x']:.2f}\n"
        f"one-page job: {res['fixed_s_server']} s with a running server, {res['fixed_s_temporary']} s with the "
        f"temporary one; `import flows.collect`: {res['import_s']} s\n"
        f"sandbox alone: {res['sandbox_pps']} pages per CPU-second of its process "
        f"({res['details']['sandbox_pps_wall']} pages/s to a fetch-only client on the other core); "
        f"harvest consumed {res['harvest_pps']} pages/s "
        f"({res['sandbox_pps'] / max(1, res['harvest_pps']):.1f}x)"
    )
    print("\nwhere the wall time goes (s, median): start and end / paging / loading")
    for name in ("harvest_server", "harvest_temporary", "script", "script_json"):
        if split := d[name].get("phases_s"):
            print(f"  {name}: {split['start_and_end']} / {split['paging']} / {split['loading']}")
    if "load_end" in d:
        from load_end import print_load_end

        print_load_end(d["load_end"])
    if "blip" in d:
        from blip import print_blip

        print_blip(d["blip"])
    if big := d.get("large_answer"):
        print(
            f"one answer of {big['answer_mb']} MB: peak RSS {big['peak_rss_mb']:.0f} MB, "
            f"{big['above_one_record_mb']:.0f} MB above the one-record job ({big['per_answer_mb']}x the answer)"
        )
    if "wide_fanout" in d:
        from wide_fanout import print_fanout

        print_fanout(d["wide_fanout"])
    if "lakehouse_export" in d:
        from lakehouse_export import print_lakehouse

        print_lakehouse(d["lakehouse_export"])
    if "http_lanes" in d:
        from http_lanes import print_lanes

        print_lanes(d["http_lanes"])


def print_fixed(res: dict[str, Any]) -> None:
    base = res["import_s"]
    print(f"`import flows.collect`: {base} s (median)")
    for label, walls in res["fixed_walls"].items():
        if label == "import":
            continue
        med = statistics.median(walls)
        spread = f"  (runs: {', '.join(f'{w:.2f}' for w in walls)})" if len(walls) > 1 else ""
        print(f"one-page job, {label}: {med:.2f} s, {med / base:.2f}x the import{spread}")


def variant(text: str) -> tuple[str, dict[str, str]]:
    label, _, assignments = text.partition(":")
    return label, dict(a.split("=", 1) for a in assignments.split(",") if a)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a small job, one repetition")
    parser.add_argument(
        "--fixed-only", action="store_true", help="only the one-page job and its import baseline"
    )
    parser.add_argument("--times", type=int, help="repetitions of the one-page job (default: 3, --quick 1)")
    parser.add_argument(
        "--variant",
        action="append",
        type=variant,
        default=[],
        metavar="LABEL:NAME=VALUE,...",
        help="with --fixed-only: one more contender with these environment variables (temporary server unless "
        "PREFECT_API_URL={api_url}: the running one)",
    )
    parser.add_argument(
        "--fanout-only", action="store_true", help="only the wide fan-out (bench/wide_fanout.py)"
    )
    parser.add_argument(
        "--sizes",
        type=lambda text: tuple(int(n) for n in text.split(",")),
        help="with --fanout-only: the numbers of handles (default: 2000,10000; --quick 200,500)",
    )
    parser.add_argument(
        "--lakehouse-only",
        action="store_true",
        help="only the table-format export (bench/lakehouse_export.py)",
    )
    parser.add_argument("--rows", type=int, help="with --lakehouse-only: rows of the first export (1000000)")
    parser.add_argument(
        "--lanes-only", action="store_true", help="only the lanes against httpx (bench/http_lanes.py)"
    )
    parser.add_argument(
        "--end-to-end-only",
        action="store_true",
        help="only the main job: harvest against both plain scripts, interleaved (--times rounds, default 3)",
    )
    args = parser.parse_args()
    bench = Bench(args.quick)
    if args.lanes_only:
        from http_lanes import http_lanes, print_lanes

        try:
            lanes = {**http_lanes(args.times or bench.times), **machine()}
        finally:
            shutil.rmtree(bench.work, ignore_errors=True)
        print_lanes({k: v for k, v in lanes.items() if k in ("long_paging", "wide_fanout")})
        write(lanes, "lanes.json")
        return
    if args.lakehouse_only:
        from lakehouse_export import print_lakehouse

        try:
            lake = {**bench.lakehouse(args.rows), **machine()}
        finally:
            shutil.rmtree(bench.work, ignore_errors=True)
        print_lakehouse(lake)
        write(lake, "lakehouse.json")
        return
    bench.fixed_times = args.times or bench.times
    bench.variants = dict(args.variant)
    if args.fixed_only:
        try:
            fixed = bench.run_fixed_only()
        finally:
            shutil.rmtree(bench.work, ignore_errors=True)
        print_fixed(fixed)
        print_summary(fixed)
        return
    if args.end_to_end_only:
        bench.times = args.times or bench.times
        try:
            e2e = bench.run_end_to_end_only()
        finally:
            shutil.rmtree(bench.work, ignore_errors=True)
        print_end_to_end(e2e)
        print_summary(e2e)
        write(e2e, "end_to_end.json")
        return
    if args.fanout_only:
        try:
            res = bench.run_fanout_only(args.sizes)
        finally:
            shutil.rmtree(bench.work, ignore_errors=True)
        from wide_fanout import print_fanout

        print_fanout(res["details"]["wide_fanout"])
        write(res, "fanout.json")
        return
    try:
        res = bench.run()
    finally:
        shutil.rmtree(bench.work, ignore_errors=True)
    print_table(res)
    print_summary(res)
    write(res, "quick.json" if args.quick else "latest.json")


def print_end_to_end(res: dict[str, Any]) -> None:
    d = res["details"]
    print(
        f"{'contender':16s} {'wall s':>8s} {'cpu s':>8s} {'RSS MB':>8s}  walls; start and end / paging / loading"
    )
    for label in ("harvest_server", "script_json", "script"):
        m = d[label]
        split = (
            " / ".join(f"{m['phases_s'][k]}" for k in ("start_and_end", "paging", "loading"))
            if "phases_s" in m
            else ""
        )
        print(f"{label:16s} {m['wall_s']:8} {m['cpu_s']:8} {m['rss_mb']:8}  {d['walls'][label]}; {split}")


def write(res: dict[str, Any], name: str) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    target = RESULTS / name
    target.write_text(orjson.dumps(res, option=orjson.OPT_INDENT_2).decode() + "\n")
    print(f"\nwritten: {target.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
