"""What syncing costs a run (#36): every `os.fsync` of a real run, timed by the file it syncs and by where it ran
(the flow's event loop, which waits on it, or the journal's sync thread, which nothing waits on), beside the run's
wall time.

Two jobs against the sandbox (in this process, 50 ms a page, `concurrency: 10`), each run in the flow as
`harvest run` runs it, in a Prefect test harness:
- a 2,000-query fan-out: one query over 2,000 handles of one page each (a journal `end` line per query);
- a 200-page job: 10 queries of 20 pages each.
Each three ways: `durability: flush` as before #36 (no journal line synced), `flush` as now (the ended queries'
lines synced from a thread), and `durability: fsync` (every page and journal line synced on the loop).

    python bench/durability.py [--sizes 2000] [--latency 0.05] [--times 2]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROFILE = "/v3/short-video/profile/videos"
KEY = "bench-key-0123456789abcdef"


def kind_of(path: str) -> str:
    name = Path(path).name
    for suffix, kind in (
        (".jsonl", "journal/attempts"),
        (".pages", "raw pages"),
        (".parquet.tmp", "parquet"),
    ):
        if name.endswith(suffix):
            return "journal" if name == "journal.jsonl" else kind
    if name == "manifest.json.tmp":
        return "manifest"
    return "directories" if os.path.isdir(path) else "other"


def measure(base_url: str, spec: dict[str, Any], out: Path) -> tuple[float, Counter[str], Counter[str]]:
    from harvest.flows.collect import run_collect

    times: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    real = os.fsync

    def timed(fd: int) -> None:
        kind = kind_of(os.readlink(f"/proc/self/fd/{fd}"))
        if threading.current_thread() is not threading.main_thread():
            kind += " (sync thread)"
        began = time.perf_counter()
        real(fd)
        times[kind] += time.perf_counter() - began
        counts[kind] += 1

    path = out / "job.yaml"
    path.write_text(yaml.safe_dump({**spec, "service": {"base_url": base_url}, "output": str(out / "o")}))
    os.fsync = timed  # type: ignore[assignment]
    try:
        began = time.perf_counter()
        summary = asyncio.run(run_collect(spec_path=str(path)))
        wall = time.perf_counter() - began
    finally:
        os.fsync = real
    assert summary.status == "complete", summary
    return wall, times, counts


def jobs(size: int) -> dict[str, dict[str, Any]]:
    base = {"budget": {"credits": 10**6}, "concurrency": 10}
    handles = [f"h{i:05d}" for i in range(size)]
    return {
        f"{size}-query fan-out": {**base, "name": "fanout", "queries": [
            {"id": "v", "endpoint": PROFILE, "for_each": {"handle": handles}}]},
        "200-page job": {**base, "name": "pages", "queries": [
            {"id": "v", "endpoint": PROFILE, "for_each": {"handle": [f"p{i}" for i in range(10)]}}]},
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="2000")
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--times", type=int, default=2)
    args = parser.parse_args()
    os.environ["HARVEST_API_KEY"] = KEY
    from prefect.testing.utilities import prefect_test_harness

    from harvest.sandbox.config import Quirks, SandboxConfig

    with prefect_test_harness(server_startup_timeout=180):
        for size in (int(s) for s in args.sizes.split(",")):
            for n, (label, spec) in enumerate(jobs(size).items()):
                one_page = label.endswith("fan-out")
                config = SandboxConfig(
                    api_keys={KEY: 10**9},
                    pages_by_path={PROFILE: (1, 1) if one_page else (20, 20)},
                    latency=args.latency,
                    quirks=Quirks.none(),
                )
                if n == 0:  # the harness's first flow run pays its registration (~1.3 s): not recorded
                    _one(label, spec, "flush", config, quiet=True)
                for _ in range(args.times):  # interleaved: the machine's load moves all three alike
                    for variant in ("flush, before #36", "flush", "fsync"):
                        _one(label, spec, variant, config)


def _one(label: str, spec: dict[str, Any], variant: str, config: Any, quiet: bool = False) -> None:
    import harvest.flows.collect
    from harvest.sandbox.wire.serving import running
    from harvest.tasks.output.journal import RunJournal

    before = variant.endswith("#36")
    harvest.flows.collect.RunJournal = (
        functools.partial(RunJournal, sync_ends=False) if before else RunJournal
    )  # type: ignore[misc]
    durability = variant.split(",")[0]
    with tempfile.TemporaryDirectory() as tmp, running(config) as sb:
        wall, times, counts = measure(sb.base_url, {**spec, "durability": durability}, Path(tmp))
    harvest.flows.collect.RunJournal = RunJournal  # type: ignore[misc]
    if quiet:
        return
    waited = sum(t for k, t in times.items() if "thread" not in k)
    parts = ", ".join(f"{k} {counts[k]} x = {times[k] * 1000:.0f} ms" for k in sorted(times))
    print(f"{label}, durability {variant}: wall {wall:.1f} s; syncs waited on {waited * 1000:.0f} ms "
          f"({100 * waited / wall:.1f}% of the wall): {parts}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
