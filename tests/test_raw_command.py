"""`harvest raw`: a night's stored pages printed as JSON lines, readable without harvest's internals."""

from __future__ import annotations

import json
from pathlib import Path

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
