"""Prices by outcome and rules between parameters, declared: a rule without `value` (whenever a parameter
is set) and `least` (what an answer may bill: a cached one 0); `exactly_one_of`, `requires` and `excludes`. The
reservation holds the most a request can cost and settles on the answer's `credits_charged`; `harvest plan` shows
the range; a broken rule is refused before anything is sent (file, line, field, what is allowed), and the
sandbox answers it 400, unbilled, as the service does. The declarations are those of
`tests/data/declared/surface-requests.yaml`, written from the service's published answers.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from typer.testing import CliRunner

import harvest.flows.collect  # noqa: F401  (Prefect binds its log handlers on first import: not inside CliRunner)
from harvest.flows.cli import app
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import running
from tests.crawl_helpers import data_entries
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, rows, scalar, write_spec
from tests.surface_helpers import (
    CATALOG,
    CHANNEL_VIDEOS,
    COMMENTS,
    COMPANY_ADS,
    PROFILE,
    SEARCH,
    declared,
)

runner = CliRunner()


def job(tmp_path: Path, queries: list[dict[str, Any]], **more: Any) -> Path:
    spec = {"name": "surface", "budget": {"credits": 100}, "output": str(tmp_path / "out"),
            "catalogs": [str(CATALOG)], "queries": queries, **more}  # fmt: skip
    return write_spec(tmp_path, spec)


def plan_lines(spec: Path) -> dict[str, str]:
    planned = runner.invoke(app, ["plan", str(spec)], env={"COLUMNS": "220"})
    assert planned.exit_code == 0, planned.output
    return {line.split("│")[1].strip(): line for line in planned.stdout.splitlines() if line.count("│") > 3}


def test_plan_shows_the_range_of_a_price_the_answer_decides(tmp_path: Path) -> None:
    """A cached answer may bill 0: the plan says 0-1 a request, and its worst case stays the most (1); a
    priced flag without `least` bills its price whatever comes back; follow-ups count as pages; page numbers
    stop at the last one the service answers."""
    lines = plan_lines(job(tmp_path, [
        {"id": "cached", "endpoint": PROFILE, "params": {"handle": "nasa", "cache_max_age": "7d"}},
        {"id": "fresh", "endpoint": PROFILE, "params": {"handle": "esa"}},
        {"id": "detailed", "endpoint": COMPANY_ADS, "params": {"domain": "a.com", "get_ad_details": True},
         "max_pages": 2},
        {"id": "threads", "endpoint": COMMENTS, "params": {"url": "https://f.example/p/1"}, "max_pages": 5},
        {"id": "search", "endpoint": SEARCH, "params": {"query": "standing desks"}},
    ]))  # fmt: skip
    assert "single page, 0-1 credits a request" in lines["cached"] and " 1 " in lines["cached"]
    assert "single page" in lines["fresh"] and "credits a request" not in lines["fresh"]
    assert "2 pages, 25 credits a request" in lines["detailed"] and " 50 " in lines["detailed"]
    assert "5 pages (follow-ups count as pages)" in lines["threads"] and " 5 " in lines["threads"]
    assert "11 pages (the last page number)" in lines["search"] and " 11 " in lines["search"]
    assert " 68 " in lines["total"]


def test_a_cached_answer_counts_0_and_the_count_equals_the_bill(
    prefect_harness: None, tmp_path: Path
) -> None:
    """The same profile asked twice with `cache_max_age`: the service bills the first answer and answers the
    second from its cache (`cached: true`, `credits_charged: 0`). Each reservation held the most (1) and
    settled on the answer's charge, so harvest counts exactly what the account was billed."""
    decls = declared(PROFILE)
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, declared=decls)
    asked = {"endpoint": PROFILE, "params": {"handle": "nasa", "cache_max_age": "7d"}}
    with running(config) as sb:
        spec = job(
            tmp_path, [{"id": "first", **asked}, {"id": "again", **asked}], service={"base_url": sb.base_url}
        )
        result = runner.invoke(app, ["run", str(spec)], env={"HARVEST_API_KEY": SECRET_KEY})
        billed = [e.credits for e in data_entries(sb)]
        bill = sb.billed_total()
    assert result.exit_code == 0, result.output
    db = tmp_path / "out" / "harvest.duckdb"
    assert sorted(billed) == [0, 1]
    assert sorted(c for (c,) in rows(db, "SELECT credits FROM query_state")) == [0, 1]
    assert rows(db, "SELECT credits_spent, service_billed FROM runs") == [(bill, bill)] == [(1, 1)]
    assert scalar(db, "SELECT count(*) FROM example_short_video_creator_profiles") == 1
    cached = runner.invoke(app, ["raw", str(tmp_path / "out")]).stdout
    assert cached.count('"cached": true') == 1 and '"credits_charged": 0' in cached


# ---------------------------------------------------------------------------------------------- rules
BROKEN = [
    pytest.param(PROFILE, {"handle": "nasa", "user_id": "11"}, "queries[0].params.user_id",
                 "handle and user_id are set: give only one of them", "exactly one of handle or user_id",
                 id="exactly one of: both"),
    pytest.param(PROFILE, {"cache_max_age": "7d"}, "queries[0].params",
                 "give exactly one of handle or user_id (none is set)", "exactly one of handle or user_id",
                 id="exactly one of: none"),
    pytest.param(COMPANY_ADS, {"domain": "a.com", "topic": "political"}, "queries[0].params.topic",
                 "topic=political needs region as well", "set region too", id="requires"),
    pytest.param(CHANNEL_VIDEOS, {"handle": "nasa", "is_paid_promotions": True, "sort": "latest"},
                 "queries[0].params.sort", "sort cannot be combined with is_paid_promotions",
                 "is_paid_promotions alone, or sort or includeExtras without is_paid_promotions", id="excludes"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "params", "field", "problem", "allowed"), BROKEN)
