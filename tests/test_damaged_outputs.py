"""`harvest load` and `harvest runs` over an output whose harvest.duckdb a disk, a copy or a hand damaged: one
line naming the file and the rebuild that makes it again, no traceback, and nothing on disk changed. One night
is landed for the module and each test damages a copy of it."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harvest.flows.cli import app
from harvest.flows.console import harvest_line
from tests.nightly_helpers import night

runner = CliRunner()
WIDE = {"COLUMNS": "400"}


@pytest.fixture(scope="module")
def landed(prefect_harness: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One complete night, loaded: read only; each test copies it."""
    root = tmp_path_factory.mktemp("landed")
    with pytest.MonkeyPatch.context() as monkeypatch:
        night(root, root / "out", 0, monkeypatch)
    yield root / "out"


def _copy(landed: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(landed, tmp_path / "out", symlinks=True))


def _files(output: Path) -> dict[str, bytes | None]:
    """Every path under the output and its bytes (None for a directory): what a failed command must not change."""
    return {
        str(p.relative_to(output)): None if p.is_dir() else p.read_bytes() for p in sorted(output.rglob("*"))
    }


def _cut_short(db: Path) -> None:
    """The first 100,000 bytes kept: the header is sound, the blocks it names are gone (a copy that stopped)."""
    with open(db, "r+b") as f:
        f.truncate(100_000)


DAMAGES: dict[str, Callable[[Path], None]] = {
    "empty": lambda db: db.write_bytes(b""),
    "garbage": lambda db: db.write_bytes(os.urandom(5000)),
    "cut short": _cut_short,
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_load_over_a_damaged_database_says_it_in_one_line_and_changes_nothing(
    landed: Path, tmp_path: Path, damage: str
) -> None:
    """A database cut short ended `harvest load` with DuckDB's IOException traceback."""
    output = _copy(landed, tmp_path)
    db = output / "harvest.duckdb"
    DAMAGES[damage](db)
    before = _files(output)
    result = runner.invoke(app, ["load", str(output)], env=WIDE)
    assert result.exit_code == 1, result.output
    assert result.stderr == (
        f"error: {db} is not a DuckDB database file (empty, cut short or overwritten); "
        f"`{harvest_line('rebuild', output)}` makes it again from the landed pages\n"
    )
    assert result.stdout == ""
    assert _files(output) == before


def _unreadable(output: Path, damage: str) -> str:
    """Damage the copy's database; the line `harvest runs` then says."""
    db, rebuild = output / "harvest.duckdb", f"`{harvest_line('rebuild', output)}`"
    if damage == "missing":
        db.unlink()
        return f"{db} does not exist although runs were loaded into it: {rebuild} builds it again from the raw pages"
    if damage == "directory":
        db.unlink()
        db.mkdir()
        return (
            f"{db} is not a file: harvest keeps its DuckDB database there; no run is loaded; move it away, then "
            f"{rebuild} makes the database again from the landed pages"
        )
    DAMAGES[damage](db)
    return (
        f"{db} is not a DuckDB database file (empty, cut short or overwritten): no run is loaded; {rebuild} "
        "makes it again from the landed pages"
    )


@pytest.mark.parametrize("damage", [*DAMAGES, "directory", "missing"])
def test_runs_over_a_database_that_cannot_be_read_calls_no_run_loaded(
    landed: Path, tmp_path: Path, damage: str
) -> None:
    """`harvest runs` trusted the manifests' `loaded` and said `yes` over a database no query could read."""
    output = _copy(landed, tmp_path)
    said = _unreadable(output, damage)
    before = _files(output)
    result = runner.invoke(app, ["runs", str(output)], env=WIDE)
    assert result.exit_code == 0, result.output
    assert result.stderr == f"warning: {said}\n"
    loaded = [line.split("│")[8].strip() for line in result.stdout.splitlines() if "│ nightly" in line]
    assert loaded == ["no"], result.stdout
    assert _files(output) == before


def test_runs_over_a_sound_database_calls_its_runs_loaded(landed: Path, tmp_path: Path) -> None:
    output = _copy(landed, tmp_path)
    result = runner.invoke(app, ["runs", str(output)], env=WIDE)
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    loaded = [line.split("│")[8].strip() for line in result.stdout.splitlines() if "│ nightly" in line]
    assert loaded == ["yes"], result.stdout


def _never_loaded(output: Path) -> None:
    """The database gone and every manifest saying its load never happened: a first night whose load another
    process's lock kept out, landed in Parquet and raw pages only."""
    (output / "harvest.duckdb").unlink()
    for manifest in (output / "raw").glob("*/manifest.json"):
        body = json.loads(manifest.read_text())
        manifest.write_text(json.dumps(body | {"loaded": False}))


def test_sql_where_the_database_is_gone_names_the_command_that_makes_it(landed: Path, tmp_path: Path) -> None:
    """`harvest sql` said "harvest.duckdb does not exist: run a job first" of a job whose runs were all there:
    loaded before (the rebuild makes the file again) or landed and never loaded (the load)."""
    output = _copy(landed, tmp_path)
    (output / "harvest.duckdb").unlink()
    gone = runner.invoke(app, ["sql", str(output), "SELECT 1"], env=WIDE)
    assert gone.exit_code == 1, gone.output
    assert f"`{harvest_line('rebuild', output)}` builds it again" in gone.stderr, gone.stderr
    output = _copy(landed, tmp_path / "again")
    _never_loaded(output)
    unloaded = runner.invoke(app, ["sql", str(output), "SELECT 1"], env=WIDE)
    assert unloaded.exit_code == 1, unloaded.output
    assert f"landed but none is loaded; `{harvest_line('load', output)}` loads them" in unloaded.stderr
    loaded = runner.invoke(app, ["load", str(output)], env=WIDE)
    assert loaded.exit_code == 0, loaded.output
    after = runner.invoke(app, ["sql", str(output), "SELECT count(*) AS n FROM runs"], env=WIDE)
    assert after.exit_code == 0 and "│ 1 │" in after.stdout, after.output


@pytest.mark.parametrize("command", [["runs"], ["sql", "SELECT 1"]])
def test_a_directory_harvest_never_wrote_to_exits_2_as_load_and_export_do(
    tmp_path: Path, command: list[str]
) -> None:
    """A typo in OUTPUT was "no runs found" or "harvest.duckdb does not exist: run a job first", exit 1: a
    scheduled check read a failed night where `load`, `export` and `rebuild` refuse the argument (exit 2)."""
    typo = tmp_path / "ouptut"
    result = runner.invoke(app, [command[0], str(typo), *command[1:]], env=WIDE)
    assert result.exit_code == 2, result.output
    assert f"{typo}: not a harvest output directory (no raw/)" in result.stderr
    assert not typo.exists()
