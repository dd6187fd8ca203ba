"""Peak memory against the size of one answer: one query of one page whose answer grows from ~10 MB to ~100 MB.

The sandbox (its own process, pages cached) serves a short-video profile whose first page holds N records (~1,400 bytes of JSON
each); harvest runs the one-query job (`max_pages: 1`) end to end against a running Prefect server, three times per size. What
is measured is harvest's process tree (not the sandbox): peak RSS, and above the one-record job's peak (what the
answer itself costs). `harvest run` refuses answers above `service.max_answer_mb`; the spec here raises it past
the largest size measured.

    python bench/answer_memory.py [--sizes 7500,37500,75000] [--times 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import run_measured
from run import HARVEST, KEY, PATH, RESULTS, env_for, prefect_server, sandbox

BYTES_PER_RECORD = 1_400


def spec(work: Path, base_url: str, output: Path) -> Path:
    body = {
        "name": "answer-memory",
        "service": {"base_url": base_url, "max_answer_mb": 1024},
        "budget": {"credits": 10},
        "output": str(output),
        "queries": [
            {
                "id": "videos",
                "endpoint": PATH,
                "params": {"handle": "maker00", "sort_by": "latest"},
                "max_pages": 1,
            }
        ],
    }
    path = work / "answer-memory.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def answer_bytes(base_url: str) -> int:
    import httpx

    got = httpx.get(
        f"{base_url}{PATH}",
        params={"handle": "maker00", "sort_by": "latest"},
        headers={"x-api-key": KEY},
        timeout=600,
    )
    return len(got.content)


def one_size(work: Path, env: dict[str, str], records: int, times: int) -> dict[str, Any]:
    """The median peak RSS of `times` one-page runs whose answer holds `records` records."""
    with sandbox(pages=2, page_size=records) as base_url:  # a first page is full, the last is not
        size = answer_bytes(base_url)  # builds (and caches) the page before harvest asks
        peaks = []
        for n in range(times):
            output = work / f"out-{records}-{n}"
            m = run_measured([HARVEST, "run", str(spec(work, base_url, output))], env=env)
            if m.returncode != 0:
                raise RuntimeError(f"harvest run failed:\n{m.stdout[-2000:]}\n{m.stderr[-2000:]}")
            peaks.append(m.peak_rss_mb)
    row = {"records": records, "answer_mb": round(size / 2**20, 1), "peak_rss_mb": statistics.median(peaks)}
    print(json.dumps(row), flush=True)
    return row


def compare(work: Path, env: dict[str, str], sizes: list[int], times: int) -> dict[str, Any]:
    """The one-record job, then each size: what an answer costs above the one-record job, per MB of it."""
    rows = [one_size(work, env, records, times) for records in [1, *sizes]]
    base = rows[0]["peak_rss_mb"]
    for row in rows:
        row["above_one_record_mb"] = round(row["peak_rss_mb"] - base, 1)
        row["per_answer_mb"] = (
            round(row["above_one_record_mb"] / row["answer_mb"], 2) if row["answer_mb"] >= 1 else None
        )
    return {"rows": rows}


def measure(sizes: list[int], times: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="harvest-answer-memory-"))
    with prefect_server(work / "prefect-home") as api_url:
        return compare(work, env_for(work / "prefect-home", api_url), sizes, times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="7500,37500,75000")
    parser.add_argument("--times", type=int, default=3)
    args = parser.parse_args()
    result = measure([int(s) for s in args.sizes.split(",")], args.times)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "answer_memory.json").write_text(json.dumps(result, indent=2))
    print(f"{'answer MB':>10} {'peak RSS MB':>12} {'above 1 record':>15} {'x answer':>9}")
    for row in result["rows"]:
        ratio = "" if row["per_answer_mb"] is None else f"{row['per_answer_mb']:.2f}"
        print(
            f"{row['answer_mb']:>10} {row['peak_rss_mb']:>12.0f} {row['above_one_record_mb']:>15.0f} {ratio:>9}"
        )


if __name__ == "__main__":
    main()
