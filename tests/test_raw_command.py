"""`harvest raw`: a night's stored pages printed as JSON lines, readable without harvest's internals; and a path
that is no output directory, refused by `raw`, `rebuild` and `load` alike."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from harvest.flows.cli import app
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import all_manifests
from tests.flow_helpers import SECRET_KEY
from tests.nightly_helpers import night

runner = CliRunner()


def test_raw_prints_every_paid_page(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    output = tmp_path / "out"
    run_id = night(tmp_path, output, 0, monkeypatch)
    (manifest,) = all_manifests(OutputLayout(output))

    result = runner.invoke(app, ["raw", str(output)])
    assert result.exit_code == 0, result.output
    pages = [json.loads(line) for line in result.stdout.splitlines()]
    assert sum(p["credits"] for p in pages) == manifest.credits_spent
    assert {p["run_id"] for p in pages} == {run_id} and SECRET_KEY not in result.stdout

    pins = runner.invoke(app, ["raw", str(output), "--run", run_id, "--query", "pins"])
    assert pins.exit_code == 0, pins.output
    pin_pages = [json.loads(line) for line in pins.stdout.splitlines()]
    # two pages of pins and the page that ends pin search (`"cursor": "-end-"`, no pins), paid as well
    assert [p["page"] for p in pin_pages] == list(range(len(pin_pages))) and len(pin_pages) == 3
    assert pin_pages[-1]["body"]["cursor"] == "-end-" and pin_pages[-1]["cursor_out"] is None
    assert all(p["query_id"] == "pins" and p["status_code"] == 200 for p in pin_pages)
    assert pin_pages[0]["cursor_in"] is None and pin_pages[1]["cursor_in"] == pin_pages[0]["cursor_out"]
    assert isinstance(pin_pages[0]["body"], dict), "a JSON answer is printed as JSON, not as a string"

    unknown = runner.invoke(app, ["raw", str(output), "--run", "20990101T000000Z-nope"])
    assert unknown.exit_code == 2 and run_id in unknown.output
    no_query = runner.invoke(app, ["raw", str(output), "--query", "nope"])
    assert no_query.exit_code == 2 and "nope" in no_query.output


def test_a_path_that_is_no_output_directory_is_refused_by_load_as_by_raw_rebuild_and_export(
    tmp_path: Path,
) -> None:
    """`harvest load data/creatr` (a typo) said "nothing to load" and exited 0, so a cron line with a typo
    succeeded every night; `raw` and `rebuild` refused it. An output directory with nothing to load is still
    no error."""
    for path in (tmp_path / "creatr", tmp_path):  # a path that does not exist, a directory without raw/
        said = {command: runner.invoke(app, [command, str(path)]) for command in ("load", "raw", "rebuild")}
        said["export"] = runner.invoke(app, ["export", str(path), "--to", str(tmp_path / "to")])
        assert {c: r.exit_code for c, r in said.items()} == {"load": 2, "raw": 2, "rebuild": 2, "export": 2}
        for result in said.values():  # one wording, said in one place (`flows.commands.output_arg`)
            assert result.stderr.startswith(f"error: {path}: not a harvest output directory (no raw/)"), (
                result
            )
        assert not (tmp_path / "creatr").exists()
    (tmp_path / "raw").mkdir()  # an output directory no run has finished in yet
    nothing = runner.invoke(app, ["load", str(tmp_path)])
    assert nothing.exit_code == 0 and "nothing to load" in nothing.stdout, nothing.output
    (tmp_path / "raw").rmdir()
    duckdb.connect(str(tmp_path / "harvest.duckdb")).close()  # only the database (its raw pages moved away)
    kept = runner.invoke(app, ["load", str(tmp_path)])
    assert kept.exit_code == 0 and "nothing to load" in kept.stdout, kept.output
