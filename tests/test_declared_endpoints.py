"""A job declares the endpoints it needs: one harvest has never seen validates, plans at its price (a
priced parameter too: an imagined ad archive's ads cost 25 credits with `get_ad_details=true`), is listed beside
the built-in ones, its price holds the budget, its table lands and is known after the run without the spec (load, rebuild,
export, the history views); a bad declaration is refused naming its file, line, field and what is allowed,
before anything is sent.

Runs against the sandbox over HTTP serve a declared copy of pin search at the built-in path
(`tests.declaring_helpers`); the never-seen endpoints run on the sandbox's own emulation of declarations.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import harvest.flows.collect  # noqa: F401  (Prefect binds its log handlers on first import: not inside CliRunner)
from harvest.flows.cli import app
from harvest.sandbox.config import SandboxConfig
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import all_manifests
from tests.crawl_helpers import data_entries
from tests.declaring_helpers import aliased, declared, declared_copy
from tests.endpoints import AD_ARCHIVE_ADS, PINS
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, expected_keys, job_spec, rows, scalar, write_spec

CATALOG = Path(__file__).parent / "data" / "declared" / "never-seen.yaml"
ADS = AD_ARCHIVE_ADS
DECLARED_PINS = "/v1/declared/pins"
runner = CliRunner()


def ads_spec(tmp_path: Path, **more: Any) -> Path:
    """A job naming the shared catalog file by a path relative to its own directory."""
    (tmp_path / "shared").mkdir(exist_ok=True)
    shutil.copy(CATALOG, tmp_path / "shared" / "endpoints.yaml")
    spec = {
        "name": "ads",
        "budget": {"credits": 100},
        "output": str(tmp_path / "out"),
        "catalogs": ["shared/endpoints.yaml"],
        "queries": [
            {"id": "detailed", "endpoint": ADS, "params": {"domain": "lululemon.com", "get_ad_details": True},
             "max_pages": 2},
            {"id": "plain", "endpoint": ADS, "params": {"domain": "lululemon.com"}, "max_pages": 2},
        ],
        **more,
    }  # fmt: skip
    (tmp_path / "jobs").mkdir(exist_ok=True)
    return write_spec(tmp_path / "jobs", spec | {"catalogs": ["../shared/endpoints.yaml"]})


def test_a_never_seen_endpoint_validates_plans_at_its_price_and_is_listed(tmp_path: Path) -> None:
    spec = ads_spec(tmp_path)
    checked = runner.invoke(app, ["validate", str(spec)])
    assert checked.exit_code == 0, checked.output
    assert "ok: 2 queries" in checked.stdout

    planned = runner.invoke(app, ["plan", str(spec)], env={"COLUMNS": "200"})
    assert planned.exit_code == 0, planned.output
    lines = {line.split("│")[1].strip(): line for line in planned.stdout.splitlines() if line.count("│") > 3}
    assert "50" in lines["detailed"] and "2 pages, 25 credits a request" in lines["detailed"]
    assert " 2 " in lines["plain"] and "credits a request" not in lines["plain"]
    assert " 52 " in lines["total"]

    builtin = json.loads(runner.invoke(app, ["endpoints", "--json"]).stdout)
    listed = json.loads(runner.invoke(app, ["endpoints", "--json", "--spec", str(spec)]).stdout)
    assert listed[: len(builtin)] == builtin  # the built-in ones, as without the spec
    ads = next(e for e in listed if e["path"] == ADS)
    assert ads["declared"] is True and ads["cost"] == 1
    assert ads["price_when"] == [{"param": "get_ad_details", "value": True, "credits": 25}]
    assert ads["one_of"] == ["domain", "advertiser_id"]
    assert ads["tables"] == [
        {"table": "ad_archive_ads", "primary_key": ["creative_id"],
         "columns": ["creative_id", "advertiser_id", "advertiser_name", "format", "ad_url", "image_url",
                     "first_shown", "last_shown"]},
    ]  # fmt: skip
    text = runner.invoke(app, ["endpoints", "--spec", str(spec)], env={"COLUMNS": "200"}).stdout
    assert "ad-archive: 1 endpoint\n" in text
    assert f"{ADS}  1 credit; 25 with get_ad_details=true\n" in text
    assert "  paging: cursor; declared by the job\n" in text

    tables = runner.invoke(app, ["schema", "--tables", "--spec", str(spec)]).stdout
    assert "## ad_archive_ads\n\nPrimary key: `creative_id`. From: `/v1/ad-archive/company/ads`." in tables
    assert "| `first_shown` | TIMESTAMP WITH TIME ZONE | firstShown |" in tables


def priced_pins(tmp_path: Path, base_url: str, budget: int) -> Path:
    """The declared pin search, `trim: true` priced at 3 credits (its price when not trimmed stays 1)."""
    copy = declared_copy(DECLARED_PINS)
    copy["price"] = {"credits": 1, "when": [{"param": "trim", "value": True, "credits": 3}]}
    spec = job_spec(
        base_url,
        tmp_path / "out",
        [{"id": "pins", "endpoint": DECLARED_PINS, "params": {"query": "desk lamps", "trim": True}}],
        name="priced",
        credits=budget,
        endpoints={DECLARED_PINS: copy},
    )
    tmp_path.mkdir(exist_ok=True)
    return write_spec(tmp_path, spec)


def test_the_budget_holds_at_a_priced_parameters_price(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ledger reserves the query's price, not the endpoint's: a budget below it sends nothing (reserving
    the unpriced 1 credit would have been charged 3, past a budget of 2)."""
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages=(5, 5), page_size=4, costs={PINS: 3})
    with aliased(config) as sb:
        short = runner.invoke(app, ["run", str(priced_pins(tmp_path / "short", sb.base_url, 2))])
        sent_short = len(data_entries(sb))
        enough = runner.invoke(app, ["run", str(priced_pins(tmp_path / "enough", sb.base_url, 7))])
        billed = sb.billed_total()
    assert sent_short == 0, short.output
    assert scalar(tmp_path / "short" / "out" / "harvest.duckdb", "SELECT credits_spent FROM runs") == 0
    assert billed == 6, enough.output  # two pages at 3 credits; a third would pass the budget of 7
    db = tmp_path / "enough" / "out" / "harvest.duckdb"
    assert rows(db, "SELECT status, credits_spent FROM runs") == [("budget_exhausted", 6)]
    assert scalar(db, "SELECT count(*) FROM declared_pins") == 8


