"""A power cut, as the disk is left by one: what the operating system had not written yet is gone. Files are cut
back the way a lost page cache leaves them (a raw pages file shorter than the journal says, a journal's ended line
whose query's pages are not there), then the same `harvest run SPEC` resumes against the sandbox over HTTP: the
user is told, the missing pages are fetched again (the sandbox's ledger), and the tables hold every record once.

The state is made from a real run's files, as a cut just before the run published its Parquet would leave them:
the manifest still `running` (it is synced when written), the journal whole (its ended lines are synced), the raw
pages' tail lost (not synced under `durability: flush`), no Parquet published and nothing loaded.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pytest

from harvest.connectors.catalog import endpoints as catalog
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.expected import crawl
from harvest.sandbox.wire.serving import RunningSandbox, running
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import all_manifests, read_manifest
from harvest.tasks.output.raw_store import RawPageReader
from harvest.tasks.output.replay import replay_pages
from tests.crawl_helpers import data_entries
from tests.endpoints import PINS
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, expected_keys, job_spec, key_set, rows, write_spec
from tests.process_helpers import finish, start_run
from tests.test_kill_after_damaged import killed_then_resumed

TOPICS = ["oak desk", "elm chair", "ash shelf", "fir bench"]
SYNC_THREAD = "sync journal.jsonl"
CONFIG = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (5, 5)}, page_size=4)


def job(sb: RunningSandbox, output: Path) -> dict[str, Any]:
    return job_spec(
        sb.base_url,
        output,
        [{"id": "pins", "endpoint": PINS, "for_each": {"query": TOPICS}}],
        name="nightly",
        credits=10_000,
        concurrency=2,
    )


def frame_ends(path: Path) -> list[int]:
    """The byte offset just past each complete page of a raw file."""
    reader, ends = RawPageReader(path), []
    for _ in reader:
        ends.append(reader.valid_bytes)
    return ends


def cut_power_before_publishing(output: Path, keep_pages: int, run: str | None = None) -> tuple[str, int]:
    """Leave the output as a power cut would have just before the run (the only one, or `run`) published its
    Parquet: the manifest as written at the start, none of its Parquet, nothing of it in DuckDB (an earlier run's
    DuckDB is kept), its last raw pages file (the session the cut came in) cut after `keep_pages` pages. Returns
    the run id and the pages lost."""
    layout = OutputLayout(output)
    (manifest,) = [m for m in all_manifests(layout) if run in (None, m.run_id)]
    started = orjson.loads(layout.manifest_file(manifest.run_id).read_bytes())
    started.update(status="running", finished=None, queries=[], files=[], credits_spent=0, loaded=False)
    layout.manifest_file(manifest.run_id).write_bytes(orjson.dumps(started))
    if run is None:
        for path in [*output.glob("harvest.duckdb*"), *output.rglob("*.parquet")]:
            path.unlink()
    else:
        for path in output.rglob(f"{run}-*.parquet"):
            path.unlink()
        con = duckdb.connect(str(output / "harvest.duckdb"))
        for table in ("runs", "query_state", "requests"):
            con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run])
        con.close()
    raw = layout.raw_files(manifest.run_id)[-1]
    ends = frame_ends(raw)
    os.truncate(raw, ends[keep_pages - 1])
    return manifest.run_id, len(ends) - keep_pages


def landed_once(output: Path, run_id: str) -> None:
    """DuckDB holds the full crawl, each key once; the run's Parquet holds each stored page's records once."""
    db = output / "harvest.duckdb"
    want = expected_keys([(PINS, {"query": t}) for t in TOPICS], CONFIG)
    for table, keys in want.items():
        assert key_set(db, table) == set(keys), table
        assert rows(db, f'SELECT count(*) FROM "{table}"') == [(len(keys),)], table
    stored = Counter[str]()
    for path in OutputLayout(output).raw_files(run_id):
        for raw in RawPageReader(path):
            for page in replay_pages([raw], catalog.get(raw.endpoint)):
                stored[page.raw.query_id] += page.record_count
    parquet = str(output / "parquet" / "*" / "*" / f"{run_id}-*.parquet")
    con = duckdb.connect()
    try:
        landed = dict(
            con.execute(f"SELECT _query_id, count(*) FROM read_parquet('{parquet}') GROUP BY 1").fetchall()
        )
    finally:
        con.close()
    assert landed == {q: n for q, n in stored.items() if n}


@pytest.mark.scenario
def test_ended_queries_whose_raw_pages_a_power_cut_lost_fetch_them_again_and_say_so(
    prefect_api_url: str, tmp_path: Path
) -> None:
    output = tmp_path / "out"
    with running(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb, output))
        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url))
        assert code == 0, out + err
        paid = data_entries(sb)
        run_id, lost = cut_power_before_publishing(output, keep_pages=9)

        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url))
        again = data_entries(sb)[len(paid) :]
    assert code == 0, out + err
    assert len(paid) == 24 and lost == 15  # 5 pages of pins and the `-end-` page, 4 queries
    said = re.search(r"(\d+) queries journaled as ended lack (\d+) of their raw pages", err)
    assert said is not None, err
    assert int(said.group(2)) == lost
    assert f"paid again for {lost} pages of {said.group(1)} queries whose raw pages the disk had lost" in err
    assert len(again) == lost  # exactly the lost pages, each once
    assert {(e.path, str(sorted(e.params.items()))) for e in again} <= {
        (e.path, str(sorted(e.params.items()))) for e in paid
    }
    run = read_manifest(OutputLayout(output).manifest_file(run_id))
    assert run.status == "complete" and run.resumes == 1 and run.loaded
    assert sum(q["pages"] for q in run.queries) == 24
    landed_once(output, run_id)


@pytest.mark.scenario
@pytest.mark.parametrize("keep_pages", [1])
def test_a_raw_file_cut_to_almost_nothing_still_resumes_every_query(
    prefect_api_url: str, tmp_path: Path, keep_pages: int
) -> None:
    """Every query but the first lost all its pages: each starts again from its first page."""
    output = tmp_path / "out"
    with running(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb, output))
        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url))
        assert code == 0, out + err
        paid = len(data_entries(sb))
        run_id, lost = cut_power_before_publishing(output, keep_pages)
        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url))
        again = len(data_entries(sb)) - paid
    assert code == 0, out + err
    assert again == lost == 23 and f"lack {lost} of their raw pages" in err
    landed_once(output, run_id)


def test_what_a_resume_trusts_is_synced_by_default(
    prefect_harness: None, tmp_path: Path, api_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under the default `durability: flush`: the journal's ended lines (from its sync thread as they come, and
    at its close), the manifest (file, then its directories) and, before the run's Parquet is published, its raw
    pages reach the disk (`os.fsync` observed, the run itself untouched)."""
    from tests.flow_helpers import run_flow

    synced: list[str] = []
    threads: list[str] = []
    real_fsync = os.fsync

    def observed(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        threads.append(threading.current_thread().name)
        real_fsync(fd)

    output = tmp_path / "out"
    with running(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb, output))
        monkeypatch.setattr(os, "fsync", observed)
        summary = run_flow(spec)
    (run,) = all_manifests(OutputLayout(output))
    assert summary.status == "complete"
    run_dir = OutputLayout(output).run_dir(run.run_id)
    journal = str(run_dir / "journal.jsonl")
    by = [t for t, p in zip(threads, synced, strict=True) if p == journal]
    assert (
        by[0] != SYNC_THREAD and by[-1] != SYNC_THREAD
    )  # the session line, before a request; the last at close
    assert SYNC_THREAD in by  # the ended queries' lines, from the journal's sync thread (nothing waits on it)
    manifest_syncs = synced.count(str(run_dir / "manifest.json.tmp"))
    assert manifest_syncs >= 3  # written at the start, at the end, once loaded
    assert synced.count(str(run_dir)) >= manifest_syncs and str(output / "raw") in synced
    raw = str(run_dir / "session-0001.pages")
    published = [i for i, p in enumerate(synced) if p.endswith(".parquet.tmp")]
    assert raw in synced and published and synced.index(raw) < published[0]


