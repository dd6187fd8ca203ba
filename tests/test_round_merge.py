"""A Dask night's round files are merged into one file a table once the run ends, and its history reads each
row once: after the merge, after a kill that left the round files beside the merged ones, and when a kill cut an
earlier merge short.

A round writes its own Parquet file per table, so a night of many small queries left a file each; every query of
a `<table>_history` view binds each file, night after night (docs/deployments-and-dask.md).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from harvest.flows.cli import app
from harvest.flows.run.dask.round_files import drop_merged, merge_rounds, unpublish
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import running
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import RunManifest, read_manifest, write_manifest
from harvest.tasks.output.parquet_sink import MultiTableSink
from tests.crawl_helpers import data_entries, paid_twice
from tests.endpoints import PINS, PROFILE
from tests.flow_helpers import (
    BIG_BALANCE,
    SECRET_KEY,
    job_spec,
    rows,
    run_flow,
    run_flow_retried,
    scalar,
    write_spec,
)
from tests.test_full_disk import small_disk  # noqa: F401 (a fixture: a real filesystem of 64 MB)

pytestmark = pytest.mark.usefixtures("api_key")

TOPICS = ["oak", "elm", "ash", "fir", "yew"]
CONFIG = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (3, 3)}, page_size=4)
PINS_KEPT = 55
"""Of the night's 65 pins, those of distinct keys (search query, id): a page repeats a pin of the page before."""


def parquet_files(output: Path, table: str) -> list[Path]:
    return sorted((output / "parquet" / table).glob("date=*/*.parquet"))


def landed_rows(output: Path, table: str) -> int:
    return sum(pq.read_metadata(p).num_rows for p in parquet_files(output, table))


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
    assert landed_rows(output, "pinboard_pins") == manifest.records == 65, "each row once in the Parquet"
    assert history_rows(output) == PINS_KEPT


def test_a_rebuild_of_a_merged_night_keeps_its_file_names_and_rows(
    merged_night: tuple[Path, Any], tmp_path: Path
) -> None:
    """`harvest rebuild` lands a merged run as a local one, into one writer, under the merged file's name: a
    rebuild that changes no row marks nothing rebuilt, so an export sends nothing again."""
    output = tmp_path / "out"
    shutil.copytree(merged_night[0], output)
    (merged,) = parquet_files(output, "pinboard_pins")
    result = CliRunner().invoke(app, ["rebuild", str(output)])
    assert result.exit_code == 0, result.output
    assert parquet_files(output, "pinboard_pins") == [merged]
    _, manifest = only_manifest(output)
    assert manifest.rebuilt is None and manifest.retired_files == []
    assert landed_rows(output, "pinboard_pins") == 65 and history_rows(output) == PINS_KEPT


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


def test_the_load_s_sweep_keeps_the_round_files_a_query_still_names(tmp_path: Path) -> None:
    """A retry's own rounds left a file a table, not merged: named by their query, they are the run's rows."""
    layout, started = OutputLayout(tmp_path), dt.datetime(2026, 12, 4, 3, 0, tzinfo=dt.UTC)
    queries = round_files(layout, "r1", started, 4)
    manifest = manifest_of(started, "complete", queries[:3])
    assert merge_rounds(layout, manifest)
    kept = layout.resolve(queries[3]["files"][0][1])
    manifest.queries = [*manifest.queries, queries[3]]  # the retry's query, its one round file unmerged
    gone = drop_merged(layout, manifest)
    assert sorted(p.name for p in gone) == sorted(layout.resolve(q["files"][0][1]).name for q in queries[:3])
    assert kept.exists()
    on_disk = sorted(p.name for p in (tmp_path / "parquet" / "pins").glob("*/*.parquet"))
    assert on_disk == sorted(["r1-rounds.parquet", kept.name])


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
    assert merge_rounds(layout, manifest) == []
    assert manifest.files == [] and [len(q["files"]) for q in manifest.queries] == [1, 1, 1]
    names = sorted(p.name for p in (tmp_path / "parquet" / "pins").glob("*/*"))
    assert len(names) == 3 and not any("rounds" in n for n in names), names


def test_an_unfinished_run_keeps_its_round_files_for_its_resume(tmp_path: Path) -> None:
    layout, started = OutputLayout(tmp_path), dt.datetime(2026, 12, 4, 3, 0, tzinfo=dt.UTC)
    queries = round_files(layout, "r1", started, 3)
    manifest = manifest_of(started, "interrupted", queries)
    assert merge_rounds(layout, manifest) == []
    assert len(list((tmp_path / "parquet" / "pins").glob("*/*.parquet"))) == 3


