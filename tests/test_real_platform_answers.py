"""Answers the real platforms send, over real HTTP against the sandbox, through real flow runs: each kind lands its
ordinary records, is paid for once, and the run says what was repaired or why a page could not be read.

The sandbox serves them by name (`harvest sandbox --drift NAME`): a tweet cut in the middle of an emoji, counts as
`NaN`, Latin-1 bytes, a byte order mark, an HTML page where JSON belongs; and on the wire, an answer cut short.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

import harvest.flows.collect  # noqa: F401  (Prefect binds its log handlers on first import: not inside CliRunner)
from harvest.connectors.reading import json_body
from harvest.flows.cli import app
from harvest.sandbox.config import FaultKind, SandboxConfig
from harvest.sandbox.drift_shapes import SHAPES, combine
from harvest.sandbox.expected import full_crawl
from harvest.sandbox.wire.serving import running
from tests.crawl_helpers import data_entries
from tests.endpoints import TWEETS
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, job_spec, rows, scalar, write_spec

PARAMS = {"url": "https://microblog-a.example/i/communities/1234"}
runner = CliRunner()


def spec_of(tmp_path: Path, base_url: str) -> Path:
    return write_spec(
        tmp_path,
        job_spec(
            base_url,
            tmp_path / "out",
            [{"id": "tweets", "endpoint": TWEETS, "params": PARAMS}],
            name="platforms",
        ),
    )


def run(tmp_path: Path, config: SandboxConfig) -> tuple[Any, list[Any], int]:
    """`harvest run` against a sandbox serving `config`: the CLI's result, the sandbox's ledger, its bill."""
    with running(config) as sb:
        result = runner.invoke(app, ["run", str(spec_of(tmp_path, sb.base_url))])
        return result, data_entries(sb), sb.billed_total()


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)


@pytest.mark.scenario
@pytest.mark.parametrize(
    ("shapes", "repairs"),
    [
        (["cut-emoji"], {"lone_surrogate": 1}),
        (["nan-counts"], {"non_finite": 6}),
        (["latin1"], {"not_utf8": 3}),
        (["byte-order-mark"], {"byte_order_mark": 1}),
        (["cut-emoji", "nan-counts", "latin1", "byte-order-mark"], None),
    ],
    ids=["cut-emoji", "nan-counts", "latin1", "byte-order-mark", "all-at-once"],
)
def test_answers_strict_json_refuses_land_every_record_paid_once_and_say_what_was_repaired(
    prefect_harness: None, tmp_path: Path, shapes: list[str], repairs: dict[str, int] | None
) -> None:
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, drift=combine(shapes))
    result, paid, billed = run(tmp_path, config)
    assert result.exit_code == 0, result.output
    db = tmp_path / "out" / "harvest.duckdb"
    tweets = full_crawl(TWEETS, PARAMS, config)["microblog_a_tweets"]
    assert sorted(r[0] for r in rows(db, "SELECT id FROM microblog_a_tweets")) == sorted(
        t["id"] for t in tweets
    )
    assert len(paid) == 1 and billed == 1 == scalar(db, "SELECT sum(credits_spent) FROM runs")
    extraction = json.loads(scalar(db, "SELECT extraction FROM query_state"))
    if repairs is not None:
        assert extraction["repairs"] == repairs
    counted = sum(extraction["repairs"].values())
    assert counted > 0 and scalar(db, "SELECT values_repaired FROM query_state") == counted
    assert scalar(db, "SELECT values_repaired FROM runs") == counted
    assert f"{counted} values were repaired to read answers strict JSON refuses" in result.stderr
    texts = [r[0] for r in rows(db, "SELECT text FROM microblog_a_tweets")]
    if shapes == ["cut-emoji"]:
        assert any(t.endswith("\ufffd") for t in texts)  # the half emoji, as the replacement character
    if shapes == ["latin1"]:
        assert any("caf\ufffd cr\ufffdme, na\ufffdve" in t for t in texts)
    if "nan-counts" in shapes:
        assert scalar(db, "SELECT count(*) FROM microblog_a_tweets WHERE view_count IS NULL") == 1
    raw_rows = [orjson.loads(r[0]) for r in rows(db, "SELECT raw FROM microblog_a_tweets")]
    assert len(raw_rows) == len(tweets)  # every record's JSON is valid UTF-8 JSON again


def test_an_answer_no_reading_takes_is_paid_once_kept_and_ends_its_query_as_drift(
    prefect_harness: None, tmp_path: Path
) -> None:
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, drift=SHAPES["unreadable-tweets"].drift)
    result, paid, billed = run(tmp_path, config)
    assert result.exit_code == 1, result.output
    assert len(paid) == 1 and billed == 1, "an unreadable answer was asked for again"
    db, output = tmp_path / "out" / "harvest.duckdb", tmp_path / "out"
    assert rows(db, "SELECT status, pages, credits, next_cursor FROM query_state") == [("drift", 1, 1, None)]
    assert "could not be read (not JSON" in result.stderr and "kept in the raw store" in result.stderr
    assert "Traceback" not in result.output
    stored = runner.invoke(app, ["raw", str(output)])
    (page,) = [json.loads(line) for line in stored.stdout.splitlines()]
    assert page["status_code"] == 200 and "Maintenance" in page["body"]


def test_a_page_harvest_could_not_read_lands_with_a_rebuild_once_it_can(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An older harvest (here: one without the tolerant reading) paid for a page it could not read; the page was
    kept, and a rebuild with a harvest that reads it lands its records without a request."""
    strict = json_body._tolerant
    monkeypatch.setattr(json_body, "_tolerant", lambda raw: json_body.Body(None, problem="not JSON (strict)"))
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, drift=SHAPES["cut-emoji"].drift)
    with running(config) as sb:
        result = runner.invoke(app, ["run", str(spec_of(tmp_path, sb.base_url))])
        assert result.exit_code == 1 and len(data_entries(sb)) == 1, result.output
        monkeypatch.setattr(json_body, "_tolerant", strict)
        rebuilt = runner.invoke(app, ["rebuild", str(tmp_path / "out")])
        assert rebuilt.exit_code == 0, rebuilt.output
        assert len(data_entries(sb)) == 1, "rebuild sent a request"
    db = tmp_path / "out" / "harvest.duckdb"
    tweets = full_crawl(TWEETS, PARAMS, config)["microblog_a_tweets"]
    assert scalar(db, "SELECT count(*) FROM microblog_a_tweets") == len(tweets) > 0
    assert scalar(db, "SELECT values_repaired FROM query_state") == 1


