"""A Dask night's round files are merged into one file a table once the run ends, and its history reads each
row once: after the merge, after a kill that left the round files beside the merged ones, and when a kill cut an
earlier merge short.

A round writes its own Parquet file per table, so a night of many small queries left a file each; every query of
a `<table>_history` view binds each file, night after night (docs/deployments-and-dask.md).
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from harvest.flows.cli import app
from harvest.flows.run.dask.round_files import merge_rounds
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import running
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import RunManifest, read_manifest
from harvest.tasks.output.parquet_sink import MultiTableSink
from tests.endpoints import PINS
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, job_spec, run_flow, scalar, write_spec

pytestmark = pytest.mark.usefixtures("api_key")

TOPICS = ["oak", "elm", "ash", "fir", "yew"]
CONFIG = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (3, 3)}, page_size=4)
PINS_KEPT = 55
"""Of the night's 65 pins, those of distinct keys (search query, id): a page repeats a pin of the page before."""


def parquet_files(output: Path, table: str) -> list[Path]:
    return sorted((output / "parquet" / table).glob("date=*/*.parquet"))


def history_rows(output: Path) -> int:
    return int(scalar(output / "harvest.duckdb", "SELECT count(*) FROM pinboard_pins_history"))


def only_manifest(output: Path) -> tuple[Path, RunManifest]:
    (path,) = (output / "raw").glob("*/manifest.json")
    return path, read_manifest(path)


@pytest.fixture(scope="module")
def merged_night(
    prefect_harness: None, dask_address: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Any]:
    """A real Dask night of five queries of four pages (13 pins each), one page a round: twenty round files."""
    tmp = tmp_path_factory.mktemp("merged")
    runner = {"kind": "dask", "address": dask_address, "round_pages": 1}
    queries = [{"id": "pins", "endpoint": PINS, "for_each": {"query": TOPICS}}]
    with pytest.MonkeyPatch.context() as env, running(CONFIG) as sb:
        env.setenv("HARVEST_API_KEY", SECRET_KEY)  # as the `api_key` fixture, for the module's one night
        env.delenv("HARVEST_BASE_URL", raising=False)
        spec = job_spec(sb.base_url, tmp / "out", queries, name="merge-job", credits=1000, runner=runner)
        summary = run_flow(write_spec(tmp, spec))
    return tmp / "out", summary


def test_a_dask_night_leaves_one_file_a_table_and_its_history_reads_each_row_once(
    merged_night: tuple[Path, Any],
) -> None:
    output, summary = merged_night
    assert summary.status == "complete" and summary.credits_spent == 20
    (merged,) = parquet_files(output, "pinboard_pins")
    assert merged.name.endswith("-rounds.parquet"), merged
    _, manifest = only_manifest(output)
    assert [Path(p).name for _, p, _ in manifest.files] == [merged.name]
    assert all(not q["files"] for q in manifest.queries), "the queries name no round file any more"
    records = sum(q["records"] for q in manifest.queries)
    assert records == 65 == pq.read_metadata(merged).num_rows
    assert (
        history_rows(output)
        == PINS_KEPT
        == scalar(output / "harvest.duckdb", "SELECT count(*) FROM pinboard_pins")
    )


def test_round_files_a_kill_left_beside_the_merged_ones_go_before_the_load(
    merged_night: tuple[Path, Any], tmp_path: Path
) -> None:
    """Killed between the manifest and the round files' removal: the next load removes them first."""
    output = tmp_path / "out"
    shutil.copytree(merged_night[0], output)
    (merged,) = parquet_files(output, "pinboard_pins")
    run_id = merged.name.removesuffix("-rounds.parquet")
    left = merged.with_name(f"{run_id}-0007-0123456789abcdef.parquet")
    shutil.copyfile(merged, left)  # a round file's rows are in the merged file: here all of them are
    path, manifest = only_manifest(output)
    plain = json.loads(path.read_text())
    path.write_text(json.dumps({**plain, "loaded": False}))  # the kill came before the load
    (output / "harvest.duckdb").unlink()
    result = CliRunner().invoke(app, ["load", str(output)])
    assert result.exit_code == 0, result.output
    assert not left.exists() and merged.exists()
    assert history_rows(output) == PINS_KEPT and manifest.records == 65


