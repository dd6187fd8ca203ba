"""A plain next night of a job (no `--continue`) starts from the prices the service was last seen charging, not
the catalog's; a price the service went back from is held one night more, then dropped; `harvest plan` forecasts
at the prices the next night holds. Real runs against the sandbox over HTTP, checked against its own bill; the
sandbox charges 5 where the catalog says 1.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

# Prefect binds its log handlers to sys.stderr on first import: import it now, not inside a CliRunner
# invocation whose streams are closed afterwards.
import harvest.flows.collect  # noqa: F401
from harvest.flows.cli import app
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import running
from harvest.tasks.output.journal import read_journal
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import all_manifests
from tests.crawl_helpers import data_entries
from tests.endpoints import FEED, PINS, PROFILE
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, job_spec, rows, scalar, write_spec

runner = CliRunner()

RISEN = (FEED, PINS, PROFILE)
"""Three endpoints the service charges 5 for, where the catalog says 1: three price keys."""


def _held(caplog: pytest.LogCaptureFixture) -> list[str]:
    return sorted(r.getMessage() for r in caplog.records if "every request holds" in r.getMessage())


def _overcharged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "the service charged" in r.getMessage()]


def _journals(output: Path) -> list[Any]:
    """Each run's journal, oldest run first."""
    layout = OutputLayout(output)
    runs = sorted(all_manifests(layout), key=lambda m: m.started)
    return [read_journal(layout.journal_file(m.run_id)) for m in runs]


