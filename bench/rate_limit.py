"""Paging under a rate limit: harvest at a concurrency far above what the service allows, against `pages / rate`.

The sandbox (its own process) accepts `--rate` requests a second (a token bucket one second deep) and answers 429
with `Retry-After: 1` past it, not billed. harvest runs 16 queries of 25 pages (400 pages) at `concurrency: 16`
and again at 64, three times each, against a running Prefect server, with no known limit in the spec (it must
find the rate), and once more with the limit given (`rate_limit.per_second`). Measured: the paging time harvest
reports against the ideal `pages / rate`, the share of requests the service refused, and whether harvest's count
equals the service's bill.

    python bench/rate_limit.py [--rate 10] [--times 3]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import run_measured
from run import HARVEST, KEY, PATH, RESULTS, env_for, free_port, prefect_server, wait_http

QUERIES, PAGES = 16, 25
TOOK = re.compile(r"([\d.]+) s paging")


@contextmanager
def limited_sandbox(rate: float):  # type: ignore[no-untyped-def]
    port = free_port()
    cmd = [HARVEST, "sandbox", "--port", str(port), "--api-key", KEY, "--credits", str(10**9)]
    cmd += ["--pages", str(PAGES), str(PAGES), "--page-size", "20", "--no-quirks", "--cache-pages"]
    cmd += ["--rate", str(rate)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base}/v1/credit-balance")
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def spec(work: Path, base_url: str, concurrency: int, per_second: float | None, n: int) -> Path:
    body: dict[str, Any] = {
        "name": "rate-limit",
        "service": {"base_url": base_url},
        "budget": {"credits": 10**6},
        "concurrency": concurrency,
        "output": str(work / f"out-{concurrency}-{per_second}-{n}"),
        "queries": [
            {"id": "videos", "endpoint": PATH, "params": {"sort_by": "latest"},
             "for_each": {"handle": [f"maker{i:02d}" for i in range(QUERIES)]}}
        ],
    }  # fmt: skip
    if per_second is not None:
        body["rate_limit"] = {"per_second": per_second}
    path = work / f"rate-limit-{concurrency}-{per_second}-{n}.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def balance(base_url: str) -> int:
    got = httpx.get(f"{base_url}/v1/credit-balance", headers={"x-api-key": KEY}).json()
    return int(got["creditCount"])


def one(
    work: Path, env: dict[str, str], rate: float, concurrency: int, known: bool, n: int
) -> dict[str, Any]:
    with limited_sandbox(rate) as base_url:
        before = balance(base_url)
        m = run_measured(
            [HARVEST, "run", str(spec(work, base_url, concurrency, rate if known else None, n))], env=env
        )
        billed = before - balance(base_url)
        ledger = httpx.get(f"{base_url}/_sandbox/ledger").json()
    if m.returncode != 0:
        raise RuntimeError(f"harvest run failed:\n{m.stdout[-2000:]}\n{m.stderr[-2000:]}")
    found = TOOK.search(m.stdout)
    assert found, m.stdout[-1000:]
    data = [e for e in ledger if e["path"] == PATH]
    refused = sum(e["status"] == 429 for e in data)
    counted = int(re.search(r"credits spent: (\d+)", m.stdout).group(1))  # type: ignore[union-attr]
    return {
        "paging_s": float(found.group(1)), "requests": len(data), "refused": refused,
        "billed": billed, "counted": counted, "wall_s": round(m.wall_s, 2),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--times", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="harvest-rate-limit-"))
    ideal = QUERIES * PAGES / args.rate
    rows = []
    with prefect_server(work / "prefect-home") as api_url:
        env = env_for(work / "prefect-home", api_url)
        for concurrency, known in ((16, False), (64, False), (16, True)):
            runs = [one(work, env, args.rate, concurrency, known, n) for n in range(args.times)]
            row = {
                "concurrency": concurrency,
                "limit_in_spec": known,
                "paging_s": statistics.median(r["paging_s"] for r in runs),
                "vs_ideal": round(statistics.median(r["paging_s"] for r in runs) / ideal, 2),
                "refused_share": round(statistics.median(r["refused"] / r["requests"] for r in runs), 3),
                "count_equals_bill": all(r["counted"] == r["billed"] for r in runs),
                "runs": runs,
            }
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "runs"}), flush=True)
    result = {"rate": args.rate, "pages": QUERIES * PAGES, "ideal_s": ideal, "rows": rows}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "rate_limit.json").write_text(json.dumps(result, indent=2))
    print(f"{QUERIES * PAGES} pages at {args.rate:g}/s: ideal {ideal:.0f} s")
    print(
        f"{'concurrency':>11} {'limit in spec':>13} {'paging s':>9} {'x ideal':>8} {'429 share':>10} {'count=bill':>10}"
    )
    for r in rows:
        print(
            f"{r['concurrency']:>11} {r['limit_in_spec']!s:>13} {r['paging_s']:>9.1f} {r['vs_ideal']:>8.2f} "
            f"{100 * r['refused_share']:>9.1f}% {r['count_equals_bill']!s:>10}"
        )


if __name__ == "__main__":
    main()
