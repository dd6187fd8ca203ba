"""What staging costs: one job on one machine through the local runner, Dask on a shared path, and Dask staging
to S3 (moto on 127.0.0.1), each repeated; prints seconds end to end and of paging, and writes
`bench/results/dask_staging.json`.

    python bench/dask_staging.py [--queries 8] [--pages 25] [--latency 0,0.1] [--times 2]

moto answers on the same machine, so the figures are the work staging adds (one PUT per page, the files'
upload, the flow's GETs and commit), not a real object store's round trips (S3 takes ~10-30 ms a PUT).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KEY = "bench-dask-staging-key-0123456789"
PINS = "/v1/pinboard/search"


def spec(base_url: str, output: Path, runner: dict[str, Any], queries: int) -> dict[str, Any]:
    return {
        "name": "staging-bench", "service": {"base_url": base_url}, "budget": {"credits": 100_000},
        "concurrency": 8, "output": str(output), "runner": runner,
        "queries": [{"id": "pins", "endpoint": PINS, "for_each": {"query": [f"topic{n}" for n in range(queries)]}}],
    }  # fmt: skip


def one_run(base_url: str, tmp: Path, name: str, runner: dict[str, Any], queries: int) -> dict[str, Any]:
    from harvest.flows.collect import run_collect

    path = tmp / f"{name}.yaml"
    output = tmp / name
    path.write_text(yaml.safe_dump(spec(base_url, output, runner, queries)))
    began = time.monotonic()
    summary = asyncio.run(run_collect(spec_path=str(path)))
    wall = time.monotonic() - began
    assert summary.status == "complete", summary
    return {
        "wall": round(wall, 2),
        "paging": summary.seconds["paging"],
        "pages": sum(q["pages"] for q in summary.queries),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queries", type=int, default=8)
    parser.add_argument("--pages", type=int, default=25)
    parser.add_argument("--latency", default="0,0.1")
    parser.add_argument("--times", type=int, default=2)
    args = parser.parse_args()

    import pyarrow.fs as pafs
    from moto.server import ThreadedMotoServer
    from prefect.testing.utilities import prefect_test_harness

    from harvest.sandbox.config import SandboxConfig
    from harvest.sandbox.wire.serving import running

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=f"http://{host}:{port}", AWS_EC2_METADATA_DISABLED="true", HARVEST_API_KEY=KEY,
    )  # fmt: skip
    pafs.S3FileSystem(endpoint_override=f"http://{host}:{port}", allow_bucket_creation=True).create_dir(
        "stage"
    )
    runners = {
        "local": {"kind": "local"},
        "dask, shared path": {"kind": "dask", "workers": 2},
        "dask, staging to S3": {"kind": "dask", "workers": 2, "staging": "s3://stage/bench"},
    }
    results: list[dict[str, Any]] = []
    with prefect_test_harness(server_startup_timeout=180), tempfile.TemporaryDirectory() as tmp:
        for latency in (float(x) for x in args.latency.split(",")):
            config = SandboxConfig(api_keys={KEY: 10**7}, pages_by_path={PINS: (args.pages, args.pages)},
                                   page_size=20, latency=latency)  # fmt: skip
            with running(config) as sb:
                for n in range(args.times):
                    for (
                        name,
                        runner,
                    ) in runners.items():  # interleaved, so drift on the machine hits all alike
                        run_dir = Path(tmp) / f"{latency}-{n}"
                        run_dir.mkdir(exist_ok=True)
                        label = name.replace(" ", "").replace(",", "-")
                        got = one_run(sb.base_url, run_dir, label, runner, args.queries)
                        results.append({"runner": name, "latency": latency, **got})
                        print(results[-1], flush=True)
    server.stop()
    rows = []
    for latency in sorted({r["latency"] for r in results}):
        for name in runners:
            mine = [r for r in results if r["runner"] == name and r["latency"] == latency]
            rows.append({"runner": name, "latency": latency, "pages": mine[0]["pages"],
                         "wall_median": statistics.median(r["wall"] for r in mine),
                         "paging_median": statistics.median(r["paging"] for r in mine)})  # fmt: skip
    for row in rows:
        print(row)
    out = ROOT / "bench" / "results" / "dask_staging.json"
    out.write_text(json.dumps({"cpus": os.cpu_count(), "runs": results, "medians": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
