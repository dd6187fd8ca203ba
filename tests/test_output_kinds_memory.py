"""A nightly job's load reads what every earlier run declared without holding every earlier run's manifest: a
manifest lists each query of its run, so a night of 5,000 queries writes ~7 MB of it, and a load that held every
night's manifest at once grew by all of them together (a year of such nights: gigabytes, at each load)."""

from __future__ import annotations

import shutil
import tracemalloc
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import orjson
import pyarrow as pa
import yaml
from typer.testing import CliRunner

from harvest.connectors.catalog.declarations import EndpointDecl, plain
from harvest.flows.cli import app
from harvest.flows.handoff.export import ExportReport, export_increment
from harvest.flows.handoff.rebuild import RebuildReport, rebuild
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import (
    RunHead,
    RunManifest,
    all_manifests,
    output_kinds,
    read_manifest,
    run_heads,
    write_manifest,
)
from harvest.tasks.output.packed_summaries import PackedSummaries
from harvest.tasks.output.run_list import RunRow, run_rows
from tests.declared_helpers import declaration
from tests.flow_helpers import rows

THINGS = "/v1/x/things"
DECLARED = {THINGS: plain(THINGS, EndpointDecl.model_validate(declaration()))}
"""What a run of a job that declares an endpoint keeps in its manifest (the plain form)."""


def _night(layout: OutputLayout, n: int, queries: int) -> None:
    summaries = [
        {"query_id": f"videos[handle=account{q:05d}]", "endpoint": "/v3/short-video/profile/videos",
         "status": "complete", "pages": 1, "records": 1, "credits": 1, "next_cursor": None, "error": None,
         "extraction": {"tables": {"short_video_videos": {"seen": 1, "kept": 1, "misfits": {}}}}}
        for q in range(queries)
    ]  # fmt: skip
    write_manifest(
        layout,
        RunManifest(
            run_id=f"20261201T0000{n:02d}Z-{n:06x}", job="nightly", spec_hash="h", service="https://api.example",
            started=f"2026-12-01T00:00:{n:02d}+00:00", finished=None, status="complete", budget=10**6,
            credits_spent=queries, queries=summaries, declared=DECLARED if n == 0 else {},
        ),
    )  # fmt: skip


