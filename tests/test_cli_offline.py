"""The commands that send nothing: validate, plan, endpoints, schema (and that none of them loads Prefect)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harvest.connectors.catalog import endpoints as catalog
from harvest.flows.cli import app
from tests.endpoints import CREATIVE_DETAIL, PROFILE
from tests.spec_texts import CASES, VALID

ROOT = Path(__file__).parent.parent
runner = CliRunner()


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_validate_ok(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["validate", str(write(tmp_path, VALID))], env={"HARVEST_BASE_URL": "sandbox"}
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == "ok: 3 queries (1 fanned out, 1 dependent)"
    assert "4 queries" not in result.stdout and "3 queries to run after fan-out" in result.stdout


def test_validate_notes_a_missing_service_url(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", str(write(tmp_path, VALID))], env={"HARVEST_BASE_URL": ""})
    assert result.exit_code == 0
    assert "no service URL" in result.stderr


def test_a_replaced_parameter_validates_with_a_warning_naming_its_successor(tmp_path: Path) -> None:
    """Video search's `filter` is replaced by `type`: a spec asking `filter: shorts` still validates, and says
    which parameter the service takes now, with its values, in lines that fit 80 columns."""
    spec = """
        name: shorts
        service: {base_url: sandbox}
        budget: {credits: 10}
        queries:
          - id: shorts
            endpoint: /v1/video-platform/search
            params: {query: running, filter: shorts}
    """
    result = runner.invoke(app, ["validate", str(write(tmp_path, spec))])
    assert result.exit_code == 0, result.output
    warning = " ".join(result.stderr.split())
    assert "queries[0] (shorts): /v1/video-platform/search takes `type`" in warning
    assert "(videos, shorts, channels, playlists) where it took `filter`" in warning
    assert all(len(line) <= 80 for line in result.stderr.splitlines())


@pytest.mark.parametrize("case", list(CASES))
def test_validate_exits_2_on_each_invalid_spec(tmp_path: Path, case: str) -> None:
    text, line, field, _, _ = CASES[case]
    path = write(tmp_path, text)
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert f"{path}:{line}: {field}: " in result.stderr
    assert "nothing was sent" in result.stderr
    assert result.stdout == ""


def test_a_duplicate_id_is_said_beside_another_query_s_problem(tmp_path: Path) -> None:
    """README: a spec is checked completely. A bad `max_pages` on one query hid that its id was taken twice:
    the user fixed one problem and met the next."""
    text, *_ = CASES["duplicate ids"]
    path = write(tmp_path, text.replace("params: {query: a}\n", "params: {query: a}\n    max_pages: 0\n", 1))
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert f"{path}:8: queries[0].max_pages: " in result.stderr, result.stderr
    assert "queries[1].id: duplicate id 'pins', also used by queries[0]" in result.stderr, result.stderr
    assert "2 problems in" in result.stderr


def test_validate_and_plan_exit_2_on_a_missing_file(tmp_path: Path) -> None:
    for command in ("validate", "plan"):
        result = runner.invoke(app, [command, str(tmp_path / "nope.yaml")])
        assert result.exit_code == 2
        assert "no such file" in result.stderr


def test_plan_prints_queries_worst_case_and_verdict(tmp_path: Path) -> None:
    path = write(tmp_path, VALID)
    result = runner.invoke(app, ["plan", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out = result.stdout
    for fragment in (
        "videos[handle=nasa]",
        "videos[handle=esa]",
        "creative_detail[material_id=*]",
        "unbounded",
    ):
        assert fragment in out
    assert "the budget does not cover the worst case" in out
    bounded = VALID.replace("style_tags: [ugc, testimonial]}", "style_tags: [ugc]}\n    max_pages: 1")
    result = runner.invoke(
        app, ["plan", str(write(tmp_path, bounded)), "--budget", "61"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    assert "budget: 61 credits" in result.stdout
    assert "the budget covers the worst case" in result.stdout  # 5 + 5 + 1 + 50 details
    assert (
        "1 page " in result.stdout and "1 pages" not in result.stdout
    )  # max_pages: 1, said as a person says it


def test_plan_refuses_a_negative_budget(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plan", str(write(tmp_path, VALID)), "--budget", "-1"])
    assert result.exit_code == 2


def test_plan_refuses_both_checks_at_once_and_a_file_for_its_output(tmp_path: Path) -> None:
    """`--check --check-expected` checked the expected case only (the second flag won) and `--output FILE`
    planned from no nights at all: both refused, as `run --fresh --continue` and `runs FILE` are."""
    spec = str(write(tmp_path, VALID))
    both = runner.invoke(app, ["plan", spec, "--check", "--check-expected"], env={"COLUMNS": "200"})
    assert both.exit_code == 2 and both.stdout == "", both.output
    assert both.stderr == "error: --check and --check-expected exclude each other; give the case to check\n"
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    planned = runner.invoke(app, ["plan", spec, "--output", str(a_file)], env={"COLUMNS": "200"})
    assert planned.exit_code == 2 and planned.stdout == "", planned.output
    assert planned.stderr.startswith(f"error: {a_file} is a file, not an output directory"), planned.stderr


@pytest.mark.parametrize("options", [[], ["--check"]])
def test_plan_refuses_a_budget_of_0_as_run_does(tmp_path: Path, options: list[str]) -> None:
    """`run --budget 0` and `budget.credits: 0` are refused (exit 2): plan prices no budget they could not run."""
    spec = str(write(tmp_path, VALID))
    ran = runner.invoke(app, ["run", spec, "--budget", "0"], env={"COLUMNS": "200"})
    planned = runner.invoke(app, ["plan", spec, "--budget", "0", *options], env={"COLUMNS": "200"})
    refusal = "Invalid value for '--budget': Input should be greater than or equal to 1"
    assert (ran.exit_code, planned.exit_code) == (2, 2), planned.output
    assert refusal in ran.stderr and refusal in planned.stderr
    assert "budget: 0 credits" not in planned.output and planned.stdout == ""


def test_endpoints_lists_every_endpoint_of_the_catalog() -> None:
    result = runner.invoke(app, ["endpoints"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    paths = [line.split()[0] for line in result.stdout.splitlines() if line.startswith("/v")]
    assert paths == [e.path for e in catalog.ENDPOINTS]
    assert "sort_by: string: latest, popular" in result.stdout
    assert "at least one of: url, group_id" in result.stdout


def test_endpoints_json() -> None:
    result = runner.invoke(app, ["endpoints", "--json"])
    assert result.exit_code == 0
    infos = json.loads(result.stdout)
    assert [i["path"] for i in infos] == [e.path for e in catalog.ENDPOINTS]
    videos = next(i for i in infos if i["path"] == PROFILE)
    assert videos["cost"] == 1 and videos["paging"] == "max_cursor"
    handle = next(p for p in videos["params"] if p["name"] == "handle")
    assert handle["required"] is True
    sort_by = next(p for p in videos["params"] if p["name"] == "sort_by")
    assert sort_by["allowed"] == ["latest", "popular"] and sort_by["required"] is False
    assert videos["tables"][0]["table"] == "short_video_videos"
    detail = next(i for i in infos if i["path"] == CREATIVE_DETAIL)
    assert detail["params"][0]["in_path"] is True and detail["paging"] == "single"
    posts = [t for i in infos for t in i["tables"] if t["table"] == "microblog_b_posts"]
    assert posts and all(
        {"feed_reason", "reply_root_uri", "reply_parent_uri"} <= set(t["columns"]) for t in posts
    ), "columns read from a wrapper are columns too"


def test_schema_is_json_schema_of_the_spec() -> None:
    result = runner.invoke(app, ["schema"])
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert schema["title"] == "JobSpec"
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == {"name", "budget", "queries"}
    builtin, declared = schema["$defs"]["Query"]["properties"]["endpoint"]["anyOf"]
    assert PROFILE in builtin["enum"]  # offered to an editor
    assert declared == {"type": "string", "pattern": "^/"}  # a path the job declares is allowed too
    assert {"catalogs", "endpoints"} <= set(schema["properties"])
    assert schema["$defs"]["KindDecl"]["required"] == ["at", "key", "columns"]


@pytest.mark.parametrize("command", ["validate", "plan", "endpoints", "schema"])
def test_help_shows_an_example(command: str) -> None:
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert f"Example: harvest {command}" in result.stdout


@pytest.mark.parametrize("command", ["validate", "plan", "run"])
def test_a_help_example_pasted_outside_the_repository_names_where_the_example_was_installed(
    tmp_path: Path, command: str
) -> None:
    """The help's examples name `configs/examples/...` as the repository holds it; pasted in a user's own
    project (the wheel installed, no configs/ folder) the refusal says where harvest installed that spec, and
    that path is a spec the command takes."""
    example = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"}).stdout
    spec = next(word for word in example.split() if word.startswith("configs/examples/"))
    env = {"HARVEST_BASE_URL": "sandbox", "HARVEST_API_KEY": ""}
    refused = subprocess.run(
        [sys.executable, "-m", "harvest.flows.cli", command, spec],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )
    assert refused.returncode == 2
    said = " ".join(refused.stderr.split())
    assert f"{spec}: no such file; allowed: the path of a YAML job spec; harvest ships this one at " in said
    shipped = said.split("harvest ships this one at ")[1].split()[0]
    assert Path(shipped).is_file() and Path(shipped).name == Path(spec).name
    result = runner.invoke(app, ["validate", shipped], env=env)
    assert result.exit_code == 0, result.output


def test_validate_in_a_real_process_exits_2_without_importing_prefect(tmp_path: Path) -> None:
    bad = write(tmp_path, VALID.replace("credits: 100", "credits: -1"))
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "harvest.flows.cli", "validate", str(bad)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert f"{bad}:3: budget.credits: " in proc.stderr
    imported = {
        line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")
    }
    assert not {m for m in imported if m.split(".")[0] in {"prefect", "duckdb", "fastapi", "uvicorn"}}


# ------------------------------------------------------------------------- text is printed literally
BRACKETS = ["[b]nasa[/b]", "[/i]", "[red]new", ":smile:"]


def test_plan_prints_values_with_brackets_as_they_are(tmp_path: Path) -> None:
    spec = VALID.replace("for_each: {handle: [nasa, esa]}", f"for_each: {{handle: {json.dumps(BRACKETS)}}}")
    result = runner.invoke(app, ["plan", str(write(tmp_path, spec))], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for value in BRACKETS:
        assert f"videos[handle={value}]" in result.stdout


@pytest.mark.parametrize("command", ["validate", "run"])
def test_problems_quoting_markup_are_printed_as_written(tmp_path: Path, command: str) -> None:
    spec = VALID.replace("name: brand-watch", "name: '[/bold]'").replace(
        "sort_by: latest", "sort_by: '[red]new'"
    )
    path = write(tmp_path, spec)
    result = runner.invoke(app, [command, str(path)], env={"HARVEST_BASE_URL": "sandbox"})
    assert result.exit_code == 2
    assert f"{path}:1: name: string should match pattern" in result.stderr
    assert "got '[/bold]'" in result.stderr
    assert f"{path}:7: queries[0].params.sort_by: '[red]new' is not allowed" in result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)


ADS_BELOW_ITS_PRICE = """\
name: ads
budget: {credits: 100, unstarted_exit_code: 3}
output: OUT
queries:
  - id: ads
    endpoint: /v1/search-engine/company/ads
    params: {topic: all}
    for_each: {domain: [a.com, b.com], get_ad_details: [false, true]}
    max_credits: 10