def test_a_disk_too_full_for_the_merge_leaves_the_round_files_as_they_are(small_disk: Path) -> None:  # noqa: F811
    """The merge needs the night's Parquet again in room: where the disk has none, the run ends as before the
    merge existed, its round files named by their queries, and nothing half-written left beside them."""
    layout, started = OutputLayout(small_disk), dt.datetime(2026, 12, 4, 3, 0, tzinfo=dt.UTC)
    noise = pa.schema([("pin_id", pa.string()), ("n", pa.string())])
    queries = []
    for i in range(3):  # ~6 MB a file of random text: zstd cannot make it smaller
        sink = MultiTableSink(layout, "r1", started, layout.part_id(i + 1, f"q{i}"))
        text = [os.urandom(3000).hex() for _ in range(1000)]
        data = pa.table({"pin_id": [f"p{i}-{k}" for k in range(1000)], "n": text}, schema=noise)
        sink.write_page([(_Kind(noise), data)])
        queries.append(
            {"query_id": f"q{i}", "status": "complete", "records": 1000, "files": layout.listed(sink.close())}
        )
    before = sorted(p.name for p in small_disk.rglob("*") if p.is_file())
    free = shutil.disk_usage(small_disk).free
    (small_disk / "filler").write_bytes(b"\0" * (free - 4 * 2**20))  # 4 MB left: less than one file
    manifest = manifest_of(started, "complete", queries)
    assert merge_rounds(layout, manifest) == []
    assert manifest.files == [] and [len(q["files"]) for q in manifest.queries] == [1, 1, 1]
    assert sorted(p.name for p in small_disk.rglob("*") if p.is_file() and p.name != "filler") == before
    assert sum(pq.read_metadata(layout.resolve(q["files"][0][1])).num_rows for q in queries) == 3000


VIDEOS = {"id": "videos", "endpoint": PROFILE, "params": {"handle": "nasa"}}
PINS_AND_VIDEOS = [{"id": "pins", "endpoint": PINS, "for_each": {"query": TOPICS}}, VIDEOS]
DOWN = ["unavailable"] * 5
"""A page of the videos query answered 503 until its retries run out: the first attempt of the flow fails."""


def retried_night(
    tmp_path: Path,
    dask_address: str,
    queries: list[dict[str, Any]],
    pages: dict[str, tuple[int, int]],
    videos_faults: list[str | None],
) -> tuple[Path, Any, list[Any]]:
    """A real Dask night, one page a round, whose videos query meets `videos_faults` and fails, then Prefect's
    retry of the flow: the output, the flow's summary, and the requests the sandbox answered without a fault."""
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE},
        pages_by_path=pages,
        page_size=4,
        fault_plan_by_path={PROFILE: videos_faults},
    )
    runner = {"kind": "dask", "address": dask_address, "round_pages": 1}
    output = tmp_path / "out"
    with running(config) as sb:
        spec = job_spec(sb.base_url, output, queries, name="retry-job", credits=1000, runner=runner)
        summary = run_flow_retried(write_spec(tmp_path, spec))
        entries = [e for e in data_entries(sb) if e.fault is None]
    return output, summary, entries


def test_a_prefect_flow_retry_of_a_merged_dask_run_lands_each_row_once(
    prefect_harness: None, dask_address: str, tmp_path: Path, api_key: str
) -> None:
    """The first attempt ends `failed` (one query's page answered 503 until its retries ran out) and is merged;
    Prefect retries the flow, which resumes that run: the kept queries' rows are landed again from their raw
    pages (their round files are gone into the merged file), the failed query goes on where it stopped, nothing
    is paid twice, and every landed row is in the Parquet once."""
    pages = {PINS: (3, 3), PROFILE: (3, 3)}
    output, summary, entries = retried_night(tmp_path, dask_address, PINS_AND_VIDEOS, pages, [None, *DOWN])
    assert summary.status == "complete" and summary.resumes == 1, summary
    assert paid_twice(entries) == 0
    _, manifest = only_manifest(output)
    files = [output / path for _, path, _ in manifest.all_files()]
    assert all(f.exists() for f in files), files
    on_disk = {p for t in ("pinboard_pins", "short_video_videos") for p in parquet_files(output, t)}
    assert on_disk == set(files), "no file of the run but those its manifest names"
    assert landed_rows(output, "pinboard_pins") == sum(
        q["records"] for q in manifest.queries if q["endpoint"] == PINS
    )
    db = output / "harvest.duckdb"
    states = dict(rows(db, "SELECT query_id, status FROM query_state"))
    assert set(states.values()) == {"complete"} and len(states) == len(TOPICS) + 1, states
    assert history_rows(output) == PINS_KEPT == scalar(db, "SELECT count(*) FROM pinboard_pins")