@pytest.mark.parametrize(
    "fault", [FaultKind.CUT, FaultKind.TRUNCATED], ids=["cut-on-the-wire", "json-ends-early"]
)
def test_an_answer_damaged_once_on_the_wire_is_asked_for_once_more(
    prefect_harness: None, tmp_path: Path, fault: FaultKind
) -> None:
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, fault_plan_by_path={TWEETS: [fault]})
    result, paid, billed = run(tmp_path, config)
    assert result.exit_code == 0, result.output
    assert [e.fault for e in paid] == [fault.value, None] and billed == 2
    db = tmp_path / "out" / "harvest.duckdb"
    assert scalar(db, "SELECT count(*) FROM microblog_a_tweets") == len(
        full_crawl(TWEETS, PARAMS, config)["microblog_a_tweets"]
    )
    assert scalar(db, "SELECT sum(credits_spent) FROM runs") == 2  # the damaged answer was billed too


def test_an_answer_damaged_on_every_try_is_paid_twice_at_most(prefect_harness: None, tmp_path: Path) -> None:
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, fault_plan_by_path={TWEETS: [FaultKind.CUT] * 5}
    )
    result, paid, billed = run(tmp_path, config)
    assert result.exit_code == 1, result.output
    assert len(paid) == 2 and billed == 2
    db = tmp_path / "out" / "harvest.duckdb"
    # no page came: the damaged answers are kept, billed, and are no page of the query (`max_pages` counts pages)
    assert rows(db, "SELECT status, pages, credits, next_cursor FROM query_state") == [("failed", 0, 2, None)]
    assert "cut short twice" in result.stderr and "--continue` asks for this page again" in result.stderr
    # the progress the user watches counts pages as the summary does: the query's line said "1 page"
    assert "harvest: tweets: failed, 0 pages, 0 records, 2 credits" in result.stderr.splitlines()


def test_an_answer_past_the_cap_is_refused_naming_the_query(prefect_harness: None, tmp_path: Path) -> None:
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, page_size=2_000)
    with running(config) as sb:
        spec = spec_of(tmp_path, sb.base_url)
        text = spec.read_text().replace("service:\n", "service:\n  max_answer_mb: 0.05\n")
        spec.write_text(text)
        result = runner.invoke(app, ["run", str(spec)])
        paid = data_entries(sb)
    assert result.exit_code == 1, result.output
    assert len(paid) == 1
    message = result.stderr.replace("\n", " ")
    assert "tweets" in message and "larger than the job reads" in message and "max_answer_mb" in message
    assert "Traceback" not in result.output
