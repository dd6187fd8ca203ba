"""Where one large answer's memory goes, step by step, read whole and read in slices, side by side in one invocation.

Each reading runs in its own process on the same answer's bytes (the catalog's short-video videos page, its
published record repeated to ~100 MB): read (`read_body`, or orjson whole), kept (the raw store's frame),
converted (`convert_page`; read in slices, each slice goes to the writer as it is converted, as in a run),
landed (Parquet). Printed per step: the process's peak RSS so far above what it held before it read the
answer's bytes, and that as a multiple of the answer's size. It is what `harvest run`
does with the page, without Prefect, HTTP and the load (`bench/answer_memory.py` measures the whole run).

    python bench/answer_steps.py [--mb 100]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT.parent / "shared" / "spec" / "service-samples" / "_v3_short-video_profile_videos.json"
PATH = "/v3/short-video/profile/videos"


def answer(mb: int, out: Path) -> int:
    """The published answer with its one record repeated (each its own id) to about `mb` MB."""
    import orjson

    body = json.loads(SAMPLE.read_text())
    record = body["aweme_list"][0]
    copies = mb * 2**20 // len(orjson.dumps(record))
    body["aweme_list"] = [{**record, "aweme_id": str(7_000_000 + n)} for n in range(copies)]
    out.write_bytes(orjson.dumps(body))
    return out.stat().st_size


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def steps(path: Path, whole: bool) -> dict[str, float]:
    """One reading of the answer at `path`, in this process: peak RSS (MB) after each step."""
    import orjson

    from harvest.connectors.catalog.endpoints import get
    from harvest.connectors.reading.extraction import PageMeta, convert_page, with_meta
    from harvest.connectors.reading.json_body import read_body
    from harvest.tasks.output.layout import OutputLayout
    from harvest.tasks.output.parquet_sink import MultiTableSink
    from harvest.tasks.output.raw_store import encode_frame, paid_page

    endpoint, now = get(PATH), dt.datetime.now(dt.UTC)
    out = {"imported": peak_mb()}
    raw = path.read_bytes()
    out["bytes"] = peak_mb()
    body, repairs = (orjson.loads(raw), {}) if whole else (lambda b: (b.value, b.repairs))(read_body(raw))
    out["read"] = peak_mb()
    page = paid_page(
        query_id="q", page=0, endpoint=PATH, params={}, cursor_in=None, cursor_out=None, fetched_at=now,
        status_code=200, credits=1, body=raw,
    )  # fmt: skip
    encode_frame(page)
    del page
    raw = b""  # the page lets its bytes go once kept (`connectors.paging.page_fetching`)
    out["kept"] = peak_mb()
    meta = PageMeta(PATH, "q", "run", now)
    with tempfile.TemporaryDirectory() as work:
        sink = MultiTableSink(OutputLayout(Path(work)), "run", now, "p0")

        def land(tables: Any) -> None:  # sliced: each slice to the writer as converted, as a run does
            sink.write_slice((k, with_meta(k, tables[k.table], meta)) for k in endpoint.landed_kinds)

        converted = convert_page(
            endpoint.kinds, body, {"handle": "maker00"}, repairs, paging=endpoint.paging,
            land=None if whole else land,
        )  # fmt: skip
        out["converted"] = peak_mb()
        if not converted.landed:
            sink.write_page((k, with_meta(k, converted.tables[k.table], meta)) for k in endpoint.landed_kinds)
        sink.close()
    out["landed"] = peak_mb()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--child", choices=["whole", "sliced"])
    parser.add_argument("--answer")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(steps(Path(args.answer), args.child == "whole")))
        return
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / "answer.json"
        size = answer(args.mb, path) / 2**20
        got = {}
        for how in ("whole", "sliced"):
            cmd = [sys.executable, __file__, "--child", how, "--answer", str(path)]
            got[how] = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    print(
        f"one answer of {size:.0f} MB; peak RSS so far above the process before the answer, MB (x the answer)"
    )
    print(f"{'step':>10} {'whole':>14} {'sliced':>14}")
    for step in ("bytes", "read", "kept", "converted", "landed"):
        cells = [got[how][step] - got[how]["imported"] for how in ("whole", "sliced")]
        print(f"{step:>10} " + " ".join(f"{c:>7.0f} ({c / size:.1f}x)" for c in cells))


if __name__ == "__main__":
    main()