"""


@pytest.mark.parametrize("command", [["validate"], ["plan", "--check"], ["run"]])
def test_a_cap_below_the_price_of_one_request_is_refused_before_anything_is_sent(
    tmp_path: Path, command: list[str]
) -> None:
    """A query whose `max_credits` is below what one of its requests costs could never send one: its night
    would say the budget left it unstarted and `--continue` picks it up, which never happens. `validate`, `plan
    --check` and `run` refuse it (exit 2) at its line, naming the priciest combination of its fan-out (details
    cost 25 credits a request, the rest 1) and what is allowed; without the details the same cap is fine."""
    path = write(tmp_path, ADS_BELOW_ITS_PRICE.replace("OUT", str(tmp_path / "out")))
    result = runner.invoke(app, [command[0], str(path), *command[1:]], env={"HARVEST_BASE_URL": "sandbox"})
    assert result.exit_code == 2, result.output
    assert (
        f"{path}:9: queries[0].max_credits: 10 is below the price of one request "
        "(ads[domain=a.com,get_ad_details=true], the priciest of its fan-out): /v1/search-engine/company/ads with "
        "these parameters costs 25 credits a request, so the query could never send one; allowed: an integer "
        ">= 25, or no max_credits"
    ) in " ".join(result.stderr.split())
    assert "nothing was sent" in result.stderr or command == ["run"]  # run: `error: ...`, and no run begun
    assert not (tmp_path / "out").exists()
    cheap = path.read_text().replace("get_ad_details: [false, true]", "get_ad_details: [false]")
    result = runner.invoke(app, ["validate", str(write(tmp_path, cheap))])
    assert result.exit_code == 0, result.output


def test_endpoints_prints_paths_and_flags_as_they_are() -> None:
    result = runner.invoke(app, ["endpoints"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "/v1/creative/materials/{material_id}  1 credit\n  One creative material" in result.stdout
    assert "material_id: string" in result.stdout and "[path, required]" in result.stdout


def test_docs_tables_md_is_the_catalog_rendered() -> None:
    """docs/tables.md is generated (`harvest schema --tables > docs/tables.md`): stale, this fails."""
    result = runner.invoke(app, ["schema", "--tables"])
    assert result.exit_code == 0, result.output
    committed = (Path(__file__).resolve().parents[1] / "docs" / "tables.md").read_text(encoding="utf-8")
    assert result.stdout == committed, (
        "docs/tables.md is stale: run `harvest schema --tables > docs/tables.md`"
    )
    for table, kind in catalog.all_kinds().items():
        assert f"## {table}\n" in committed and f"Primary key: `{', '.join(kind.primary_key)}`" in committed
    assert "| `feed_reason` |" in committed and "| `_fetched_at` | TIMESTAMP WITH TIME ZONE |" in committed


def test_a_column_the_service_spells_from_the_request_does_not_say_it_is_the_request() -> None:
    """A subreddit asked as `absoluteunits` is named `AbsoluteUnits` (the service's published answer): its `name`
    column said "Made as `$params.subreddit`", so an analyst joined the job's list on it and lost the row. The
    comment (and docs/tables.md) now says it is the service's spelling; `subreddit_name` holds the request's."""
    result = runner.invoke(app, ["schema", "--tables"])
    assert result.exit_code == 0, result.output
    section = result.stdout.split("## forum_subreddits\n", 1)[1].split("\n## ", 1)[0]
    (name,) = [line for line in section.splitlines() if line.startswith("| `name` |")]
    assert "Made as" not in name
    assert "The request's `subreddit` as the service spells it (its case may differ" in name
    assert (
        "Made as `'t3_' \\|\\| id`" in result.stdout
    )  # a template of the record's own values still says how


def harvest_plan(spec: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """`harvest plan SPEC OPTIONS` as a script runs it, in the spec's folder."""
    return subprocess.run(
        [str(ROOT / ".venv" / "bin" / "harvest"), "plan", str(spec), *options], capture_output=True,
        text=True, timeout=120, cwd=spec.parent, env={"PATH": "/usr/bin:/bin", "COLUMNS": "200"},
    )  # fmt: skip


def test_plan_names_a_query_no_max_pages_bounds_among_what_a_short_budget_leaves_undone(
    tmp_path: Path,
) -> None:
    """An unbounded query pages until a budget runs out: the plan said "the budget does not cover the worst
    case", then "every query still starts and ends", naming only a bounded query beside it."""
    spec = write(
        tmp_path,
        """\
        name: unbounded
        budget: {credits: 10}
        output: out
        queries:
          - id: v
            endpoint: /v3/short-video/profile/videos
            params: {handle: nasa}
          - id: w
            endpoint: /v3/short-video/profile/videos
            params: {handle: esa}
            max_pages: 20
        """,
    )
    short = harvest_plan(spec, "--check")
    assert short.returncode == 3, short.stdout + short.stderr
    lines = short.stdout.splitlines()
    assert "every query still starts and ends" not in short.stdout
    assert "  would stop before their last page: w" in lines, short.stdout
    assert "  would page until the budget ran out (unbounded): v" in lines, short.stdout


def test_plan_check_names_who_a_short_budget_leaves_unstarted_and_exits_3(tmp_path: Path) -> None:
    """As a nightly script runs it: `harvest plan SPEC --check` exits 3 when the budget does not cover the
    worst case, after saying which queries would not start if it happens; 0 when it does, and without --check."""
    spec = write(
        tmp_path,
        """\
        name: short
        budget: {credits: 20}
        output: out
        queries:
          - id: creatives
            endpoint: /v1/creative/materials
            params: {query: shoes, limit: 50}
            max_pages: 2
          - id: detail
            endpoint: /v1/creative/materials/{material_id}
            for_each: {material_id: {from: creatives, field: material_id}}
          - id: pins
            endpoint: /v1/pinboard/search
            params: {query: trail}
            for_each: {trim: [true, false]}
            max_pages: 5
        """,
    )

    def plan(*options: str) -> subprocess.CompletedProcess[str]:
        return harvest_plan(spec, *options)

    short = plan("--check")
    assert short.returncode == 3, short.stderr
    lines = short.stdout.splitlines()
    assert "worst case: 112; expected: 112 (no earlier run of the job to learn from: the worst case)" in lines
    assert "the budget covers neither the expected case nor the worst case" in lines
    # breadth-first: the three first pages (3), then the 50 details the first search page found, 17 of them
    assert "  detail[material_id=*]: 83 of 100 would not start" in lines
    assert "  would stop before their last page: creatives, pins (2 of 2)" in lines
    assert plan().returncode == 0
    assert plan("--check", "--budget", "112").returncode == 0
    assert plan("--check-expected", "--budget", "111").returncode == 3


def test_plan_check_counts_the_most_a_declared_price_rule_may_bill(tmp_path: Path) -> None:
    """The same with the declarations' prices: the worst case and the shortfall count what a request may cost at
    most (`get_ad_details` 25 credits a request, a cached profile 1 although its answer may bill 0), as the
    ledger reserves it, so `--check` passes only a budget the night cannot outspend."""
    from tests.surface_helpers import CATALOG, COMPANY_ADS, PROFILE

    spec = write(
        tmp_path,
        f"""\
        name: priced
        budget: {{credits: 50}}
        output: out
        catalogs: [{CATALOG}]
        queries:
          - id: cached
            endpoint: {PROFILE}
            params: {{handle: nasa, cache_max_age: 7d}}
          - id: detailed
            endpoint: {COMPANY_ADS}
            params: {{domain: a.com, get_ad_details: true}}
            max_pages: 2
        """,
    )
    short = harvest_plan(spec, "--check")
    assert short.returncode == 3, short.stdout + short.stderr
    lines = short.stdout.splitlines()
    assert any(line.startswith("worst case: 51;") for line in lines), short.stdout
    # breadth-first: the profile (1) and the ads' first page (25) fit 50; their second page (25) does not
    assert "  would stop before their last page: detailed" in lines, short.stdout
    assert harvest_plan(spec, "--check", "--budget", "51").returncode == 0


def test_a_budget_past_what_a_run_counts_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """`--budget 99999999999999999999999` was taken, then crashed the run writing its manifest (64-bit)."""
    path = write(tmp_path, VALID)
    for command in ("plan", "run"):
        result = runner.invoke(app, [command, str(path), "--budget", "99999999999999999999999"])
        assert result.exit_code == 2, result.output
        assert "--budget" in result.output and "1000000000000000" in result.output, result.output