def _peak(read: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        read()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


NIGHTS = 12


def _nights(tmp_path: Path, nights: int = NIGHTS) -> tuple[OutputLayout, int]:
    """An output of `nights` nightly runs of 3,000 queries, and the traced peak of reading one manifest whole."""
    layout = OutputLayout(tmp_path / "out")
    for n in range(nights):
        _night(layout, n, queries=3000)
    first = layout.raw_root / f"20261201T000000Z-{0:06x}" / "manifest.json"
    return layout, _peak(lambda: read_manifest(first))


def test_a_load_reads_earlier_nights_declarations_one_manifest_at_a_time(tmp_path: Path) -> None:
    layout, one_night = _nights(tmp_path)
    # the nights as another process finds them: no head read yet (the writer knows the heads of what it wrote)
    shutil.copytree(layout.root, tmp_path / "elsewhere")
    layout = OutputLayout(tmp_path / "elsewhere")
    every_night = _peak(lambda: output_kinds(layout))
    again = _peak(lambda: output_kinds(layout))  # later in the same process: the heads are known
    kinds = output_kinds(layout)
    assert "things" in kinds  # the first night's declaration still names its table
    assert "short_video_videos" in kinds
    # holding every night's manifest at once took twelve nights' worth; one at a time, about one night's
    assert every_night < 2 * one_night, (every_night / 2**20, one_night / 2**20)
    assert again < one_night / 10, (again / 2**20, one_night / 2**20)


def test_the_list_of_runs_reads_each_nights_manifest_once_and_keeps_its_totals(tmp_path: Path) -> None:
    """`harvest runs` and `harvest load` list every run: a year of nightly fan-outs held at once was gigabytes."""
    layout, one_night = _nights(tmp_path)
    listed: list[RunRow] = []
    every_night = _peak(lambda: listed.extend(run_rows(layout)))
    assert [r.manifest.run_id for r in listed] == [f"20261201T0000{n:02d}Z-{n:06x}" for n in range(NIGHTS)]
    assert {(r.state, r.pages, r.records, r.credits) for r in listed} == {("complete", 3000, 3000, 3000)}
    assert all(r.manifest.queries == [] for r in listed)  # the rows keep the totals, not every query
    assert every_night < 2 * one_night, (every_night / 2**20, one_night / 2**20)


def test_an_export_of_last_night_does_not_read_the_nights_it_sent_before(tmp_path: Path) -> None:
    """A nightly export sends the night's run: the year of nights before it, sent already, is told from their
    heads (it held every night's manifest at once, then read each whole)."""
    layout, one_night = _nights(tmp_path)
    for m in all_manifests(layout):
        write_manifest(layout, replace(m, loaded=True))
    destination = tmp_path / "warehouse"
    destination.mkdir()
    first = export_increment(layout, str(destination))
    assert len(first.runs) == NIGHTS  # every night sent once
    again: list[ExportReport] = []
    every_night = _peak(lambda: again.append(export_increment(layout, str(destination))))
    assert again[0].runs == []  # nothing new
    assert every_night < one_night / 10, (every_night / 2**20, one_night / 2**20)


def test_a_rebuild_reads_one_nights_manifest_at_a_time(tmp_path: Path) -> None:
    """`harvest rebuild` builds DuckDB anew from every run (a lost or damaged file): it held every night's
    manifest at once, a year of nightly fan-outs gigabytes, before it loaded the first."""
    layout, one_night = _nights(tmp_path, NIGHTS // 2)
    report: list[RebuildReport] = []
    every_night = _peak(lambda: report.append(rebuild(layout)))
    assert report[0].loaded == [f"20261201T0000{n:02d}Z-{n:06x}" for n in range(NIGHTS // 2)]
    assert rows(layout.db, "SELECT count(*), count(DISTINCT run_id) FROM query_state") == [
        (3000 * NIGHTS // 2, NIGHTS // 2)
    ]
    assert every_night < 2 * one_night, (every_night / 2**20, one_night / 2**20)


def test_the_plan_learns_from_the_last_nights_one_manifest_at_a_time(tmp_path: Path) -> None:
    """`harvest plan` (a nightly job's `--check` before it runs) learns what a night costs from the last twelve
    nights: it held their manifests whole, all at once (a wide nightly job's: ~0.9 GB)."""
    layout, one_night = _nights(tmp_path)
    spec = tmp_path / "nightly.yaml"
    spec.write_text(
        yaml.safe_dump({
            "name": "nightly", "output": str(layout.root), "budget": {"credits": 100},
            "queries": [{"id": "videos", "endpoint": "/v3/short-video/profile/videos", "params": {"sort_by": "latest"},
                         "for_each": {"handle": ["account00000", "account00001"]}}],
        })
    )  # fmt: skip
    CliRunner().invoke(app, ["plan", str(spec)])  # the command's imports, paid once in a process
    printed: list[str] = []
    every_night = _peak(lambda: printed.append(CliRunner().invoke(app, ["plan", str(spec)]).output))
    assert "average of the last 3 nights" in printed[0], printed[0]
    # one manifest read whole, and the five fields of each query of the twelve nights it keeps: 2.1x (the
    # twelve manifests held together: 12x and more)
    assert every_night < 3 * one_night, (every_night / 2**20, one_night / 2**20)


def test_the_run_just_written_is_listed_without_reading_its_manifest_again(tmp_path: Path) -> None:
    """A run's end lists the runs (its load, its summary) right after writing its manifest."""
    layout, one_night = _nights(tmp_path, 1)
    heads: list[RunHead] = []
    listed = _peak(lambda: heads.extend(run_heads(layout)))
    assert [(h.run_id, h.status, h.loaded) for h in heads] == [
        (f"20261201T000000Z-{0:06x}", "complete", False)
    ]
    assert heads[0].declared == orjson.loads(orjson.dumps(DECLARED))  # as a reader of the file finds it
    assert output_kinds(layout)["things"] == output_kinds(OutputLayout(tmp_path / "out"))["things"]
    assert listed < one_night / 10, (listed / 2**20, one_night / 2**20)


def test_harvest_load_reads_the_waiting_nights_one_manifest_at_a_time(tmp_path: Path) -> None:
    """`harvest load` after weeks of loads refused (DuckDB held by a dashboard): it read every waiting night's
    manifest before it loaded the first."""
    layout, one_night = _nights(tmp_path, NIGHTS // 2)
    printed: list[str] = []
    arrows_own, system = pa.default_memory_pool(), pa.system_memory_pool()
    assert arrows_own.backend_name != "system"
    before = (arrows_own.num_allocations(), system.num_allocations())
    every_night = _peak(lambda: printed.append(CliRunner().invoke(app, ["load", str(layout.root)]).output))
    # the bookkeeping's Arrow tables (500 queries each) come from the system allocator: mimalloc kept the pages
    # of such small tables (a 40,000-query night's load peaked 48 MB higher), the system one hands them back
    # (what Arrow allocates in C++ without a pool given still comes from mimalloc, the process default there)
    from_mimalloc, from_system = (
        arrows_own.num_allocations() - before[0],
        system.num_allocations() - before[1],
    )
    assert from_system > from_mimalloc, (from_system, from_mimalloc)  # 12,528 and 9,936; before: 0 and 22,464
    assert printed[0].count("loaded run ") == NIGHTS // 2, printed[0]
    assert all(m.loaded for m in all_manifests(layout))
    assert rows(layout.db, "SELECT count(*) FROM query_state") == [(3000 * NIGHTS // 2,)]
    # one manifest read, loaded and written back: 1.9x (24 nights held together: 5x a manifest of before; six
    # nights, the test's, together more than 2.5x)
    assert every_night < 2.5 * one_night, (every_night / 2**20, one_night / 2**20)


def test_a_wide_nights_manifest_is_written_a_query_at_a_time(tmp_path: Path) -> None:
    """The end of a night writes its manifest with every query's summary (~1 KB each): made as one document
    first, a 40,000-query night held 40 MB more at its end. Read back, it is the night as it was."""
    layout = OutputLayout(tmp_path / "out")
    summaries = [
        {"query_id": f"comments[url=https://v.example/{q:07d}]", "status": "complete", "pages": 1, "records": 10,
         "credits": 1, "next_cursor": {"cursor": f"c{q}"}, "error": None, "files": [],
         "extraction": {"tables": {"short_video_comments": {"kept": 10, "misfits": {}, "text": "é" * 700}}}}
        for q in range(3000)
    ]  # fmt: skip
    night = RunManifest(
        run_id="20261201T000000Z-000001", job="nightly", spec_hash="h", service="https://api.example",
        started="2026-12-01T00:00:00+00:00", finished=None, status="complete", budget=10**6, credits_spent=3000,
        queries=PackedSummaries(summaries), declared=DECLARED, files=[("t", "parquet/t/a.parquet", 3)],
    )  # fmt: skip
    path = layout.manifest_file(night.run_id)
    held = _peak(lambda: write_manifest(layout, night))
    assert held < path.stat().st_size / 20, (held, path.stat().st_size)
    back = read_manifest(path)
    assert back.queries == summaries
    assert back == replace(
        night, queries=summaries, files=[["t", "parquet/t/a.parquet", 3]], declared=back.declared
    )
    assert back.declared == orjson.loads(orjson.dumps(DECLARED))
    write_manifest(layout, replace(back, queries=[]))  # a run that ended before any query
    assert read_manifest(path).queries == [] and read_manifest(path).run_id == night.run_id
    write_manifest(layout, back)  # as `harvest load` writes back what it read (dicts)
    assert read_manifest(path).queries == summaries
