"""The output directory is checked before Prefect starts and before any request: a run that could not land its
data is refused in a second (exit 2), naming the path and what to do, and leaves everything as it was. Every
check of `harvest run` comes before Prefect's temporary server is started (the last tests)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from harvest.connectors.catalog.endpoints import all_kinds
from harvest.flows.cli import app
from harvest.flows.orchestrator import temporary_server
from harvest.flows.run.preflight import check_output_dir
from harvest.flows.spec import UsageError
from harvest.tasks.database.record_tables import ensure_table
from harvest.tasks.output.job_lock import acquire, is_locked
from harvest.tasks.output.layout import OutputLayout
from tests.flow_helpers import HoldDuckDB
from tests.process_helpers import imported, messages
from tests.spec_texts import VALID

ROOT = Path(__file__).parent.parent
runner = CliRunner()


def make_job_output(root: Path, rows: int = 3) -> Path:
    """An output directory as a run leaves it: a DuckDB file with rows, and a run manifest under raw/."""
    (root / "raw" / "20260101T000000Z-abc123").mkdir(parents=True)
    (root / "raw" / "20260101T000000Z-abc123" / "manifest.json").write_text("{}")
    con = duckdb.connect(str(root / "harvest.duckdb"))
    ensure_table(con, all_kinds()["forum_posts"])  # the table as the load step makes it
    con.execute("INSERT INTO forum_posts (id) SELECT range::VARCHAR FROM range(?)", [rows])
    con.close()
    return root


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def refusal(path: Path) -> str:
    with pytest.raises(UsageError) as caught:
        check_output_dir(path)
    assert caught.value.exit_code == 2
    return str(caught.value)


# ------------------------------------------------------------------------------------------- accepted
def test_new_empty_and_existing_outputs_are_fine_and_left_as_they_were(tmp_path: Path) -> None:
    check_output_dir(tmp_path / "data" / "new-job")
    assert not (tmp_path / "data").exists()  # checking creates nothing
    (tmp_path / "empty").mkdir()
    check_output_dir(tmp_path / "empty")
    job = make_job_output(tmp_path / "job")
    before = sha(job / "harvest.duckdb")
    check_output_dir(job)
    assert sha(job / "harvest.duckdb") == before
    check_output_dir(tmp_path / "job-2")  # a sibling of another job's output is its own


def test_a_database_busy_in_another_process_is_no_reason_to_refuse(
    tmp_path: Path, duckdb_holder: HoldDuckDB
) -> None:
    """The run lands Parquet and says to run `harvest load`; refusing it would lose a scheduled run."""
    job = make_job_output(tmp_path / "job")
    with duckdb_holder(job / "harvest.duckdb", mark=False):
        with pytest.raises(duckdb.IOException, match="lock"):
            duckdb.connect(str(job / "harvest.duckdb"), read_only=True)
        check_output_dir(job)


# ------------------------------------------------------------------------------------------- refused
def test_an_output_that_is_a_file_or_under_one_is_refused(tmp_path: Path) -> None:
    afile = tmp_path / "notes.txt"
    afile.write_text("keep me")
    assert refusal(afile) == (
        f"output: {afile} is a file, not a directory; allowed: a directory harvest can create "
        "(--output or `output:` in the spec)"
    )
    assert f"output: {afile / 'x' / 'y'} is under {afile}, which is a file, not a directory" in refusal(
        afile / "x" / "y"
    )
    assert afile.read_text() == "keep me"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_an_output_in_a_directory_without_write_permission_is_refused(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    try:
        assert "is not writable; allowed: a directory you can write to" in refusal(locked / "job")
    finally:
        locked.chmod(0o755)


@pytest.mark.parametrize("how", ["the output", "a directory above it"])
def test_an_output_through_a_link_to_nothing_is_refused(tmp_path: Path, how: str) -> None:
    """`exists()` says no and the nearest existing directory is writable, but no mkdir can make it (root neither)."""
    link = tmp_path / "data"
    link.symlink_to(tmp_path / "gone" / "data")
    output = link if how == "the output" else link / "job"
    assert refusal(output) == (
        f"output: {output} cannot be created: {link} is a symbolic link that leads nowhere (to "
        f"{tmp_path / 'gone' / 'data'}); allowed: a directory harvest can create (--output or `output:` in the spec)"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"] and not (tmp_path / "gone").exists()


CANNOT_MKDIR = Path("/sys")
"""sysfs: writable by its permission bits, yet no directory can be made in it, not even by root."""


@pytest.mark.skipif(not (CANNOT_MKDIR / "kernel").is_dir(), reason="no sysfs here")
def test_an_output_where_no_directory_can_be_made_is_refused(tmp_path: Path) -> None:
    output = CANNOT_MKDIR / "harvest-out" / "job"
    assert refusal(output).startswith(f"output: {output} cannot be created")
    assert "; allowed: a directory you can write to" in refusal(output)
    assert not list(CANNOT_MKDIR.glob(".harvest-check-*"))


@pytest.mark.parametrize("inside", ["raw", "raw/20260101T000000Z-abc123/mine", "parquet/forum_posts"])
def test_an_output_inside_another_jobs_data_is_refused(tmp_path: Path, inside: str) -> None:
    other = make_job_output(tmp_path / "other")
    message = refusal(other / inside)
    top = inside.split("/")[0]
    assert message.startswith(
        f"output: {other / inside} is inside the {top}/ directory of another job's output"
    )
    assert f"({other})" in message and "allowed: a directory of its own" in message


def corrupt(db: Path, how: str) -> None:
    if how == "text":
        db.write_text("id,body\n1,hello\n")  # what a `COPY ... TO 'harvest.duckdb'` by mistake leaves
    elif how == "truncated":
        con = duckdb.connect(str(db))
        con.execute("CREATE TABLE t AS SELECT range AS id FROM range(100000)")
        con.close()
        data = db.read_bytes()
        db.write_bytes(data[: len(data) // 3])
    elif how == "overwritten":
        con = duckdb.connect(str(db))
        con.execute("CREATE TABLE t AS SELECT range AS id FROM range(100000)")
        con.close()
        with db.open("r+b") as f:
            f.seek(3 * 4096)
            f.write(b"\xff" * 8192)
    else:
        db.mkdir()


@pytest.mark.parametrize("how", ["text", "truncated", "overwritten", "directory"])
def test_a_database_duckdb_cannot_open_is_refused_with_how_to_recover(tmp_path: Path, how: str) -> None:
    job = tmp_path / "job"
    job.mkdir()
    db = job / "harvest.duckdb"
    corrupt(db, how)
    message = refusal(job)
    assert message.startswith(f"output: {db} is not a readable DuckDB database (")
    assert f"Move it aside (mv {db} {db}.broken)" in message
    assert f"earlier runs stay in {job / 'parquet'}" in message


# -------------------------------------------------------------------------------------- from the CLI
def harvest_run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`harvest run` in its own process, recording imports: a refused run must not even import Prefect."""
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "harvest.flows.cli", "run", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HARVEST_API_KEY": "k"},
    )