@pytest.mark.scenario
@pytest.mark.parametrize("damage", ["missing", "empty"])
def test_a_manifest_the_disk_lost_is_made_again_from_the_journal_and_the_run_resumed(
    prefect_api_url: str, tmp_path: Path, damage: str
) -> None:
    """A manifest gone, or left empty (a rename the disk kept without the file's bytes): the run is not forgotten
    (its paid pages would never land) nor does every command fail on it; nothing is paid again."""
    output = tmp_path / "out"
    with running(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb, output))
        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url))
        assert code == 0, out + err
        paid = len(data_entries(sb))
        run_id, lost = cut_power_before_publishing(output, keep_pages=24)
        manifest = OutputLayout(output).manifest_file(run_id)
        if damage == "missing":
            manifest.unlink()
        else:
            manifest.write_bytes(b"")
        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url))
        again = len(data_entries(sb)) - paid
    assert code == 0, out + err
    assert lost == 0 and again == 0
    reason = "missing" if damage == "missing" else "JSONDecodeError"
    assert f"run {run_id} had no readable manifest ({reason}" in err
    assert (
        "made again from its journal as unfinished; the next `harvest run` of job nightly resumes it" in err
    )
    (run,) = all_manifests(OutputLayout(output))
    assert run.run_id == run_id and run.status == "complete" and run.resumes == 1 and run.loaded
    assert (manifest.with_name("manifest.json.damaged").exists()) == (damage == "empty")
    landed_once(output, run_id)


