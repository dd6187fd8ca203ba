"""The dlt contender: dlt's `rest_api` source into its DuckDB destination, with parquet loader files.

Configured as its documentation shows for a cursor-paged JSON API: one resource per handle, the records at
`aweme_list`, the cursor read from `max_cursor` and sent back as `max_cursor`, primary key `aweme_id`, append
(the first load into an empty dataset: nothing to merge). dlt is a bench-only extra, never a runtime dependency.

    python bench/dlt_pipeline.py BASE_URL API_KEY OUTPUT HANDLE [HANDLE ...]
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import orjson

PATH = "/v3/short-video/profile/videos"


def main(base_url: str, key: str, out: Path, handles: list[str]) -> int:
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("RUNTIME__DLTHUB_TELEMETRY", "false")  # nothing leaves the machine
    os.environ["DLT_DATA_DIR"] = str(out / "dlt-data")
    import dlt
    from dlt.sources.rest_api import rest_api_source

    source = rest_api_source(
        {
            "client": {
                "base_url": base_url,
                "headers": {"x-api-key": key},
                "paginator": {"type": "cursor", "cursor_path": "max_cursor", "cursor_param": "max_cursor"},
            },
            "resources": [
                {
                    "name": f"videos_{n}",
                    "endpoint": {
                        "path": PATH,
                        "params": {"handle": handle, "sort_by": "latest"},
                        "data_selector": "aweme_list",
                    },
                    "primary_key": "aweme_id",
                    "write_disposition": "append",
                }
                for n, handle in enumerate(handles)
            ],
        }
    )
    pipeline = dlt.pipeline(
        pipeline_name="bench",
        destination=dlt.destinations.duckdb(str(out / "dlt.duckdb")),
        dataset_name="bench",
        pipelines_dir=str(out / "pipelines"),
    )
    info = pipeline.run(source, loader_file_format="parquet")
    info.raise_on_failed_jobs()
    return sum(
        pipeline.last_trace.last_normalize_info.row_counts.get(f"videos_{n}", 0) for n in range(len(handles))
    )


if __name__ == "__main__":
    t0 = time.perf_counter()
    total = main(sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4:])
    print(orjson.dumps({"records": total, "seconds": time.perf_counter() - t0}).decode())
