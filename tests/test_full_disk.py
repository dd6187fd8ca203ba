"""The machine's own faults: a disk that fills during a run stops it cleanly, and the next run finishes it.

A real filesystem fills: a tmpfs of 64 MB is mounted for the job's output, and a filler file leaves just
enough room for the run to fill it while writing its raw pages, its Parquet, or DuckDB (sizes measured by a
reference run of the same job), in the flow's process or on Dask workers. Then the filler goes, as a user frees
space, and the same command runs again. Each time: one clear line, no traceback, exit 75 (EX_TEMPFAIL); the
rerun lands every record once and pays again for at most `concurrency` pages (those paid but not stored when
the disk filled).

Mounting needs privileges the tests have on the machines CI runs on (root); where they do not, the tests are
skipped, saying why.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from harvest.sandbox.config import Quirks, SandboxConfig
from harvest.sandbox.wire.billing import LedgerEntry
from harvest.sandbox.wire.serving import RunningSandbox, running
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import all_manifests
from tests.crawl_helpers import data_entries
from tests.endpoints import FEED, PINS
from tests.flow_helpers import (
    BIG_BALANCE,
    HARVEST,
    ROOT,
    SECRET_KEY,
    expected_keys,
    job_spec,
    key_set,
    rows,
    subprocess_env,
    write_spec,
)
from tests.process_helpers import SWITCHED_NIGHT, finish, killed_then_switched_to_dask, start_run, wait_until
from tests.sandbox_gate import gated

TOPICS = [f"topic {c}" for c in "abcdef"]
CONCURRENCY = 4
DISK_MB = 64
"""Room for the 10-query Dask resume, and for two nights of the job and their load (one night writes ~7 MB: raw
pages, Parquet, DuckDB)."""
CONFIG = SandboxConfig(
    api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (30, 30)}, page_size=50,
    quirks=Quirks(dangling_last_cursor=False, repeat_items=False),
)  # fmt: skip


def _mount(where: Path) -> str | None:
    """Mount a small tmpfs at `where`; why not, when it cannot be done here."""
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    return None if done.returncode == 0 else (done.stderr.strip() or "mount failed")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    why = _mount(disk)
    if why is not None:
        pytest.skip(f"cannot mount a small filesystem here ({why}): run as root to fill a real disk")
    try:
        yield disk
    finally:
        # Lazily: a process the test started may still hold a file there. A mount left behind outlives the
        # session under pytest's garbage folder, so a failure to unmount fails the test, saying why.
        done = subprocess.run(["umount", "-l", str(disk)], capture_output=True, text=True)
        assert not _mounted(disk), f"the small filesystem at {disk} is still mounted: {done.stderr.strip()}"


def _mounted(where: Path) -> bool:
    return any(line.split()[1] == str(where) for line in Path("/proc/mounts").read_text().splitlines())


def spec(path: Path, base_url: str, output: Path, topics: list[str] = TOPICS, **more: Any) -> Path:
    queries = [{"id": "pins", "endpoint": PINS, "for_each": {"query": topics}}]
    job = job_spec(
        base_url,
        output,
        queries,
        name="filling",
        credits=10_000,
        concurrency=CONCURRENCY,
        min_free_mb=0,
        **more,
    )
    return write_spec(path.parent, job, path.name)


def harvest_run(spec_path: Path, tmp_path: Path, api_url: str) -> subprocess.CompletedProcess[str]:
    env = subprocess_env(tmp_path, HARVEST_API_KEY=SECRET_KEY, PREFECT_API_URL=api_url)
    return subprocess.run(
        [str(HARVEST), "run", str(spec_path)], env=env, capture_output=True, text=True, timeout=300
    )


def size_of(path: Path) -> int:
    return (
        sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        if path.is_dir()
        else path.stat().st_size
    )


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, prefect_api_url: str) -> dict[str, int]:
    """What the job writes on a disk with room: bytes of raw/ (pages, journal, attempt logs), parquet/, DuckDB."""
    tmp = tmp_path_factory.mktemp("reference")
    with running(CONFIG) as sb:
        done = harvest_run(spec(tmp / "job.yaml", sb.base_url, tmp / "out"), tmp, prefect_api_url)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    out = tmp / "out"
    return {
        "raw": size_of(out / "raw"),
        "parquet": size_of(out / "parquet"),
        "db": size_of(out / "harvest.duckdb"),
    }


def fill(disk: Path, leave: int) -> Path:
    """A filler file leaving `leave` bytes free on `disk`."""
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    filler = disk / "filler"
    with filler.open("wb") as f:
        f.truncate(0)
        f.write(b"\0" * max(0, free - leave))
    return filler


def disk_line(said: str, output: Path) -> str:
    """The one line a run stopped by the full disk says, naming the output's path."""
    lines = [line for line in said.splitlines() if "no space left on the device" in line]
    assert len(lines) == 1 and str(output) in lines[0], said[-3000:]
    return lines[0]


