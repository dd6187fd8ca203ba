"""The recovery docs/shape-changes.md documents after a shape change, as a user goes through it: a run stops
as `drift`, the catalog learns the new shape, `harvest rebuild` lands the stored pages without a request, and
`harvest run --continue` picks the query up at its saved cursor. In the end the rows are the full crawl and the
sandbox's ledger shows no page paid twice.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
from pathlib import Path

import orjson
import pytest
import yaml
from typer.testing import CliRunner

import harvest.flows.collect  # noqa: F401  (Prefect binds its log handlers on first import: not inside CliRunner)
from harvest.connectors.catalog import job_catalog
from harvest.flows.cli import app
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.drift_shapes import SHAPES
from harvest.sandbox.expected import full_crawl
from harvest.sandbox.wire.serving import running
from tests.crawl_helpers import data_entries
from tests.endpoints import FEED
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, one_query, rows, scalar
from tests.process_helpers import finish, pasted, start_run

PARAMS = {"handle": "nasa.example"}
runner = CliRunner()


def read_items_too(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The fix a user makes in `connectors/catalog/endpoints/microblog-b.yaml`: the posts may also come under
    `items`."""
    fixed = tmp_path / "catalog"
    shutil.copytree(job_catalog.BUILTIN_DIR, fixed)
    text = (fixed / "microblog-b.yaml").read_text(encoding="utf-8")
    assert text.count("at: [feed, post]") == 1
    (fixed / "microblog-b.yaml").write_text(text.replace("at: [feed, post]", "at: [feed, post, items]"))
    monkeypatch.setattr(job_catalog, "BUILTIN_DIR", fixed)
    monkeypatch.setattr(
        job_catalog, "builtin_declarations", functools.cache(job_catalog.builtin_declarations.__wrapped__)
    )
    monkeypatch.setattr(job_catalog, "builtin", functools.cache(job_catalog.builtin.__wrapped__))


def test_rebuild_then_continue_recovers_a_drifted_query_paying_no_page_twice(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages=(3, 3), page_size=5, drift=SHAPES["renamed-list"].drift
    )
    output, db = tmp_path / "out", tmp_path / "out" / "harvest.duckdb"
    with running(config) as sb:
        spec = str(one_query(tmp_path, sb.base_url, FEED, PARAMS))
        drifted = runner.invoke(app, ["run", spec])
        assert drifted.exit_code == 1, drifted.output
        assert "harvest rebuild" in drifted.stderr and "--continue" in drifted.stderr
        assert rows(db, "SELECT status, records FROM query_state") == [("drift", 0)]

        read_items_too(monkeypatch, tmp_path)
        paid = len(sb.ledger)
        rebuilt = runner.invoke(app, ["rebuild", str(output)])
        assert rebuilt.exit_code == 0, rebuilt.output
        assert len(sb.ledger) == paid, "rebuild sent a request"
        assert scalar(db, "SELECT count(*) FROM microblog_b_posts") == 5  # the drifted page, landed
        assert rows(db, "SELECT status, records, lists_missing FROM query_state") == [("drift", 5, 0)]

        continued = runner.invoke(app, ["run", spec, "--continue"])
        assert continued.exit_code == 0, continued.output
        pages = data_entries(sb)
        credits = sb.billed_total()

    posts = full_crawl(FEED, PARAMS, config)["posts"]
    assert sorted(r[0] for r in rows(db, "SELECT uri FROM microblog_b_posts")) == sorted(
        p["uri"] for p in posts
    )
    asked = [orjson.dumps(e.params) for e in pages]
    assert len(asked) == 3 == len(set(asked)), "a page was asked for twice"
    assert credits == 3 == scalar(db, "SELECT sum(credits_spent) FROM runs")
    assert rows(db, "SELECT status FROM runs ORDER BY started") == [("failed",), ("complete",)]


@pytest.mark.scenario
def test_the_commands_a_drifted_night_prints_land_its_pages_and_go_on_pasted_into_a_shell(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """A night on a service that moved a list, as a user meets it: `harvest run` stops the query as drift (exit
    1), prints the `shapes:` that read the list where it is now and, last, the two commands that go on. The
    shapes added to the spec, both commands pasted into a shell as printed (before, they read `harvest rebuild
    OUTPUT --spec SPEC` and `harvest run --continue`: neither runs): the paid pages land without a request, the
    query goes on from the next page, and the rows are the full crawl with no page paid twice."""
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages=(3, 3), page_size=5, drift=SHAPES["renamed-list"].drift
    )
    with running(config) as sb:
        spec = one_query(tmp_path, sb.base_url, FEED, PARAMS)
        code, _, err = finish(start_run(spec, tmp_path, prefect_api_url))
        assert code == 1, err
        (shapes,) = re.findall(r"`shapes: (\{.*?\})`", err)
        spec.write_text(yaml.safe_dump({**yaml.safe_load(spec.read_text()), "shapes": json.loads(shapes)}))
        (line,) = [x for x in err.splitlines() if "stopped on answers harvest could not read" in x]
        rebuild, go_on = re.findall(r"`([^`]+)`", line)
        paid = len(sb.ledger)
        for command in (rebuild, go_on):
            code, _, err = pasted(command, tmp_path, prefect_api_url)
            assert code == 0, (command, err)
            assert command != rebuild or len(sb.ledger) == paid, "rebuild sent a request"
        pages = data_entries(sb)
    db = tmp_path / "out" / "harvest.duckdb"
    posts = full_crawl(FEED, PARAMS, config)["posts"]
    assert sorted(r[0] for r in rows(db, "SELECT uri FROM microblog_b_posts")) == sorted(
        p["uri"] for p in posts
    )
    asked = [orjson.dumps(e.params) for e in pages]
    assert len(asked) == 3 == len(set(asked)), "a page was asked for twice"