def test_a_resume_of_a_merged_run_whose_retry_left_no_merged_file_lands_its_kept_queries_again(
    merged_night: tuple[Path, Any], prefect_harness: None, dask_address: str, tmp_path: Path
) -> None:
    """A flow retry of a merged run removes its files, then lands its kept queries again: where they land no
    row, no merged file is left to say the run was merged, and a kill then leaves a `running` manifest naming
    no file while the journal's summaries name round files gone into the merged one. That state, made here on
    a real merged night: the next `harvest run` resumes it, lands the kept queries from their raw pages, pays
    nothing, and every landed row is in the Parquet once."""
    output = tmp_path / "out"
    shutil.copytree(merged_night[0], output)
    (merged,) = parquet_files(output, "pinboard_pins")
    merged.unlink()
    path, _ = only_manifest(output)
    plain = json.loads(path.read_text())
    runner = {"kind": "dask", "address": dask_address, "round_pages": 1}
    queries = [{"id": "pins", "endpoint": PINS, "for_each": {"query": TOPICS}}]
    with running(CONFIG) as sb:  # the night's sandbox again (a run resumes against the service it ran on)
        killed = {"status": "running", "finished": None, "files": [], "loaded": False, "service": sb.base_url}
        path.write_text(json.dumps({**plain, **killed}))
        spec = job_spec(sb.base_url, output, queries, name="merge-job", credits=1000, runner=runner)
        summary = run_flow(write_spec(tmp_path, spec))
        assert not data_entries(sb), "nothing asked of the service again"
    assert summary.status == "complete" and summary.resumes == 1, summary
    _, manifest = only_manifest(output)
    files = [output / p for _, p, _ in manifest.all_files()]
    assert files and all(f.exists() for f in files), files
    assert landed_rows(output, "pinboard_pins") == manifest.records == 65
    assert history_rows(output) == PINS_KEPT


def test_a_rebuild_of_a_retried_run_with_merged_and_round_files_lands_each_row_once(
    prefect_harness: None, dask_address: str, tmp_path: Path, api_key: str
) -> None:
    """A flow retry of a merged run whose failed query has one page: the kept queries land into a merged file,
    the retried query's one round file is too few to merge, so the run has both. `harvest rebuild` lands
    every query into one writer again: no row twice, no file left behind."""
    pages = {PINS: (3, 3), PROFILE: (1, 1)}
    output, summary, _ = retried_night(tmp_path, dask_address, PINS_AND_VIDEOS, pages, DOWN)
    assert summary.status == "complete" and summary.resumes == 1, summary
    _, before = only_manifest(output)
    assert before.files and any(q["files"] for q in before.queries), "the run has merged and round files"
    result = CliRunner().invoke(app, ["rebuild", str(output)])
    assert result.exit_code == 0, result.output
    _, manifest = only_manifest(output)
    for table, endpoint in (("pinboard_pins", PINS), ("short_video_videos", PROFILE)):
        records = sum(q["records"] for q in manifest.queries if q["endpoint"] == endpoint)
        assert records and landed_rows(output, table) == records, table
    on_disk = {p for t in ("pinboard_pins", "short_video_videos") for p in parquet_files(output, t)}
    assert on_disk == {output / p for _, p, _ in manifest.all_files()}
    assert history_rows(output) == PINS_KEPT


def test_an_export_of_a_retried_merged_run_holds_every_row_of_it(
    prefect_harness: None, dask_address: str, tmp_path: Path, api_key: str
) -> None:
    """Its one query fails after two pages: the run's end merges them into `<run>-rounds`. Prefect retries the
    flow: the merged file goes (a retired name), the query lands its pages again, goes on, and the end merges
    them under the same name. An export then sends that file and must not delete it as retired."""
    pages = {PROFILE: (3, 3)}
    output, summary, _ = retried_night(tmp_path, dask_address, [VIDEOS], pages, [None, None, *DOWN])
    to = tmp_path / "lake"
    assert summary.status == "complete" and summary.resumes == 1, summary
    _, manifest = only_manifest(output)
    assert [Path(p).name for _, p, _ in manifest.files] == [f"{manifest.run_id}-rounds.parquet"]
    result = CliRunner().invoke(app, ["export", str(output), "--to", str(to)])
    assert result.exit_code == 0, result.output
    sent = sorted((to / "short_video_videos").rglob("*.parquet"))
    assert [p.name for p in sent] == [f"{manifest.run_id}-rounds.parquet"], sent
    assert sum(pq.read_metadata(p).num_rows for p in sent) == manifest.records > 0


def test_merged_files_stay_when_the_manifest_on_disk_names_them(tmp_path: Path) -> None:
    """The run's end could not be written after its merge. Before the rename: the manifest on disk names the
    round files, so the merged ones go. After it (the directory's sync failed): it names the merged files, so
    they stay, and the round files go at the next load. Either way each row is in the Parquet once."""
    layout, started = OutputLayout(tmp_path), dt.datetime(2026, 12, 4, 3, 0, tzinfo=dt.UTC)
    queries = round_files(layout, "r1", started, 3)
    write_manifest(layout, manifest_of(started, "running", queries))
    merged = merge_rounds(layout, manifest_of(started, "complete", queries))
    assert merged
    unpublish(layout, "r1", merged)
    assert not any(p.exists() for p in merged) and landed_rows(tmp_path, "pins") == 6
    ended = manifest_of(started, "complete", queries)
    merged = merge_rounds(layout, ended)
    write_manifest(layout, ended)
    unpublish(layout, "r1", merged)
    assert merged and all(p.exists() for p in merged)
    assert len(drop_merged(layout, ended)) == 3 and landed_rows(tmp_path, "pins") == 6