@pytest.mark.scenario
def test_a_continued_query_that_lost_every_page_starts_again_at_its_cursor_not_page_1(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """`--continue` started each query where the run before stopped (its budget); a power cut then took every
    raw page of the continued run: its resume fetches those pages again from the same cursor, and never the
    pages the run before had (page 1 on)."""
    output = tmp_path / "out"
    with running(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb, output))
        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url, "--budget", "8"))
        assert code == 0, out + err
        first = len(data_entries(sb))
        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url, "--continue"))
        assert code == 0, out + err
        second = data_entries(sb)[first:]
        layout = OutputLayout(output)
        continued = all_manifests(layout)[-1]
        (raw,) = layout.raw_files(continued.run_id)
        cut_power_before_publishing(output, keep_pages=1, run=continued.run_id)
        raw.write_bytes(b"")  # not one page of the continued run reached the disk
        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url))
        again = data_entries(sb)[first + len(second) :]
    assert code == 0, out + err
    assert first == 8 and len(second) == 16
    assert f"lack {len(second)} of their raw pages" in err
    key = lambda e: (e.path, str(sorted(e.params.items())))  # noqa: E731
    assert sorted(map(key, again)) == sorted(map(key, second))  # the same pages, none of the first run's
    db = output / "harvest.duckdb"
    want = expected_keys([(PINS, {"query": t}) for t in TOPICS], CONFIG)
    for table, keys in want.items():
        assert key_set(db, table) == set(keys), table