@pytest.fixture
def spec(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "job.yaml"
    path.write_text(VALID)
    yield path


def test_run_into_a_path_under_a_file_is_refused_before_prefect_starts(tmp_path: Path, spec: Path) -> None:
    (tmp_path / "afile").write_text("x")
    proc = harvest_run(str(spec), "--base-url", "sandbox", "--output", "afile/out", cwd=tmp_path)
    assert proc.returncode == 2
    assert messages(proc.stderr) == [
        f"error: output: afile/out is under {tmp_path / 'afile'}, which is a file, not a directory; allowed: a "
        "directory harvest can create (--output or `output:` in the spec)"
    ]
    assert not {m for m in imported(proc.stderr) if m.split(".")[0] == "prefect"}


def test_run_onto_a_corrupt_database_is_refused_and_leaves_it_as_it_was(tmp_path: Path, spec: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    db = job / "harvest.duckdb"
    corrupt(db, "text")
    before = sha(db)
    proc = harvest_run(str(spec), "--base-url", "http://127.0.0.1:9", "--output", str(job), cwd=tmp_path)
    assert proc.returncode == 2
    (line,) = messages(proc.stderr)
    assert line.startswith(f"error: output: {db} is not a readable DuckDB database") and "mv " in line
    assert not {m for m in imported(proc.stderr) if m.split(".")[0] == "prefect"}
    assert sha(db) == before and sorted(p.name for p in job.iterdir()) == ["harvest.duckdb"]


def test_the_specs_output_is_checked_when_there_is_no_output_option(tmp_path: Path) -> None:
    other = make_job_output(tmp_path / "other")
    path = tmp_path / "job.yaml"
    path.write_text(VALID + f"output: {other / 'raw' / 'mine'}\n")
    result = runner.invoke(app, ["run", str(path), "--base-url", "sandbox"])
    assert result.exit_code == 2
    assert f"error: output: {other / 'raw' / 'mine'} is inside the raw/ directory" in result.stderr
    assert not (other / "raw" / "mine").exists()


def test_demo_into_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    result = runner.invoke(app, ["demo", "--output", str(tmp_path / "afile")])
    assert result.exit_code == 2
    assert f"error: output: {tmp_path / 'afile'} is a file, not a directory" in result.stderr


@pytest.mark.skipif(not (CANNOT_MKDIR / "kernel").is_dir(), reason="no sysfs here")
def test_run_into_a_directory_that_cannot_be_made_is_refused_without_a_traceback(spec: Path) -> None:
    output = CANNOT_MKDIR / "harvest-out"
    result = runner.invoke(app, ["run", str(spec), "--base-url", "sandbox", "--output", str(output)])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        f"error: output: {output} cannot be created: making a directory in {CANNOT_MKDIR} "
    )
    assert "Traceback" not in result.output + result.stderr


# ----------------------------------------------------------------- nothing starts before every check passed
class ServerStarted(BaseException):
    """Raised where Prefect's temporary server process would have been spawned (not an Exception: harvest turns
    those into an error line)."""


@pytest.fixture
def server_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Every start of Prefect's temporary server, observed in the module that starts it.

    No Prefect API is configured (the environment's and the profile's are hidden), so a run starts one. The start
    records whether the job's lock was held, and stops the run there: nothing is spawned."""
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PREFECT_PROFILES_PATH", str(tmp_path / "no-profiles.toml"))
    assert temporary_server.configured_api_url() is None
    started: list[bool] = []

    def start(self: temporary_server.TemporaryServer) -> None:
        started.append(is_locked(OutputLayout(tmp_path / "out").lock_file("brand-watch")))
        raise ServerStarted

    monkeypatch.setattr(temporary_server.TemporaryServer, "__init__", start)
    return started


REFUSED = {
    "invalid spec": "budget.credits: ",
    "output under a file": "which is a file, not a directory",
    "output through a broken link": "is a symbolic link that leads nowhere",
    "output with a question mark": "has a '?' in it, where DuckDB cannot keep its database",
    "database of another program": "has tables harvest cannot load into (runs: primary key none",
    "key in the service URL": "--base-url: the URL carries a credential before the host",
    "no API key": "HARVEST_API_KEY",
    "Prefect wait not a number": "HARVEST_PREFECT_WAIT_SECONDS='abc': not a number; allowed: a number of seconds",
}


def refused_input(tmp_path: Path, spec: Path, what: str) -> tuple[list[str], dict[str, str]]:
    """`harvest run` arguments and environment for one kind of bad input."""
    args, env = (
        [str(spec), "--base-url", "sandbox", "--output", str(tmp_path / "out")],
        {"HARVEST_API_KEY": "k"},
    )
    if what == "invalid spec":
        spec.write_text(VALID.replace("credits: 100", 'credits: "100"'))
    elif what == "output under a file":
        (tmp_path / "afile").write_text("x")
        args[-1] = str(tmp_path / "afile" / "out")
    elif what == "output through a broken link":
        (tmp_path / "out").symlink_to(tmp_path / "gone")
    elif what == "output with a question mark":  # DuckDB logged to `a.wal?b/...`: the load failed, paid
        args[-1] = str(tmp_path / "a?b" / "out")
    elif what == "database of another program":
        (tmp_path / "out").mkdir()
        duckdb.connect(str(tmp_path / "out" / "harvest.duckdb")).execute("CREATE TABLE runs (id INT)").close()
    elif what == "key in the service URL":
        args[2] = "http://SECRET@127.0.0.1:9"
    elif what == "no API key":
        args[2], env = "http://127.0.0.1:9", {"HARVEST_API_KEY": ""}
    elif what == "Prefect wait not a number":  # was read as the default (60 s) without a word
        env["HARVEST_PREFECT_WAIT_SECONDS"] = "abc"
    return args, env


@pytest.mark.parametrize("what", list(REFUSED))
def test_bad_input_is_refused_before_prefects_server_starts(
    tmp_path: Path, spec: Path, server_starts: list[bool], what: str
) -> None:
    args, env = refused_input(tmp_path, spec, what)
    result = runner.invoke(app, ["run", *args], env=env)
    assert result.exit_code == 2, result.output + result.stderr
    assert isinstance(result.exception, SystemExit) and result.stderr.startswith("error: ")
    assert REFUSED[what] in result.stderr
    assert server_starts == []


UNWRITABLE = {
    "under a file": "which is a file, not a directory",
    "no write permission": "is not writable; allowed: a directory you can write to",
    "where no directory can be made": "cannot be created",
}


def unwritable_output(tmp_path: Path, how: str) -> Path:
    """An output directory that cannot be written, made the `how` way. Under a file refuses root too (no
    mkdir makes a directory inside a regular file), and so does sysfs; a mode-0555 parent only refuses a user."""
    if how == "under a file":
        (tmp_path / "afile").write_text("x")
        return tmp_path / "afile" / "out"
    if how == "no write permission":
        if os.geteuid() == 0:
            pytest.skip("root writes anywhere")
        (tmp_path / "locked").mkdir(mode=0o555)
        return tmp_path / "locked" / "out"
    if not (CANNOT_MKDIR / "kernel").is_dir():
        pytest.skip("no sysfs here")
    return CANNOT_MKDIR / "harvest-out" / "out"


@pytest.mark.parametrize("how", list(UNWRITABLE))
def test_an_output_that_cannot_be_written_is_refused_before_anything_is_paid(
    tmp_path: Path, server_starts: list[bool], how: str
) -> None:
    """README: before Prefect starts or anything is sent, `harvest run` checks that the output directory can be
    made and written. The spec's own `output:` against a real sandbox: exit 2 naming the path, not one request
    (not even the free balance), no Prefect server, nothing made."""
    from harvest.sandbox.config import SandboxConfig
    from harvest.sandbox.wire.serving import running

    output = unwritable_output(tmp_path, how)
    try:
        with running(SandboxConfig(api_keys={"k": 100})) as sb:
            path = tmp_path / "job.yaml"
            path.write_text(VALID + f"service: {{base_url: '{sb.base_url}'}}\noutput: {output}\n")
            before = sorted(p.name for p in tmp_path.iterdir())
            result = runner.invoke(app, ["run", str(path)], env={"HARVEST_API_KEY": "k"})
            sent = sb.ledger
            billed = sb.billed_total()
    finally:
        if (tmp_path / "locked").exists():
            (tmp_path / "locked").chmod(0o755)
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output + result.stderr
    assert result.stderr.startswith(f"error: output: {output}") and UNWRITABLE[how] in result.stderr
    assert sent == [] and billed == 0, "nothing is sent before the output is known to be writable"
    assert server_starts == []
    assert sorted(p.name for p in tmp_path.iterdir()) == before and not output.exists()


def test_a_job_already_running_is_refused_before_prefects_server_starts(
    tmp_path: Path, spec: Path, server_starts: list[bool]
) -> None:
    """The lock is held as `harvest run` holds it while its Prefect flow starts, before its run has an id: the
    refusal says so (it said only `pid ..., host ..., since ...`, as if no run were named for want of care)."""
    held = acquire(OutputLayout(tmp_path / "out").lock_file("brand-watch"))  # as another harvest process does
    try:
        result = runner.invoke(
            app, ["run", str(spec), "--base-url", "sandbox", "--output", str(tmp_path / "out")]
        )
    finally:
        held.release()
    said = " ".join(result.stderr.split())
    assert result.exit_code == 2 and "another harvest run of this job is running on this output: " in said
    assert f"a run starting since {held.since[:19]} UTC, not yet given a run id (pid {os.getpid()}, " in said
    assert server_starts == []


def test_a_valid_run_starts_prefects_server_right_after_the_checks(
    tmp_path: Path, spec: Path, server_starts: list[bool]
) -> None:
    """The control: the same run with good input does start it, holding the job's lock, before importing Prefect."""
    with pytest.raises(ServerStarted):
        runner.invoke(app, ["run", str(spec), "--base-url", "sandbox", "--output", str(tmp_path / "out")])
    assert server_starts == [True]
    assert not is_locked(OutputLayout(tmp_path / "out").lock_file("brand-watch"))  # released on the way out


def test_a_server_that_cannot_start_is_one_line_and_frees_the_lock(
    tmp_path: Path, spec: Path, server_starts: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    def start(self: temporary_server.TemporaryServer) -> None:
        raise OSError("[Errno 12] Cannot allocate memory")

    monkeypatch.setattr(temporary_server.TemporaryServer, "__init__", start)
    result = runner.invoke(
        app, ["run", str(spec), "--base-url", "sandbox", "--output", str(tmp_path / "out")]
    )
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert result.stderr.splitlines() == [
        "error: Prefect's temporary server did not start: OSError: [Errno 12] Cannot allocate memory"
    ]
    assert not is_locked(OutputLayout(tmp_path / "out").lock_file("brand-watch"))


@pytest.mark.parametrize(
    ("name", "value", "allowed"),
    [
        ("HARVEST_DUCKDB_ROW_GROUP_ROWS", "1000", "a positive multiple of 2048"),
        ("HARVEST_DUCKDB_ROW_GROUP_ROWS", "lots", "a positive multiple of 2048"),
        ("HARVEST_DUCKDB_MEMORY_LIMIT", "plenty", "a size such as 64MB"),
        ("HARVEST_DUCKDB_LOCK_WAIT_SECONDS", "a minute", "a number of seconds >= 0"),
        ("HARVEST_DUCKDB_LOCK_WAIT_SECONDS", "-5", "a number of seconds >= 0"),
    ],
)
def test_an_unusable_load_setting_is_refused_before_anything_is_paid(
    spec: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, value: str, allowed: str
) -> None:
    """Found at the load step, the value would fail the run after its pages were paid for."""
    monkeypatch.setenv(name, value)
    output = tmp_path / "out"
    result = runner.invoke(app, ["run", str(spec), "--base-url", "sandbox", "--output", str(output)])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: {name}={value!r}: ") and allowed in line
    assert not output.exists()
    loaded = runner.invoke(app, ["load", str(tmp_path)])
    assert loaded.exit_code == 2 and loaded.stderr.splitlines() == [line]


def test_the_checks_before_the_temporary_server_starts_import_neither_duckdb_nor_httpx(
    tmp_path: Path,
) -> None:
    """Everything before Prefect's temporary server is spawned delays the one-page job (the server boots ~3.5 s
    while harvest imports): DuckDB (~50 ms) and httpx (~45 ms) are imported once it is on its way."""
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from flows.commands import run_job\n"
        "from flows.orchestrator import temporary_server\n"
        "from flows.run.preflight import check_output_dir\n"
        "from flows.spec import load_spec\n"
        "load_spec(Path(sys.argv[1]))\n"
        "check_output_dir(Path(sys.argv[2]))\n"
        "print(sorted(m for m in ('duckdb', 'httpx', 'prefect') if m in sys.modules))\n"
    )
    spec = tmp_path / "job.yaml"
    spec.write_text(VALID)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("HARVEST_DUCKDB_MEMORY_LIMIT", None)  # set, it is checked by DuckDB itself (and imports it)
    proc = subprocess.run(
        [sys.executable, "-c", code, str(spec), str(tmp_path / "out")],
        capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