def test_a_declared_table_lands_and_is_known_after_the_run_without_the_spec(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    variant = declared(DECLARED_PINS)
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages=(3, 3), page_size=4)
    output = tmp_path / "out"
    params = {"query": "oak desk"}
    with aliased(config) as sb:
        spec = variant.spec(
            job_spec(sb.base_url, output, [{"id": "pins", "endpoint": DECLARED_PINS, "params": params}], name="declared")
        )  # fmt: skip
        result = runner.invoke(app, ["run", str(write_spec(tmp_path, spec))])
        assert result.exit_code == 0, result.output
    want = {(key[-1],) for key in expected_keys([(PINS, params)], config)["pinboard_pins"]}  # (query, id)
    db = output / "harvest.duckdb"
    assert set(rows(db, "SELECT id FROM declared_pins")) == want and want
    assert rows(db, "SELECT DISTINCT _endpoint FROM declared_pins") == [(DECLARED_PINS,)]
    (run,) = all_manifests(OutputLayout(output))
    assert run.declared == {DECLARED_PINS: variant.declared[DECLARED_PINS]}  # recorded, as `shapes` are

    db.unlink()  # everything below knows the table from the manifest alone
    rebuilt = runner.invoke(app, ["rebuild", str(output)])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert set(rows(db, "SELECT id FROM declared_pins")) == want
    assert scalar(db, "SELECT count(DISTINCT id) FROM declared_pins_history") == len(want)
    exported = runner.invoke(app, ["export", str(output), "--to", str(tmp_path / "snap"), "--snapshot"])
    assert exported.exit_code == 0, exported.output
    manifest = json.loads((tmp_path / "snap" / "_manifest.json").read_text())
    assert manifest["tables"]["declared_pins"]["primary_key"] == ["search_query", "id"]
    assert manifest["tables"]["declared_pins"]["rows"] == len(want)
    for fmt in ("delta", "iceberg"):  # the lakehouse formats, read back by their own readers, not harvest
        lake = tmp_path / fmt
        merged = runner.invoke(app, ["export", str(output), "--to", str(lake), "--format", fmt])
        assert merged.exit_code == 0, merged.output
    from deltalake import DeltaTable
    from pyiceberg.catalog.sql import SqlCatalog

    from harvest.flows.handoff.lakehouse.iceberg_catalog import SQLITE_FILE

    delta_ids = DeltaTable(str(tmp_path / "delta" / "declared_pins")).to_pyarrow_table().column("id")
    iceberg = SqlCatalog("harvest", uri=f"sqlite:///{tmp_path / 'iceberg' / SQLITE_FILE}",
                         warehouse=(tmp_path / "iceberg").as_uri())  # fmt: skip
    iceberg_ids = iceberg.load_table(("harvest", "declared_pins")).scan().to_arrow().column("id")
    assert set(delta_ids.to_pylist()) == set(iceberg_ids.to_pylist()) == {key for (key,) in want}