def test_a_broken_rule_is_refused_before_anything_is_sent_naming_its_line(
    tmp_path: Path, path: str, params: dict[str, Any], field: str, problem: str, allowed: str
) -> None:
    spec = job(tmp_path, [{"endpoint": path, "params": params}])
    result = runner.invoke(app, ["validate", str(spec)])
    assert result.exit_code == 2, result.output
    (line,) = [line for line in result.stderr.splitlines() if line.startswith(f"{spec}:")]
    where, said = line.split(": ", 1)
    assert said == f"{field}: {problem}; allowed: {allowed}", said
    named = spec.read_text().splitlines()[int(where.rsplit(":", 1)[1]) - 1]
    assert field.rsplit(".", 1)[1] in named, named  # the line of the parameter blamed


def test_the_sandbox_answers_a_broken_rule_400_naming_the_parameter_unbilled() -> None:
    decls = declared(PROFILE, COMPANY_ADS, CHANNEL_VIDEOS)
    cases = [
        (PROFILE, {"handle": "nasa", "user_id": "11"}, "user_id"),
        (PROFILE, {}, "handle"),
        (COMPANY_ADS, {"domain": "a.com", "topic": "political"}, "topic"),
        (
            CHANNEL_VIDEOS,
            {"handle": "nasa", "is_paid_promotions": "true", "includeExtras": "true"},
            "includeExtras",
        ),
    ]
    with running(SandboxConfig(api_keys={SECRET_KEY: 100}, declared=decls)) as sb:
        client = httpx.Client(base_url=sb.base_url, headers={"x-api-key": SECRET_KEY})
        answers = [client.get(path, params=params) for path, params, _ in cases]
        fine = client.get(COMPANY_ADS, params={"domain": "a.com", "topic": "political", "region": "US"})
        billed = sb.billed_total()
    assert [a.status_code for a in answers] == [400] * len(cases)
    assert [a.json()["parameter"] for a in answers] == [blamed for *_, blamed in cases]
    assert {a.json()["credits_charged"] for a in answers} == {0}
    assert fine.status_code == 200 and billed == 1


# ---------------------------------------------------------------------------------------------- declarations
BAD = [
    pytest.param(PROFILE, ("price", "when", 0), {"param": "cache_max_age"}, "price.when[0]",
                 "the rule changes no price", "credits (the most), least (the least billed), or both",
                 id="a rule that prices nothing"),
    pytest.param(PROFILE, ("price", "least"), 3, "price.least", "3 is more than the most, 1", "0 to 1",
                 id="least above the most"),
    pytest.param(PROFILE, ("exactly_one_of",), [["handle", "uid"]], "exactly_one_of[0][1]",
                 "'uid' is not a parameter", "handle, user_id, cache_max_age", id="an unknown parameter in a rule"),
    pytest.param(CHANNEL_VIDEOS, ("params", "sort", "default"), "latest", "excludes[0].excludes[0]",
                 "'sort' has a default, so it is always sent", "a parameter without a default",
                 id="excluding a parameter that is always sent"),
    pytest.param(COMMENTS, ("paging", "follow", "kind"), "forum_comments", "paging.follow.kind",
                 "'forum_comments' is not a record kind here", "example_forum_post_comments, example_forum_post_details",
                 id="a follow-up kind that is no record kind"),
    pytest.param(COMMENTS, ("paging", "last"), 11, "paging.last", "`last` is a key of page numbers",
                 "style: page_number, or leave it out", id="a page-number key on a cursor"),
    pytest.param("/v1/example-search-engine/search", ("paging", "last"), 12, "paging.last",
                 "page 12 is outside the page parameter's 1..11", "a number in 1..11", id="last past the page's max"),
    pytest.param(COMMENTS, ("method",), "PUT", "method", "'PUT' is not a method harvest sends",
                 "GET, POST, or [GET, POST] (the first is the default)", id="a method"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "at", "value", "field", "problem", "allowed"), BAD)
def test_a_bad_request_key_is_refused_naming_its_file_line_field_and_what_is_allowed(
    tmp_path: Path, path: str, at: tuple[Any, ...], value: Any, field: str, problem: str, allowed: str
) -> None:
    raw = yaml.safe_load(CATALOG.read_text())["endpoints"][path]
    node = raw
    for key in at[:-1]:
        node = node[key]
    node[at[-1]] = value
    catalog = tmp_path / "endpoints.yaml"
    catalog.write_text(yaml.safe_dump({"endpoints": {path: raw}}, sort_keys=False))
    spec = write_spec(tmp_path, {"name": "bad", "budget": {"credits": 5}, "catalogs": ["endpoints.yaml"],
                                 "queries": [{"endpoint": path, "params": {"url": "u"}}]})  # fmt: skip
    result = runner.invoke(app, ["validate", str(spec)])
    assert result.exit_code == 2, result.output
    found = [line for line in result.stderr.splitlines() if line.startswith(f"{catalog}:")]
    assert len(found) == 1, result.stderr
    where, said = found[0].split(": ", 1)
    assert said.startswith(f'endpoints["{path}"].{field}: {problem}'), said
    assert said.endswith(f"; allowed: {allowed}"), said
    text = catalog.read_text().splitlines()[int(where.rsplit(":", 1)[1]) - 1]
    shown = list(value.values()) if isinstance(value, dict) else value if isinstance(value, list) else [value]
    named = (
        [k for k in at if isinstance(k, str)][-1:]
        + [str(v) for v in shown]
        + re.findall(r"'([^']+)'", problem)
    )
    assert any(word in text for word in named), (text, named)  # the line of the key named, or its value's