def test_a_sync_that_fails_in_the_journals_thread_is_raised_not_lost(tmp_path: Path) -> None:
    """A disk that cannot sync (here: a pipe, which has nothing to sync) fails the next line or the close, where
    the journal turns it into the run's clean stop; it never passes for a synced line."""
    from harvest.tasks.output.append_file import SyncBehind

    read_end, write_end = os.pipe()
    try:
        behind = SyncBehind(write_end, "pipe")
        behind.request()
        deadline = time.monotonic() + 60  # a hang guard: the thread syncs at once
        while behind.error is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert isinstance(behind.error, OSError)
        with pytest.raises(OSError) as raised:
            behind.close()
        assert raised.value is behind.error
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_query_whose_pages_all_landed_before_the_kill_keeps_its_credits_when_resumed(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """Killed after a query's last page was kept but before its end was journaled: the resume lands its pages,
    pays nothing, and its line and `query_state` say what they cost. They said 0 credits (the run's total and
    its queries' then disagreed: 22 against 26 on a nightly job)."""
    output = tmp_path / "out"
    with running(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb, output))
        assert finish(start_run(spec, tmp_path, prefect_api_url))[0] == 0
        paid = len(data_entries(sb))
        layout = OutputLayout(output)
        (raw,) = layout.raw_files(all_manifests(layout)[0].run_id)
        run_id, _ = cut_power_before_publishing(output, keep_pages=len(frame_ends(raw)))
        journal = layout.journal_file(run_id)
        lines = journal.read_bytes().splitlines(keepends=True)
        journal.write_bytes(b"".join(line for line in lines if not line.startswith(b'{"e":"end"')))
        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url))
        assert len(data_entries(sb)) == paid, "the resume asked for nothing"
    assert code == 0, out + err
    (run,) = all_manifests(layout)
    assert run.resumes == 1 and {q["status"] for q in run.queries} == {"complete"}, run.queries
    assert [q["credits"] for q in run.queries] == [q["pages"] for q in run.queries], run.queries  # 1 a page
    assert sum(q["credits"] for q in run.queries) == run.credits_spent == paid
    said = rows(output / "harvest.duckdb", "SELECT sum(credits) FROM query_state WHERE run_id = ?", [run_id])
    assert said == [(paid,)]


@pytest.mark.scenario
def test_a_page_a_power_cut_lost_beside_a_kept_damaged_answer_is_fetched_again(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """One topic's pins, `max_pages: 3`, the second answer cut short twice (billed, kept, no page), the run killed
    once it was kept, then resumed: the query's raw pages are 4 answers for its 3 pages (page 1 and the damaged
    answer in the first session's file, pages 2 and 3 in the second's). A power cut then took page 3: the 3
    answers left matched the summary's 3 pages, the query was kept as ended and page 3's pins never landed. The
    answers are counted as the summary counts pages: the resume says a page is lacking and asks for page 3 again."""
    params = {"query": TOPICS[0]}
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (6, 6)}, page_size=4,
        fault_plan_by_path={PINS: [None, "truncated", "truncated"]},
    )  # fmt: skip
    three_pages = {
        pin["id"] for page in list(crawl(PINS, params, config))[:3] for pin in page.records["pins"]
    }
    output = tmp_path / "out"
    query = {"id": "pins", "endpoint": PINS, "params": params, "max_pages": 3}
    with running(config) as sb:
        spec = write_spec(tmp_path, job_spec(sb.base_url, output, [query], name="nightly", credits=1000))
        killed_then_resumed(spec, tmp_path, prefect_api_url)
        paid = data_entries(sb)
        run_id, lost = cut_power_before_publishing(
            output, keep_pages=1
        )  # the second session's page 3 is gone
        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url))
        again = data_entries(sb)[len(paid) :]
    assert code == 0, out + err
    assert [e.fault for e in paid] == [None, "truncated", "truncated", None, None] and lost == 1
    assert "1 queries journaled as ended lack 1 of their raw pages" in err, err
    assert [e.params for e in again] == [paid[-1].params]  # page 3, once
    run = read_manifest(OutputLayout(output).manifest_file(run_id))
    assert run.status == "complete" and run.resumes == 2 and run.loaded
    (pins,) = run.queries
    assert (pins["status"], pins["pages"]) == ("max_pages", 3), pins
    assert {pin for (pin,) in rows(output / "harvest.duckdb", "SELECT id FROM pinboard_pins")} == three_pages