# ---------------------------------------------------------------------------------------------- refusals
GOOD = yaml.safe_load(CATALOG.read_text())["endpoints"][ADS]


def _with(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """The ads declaration with one value changed (None removes the key)."""
    declaration = json.loads(json.dumps(GOOD))
    node = declaration
    for key in path[:-1]:
        node = node[key]
    if value is None:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return declaration


CHILD = ("records", "ad_archive_ads", "children")
ADVERTISER = ("records", "ad_archive_ads", "columns", "advertiser_id")
BAD: list[tuple[str, str, dict[str, Any], str, str, str]] = [
    # (case, declared path, declaration, field, problem, allowed): each in a catalog file the spec names
    ("a key not among the columns", ADS, _with(("records", "ad_archive_ads", "key"), "creativeId"),
     'endpoints["/v1/ad-archive/company/ads"].records.ad_archive_ads.key[0]',
     "'creativeId' is not a column of ad_archive_ads", "creative_id, advertiser_id, advertiser_name"),
    ("an unknown paging style", ADS, _with(("paging", "style"), "offset"),
     'endpoints["/v1/ad-archive/company/ads"].paging.style', "'offset' is not allowed",
     "'single', 'cursor', 'continuation_token', 'envelope_cursor', 'page_id_and_cursor', 'max_id', 'max_cursor' or "
     "'page_number'"),
    ("a path that is no record path", ADS, _with(("records", "ad_archive_ads", "at"), "ads..items"),
     'endpoints["/v1/ad-archive/company/ads"].records.ad_archive_ads.at[0]',
     "'ads..items' is not a record path", "a record path: keys joined by dots"),
    ("a built-in path", PINS, GOOD,
     'endpoints["/v1/pinboard/search"]', "/v1/pinboard/search is a built-in endpoint",
     "a path harvest does not have; `shapes:` reads a built-in endpoint's changed answers"),
    ("a built-in table of another shape", ADS, _with(("records",), {"pinboard_pins": GOOD["records"]["ad_archive_ads"]}),
     'endpoints["/v1/ad-archive/company/ads"].records.pinboard_pins',
     "the built-in pinboard_pins is a table already, with another key or other columns",
     "another table name, or the same key and columns: key search_query, id; columns id (text), url (text)"),
    ("harvest's own table", ADS, _with(("records",), {"runs": GOOD["records"]["ad_archive_ads"]}),
     'endpoints["/v1/ad-archive/company/ads"].records.runs', "'runs' is one of harvest's own tables",
     "a name other than runs, requests, query_state, exports"),
    ("an unknown column type", ADS, _with(("records", "ad_archive_ads", "columns", "format"), "string"),
     'endpoints["/v1/ad-archive/company/ads"].records.ad_archive_ads.columns.format.type',
     "'string' is not allowed", "'text', 'integer', 'number', 'boolean', 'timestamp', 'json', 'text_list' or 'decimal'"),
    ("columns that are no mapping", ADS, _with(("records", "ad_archive_ads", "columns"), 5),
     'endpoints["/v1/ad-archive/company/ads"].records.ad_archive_ads.columns',
     "input should be a valid dictionary, got 5",
     "{<column>: <type>, or {type, path, description}}; types: text, integer, number, boolean, timestamp, json, "
     "text_list, decimal"),
    ("a price on an undeclared parameter", ADS, _with(("price", "when", 0, "param"), "details"),
     'endpoints["/v1/ad-archive/company/ads"].price.when[0].param', "'details' is not a parameter",
     "domain, advertiser_id, topic"),
    ("a bound on a text", ADS, _with(("params", "domain", "min"), 3),
     'endpoints["/v1/ad-archive/company/ads"].params.domain.min', "`min` bounds a number, not a string",
     "min/max on integer or number parameters"),
    ("an unknown key", ADS, _with(("records", "ad_archive_ads", "primary_key"), "id"),
     'endpoints["/v1/ad-archive/company/ads"].records.ad_archive_ads.primary_key',
     "unknown key 'primary_key'", "at, one, objects, key, columns, unwrap, ignore, nested"),
    ("a path parameter not in the path", ADS, _with(("params", "domain", "in"), "path"),
     'endpoints["/v1/ad-archive/company/ads"].params.domain.in', "'domain' is not a `{domain}` of the path",
     "query, or add {domain} to the path"),
    ("a one_of of no parameter", ADS, _with(("one_of",), [["domain", "company"]]),
     'endpoints["/v1/ad-archive/company/ads"].one_of[0][1]', "'company' is not a parameter",
     "domain, advertiser_id, topic"),
    # what a column joins (`joins`), and how its value is made (`template`)
    ("a join to no table", ADS, _with(ADVERTISER, {"type": "text", "joins": "search_engine_advertiser.advertiser_id"}),
     'endpoints["/v1/ad-archive/company/ads"].records.ad_archive_ads.columns.advertiser_id.joins[0]',
     "'search_engine_advertiser' is not a table", "a table of the job's catalog (search_engine_advertisers, "),
    ("a join to no column", ADS, _with(ADVERTISER, {"type": "text", "joins": ["search_engine_advertisers.id"]}),
     'endpoints["/v1/ad-archive/company/ads"].records.ad_archive_ads.columns.advertiser_id.joins[0]',
     "'id' is not a column of search_engine_advertisers", "advertiser_id, name, region"),
    ("a join that is no table and column", ADS, _with(ADVERTISER, {"type": "text", "joins": "advertisers"}),
     'endpoints["/v1/ad-archive/company/ads"].records.ad_archive_ads.columns.advertiser_id.joins[0]',
     "'advertisers' is not a table and a column", "`table.column`: a column of a record table or a child table"),
    ("a template of no column", ADS, _with(ADVERTISER, {"type": "text", "template": "AR{advertiserId}"}),
     'endpoints["/v1/ad-archive/company/ads"].records.ad_archive_ads.columns.advertiser_id.template',
     "'advertiserId' is not a column of the record", "creative_id, advertiser_name, format"),
    ("a template of no parameter", ADS, _with(ADVERTISER, {"type": "text", "template": "{$params.handle}"}),
     'endpoints["/v1/ad-archive/company/ads"].records.ad_archive_ads.columns.advertiser_id.template',
     "'handle' is not a parameter", "$params.domain, $params.advertiser_id"),
    ("a path of a parameter or a field", ADS, _with(ADVERTISER, {"type": "text", "path": "$params.advertiser_id|advertiserId"}),
     'endpoints["/v1/ad-archive/company/ads"].records.ad_archive_ads.columns.advertiser_id.path',
     "'$params.advertiser_id|advertiserId' reads both the request's parameters and the record",
     "`$params.a|$params.b` (the parameter the request gave) or record paths `a|b`, not both"),
    ("an empty key", ADS, _with(("records", "ad_archive_ads", "key"), []),
     'endpoints["/v1/ad-archive/company/ads"].records.ad_archive_ads.key', "no primary key",
     "a column, or several: creative_id, advertiser_id, advertiser_name"),
    # a rule's value is one the parameter allows: a typo would price (or require) nothing a query sends
    ("a price rule's value no enum allows", ADS,
     _with(("price", "when", 0), {"param": "topic", "value": "politics", "credits": 25}),
     'endpoints["/v1/ad-archive/company/ads"].price.when[0].value', "'politics' is not an allowed value",
     "all, political"),
    ("a price rule's value no pattern allows", ADS,
     _with(("price", "when", 0), {"param": "region", "value": "usa", "credits": 25}),
     'endpoints["/v1/ad-archive/company/ads"].price.when[0].value',
     "'usa' does not match the parameter's pattern", "a text matching ^[A-Z]{2}$"),
    ("a required value no enum allows", ADS,
     _with(("requires",), [{"param": "topic", "value": "politics", "needs": ["region"]}]),
     'endpoints["/v1/ad-archive/company/ads"].requires[0].value', "'politics' is not an allowed value",
     "all, political"),
    ("a newest-first value no enum allows", ADS, _with(("newest_first",), {"param": "topic", "values": ["newest"]}),
     'endpoints["/v1/ad-archive/company/ads"].newest_first.values[0]', "'newest' is not an allowed value",
     "all, political"),
    # a price the run's counts cannot hold
    ("a price too high", ADS, _with(("price",), 99999999999999999999999),
     'endpoints["/v1/ad-archive/company/ads"].price.credits',
     "input should be less than or equal to 1000000, got 99999999999999999999999", "an integer: from 0 to 1000000"),
    ("a rule's price too high", ADS,
     _with(("price", "when", 0), {"param": "get_ad_details", "value": True, "credits": 10**7}),
     'endpoints["/v1/ad-archive/company/ads"].price.when[0].credits',
     "input should be less than or equal to 1000000, got 10000000", "an integer: from 0 to 1000000"),
    # child tables
    ("a child column every child row has", ADS, _with(CHILD, {"ad_archive_ad_regions": {"at": "regions", "columns": {"position": "integer"}}}),
     'endpoints["/v1/ad-archive/company/ads"].records.ad_archive_ads.children.ad_archive_ad_regions.columns.position',
     "'position' is a column of every row of ad_archive_ad_regions already", "a name other than position, parent_creative_id"),
    ("a child of a child", ADS, _with(CHILD, {"ad_archive_ad_regions": {"at": "regions", "columns": {"code": "text"}, "children": {}}}),
     'endpoints["/v1/ad-archive/company/ads"].records.ad_archive_ads.children.ad_archive_ad_regions.children',
     "unknown key 'children'", "at, columns, entries, ignore, replaces"),
    ("a child replacing no json column", ADS, _with(CHILD, {"ad_archive_ad_regions": {"at": "regions", "columns": {"code": "text"}, "replaces": "format"}}),
     'endpoints["/v1/ad-archive/company/ads"].records.ad_archive_ads.children.ad_archive_ad_regions.replaces',
     "'format' is not a json column of the record", "no json column: leave `replaces` out"),
    ("a child table named like its parent's", ADS, _with(CHILD, {"ad_archive_ads": {"at": "regions", "columns": {"code": "text"}}}),
     'endpoints["/v1/ad-archive/company/ads"].records.ad_archive_ads.children.ad_archive_ads',
     "'ad_archive_ads' is a table of this endpoint already", "a table name of its own"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "declaration", "field", "problem", "allowed"),
                         [pytest.param(*case[1:], id=case[0]) for case in BAD])  # fmt: skip
def test_a_bad_declaration_is_refused_naming_its_file_line_field_and_what_is_allowed(
    tmp_path: Path, path: str, declaration: dict[str, Any], field: str, problem: str, allowed: str
) -> None:
    catalog = tmp_path / "endpoints.yaml"
    catalog.write_text(yaml.safe_dump({"endpoints": {path: declaration}}, sort_keys=False))
    spec = write_spec(
        tmp_path,
        {"name": "bad", "budget": {"credits": 5}, "catalogs": ["endpoints.yaml"],
         "queries": [{"endpoint": path, "params": {"query": "x"} if path == PINS else {"domain": "x.com"}}]},
    )  # fmt: skip
    result = runner.invoke(app, ["validate", str(spec)])
    assert result.exit_code == 2, result.output
    found = [line for line in result.stderr.splitlines() if line.startswith(f"{catalog}:")]
    assert len(found) == 1 and "\n1 problem in" in result.stderr, result.stderr  # said once, where declared
    where, rest = found[0].split(": ", 1)
    line = int(where.rsplit(":", 1)[1])
    assert rest.startswith(f"{field}: {problem}"), rest
    assert f"; allowed: {allowed}" in rest, rest
    keys = re.findall(r"[A-Za-z_]+", field.split("]", 1)[1]) or [path]
    text = catalog.read_text().splitlines()[line - 1]
    named = [*keys[-2:], *re.findall(r"'([^']+)'", problem)]
    assert any(word in text for word in named), (line, text)  # the line of the field named, or its value's


def test_a_cost_past_what_a_run_counts_is_refused_naming_its_line(tmp_path: Path) -> None:
    """`costs:` prices a request as a declaration does: 10**23 validated, and the run crashed writing its manifest
    (`TypeError: Integer exceeds 64-bit range`)."""
    spec = write_spec(tmp_path, {"name": "dear", "budget": {"credits": 5}, "costs": {PINS: 10**23},
                                 "queries": [{"endpoint": PINS, "params": {"query": "x"}}]})  # fmt: skip
    result = runner.invoke(app, ["validate", str(spec)])
    assert result.exit_code == 2, result.output
    [said] = [line for line in result.stderr.splitlines() if line.startswith(f"{spec}:")]
    where, rest = said.split(": ", 1)
    assert rest.startswith(f'costs["{PINS}"]: input should be less than or equal to 1000000'), rest
    assert "at most 1000000" in rest.split("; allowed: ")[1], rest
    assert "100000000000000000000000" in spec.read_text().splitlines()[int(where.rsplit(":", 1)[1]) - 1]


def test_an_inline_declaration_is_checked_in_the_spec_and_a_missing_catalog_named(tmp_path: Path) -> None:
    bad = _with(("records", "ad_archive_ads", "key"), "nope")
    spec = write_spec(
        tmp_path,
        {"name": "bad", "budget": {"credits": 5}, "catalogs": ["missing.yaml"], "endpoints": {ADS: bad},
         "queries": [{"endpoint": ADS, "params": {"domain": "example.com"}}]},
    )  # fmt: skip
    result = runner.invoke(app, ["validate", str(spec)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert (
        f"{spec}:5: catalogs[0]: no such file: {tmp_path / 'missing.yaml'}; allowed: a catalog file"
        in lines[0]
    )
    assert any(
        line.startswith(f"{spec}:")
        and "records.ad_archive_ads.key[0]: 'nope' is not a column of ad_archive_ads" in line
        for line in lines
    ), result.stderr


# ---------------------------------------------------------------------------------------------- on the sandbox
def test_a_never_seen_endpoint_runs_end_to_end_on_the_embedded_sandbox_at_its_price(
    prefect_harness: None, tmp_path: Path
) -> None:
    spec = ads_spec(tmp_path, service={"base_url": "sandbox"})
    result = runner.invoke(app, ["run", str(spec)])
    assert result.exit_code == 0, result.output
    db = tmp_path / "out" / "harvest.duckdb"
    spent = dict(rows(db, "SELECT query_id, credits FROM query_state"))
    pages = dict(rows(db, "SELECT query_id, pages FROM query_state"))
    assert spent == {"detailed": 25 * pages["detailed"], "plain": pages["plain"]}
    assert scalar(db, "SELECT credits_spent FROM runs") == sum(spent.values()) <= 52
    assert scalar(db, "SELECT count(*) FROM ad_archive_ads WHERE creative_id IS NULL") == 0
    assert scalar(db, "SELECT count(*) FROM ad_archive_ads") > 0


def test_the_pages_example_validates_and_plans_as_the_page_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/declaring-endpoints.md stays true: its catalog file and spec, saved as it says, validate and plan
    to its figures, and its refused key reads as it prints it."""
    page = (Path(__file__).parent.parent / "docs" / "declaring-endpoints.md").read_text()
    catalog_text, spec_text = re.findall(r"```yaml\n(.*?)```", page, re.DOTALL)[:2]
    (tmp_path / "catalogs").mkdir()
    (tmp_path / "catalogs" / "ad-library.yaml").write_text(catalog_text)
    (tmp_path / "ad-watch.yaml").write_text(spec_text)
    planned = runner.invoke(app, ["plan", str(tmp_path / "ad-watch.yaml")], env={"COLUMNS": "200"})
    assert planned.exit_code == 0, planned.output
    shown = re.search(r"```sh\nharvest plan ad-watch.yaml\n```\n\n```text\n(.*?)```", page, re.DOTALL)
    assert shown is not None
    for line in shown.group(1).splitlines():
        assert line in planned.stdout, line
    (tmp_path / "catalogs" / "ad-library.yaml").write_text(
        catalog_text.replace("key: creative_id", "key: creativeId")
    )
    monkeypatch.chdir(tmp_path)  # as the page runs it: from the spec's directory
    refused = runner.invoke(app, ["validate", "ad-watch.yaml"], env={"COLUMNS": "400"})
    assert refused.exit_code == 2
    error = re.search(r"(catalogs/ad-library.yaml:19: .*)\n", page)
    assert error is not None and error.group(1) in refused.stderr


def test_the_pages_example_runs_on_the_sandbox_to_its_figures(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/declaring-endpoints.md's steps 5 and 6, as a user follows them: the run prints the page's lines
    (statuses, records, credits, rows) and the page's query reads the table it landed."""
    page = (Path(__file__).parent.parent / "docs" / "declaring-endpoints.md").read_text()
    catalog_text, spec_text = re.findall(r"```yaml\n(.*?)```", page, re.DOTALL)[:2]
    (tmp_path / "catalogs").mkdir()
    (tmp_path / "catalogs" / "ad-library.yaml").write_text(catalog_text)
    (tmp_path / "ad-watch.yaml").write_text(spec_text)
    monkeypatch.chdir(tmp_path)  # as the page runs it: from the spec's directory
    shown = re.search(r"```sh\nharvest run ad-watch.yaml\n```\n\n```text\n(.*?)```", page, re.DOTALL)
    query = re.search(r'```sh\nharvest sql data/ad-watch "(.*?)"\n```', page)
    assert shown is not None and query is not None
    ran = runner.invoke(app, ["run", "ad-watch.yaml"], env={"COLUMNS": "200"})
    assert ran.exit_code == 0, ran.output
    for line in shown.group(1).splitlines():
        assert line in ran.stdout, line
    asked = runner.invoke(app, ["sql", "data/ad-watch", query.group(1)], env={"COLUMNS": "200"})
    shown_at = re.findall(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", asked.stdout)  # first_shown, newest first
    assert asked.exit_code == 0 and len(shown_at) == 5 and shown_at == sorted(shown_at, reverse=True), (
        asked.output
    )


def test_a_changed_declared_key_is_refused_with_a_rebuild_that_reads_the_spec(
    prefect_harness: None, tmp_path: Path
) -> None:
    """The refusal of a table whose declared key changed advised `harvest rebuild OUTPUT`, which knows only the
    tables the output's runs declared (the old key) and was refused the same way; the advice names `--spec`."""
    spec = ads_spec(tmp_path, service={"base_url": "sandbox"})
    assert runner.invoke(app, ["run", str(spec)]).exit_code == 0
    catalog = tmp_path / "shared" / "endpoints.yaml"
    catalog.write_text(catalog.read_text().replace("key: creative_id", "key: [advertiser_id, creative_id]"))
    from harvest.flows.spec.parse import parse_spec

    parse_spec.cache_clear()  # as a new `harvest run` process reads it (the memo is keyed on the spec's text)
    refused = runner.invoke(app, ["run", str(spec)])
    assert refused.exit_code == 2, refused.output
    advised = re.search(r"`harvest (rebuild [^`]*)`", refused.stderr.replace("\n", " "))
    assert advised is not None, refused.stderr
    assert advised.group(1).split() == ["rebuild", str(tmp_path / "out"), "--spec", str(spec)]
    rebuilt = runner.invoke(app, advised.group(1).split())
    assert rebuilt.exit_code == 0, rebuilt.output
    assert runner.invoke(app, ["run", str(spec)]).exit_code == 0