def round_files(layout: OutputLayout, run_id: str, started: dt.datetime, n: int) -> list[dict[str, Any]]:
    """`n` queries' round files of one table, as Dask rounds write them, each query's summary naming its own."""
    kind = pa.schema([("pin_id", pa.string()), ("n", pa.int64())])
    queries = []
    for i in range(n):
        sink = MultiTableSink(layout, run_id, started, layout.part_id(i + 1, f"q{i}"))
        sink.write_page([(_Kind(kind), pa.table({"pin_id": [f"p{i}a", f"p{i}b"], "n": [i, i]}, schema=kind))])
        files = layout.listed(sink.close())
        queries.append({"query_id": f"q{i}", "status": "complete", "records": 2, "files": files})
    return queries


def manifest_of(started: dt.datetime, status: str, queries: list[dict[str, Any]]) -> RunManifest:
    return RunManifest(
        run_id="r1", job="j", spec_hash="", service="", started=started.isoformat(), finished=None,
        status=status, budget=100, credits_spent=0, queries=queries,
    )  # fmt: skip


class _Kind:
    table, primary_key = "pins", ("pin_id",)

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema


def test_a_merge_a_kill_cut_short_is_made_again_from_the_round_files(tmp_path: Path) -> None:
    """Killed after the merged files were published and before the manifest named them: the run is still
    `running` on disk, its resume ends it again, and the merge starts over from the round files."""
    layout, started = OutputLayout(tmp_path), dt.datetime(2026, 12, 4, 3, 0, tzinfo=dt.UTC)
    queries = round_files(layout, "r1", started, 4)
    stale = layout.parquet_file("pins", started.date(), "r1", "rounds")
    shutil.copyfile(layout.resolve(queries[0]["files"][0][1]), stale)  # the first try's, cut short
    manifest = manifest_of(started, "complete", queries)
    assert merge_rounds(layout, manifest)
    assert manifest.files == [("pins", "parquet/pins/date=2026-12-04/r1-rounds.parquet", 8)]
    merged = pq.read_table(stale)
    assert sorted(merged["pin_id"].to_pylist()) == sorted(f"p{i}{c}" for i in range(4) for c in "ab")
    assert all(q["files"] == [] for q in manifest.queries)


def test_round_files_of_two_schemas_stay_as_they_are(tmp_path: Path) -> None:
    layout, started = OutputLayout(tmp_path), dt.datetime(2026, 12, 4, 3, 0, tzinfo=dt.UTC)
    queries = round_files(layout, "r1", started, 2)
    other = pa.schema([("pin_id", pa.string()), ("n", pa.string())])
    sink = MultiTableSink(layout, "r1", started, layout.part_id(9, "q9"))
    sink.write_page([(_Kind(other), pa.table({"pin_id": ["x"], "n": ["1"]}, schema=other))])
    queries.append(
        {"query_id": "q9", "status": "complete", "records": 1, "files": layout.listed(sink.close())}
    )
    manifest = manifest_of(started, "complete", queries)
    assert not merge_rounds(layout, manifest)
    assert manifest.files == [] and [len(q["files"]) for q in manifest.queries] == [1, 1, 1]
    names = sorted(p.name for p in (tmp_path / "parquet" / "pins").glob("*/*"))
    assert len(names) == 3 and not any("rounds" in n for n in names), names


def test_an_unfinished_run_keeps_its_round_files_for_its_resume(tmp_path: Path) -> None:
    layout, started = OutputLayout(tmp_path), dt.datetime(2026, 12, 4, 3, 0, tzinfo=dt.UTC)
    queries = round_files(layout, "r1", started, 3)
    manifest = manifest_of(started, "interrupted", queries)
    assert not merge_rounds(layout, manifest)
    assert len(list((tmp_path / "parquet" / "pins").glob("*/*.parquet"))) == 3
