"""A blip of 429s is not a limit: harvest's pace after one burst of refusals, against the same job without it.

The sandbox (its own process, pages cached) answers every data request in `--latency` seconds (a fast real
service); in the blip run, the requests numbered 40 to 47 are refused with 429 and `Retry-After: 1`, and no
request after them is. harvest runs 8 queries of 30 pages (240 pages) at `concurrency: 8` against a running
Prefect server, quiet and with the blip, alternately, `--times` times each. From the sandbox's ledger (when it
answered each request):
- the quiet pace (pages a second from the first answer to the last);
- the blip run's pace from the first refusal to the last page (a second of it is the refused requests' own
  `Retry-After`: every request in flight was refused), and as a share of the quiet pace;
- the recovery: seconds from the first refusal until a one-second window of answers holds 90% of the quiet pace;
- what the run's summary said of it (`slowed`: seconds below its concurrency).

    python bench/blip.py [--times 3] [--latency 0.05]
"""

from __future__ import annotations

import argparse
import json
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
from run import HARVEST, KEY, PATH, PYTHON, RESULTS, env_for, free_port, prefect_server, wait_http

QUERIES, PAGES, CONCURRENCY = 8, 30, 8
BLIP = range(40, 48)
"""Data requests (1-based, as the sandbox numbers them) answered 429: eight in a row, then none."""
RECOVERED = 0.9
"""A one-second window holding this share of the quiet pace counts as recovered."""

SERVE = """
import sys
from harvest.sandbox.config import Quirks
from harvest.sandbox.wire.serving import serve
port, key, latency, blip = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), sys.argv[4]
plan = {int(n): "rate_limit" for n in blip.split(",") if n}
serve(port, api_key=key, credits=10**9, pages=({pages}, {pages}), page_size=20, quirks=Quirks.none(),
      cache_pages=True, latency=latency, retry_after="1", fault_plan=plan)
"""


@contextmanager
def blip_sandbox(latency: float, blip: range | None):  # type: ignore[no-untyped-def]
    """The sandbox in its own process; `fault_plan` is not one of `harvest sandbox`'s options."""
    port = free_port()
    numbers = ",".join(str(n) for n in blip or ())
    code = SERVE.replace("{pages}", str(PAGES))
    proc = subprocess.Popen(
        [PYTHON, "-c", code, str(port), KEY, str(latency), numbers],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base}/v1/credit-balance")
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def spec(work: Path, base_url: str, name: str) -> Path:
    body = {
        "name": "blip",
        "service": {"base_url": base_url},
        "budget": {"credits": 10**6},
        "concurrency": CONCURRENCY,
        "output": str(work / f"out-{name}"),
        "queries": [
            {"id": "videos", "endpoint": PATH, "params": {"sort_by": "latest"},
             "for_each": {"handle": [f"maker{i:02d}" for i in range(QUERIES)]}}
        ],
    }  # fmt: skip
    path = work / f"blip-{name}.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def answers(base_url: str) -> list[tuple[float, int]]:
    """(time, status) of every data request the sandbox answered, in order."""
    ledger = httpx.get(f"{base_url}/_sandbox/ledger", timeout=30).json()
    return sorted((e["time"], e["status"]) for e in ledger if e["path"] == PATH)


def one(work: Path, env: dict[str, str], latency: float, blip: bool, n: int) -> dict[str, Any]:
    with blip_sandbox(latency, BLIP if blip else None) as base_url:
        m = run_measured(
            [HARVEST, "run", str(spec(work, base_url, f"{'blip' if blip else 'quiet'}-{n}"))], env
        )
        seen = answers(base_url)
    if m.returncode != 0:
        raise RuntimeError(f"harvest run failed:\n{m.stdout[-2000:]}\n{m.stderr[-2000:]}")
    ok = [t for t, status in seen if status == 200]
    refused = [t for t, status in seen if status == 429]
    said = next((line.strip() for line in m.stdout.splitlines() if "below its concurrency" in line), None)
    return {"ok": ok, "refused": refused, "pages": len(ok), "said": said, "wall_s": round(m.wall_s, 2)}


def pace(times: list[float]) -> float:
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0


def recovery(ok: list[float], start: float, quiet: float) -> float | None:
    """Seconds from `start` until one second of answers holds `RECOVERED` of the quiet pace (None: never)."""
    need = RECOVERED * quiet
    for i, t in enumerate(ok):
        if t < start:
            continue
        window = sum(1 for u in ok[i:] if u < t + 1.0)
        if window >= need:
            return round(t + 1.0 - start, 2)
    return None


def blip_recovery(work: Path, env: dict[str, str], times: int, latency: float) -> dict[str, Any]:
    """Quiet and blip runs, alternately; the figures of each pair and their medians."""
    pairs = []
    for n in range(times):
        quiet, blip = one(work, env, latency, False, n), one(work, env, latency, True, n)
        quiet_pps = pace(quiet["ok"])
        first = blip["refused"][0] if blip["refused"] else blip["ok"][0]
        after = [t for t in blip["ok"] if t >= first]
        after_pps = len(after) / (after[-1] - first) if after else 0.0
        pairs.append(
            {
                "quiet_pps": round(quiet_pps, 1),
                "blip_after_pps": round(after_pps, 1),
                "after_vs_quiet": round(after_pps / quiet_pps, 2) if quiet_pps else None,
                "recovered_s": recovery(blip["ok"], first, quiet_pps),
                "refused": len(blip["refused"]),
                "said": blip["said"],
            }
        )
        print(json.dumps(pairs[-1]), flush=True)

    def med(key: str) -> float | None:
        values = [p[key] for p in pairs if p[key] is not None]
        return round(statistics.median(values), 2) if values else None

    return {
        "latency_s": latency, "pages": QUERIES * PAGES, "concurrency": CONCURRENCY,
        "quiet_pps": med("quiet_pps"), "blip_after_pps": med("blip_after_pps"),
        "after_vs_quiet": med("after_vs_quiet"), "recovered_s": med("recovered_s"),
        "never_recovered": sum(p["recovered_s"] is None for p in pairs), "pairs": pairs,
    }  # fmt: skip


def print_blip(res: dict[str, Any]) -> None:
    print(
        f"blip of {len(BLIP)} 429s, {res['pages']} pages at concurrency {res['concurrency']}, "
        f"{res['latency_s'] * 1000:.0f} ms a page: quiet {res['quiet_pps']} pages/s; from the blip to the last "
        f"page {res['blip_after_pps']} pages/s ({res['after_vs_quiet']}x, a second of it the refused "
        f"requests' Retry-After); back at {RECOVERED:.0%} of the quiet pace {res['recovered_s']} s after the blip"
    )
    said = next((p["said"] for p in res["pairs"] if p["said"]), None)
    if said:
        print(f"  harvest said: {said}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--times", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.05)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="harvest-blip-"))
    with prefect_server(work / "prefect-home") as api_url:
        res = blip_recovery(work, env_for(work / "prefect-home", api_url), args.times, args.latency)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "blip.json").write_text(json.dumps(res, indent=2))
    print_blip(res)


if __name__ == "__main__":
    main()