def test_a_plain_night_after_a_price_rise_holds_the_price_from_its_first_request(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Night 1 learns the three prices from its first answers. Night 2, a plain `harvest run` with a budget of 4,
    below one request: each key's first request would reserve the catalog's 1, three go out together (one per key,
    concurrency 4) and the service bills 15 of a budget of 4. It holds 5 from the first and sends nothing. Night 3,
    the same: night 2 asked the service nothing, so nothing says the service stopped charging 5. Both say no
    budget of 4 can send a request of 5 (exit 1)."""
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages=(3, 3), costs=dict.fromkeys(RISEN, 5), latency=0.2
    )
    output = tmp_path / "out"
    queries = [
        {"id": "posts", "endpoint": FEED, "for_each": {"handle": ["nasa", "esa"]}},
        {"id": "pins", "endpoint": PINS, "for_each": {"query": ["oak", "elm"]}},
        {"id": "videos", "endpoint": PROFILE, "for_each": {"handle": ["nasa", "esa"]}},
    ]
    with running(config) as sb:
        monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
        spec = write_spec(
            tmp_path, job_spec(sb.base_url, output, queries, name="risen", credits=30, concurrency=4)
        )
        night1 = runner.invoke(app, ["run", str(spec)])
        billed1, answered1 = sb.billed_total(), len(data_entries(sb))
        landed1 = scalar(output / "harvest.duckdb", "SELECT count(*) FROM microblog_b_posts")
        caplog.clear()
        with caplog.at_level(logging.WARNING, "harvest.ledger"):
            night2 = runner.invoke(app, ["run", str(spec), "--budget", "4"])
            billed2 = sb.billed_total()
            held2, overcharged2 = _held(caplog), _overcharged(caplog)
            caplog.clear()
            night3 = runner.invoke(app, ["run", str(spec), "--budget", "4"])
        billed3, answered3 = sb.billed_total(), len(data_entries(sb))

    assert night1.exit_code == 0, night1.output
    assert "credits spent: 30 of a budget of 30" in night1.stdout, night1.stdout
    assert billed1 == 30 and answered1 == 6  # the three first answers (15), then 3 requests holding 5
    assert night2.exit_code == night3.exit_code == 1, (
        night2.output + night3.output
    )  # no budget of 4 sends one
    assert "a budget of 4, a request 5 credits" in " ".join(night2.output.split()), night2.output
    assert billed2 == billed1, f"night 2 paid {billed2 - billed1} with a budget of 4 and requests of 5"
    assert "credits spent: 0 of a budget of 4" in night2.stdout, night2.stdout
    assert overcharged2 == [], overcharged2
    assert held2 == [
        f"{key}: every request holds 5 credits from the first, the price the service was last seen charging, "
        "above the cost table's; update the cost table"
        for key in sorted(RISEN)
    ], held2
    assert billed3 == billed1 and answered3 == answered1, "night 3 still holds 5: night 2 saw nothing new"
    assert "credits spent: 0 of a budget of 4" in night3.stdout, night3.stdout
    assert len(_held(caplog)) == 3 and _overcharged(caplog) == []
    db = output / "harvest.duckdb"
    assert rows(db, "SELECT credits_spent, budget FROM runs ORDER BY started") == [(30, 30), (0, 4), (0, 4)]
    assert rows(db, "SELECT sum(credits), count(*) FROM requests") == [(30, 6)]
    assert scalar(db, "SELECT count(*) FROM microblog_b_posts") == landed1
    assert all(j.held == dict.fromkeys(RISEN, 5) and not j.seen for j in _journals(output)[1:])


def _plan(spec: Path, *options: str) -> tuple[int, str]:
    result = runner.invoke(app, ["plan", str(spec), *options], env={"COLUMNS": "200"})
    return result.exit_code, " ".join(result.stdout.split())


def test_a_price_the_service_went_back_from_is_held_one_night_then_dropped_and_the_plan_follows(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Night 0 pays the catalog's 1 a page (3 pages). Night 1 the service charges 5: 10 of a budget of 12, two
    pages. `harvest plan` now forecasts at 5 a request: the worst case 15 (3 pages), and the expected case, night
    0's 3 pages, 15 too, both past the budget of 12 (at the catalog's price they said 3: a lie). Night 2 the
    service is back at 1: it holds 5 (one night of conservative holds), pays 3 and journals no learned price; the
    plan is back at 3; night 3 holds the catalog's 1 and takes its 3 pages with a budget of 3."""
    risen = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages=(3, 3), costs={FEED: 5})
    listed = risen.replace(costs={})
    output = tmp_path / "out"
    query = {"id": "q", "endpoint": FEED, "params": {"handle": "nasa"}, "max_pages": 3}
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)

    def night(config: SandboxConfig, budget: int) -> tuple[Any, int, Path]:
        with running(config) as sb:
            spec = write_spec(tmp_path, job_spec(sb.base_url, output, [query], name="back", credits=budget))
            result = runner.invoke(app, ["run", str(spec)])
            return result, sb.billed_total(), spec

    night0, billed0, _ = night(listed, 12)
    night1, billed1, spec = night(risen, 12)
    after_rise = _plan(spec, "--check-expected")
    after_rise_worst = _plan(spec, "--check")
    caplog.clear()
    with caplog.at_level(logging.WARNING, "harvest.ledger"):
        night2, billed2, _ = night(listed, 12)
        held2, overcharged2 = _held(caplog), _overcharged(caplog)
        caplog.clear()
        after_back = _plan(spec, "--check")
        night3, billed3, _ = night(listed, 3)

    assert [r.exit_code for r in (night0, night1, night2, night3)] == [0] * 4, night1.output + night3.output
    assert (billed0, billed1, billed2, billed3) == (3, 10, 3, 3)
    assert "credits spent: 10 of a budget of 12" in night1.stdout, night1.stdout
    code, said = after_rise
    assert code == 3, said
    assert "worst case: 15; expected: 15 (" in said, said
    assert "3 pages, 5 credits a request as last charged (the cost table: 1)" in said, said
    assert (
        f"{FEED}: 5 credits a request, the price the service was last seen charging, above the cost table's: the "
        "next run holds it from its first request, and so do these figures" in said
    ), said
    assert after_rise_worst[0] == 3, after_rise_worst[1]
    assert "credits spent: 3 of a budget of 12" in night2.stdout, night2.stdout
    assert held2 == [
        f"{FEED}: every request holds 5 credits from the first, the price the service was last seen charging, "
        "above the cost table's; update the cost table"
    ], held2
    assert overcharged2 == [], overcharged2
    journals = _journals(output)
    assert [j.prices for j in journals] == [{}, {FEED: 5}, {}, {}], [j.prices for j in journals]
    assert journals[2].held == {FEED: 5} and journals[2].seen == {FEED}
    assert journals[3].held == {}
    code, said = after_back
    assert code == 0 and "worst case: 3; " in said and "last seen charging" not in said, said
    assert "credits spent: 3 of a budget of 3" in night3.stdout, night3.stdout
    assert _held(caplog) == [] and _overcharged(caplog) == []
    db = output / "harvest.duckdb"
    spent = rows(db, "SELECT credits_spent, budget, status FROM runs ORDER BY started")
    assert spent == [
        (3, 12, "complete"),
        (10, 12, "budget_exhausted"),
        (3, 12, "complete"),
        (3, 3, "complete"),
    ]
    assert rows(db, "SELECT sum(credits), count(*) FROM requests") == [(19, 11)]