def freed_and_run_again(filler: Path, job: Path, tmp_path: Path, prefect_api_url: str) -> str:
    """The user frees space and runs the same command: it ends well; its stderr."""
    filler.unlink()
    finished = harvest_run(job, tmp_path, prefect_api_url)
    assert finished.returncode == 0, (finished.stdout + finished.stderr)[-3000:]
    return finished.stderr


def stopped_run(output: Path) -> str:
    """The id of the job's one run in `output`."""
    (run,) = (output / "raw").glob("*/manifest.json")
    return run.parent.name


def assert_every_pin_once(output: Path, topics: list[str]) -> Path:
    """The job's DuckDB holds every pin of the full crawl, each once; its path."""
    db = output / "harvest.duckdb"
    assert key_set(db, "pinboard_pins") == set(
        expected_keys([(PINS, {"query": t}) for t in topics], CONFIG)["pinboard_pins"]
    )
    assert rows(db, "SELECT count(*) = count(DISTINCT (search_query, id)) FROM pinboard_pins") == [(True,)]
    return db


@pytest.mark.scenario
@pytest.mark.parametrize("where", ["raw", "parquet", "duckdb"])
def test_a_disk_that_fills_stops_the_run_in_one_line_and_the_next_run_finishes_it(
    prefect_harness: None,
    prefect_api_url: str,
    reference: dict[str, int],
    small_disk: Path,
    tmp_path: Path,
    where: str,
) -> None:
    room = {
        "raw": reference["raw"] // 2,  # the raw pages fill it half-way through the crawl
        "parquet": reference["raw"] + reference["parquet"] // 3,  # the pages fit, their Parquet does not
        "duckdb": reference["raw"] + reference["parquet"] + reference["db"] // 4,  # all but the load
    }[where]
    output = small_disk / "out"
    with running(CONFIG) as sb:
        job = spec(tmp_path / "job.yaml", sb.base_url, output)
        filler = fill(small_disk, room)
        stopped = harvest_run(job, tmp_path, prefect_api_url)
        said = stopped.stdout + stopped.stderr
        assert stopped.returncode == 75, said[-3000:]
        assert "Traceback" not in said and "ERROR" not in said, said[-3000:]
        line = disk_line(said, output)
        assert ("stopped: " if where != "duckdb" else "not loaded: ") in line
        assert "resumes the run" in line or "loads the run" in line
        paid_before = len(data_entries(sb))
        if where == "duckdb":  # the run paid for everything: the printed command, pasted, pays nothing again
            assert "then pays for a new run of the job" in line, line
            (printed,) = re.findall(r"`([^`]+)` loads the run without paying", line)
            filler.unlink()
            env = subprocess_env(tmp_path, HARVEST_API_KEY=SECRET_KEY, PREFECT_API_URL=prefect_api_url)
            pasted = subprocess.run(
                ["bash", "-c", printed], env=env, capture_output=True, text=True, timeout=300
            )
            assert pasted.returncode == 0 and f"loaded run {stopped_run(output)}" in pasted.stdout, pasted
            assert len(data_entries(sb)) == paid_before, "the pasted command paid again"
        else:
            freed_and_run_again(filler, job, tmp_path, prefect_api_url)
        entries = data_entries(sb)

    db = assert_every_pin_once(output, TOPICS)
    assert rows(db, "SELECT status FROM runs ORDER BY started") == [("complete",)]  # the one run
    asked = Counter((e.params["query"], e.params.get("cursor")) for e in entries)
    twice = sum(n - 1 for n in asked.values())
    assert twice <= CONCURRENCY, f"{twice} pages paid twice"


