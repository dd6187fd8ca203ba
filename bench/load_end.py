"""Where a run's seconds after its last page go, and whether staging the rows during paging would end it sooner.

On a run the bench landed (its Parquet, raw pages and manifest; `harvest.duckdb` left out), each round
measures, every step in its own process (`bench/measure.py`: wall, CPU, peak RSS), one after the other:
- `load`: harvest's load step as a run ends (`load_manifest_into_duckdb`) into a new file: the merge, then the
  bookkeeping;
- `read`: decoding every column of the run's Parquet once, a row group at a time (what a load from it reads);
- `stage`: what a background thread would do while pages land: the run's rows appended into a staging DuckDB
  file beside the run (every table, the same columns and compression as the user's);
- `merge_staged`: the step that would then be left at the end: the staging file attached read-only and its rows
  inserted into a new user's file (all keys new, as in the bench's fresh output: today's merge then inserts as
  read too).

The ratio that decides the design is `merge_staged / load` within a round: the end a staging file leaves,
against the end today. Printed by `make bench` (`bench/run.py`) after the main job, from its landed output.

    python bench/load_end.py OUTPUT [--times 3]     # OUTPUT: a landed output directory (the bench's `harvest`)
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import Measured, run_measured

PYTHON = sys.executable
RESULTS = Path(__file__).resolve().parent / "results"
STEPS = ("load", "read", "stage", "merge_staged")


def _copy_without_db(output: Path, into: Path) -> Path:
    shutil.rmtree(into, ignore_errors=True)
    shutil.copytree(output, into, ignore=shutil.ignore_patterns("harvest.duckdb*", "*.staging.duckdb*"))
    return into


def _run_step(step: str, output: Path, work: Path) -> Measured:
    m = run_measured([PYTHON, __file__, "--step", step, str(output), str(work)])
    if m.returncode != 0:
        raise RuntimeError(f"load_end step {step} failed:\n{m.stdout[-2000:]}\n{m.stderr[-2000:]}")
    return m


def load_end(output: Path, times: int) -> dict[str, Any]:
    """`times` rounds of the four steps on a copy of `output`; per round each step's wall/CPU/RSS and the ratio."""
    work = Path(tempfile.mkdtemp(prefix="harvest-load-end-"))
    rounds: list[dict[str, Any]] = []
    try:
        for _ in range(times):
            copy = _copy_without_db(output, work / "output")
            (work / "staging.duckdb").unlink(missing_ok=True)
            (work / "merged.duckdb").unlink(missing_ok=True)
            measured = {step: _run_step(step, copy, work) for step in STEPS}
            row = {
                step: {
                    "wall_s": round(m.wall_s, 2),
                    "cpu_s": round(m.cpu_s, 2),
                    "rss_mb": round(m.peak_rss_mb),
                }
                for step, m in measured.items()
            }
            row["said"] = {
                step: json.loads(m.stdout.strip().splitlines()[-1]) for step, m in measured.items()
            }
            row["merge_staged_vs_load"] = round(measured["merge_staged"].wall_s / measured["load"].wall_s, 2)
            rounds.append(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "rounds": rounds,
        "merge_staged_vs_load": [r["merge_staged_vs_load"] for r in rounds],
        "median": {
            step: {k: statistics.median(r[step][k] for r in rounds) for k in ("wall_s", "cpu_s", "rss_mb")}
            for step in STEPS
        },
    }


def print_load_end(res: dict[str, Any]) -> None:
    med = res["median"]
    print("the end of a run, on the main job's landed output (median s wall / s CPU / peak RSS MB):")
    for step in STEPS:
        said = res["rounds"][-1]["said"][step]
        inner = ", ".join(f"{k} {v}" for k, v in said.items())
        print(
            f"  {step}: {med[step]['wall_s']} / {med[step]['cpu_s']} / {med[step]['rss_mb']:.0f}  ({inner})"
        )
    print(f"  end merge from a staging file / today's load, per round: {res['merge_staged_vs_load']}")


def _step(step: str, output: Path, work: Path) -> dict[str, Any]:
    """One step in this process; returns what it measured inside (seconds of its own parts)."""

    from harvest.flows.run.load_step import load_manifest_into_duckdb
    from harvest.tasks.database.connection import quote_ident, write_connection
    from harvest.tasks.database.record_tables import ensure_table
    from harvest.tasks.output.layout import OutputLayout
    from harvest.tasks.output.manifest import all_manifests, output_kinds

    layout = OutputLayout(output)
    (manifest,) = all_manifests(layout)
    kinds = output_kinds(layout, manifest)
    files = manifest.files_by_table(layout)
    t0 = time.perf_counter()
    if step == "load":
        rows = load_manifest_into_duckdb(layout, manifest, work / "merged.duckdb")
        return {"rows": sum(rows.values()), "in_step_s": round(time.perf_counter() - t0, 2)}
    if step == "read":  # every column decoded, a row group at a time, as a load from Parquet reads them
        import pyarrow.parquet as pq

        n = sum(
            batch.num_rows
            for paths in files.values()
            for path in paths
            for batch in pq.ParquetFile(path).iter_batches(batch_size=16_384)
        )
        return {"rows": n, "in_step_s": round(time.perf_counter() - t0, 2)}
    if step == "stage":
        with write_connection(work / "staging.duckdb", tables=len(files)) as con:
            for table, paths in files.items():
                ensure_table(con, kinds[table])
                names = ", ".join(quote_ident(n) for n in kinds[table].schema.names)
                source = f"read_parquet({[str(p) for p in paths]!r}, union_by_name = true)"
                con.execute(f"INSERT INTO {quote_ident(table)} ({names}) SELECT {names} FROM {source}")
        return {"in_step_s": round(time.perf_counter() - t0, 2)}
    with write_connection(work / "merged.duckdb", tables=len(files)) as con:
        con.execute(f"ATTACH '{work / 'staging.duckdb'}' AS staging (READ_ONLY)")
        attached = time.perf_counter()
        for table in files:
            ensure_table(con, kinds[table])
            names = ", ".join(quote_ident(n) for n in kinds[table].schema.names)
            con.execute("BEGIN")
            con.execute(
                f"INSERT INTO {quote_ident(table)} ({names}) SELECT {names} FROM staging.{quote_ident(table)}"
            )
            con.execute("COMMIT")
    return {"attach_s": round(attached - t0, 2), "in_step_s": round(time.perf_counter() - t0, 2)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("output", type=Path)
    parser.add_argument("work", type=Path, nargs="?")
    parser.add_argument("--times", type=int, default=3)
    parser.add_argument("--step", choices=STEPS)
    args = parser.parse_args()
    if args.step:
        print(json.dumps(_step(args.step, args.output, args.work)))
        return
    res = load_end(args.output, args.times)
    print_load_end(res)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "load_end.json").write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