def test_a_run_is_refused_before_paying_when_the_disk_is_below_its_floor(
    small_disk: Path, tmp_path: Path, sandbox: RunningSandbox
) -> None:
    job = spec(tmp_path / "job.yaml", sandbox.base_url, small_disk / "out")
    text: dict[str, Any] = yaml.safe_load(job.read_text())
    job.write_text(yaml.safe_dump({**text, "min_free_mb": 2 * DISK_MB}))
    paid = len(sandbox.ledger)
    refused = subprocess.run(
        [str(HARVEST), "run", str(job)], env=subprocess_env(tmp_path, HARVEST_API_KEY=SECRET_KEY),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert refused.returncode == 75, refused.stderr
    assert f"{small_disk} has " in refused.stderr
    assert f"MB free, below the floor of {2 * DISK_MB} MB" in refused.stderr
    assert "min_free_mb" in refused.stderr and "Traceback" not in refused.stderr
    assert len(sandbox.ledger) == paid, "a refused run sent a request"


def test_a_run_on_a_disk_with_no_room_left_is_refused_before_paying_as_a_full_disk(
    small_disk: Path, tmp_path: Path, sandbox: RunningSandbox
) -> None:
    """With the floor switched off (`min_free_mb: 0`), the job's lock is the first write a run makes: on a full
    disk it was refused with exit 2, a spec's mistake, where a cron wrapper waits for 75 to try again."""
    output = small_disk / "out"
    job = spec(tmp_path / "job.yaml", sandbox.base_url, output)
    paid = len(sandbox.ledger)
    fill(small_disk, 0)
    refused = subprocess.run(
        [str(HARVEST), "run", str(job)], env=subprocess_env(tmp_path, HARVEST_API_KEY=SECRET_KEY),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    said = refused.stdout + refused.stderr
    assert refused.returncode == 75, said
    assert "nothing was sent" in disk_line(said, output) and "Traceback" not in said, said
    assert len(sandbox.ledger) == paid, "a refused run sent a request"


@pytest.mark.parametrize("room", [4 << 10, 8 << 10], ids=["no room for the manifest", "none for the journal"])
def test_a_new_run_whose_first_writes_the_disk_refuses_stops_in_one_line_before_paying(
    prefect_harness: None, prefect_api_url: str, small_disk: Path, tmp_path: Path, room: int
) -> None:
    """Room for the job's lock but not for the run's first manifest, or not for its journal's first line: the
    flow ended on an OSError that Prefect printed with its traceback. Now one line, exit 75, nothing paid, and
    the same command, once space is freed, lands every pin once."""
    output = small_disk / "out"
    with running(CONFIG) as sb:
        job = spec(tmp_path / "job.yaml", sb.base_url, output)
        output.mkdir()
        filler = fill(small_disk, room)
        stopped = harvest_run(job, tmp_path, prefect_api_url)
        said = stopped.stdout + stopped.stderr
        assert stopped.returncode == 75, said[-3000:]
        assert "Traceback" not in said and "Prefect's API" not in said, said[-3000:]
        disk_line(said, output)
        assert data_entries(sb) == [], "a run the disk stopped before it began paid"
        freed_and_run_again(filler, job, tmp_path, prefect_api_url)
    assert_every_pin_once(output, TOPICS)


@pytest.mark.scenario
def test_a_rebuild_and_an_export_the_disk_stops_say_so_in_one_line_and_leave_what_was_there(
    prefect_harness: None, prefect_api_url: str, small_disk: Path, tmp_path: Path
) -> None:
    """`harvest rebuild` on a full disk ended with DuckDB's traceback and exit 1, `harvest export` to a full
    destination with exit 1 (a failed export, not a machine to fix): both now say the path in one line and exit
    75, the database and the destination as they were; once space is freed the same commands work."""
    output, lake = small_disk / "out", small_disk / "lake"
    with running(CONFIG) as sb:
        assert (
            harvest_run(
                spec(tmp_path / "job.yaml", sb.base_url, output), tmp_path, prefect_api_url
            ).returncode
            == 0
        )
    db = assert_every_pin_once(output, TOPICS)
    before = rows(db, "SELECT count(*) FROM pinboard_pins")
    filler = fill(small_disk, 64 << 10)
    env = subprocess_env(tmp_path, HARVEST_API_KEY=SECRET_KEY)
    commands = [["rebuild", str(output)], ["export", str(output), "--to", str(lake)]]
    for command in commands:
        done = subprocess.run([str(HARVEST), *command], env=env, capture_output=True, text=True, timeout=300)
        said = done.stdout + done.stderr
        assert done.returncode == 75, said[-3000:]
        assert "Traceback" not in said and "no space left on" in said.lower() and str(small_disk) in said, (
            said
        )
    assert rows(db, "SELECT count(*) FROM pinboard_pins") == before
    assert not list(output.glob(".harvest.duckdb.rebuild*")) and not list(lake.rglob("_SUCCESS"))
    filler.unlink()
    for command in commands:
        done = subprocess.run([str(HARVEST), *command], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert rows(db, "SELECT count(*) FROM pinboard_pins") == before and list(lake.rglob("_SUCCESS"))


def _export(output: Path, to: Path, fmt: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = subprocess_env(tmp_path, HOME=str(tmp_path), PYICEBERG_HOME=str(tmp_path))  # no user catalog
    env = {k: v for k, v in env.items() if not k.startswith("PYICEBERG_CATALOG__")}
    command = [str(HARVEST), "export", str(output), "--to", str(to), "--format", fmt]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.scenario
def test_a_table_export_to_a_read_only_or_full_destination_says_so_in_one_line(
    prefect_harness: None, prefect_api_url: str, small_disk: Path, tmp_path: Path
) -> None:
    """`--format iceberg` to a read-only destination ended with SQLAlchemy's traceback ("unable to open database
    file", exit 1): its catalog was opened outside the export's handling. To a full one, or `--format delta` to
    either, the error line carried the library's lines (the SQL statement and its parameters, Rust's
    `Error: Os {...}`). Each now says the path and why in one line, exit 75, nothing recorded; once the
    destination takes writes, the same command exports every pin."""
    output = tmp_path / "out"
    with running(CONFIG) as sb:
        night = harvest_run(spec(tmp_path / "job.yaml", sb.base_url, output), tmp_path, prefect_api_url)
    assert night.returncode == 0, night.stderr[-3000:]
    pins = rows(output / "harvest.duckdb", "SELECT count(*) FROM pinboard_pins")[0][0]
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    try:
        for fmt in ("delta", "iceberg"):
            done = _export(output, small_disk / fmt, fmt, tmp_path)
            said = done.stdout + done.stderr
            assert done.returncode == 75, said[-3000:]
            assert said.count("\n") == 1 and said.startswith("error: "), said[-3000:]
            assert "read-only file system" in said.lower() and str(small_disk / fmt) in said, said
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)
    filler = fill(small_disk, 96 << 10)
    for fmt in ("delta", "iceberg"):
        done = _export(output, small_disk / fmt, fmt, tmp_path)
        said = done.stdout + done.stderr
        (line,) = [line for line in said.splitlines() if line.startswith("error: ")]
        assert done.returncode == 75 and "Traceback" not in said, said[-3000:]
        # deltalake's Rust threads may print a panic of their own on stderr before it: not harvest's to stop
        assert ("no space left on device" in line.lower() or "disk is full" in line) and "[SQL:" not in line
    assert rows(output / "harvest.duckdb", "SELECT count(*) FROM exports") == [(0,)]
    filler.unlink()
    for fmt in ("delta", "iceberg"):
        done = _export(output, small_disk / fmt, fmt, tmp_path)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    exported = rows(
        output / "harvest.duckdb", "SELECT kind, sum(rows) FROM exports GROUP BY kind ORDER BY kind"
    )
    assert exported == [("delta", pins), ("iceberg", pins)], exported


@pytest.mark.scenario
def test_a_rebuild_on_a_disk_nearly_full_loses_no_run_whatever_the_room_left(
    prefect_harness: None, prefect_api_url: str, small_disk: Path, tmp_path: Path
) -> None:
    """A rebuild's new database takes its rows in its log first; with room for the log but not for folding it
    into the file, DuckDB's checkpoint at close failed quietly, the file without the log replaced the old one:
    exit 0 and a run (and the exports' record) gone. At every room from half the database to three times it,
    a rebuild either ends whole or stops with exit 75 and the old database as it was."""
    output = small_disk / "out"
    with running(CONFIG) as sb:
        job = spec(tmp_path / "job.yaml", sb.base_url, output)
        for _ in range(2):  # two nights
            assert harvest_run(job, tmp_path, prefect_api_url).returncode == 0
    env = subprocess_env(tmp_path, HARVEST_API_KEY=SECRET_KEY)
    lake = tmp_path / "lake"
    subprocess.run([str(HARVEST), "export", str(output), "--to", str(lake)], env=env, check=True, timeout=300)
    db = output / "harvest.duckdb"
    whole = rows(
        db, "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM exports), count(*) FROM requests"
    )
    assert whole[0][:2] == (2, 2), whole
    outcomes = []
    for eighths in range(4, 25, 2):
        filler = fill(small_disk, size_of(db) * eighths // 8)
        done = subprocess.run(
            [str(HARVEST), "rebuild", str(output)], env=env, capture_output=True, text=True, timeout=300
        )
        filler.unlink()
        said = done.stdout + done.stderr
        assert done.returncode in (0, 75) and "Traceback" not in said, said[-3000:]
        assert (
            rows(
                db,
                "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM exports), count(*) FROM requests",
            )
            == whole
        ), said[-2000:]
        assert not list(output.glob(".harvest.duckdb.rebuild*"))
        outcomes.append(done.returncode)
    assert 75 in outcomes and 0 in outcomes, outcomes  # the sweep reached both sides


def paid_again(entries: list[LedgerEntry], first: int) -> int:
    """Pages the stopped run (its first `first` entries) was billed for and the resume paid for again."""
    before = {page(e) for e in entries[:first] if e.credits}
    return sum(1 for e in entries[first:] if e.credits and page(e) in before)


def page(entry: LedgerEntry) -> tuple[Any, ...]:
    return (entry.path, tuple(sorted((k, str(v)) for k, v in entry.params.items())))


@pytest.mark.scenario
def test_on_dask_a_disk_that_fills_pays_at_most_concurrency_pages_twice(
    prefect_harness: None,
    prefect_api_url: str,
    reference: dict[str, int],
    small_disk: Path,
    tmp_path: Path,
) -> None:
    """Two workers, ten queries in a round: the disk fills while the third and fourth page, and the six tasks
    still queued start on a full disk. Each must see it before it pays, not after: they have ledgers of their
    own, so the first task's stop does not reach them. A task that checked only after paying would pay one page
    it could not keep (9 pages paid twice here), and one that did not check would fail at its journal.

    On the cluster harvest starts itself (`workers: 2`), as a user's run does, which the run stops at its end
    (a shared cluster outlives the run): on that path the rerun once left pins out, not yet explained."""
    topics = [f"topic {c}" for c in "abcdefghij"]
    output = small_disk / "out"
    with running(CONFIG) as sb:
        job = spec(tmp_path / "job.yaml", sb.base_url, output, topics, runner={"kind": "dask", "workers": 2})
        filler = fill(small_disk, reference["raw"] // 3)  # ~60 of the first round's 200 pages fit
        stopped = harvest_run(job, tmp_path, prefect_api_url)
        said = stopped.stdout + stopped.stderr
        assert stopped.returncode == 75, said[-3000:]
        harvest_frame = rf'File "{re.escape(str(ROOT))}/(connectors|tasks|flows)/'
        assert not re.search(harvest_frame, said), said[-3000:]  # no traceback of harvest (Dask logs its own)
        assert not re.search(r"\| ERROR +\| harvest", said), said[-3000:]
        line = disk_line(said, output)
        assert "stopped: " in line and "resumes the run" in line
        first = len(data_entries(sb))
        freed_and_run_again(filler, job, tmp_path, prefect_api_url)
        entries = data_entries(sb)

    db = assert_every_pin_once(output, topics)
    assert rows(db, "SELECT status FROM runs") == [("complete",)]
    again = paid_again(entries, first)
    assert again <= CONCURRENCY, f"{again} pages paid twice"


@pytest.mark.parametrize("leave", [4096, 8192])
def test_a_database_the_disk_cut_short_as_it_was_made_is_not_left_behind(
    small_disk: Path, leave: int
) -> None:
    """The first load of a job meets a disk with room for DuckDB's header and not its first blocks: the file it
    leaves no DuckDB opens, and the next run refused it as another program's database ("is not a readable DuckDB
    database ... move it aside"), a run the disk had stopped never finished by itself. The file is dropped; one
    that opens stays."""
    import duckdb

    from harvest.tasks.database.connection import write_connection

    db = small_disk / "out" / "harvest.duckdb"
    filler = fill(small_disk, leave)
    with pytest.raises(duckdb.IOException, match="No space left"), write_connection(db) as con:
        con.execute("CREATE TABLE t AS SELECT range AS x, repeat('x', 100) AS y FROM range(100000)")
    filler.unlink()
    assert not db.exists() and not db.with_name("harvest.duckdb.wal").exists()
    with write_connection(db) as con:  # the next load makes it anew
        con.execute("CREATE TABLE t AS SELECT 1 AS x")
    assert rows(db, "SELECT x FROM t") == [(1,)]


@pytest.mark.scenario
def test_on_dask_a_query_whose_round_used_its_grant_as_the_disk_stopped_the_run_is_resumed(
    prefect_harness: None, prefect_api_url: str, small_disk: Path, tmp_path: Path
) -> None:
    """Two queries in one Dask round of 3 pages each: the pins pay their 3 pages (their grant, not the
    budget) while the gate holds the feed's one page; then the disk fills, and the feed's 8 MB answer cannot be
    kept: its task stops the run. The pins' round, settled after that stop, must end `interrupted` with its
    cursor, as the run's stop: ended `budget_exhausted` (its grant's words), the resume would never ask for
    its 27 remaining pages."""
    noise = base64.b64encode(os.urandom(6 << 20)).decode()  # 8 MB the raw store's compression cannot shrink
    post = {"post": {"uri": "at://big/1", "text": noise}}
    big = json.dumps({"feed": [post], "cursor": None}).encode()
    output = small_disk / "out"
    queries = [
        {"id": "feed", "endpoint": FEED, "params": {"handle": "big.example"}},
        {"id": "pins", "endpoint": PINS, "params": {"query": "topic a"}},
    ]
    with gated(CONFIG, replay={FEED: big}) as sb:
        runner = {"kind": "dask", "workers": 2, "round_pages": 3}
        job = write_spec(
            tmp_path,
            job_spec(sb.base_url, output, queries, name="filling", credits=10_000, concurrency=2,
                     min_free_mb=0, runner=runner),
        )  # fmt: skip
        sb.gate.let_through(3, PINS)  # the pins' round goes through; the feed's page waits
        proc = start_run(job, tmp_path, prefect_api_url)
        sb.gate.wait_frozen(proc)
        wait_until(  # the round's end: its pages paid and landed, before the disk fills
            lambda: list((output / "parquet" / "pinboard_pins").glob("*/*.parquet")), proc, "the pins landed"
        )
        filler = fill(small_disk, 2 << 20)
        sb.gate.open()
        code, out, err = finish(proc)
        assert code == 75, (out + err)[-3000:]
        freed_and_run_again(filler, job, tmp_path, prefect_api_url)
    db = output / "harvest.duckdb"
    assert key_set(db, "pinboard_pins") == set(
        expected_keys([(PINS, {"query": "topic a"})], CONFIG)["pinboard_pins"]
    )
    assert rows(db, "SELECT status FROM runs") == [("complete",)]


def test_a_floor_is_said_in_the_megabytes_the_spec_wrote(tmp_path: Path) -> None:
    """`min_free_mb: 99999999` was said back as "the floor of 1e+08 MB"."""
    from harvest.flows.run.preflight import LowDiskSpace, check_output_dir

    for floor, said in (
        (99_999_999, "99,999,999"),
        (2.5e12, "2,500,000,000,000"),
        (0.5 * 2**40, "549,755,813,888"),
        (10_000_000.5, "10,000,000.5"),
    ):
        with pytest.raises(LowDiskSpace) as refused:
            check_output_dir(tmp_path / "out", min_free_mb=floor)
        assert f"below the floor of {said} MB a run needs" in str(refused.value)


@pytest.mark.scenario
@pytest.mark.parametrize("leave", [0, 12 << 10], ids=["no room", "room for the manifest"])
def test_a_dask_resume_that_cannot_land_its_ended_queries_again_stops_before_paying(
    prefect_harness: None,
    prefect_api_url: str,
    dask_address: str,
    small_disk: Path,
    tmp_path: Path,
    leave: int,
) -> None:
    """A night killed -9 on the local runner, resumed after `runner:` changed to Dask: the resume first lands the
    queries that ended before the kill again from their raw pages. On a disk without room for them it said
    "Prefect's API did not answer" and "the run failed: OSError" (exit 1); it stops as any run the disk stops:
    one line naming the output, exit 75, nothing paid, and the next run finishes it."""
    output = small_disk / "out"
    with gated(SWITCHED_NIGHT) as sb:
        job = killed_then_switched_to_dask(sb, output, tmp_path, prefect_api_url, dask_address, min_free_mb=0)
        paid = len(data_entries(sb))
        filler = fill(small_disk, leave)
        code, out, err = finish(start_run(job, tmp_path, prefect_api_url))
        said = out + err
        assert code == 75, said[-3000:]
        assert "Traceback" not in said and "Prefect's API" not in said, said[-3000:]
        assert "nothing was paid" in disk_line(said, output)
        assert len(data_entries(sb)) == paid, "the stopped resume paid"
        freed_and_run_again(filler, job, tmp_path, prefect_api_url)
    (run,) = all_manifests(OutputLayout(output))
    assert run.status == "complete", run.status
    on_disk = sorted((output / "parquet" / "pinboard_pins").glob("date=*/*.parquet"))
    assert sum(pq.read_metadata(p).num_rows for p in on_disk) == run.records == 39


def test_a_full_or_locked_disk_is_told_apart_as_each_library_says_it() -> None:
    """The lakehouse exports' libraries say a full disk only in their messages (SQLite, an Iceberg catalog's;
    deltalake, from its Rust module), and DuckDB an immutable file as "Operation not permitted": each was a
    traceback or exit 1 where a full disk is exit 75. Text alone is not a fault in any other error."""
    import sqlite3

    import duckdb
    from deltalake.exceptions import DeltaError

    from harvest.tasks.output.machine_fault import as_machine_fault

    full = [
        sqlite3.OperationalError("database or disk is full"),
        DeltaError("Generic error: Generic LocalFileSystem error: No space left on device (os error 28)"),
    ]
    assert all((f := as_machine_fault(e)) is not None and f.full for e in full)
    locked = as_machine_fault(
        duckdb.IOException('Cannot open file "/out/harvest.duckdb": Operation not permitted')
    )
    assert locked is not None and not locked.full and locked.path == "/out/harvest.duckdb"
    assert as_machine_fault(ValueError("No space left on device")) is None


def test_a_librarys_error_is_said_in_one_line_without_its_statement_or_colours() -> None:
    """What a table export puts into its one error line: SQLAlchemy's driver error without the SQL and
    parameters it appends (a catalog's paths), a Rust error's lines joined, a terminal's colour codes gone."""
    import sqlite3

    from deltalake.exceptions import DeltaError
    from sqlalchemy.exc import OperationalError

    from harvest.flows.handoff.lakehouse.lakehouse_export import said_by

    catalog = OperationalError(
        "UPDATE iceberg_tables SET x=?", ("/lake/t",), sqlite3.OperationalError("database or disk is full")
    )
    assert said_by(catalog) == "OperationalError: database or disk is full"
    rust = DeltaError("Could not create local directory: /lake/t\n\x1b[31mError\x1b[0m: Os { code: 30 }\n")
    assert said_by(rust) == "DeltaError: Could not create local directory: /lake/t; Error: Os { code: 30 }"
