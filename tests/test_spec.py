"""Job spec validation: every invalid spec names the file, the line, the field and what is allowed."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from flows.spec import (
    JobSpec,
    Problem,
    SpecError,
    UsageError,
    derive_id,
    load_spec,
    parse_spec,
    resolve_base_url,
)

HEAD = """\
name: brand-watch
budget:
  credits: 100
queries:
"""
"""Lines 1-4 of most specs below: their queries start on line 5."""

VALID = (
    HEAD
    + """\
  - id: videos
    endpoint: /v3/short-video/profile/videos
    params: {sort_by: latest}
    for_each: {handle: [nasa, esa]}
    max_pages: 5
  - id: creatives
    endpoint: /v1/creative/materials
    params: {query: shoes, limit: 50, style_tags: [ugc, testimonial]}
  - id: creative_detail
    endpoint: /v1/creative/materials/{material_id}
    for_each: {material_id: {from: creatives, field: material_id}}
"""
)


def write(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def problems(tmp_path: Path, text: str) -> tuple[Path, list[Problem]]:
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    return path, list(caught.value.problems)


def only(tmp_path: Path, text: str) -> tuple[Path, Problem]:
    path, found = problems(tmp_path, text)
    assert len(found) == 1, "\n".join(map(str, found))
    return path, found[0]


# ------------------------------------------------------------------------------------------ valid specs
def test_valid_spec_with_defaults(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, VALID))
    assert spec.name == "brand-watch"
    assert spec.output == Path("data/brand-watch")
    assert spec.concurrency == 4
    assert spec.durability == "flush"
    assert spec.budget.policy == "breadth_first"
    assert spec.budget.min_balance is None
    assert spec.service.base_url is None
    assert spec.service.api_key_env == "HARVEST_API_KEY"
    assert [q.query_id for q in spec.queries] == ["videos", "creatives", "creative_detail"]
    assert spec.queries[2].dependent["material_id"].from_ == "creatives"


def test_example_specs_are_valid() -> None:
    examples = sorted((Path(__file__).parent.parent / "configs" / "examples").glob("*.yaml"))
    assert len(examples) >= 2
    for path in examples:
        load_spec(path)


def test_programmatic_validation_runs_the_semantic_checks_too() -> None:
    data = {"name": "x", "budget": {"credits": 1}, "queries": [{"endpoint": "/v1/nope"}]}
    with pytest.raises(ValueError, match="unknown endpoint"):
        JobSpec.model_validate(data)


def test_spec_hash_is_stable_and_changes_with_the_spec(tmp_path: Path) -> None:
    one = load_spec(write(tmp_path, VALID))
    two = parse_spec(VALID.replace("name: brand-watch", "name: brand-watch  # same"))
    assert one.spec_hash() == two.spec_hash()
    assert len(one.spec_hash()) == 64
    assert parse_spec(VALID.replace("credits: 100", "credits: 101")).spec_hash() != one.spec_hash()


def test_derived_ids_are_readable_stable_and_ignore_limits() -> None:
    text = HEAD + "  - endpoint: /v1/pinboard/search\n    params: {query: shoes}\n"
    query = parse_spec(text).queries[0]
    assert query.id is None
    assert query.query_id == derive_id(query) == parse_spec(text).queries[0].query_id
    assert (
        query.query_id.startswith("pinboard_search-") and len(query.query_id) == len("pinboard_search-") + 8
    )
    capped = parse_spec(text + "    max_pages: 3\n").queries[0]
    assert capped.query_id == query.query_id
    other = parse_spec(text.replace("shoes", "boots")).queries[0]
    assert other.query_id != query.query_id


# ----------------------------------------------------------------------------------------- invalid specs
CASES = {
    "unknown top key": (
        VALID + "colour: blue\n",
        16,
        "colour",
        ["unknown key 'colour'"],
        ["name", "budget", "queries", "concurrency"],
    ),
    "unknown query key": (
        HEAD + "  - endpoint: /v1/pinboard/search\n    params: {query: x}\n    max_page: 5\n",
        7,
        "queries[0].max_page",
        ["unknown key 'max_page'"],
        ["max_pages", "max_credits", "for_each"],
    ),
    "bad name": (
        VALID.replace("name: brand-watch", "name: Brand Watch"),
        1,
        "name",
        ["'Brand Watch'"],
        ["lower-case letters, digits"],
    ),
    "unknown endpoint with suggestion": (
        HEAD + "  - endpoint: /v3/short-video/profile/video\n    params: {handle: nasa}\n",
        5,
        "queries[0].endpoint",
        ["unknown endpoint '/v3/short-video/profile/video'"],
        ["/v3/short-video/profile/videos", "harvest endpoints"],
    ),
    "bad param type": (
        HEAD + "  - endpoint: /v1/creative/materials\n    params:\n      query: x\n      limit: many\n",
        8,
        "queries[0].params.limit",
        ["'many'"],
        ["an integer", "from 1 to 100"],
    ),
    "enum outside allowed values": (
        HEAD + "  - endpoint: /v3/short-video/profile/videos\n    params: {handle: nasa, sort_by: oldest}\n",
        6,
        "queries[0].params.sort_by",
        ["'oldest' is not allowed"],
        ["latest, popular"],
    ),
    "limit out of range": (
        HEAD + "  - endpoint: /v1/creative/materials\n    params:\n      limit: 500\n",
        7,
        "queries[0].params.limit",
        ["less than or equal to 100", "500"],
        ["from 1 to 100"],
    ),
    "missing required param": (
        HEAD + "  - id: vids\n    endpoint: /v3/short-video/profile/videos\n    params: {sort_by: latest}\n",
        7,
        "queries[0].params.handle",
        ["required parameter 'handle' is missing"],
        ["text"],
    ),
    "neither of two identifiers": (
        HEAD + "  - endpoint: /v1/network-a/group/posts\n    params: {sort_by: TOP_POSTS}\n",
        6,
        "queries[0].params",
        ["give at least one of: url, group_id"],
        ["url, group_id"],
    ),
    "for_each on a non-parameter": (
        HEAD + "  - endpoint: /v3/short-video/profile/videos\n    for_each:\n      handel: [nasa]\n",
        7,
        "queries[0].for_each.handel",
        ["'handel' is not a parameter of /v3/short-video/profile/videos"],
        ["handle", "user_id", "sort_by"],
    ),
    "for_each from an unknown query": (
        VALID.replace("{from: creatives,", "{from: creative,"),
        15,
        "queries[2].for_each.material_id.from",
        ["no query has id 'creative'"],
        ["creatives"],
    ),
    "field not in the parent's kinds": (
        VALID.replace("field: material_id}", "field: materialId}"),
        15,
        "queries[2].for_each.material_id.field",
        ["'materialId' is not a column of creative_materials"],
        ["material_id", "title"],
    ),
    "cycle": (
        HEAD
        + """\
  - id: a
    endpoint: /v1/creative/materials/{material_id}
    for_each: {material_id: {from: b, field: material_id}}
  - id: b
    endpoint: /v1/creative/materials/{material_id}
    for_each: {material_id: {from: a, field: material_id}}
""",
        7,
        "queries[0].for_each.material_id.from",
        ["cycle: a -> b -> a"],
        ["does not depend on this one"],
    ),
    "duplicate ids": (
        HEAD
        + "  - id: pins\n    endpoint: /v1/pinboard/search\n    params: {query: a}\n"
        + "  - id: pins\n    endpoint: /v1/pinboard/search\n    params: {query: b}\n",
        8,
        "queries[1].id",
        ["duplicate id 'pins', also used by queries[0]"],
        ["a unique `id`"],
    ),
    "negative budget": (
        VALID.replace("credits: 100", "credits: -5"),
        3,
        "budget.credits",
        ["greater than or equal to 0", "-5"],
        ["an integer", ">= 0"],
    ),
    "concurrency out of range": (
        VALID + "concurrency: 65\n",
        16,
        "concurrency",
        ["65"],
        ["from 1 to 64"],
    ),
    "fanned-out value outside allowed values": (
        VALID.replace(
            "params: {sort_by: latest}\n    for_each: {handle: [nasa, esa]}",
            "for_each:\n      handle: [nasa]\n      sort_by:\n        - latest\n        - newest",
        ),
        11,
        "queries[0].for_each.sort_by[1]",
        ["'newest' is not allowed"],
        ["latest, popular"],
    ),
    "for_each value neither list nor from": (
        VALID.replace("{handle: [nasa, esa]}", "{handle: nasa}"),
        8,
        "queries[0].for_each.handle",
        ["expected a list of values or {from: <query id>, field: <column>}"],
        ["{from: <query id>, field: <column>}"],
    ),
    "unquoted boolean for a text": (
        HEAD + "  - endpoint: /v1/photo-app/user/embed\n    params: {handle: no}\n",
        6,
        "queries[0].params.handle",
        ["quote the value"],
        ["text"],
    ),
    "unknown endpoint in costs": (
        VALID + "costs:\n  /v1/pinboard/serch: 2\n",
        17,
        'costs["/v1/pinboard/serch"]',
        ["unknown endpoint '/v1/pinboard/serch'"],
        ["/v1/pinboard/search"],
    ),
    "base_url neither URL nor sandbox": (
        VALID.replace("budget:", "service: {base_url: localhost}\nbudget:"),
        2,
        "service.base_url",
        ["the URL does not start with http:// or https:// (the URL is not shown"],
        ["`sandbox`"],
    ),
    "duplicate YAML key": (
        VALID + "name: other\n",
        16,
        "name",
        ["duplicate key 'name'"],
        ["each key once"],
    ),
    "cost below the catalog's price": (
        VALID + "costs:\n  /v1/pinboard/search: 0\n",
        17,
        'costs["/v1/pinboard/search"]',
        ["0 is below the catalog's price of 1 credit", "spend past it"],
        [">= 1", "allow_lower_costs: true"],
    ),
    "credential before the host in base_url": (
        VALID.replace("budget:", "service: {base_url: 'http://user:s3cr3t-pass@api.example'}\nbudget:"),
        2,
        "service.base_url",
        ["carries a credential before the host", "not shown"],
        ["without credentials"],
    ),
    "key in the query string of base_url": (
        VALID.replace("budget:", "service: {base_url: 'https://api.example/?api_key=s3cr3t-key'}\nbudget:"),
        2,
        "service.base_url",
        ["credential in its query string (api_key, not shown)"],
        ["without credentials or query string"],
    ),
    "escaped control character in a value": (
        VALID.replace("{query: shoes,", '{query: "sho\\ees",'),
        12,
        "queries[1].params.query",
        ["control character U+001B (ESC) at column 25, written as \\e"],
        ["printable text"],
    ),
    "cron field out of range": (
        VALID + 'schedule: {cron: "99 99 * * *"}\n',
        16,
        "schedule.cron",
        ["'99 99 * * *' is not a valid cron expression", "out of range"],
        ["minute 0-59", "hour 0-23", "weekday 0-6"],
    ),
    "cron with four fields": (
        VALID + 'schedule: {cron: "0 3 * *"}\n',
        16,
        "schedule.cron",
        ["not a five-field cron expression"],
        ["minute 0-59"],
    ),
    "hashed cron": (
        VALID + 'schedule: {cron: "H 3 * * *"}\n',
        16,
        "schedule.cron",
        ["random and hashed fields (H, R) are not supported"],
        ["minute 0-59"],
    ),
    "unknown time zone": (
        VALID + 'schedule: {cron: "0 3 * * *", timezone: Mars/Olympus}\n',
        16,
        "schedule.timezone",
        ["'Mars/Olympus' is not an IANA time zone"],
        ["Europe/Berlin"],
    ),
    "interval below a minute": (
        VALID + "schedule: {interval: 30}\n",
        16,
        "schedule.interval",
        ["greater than or equal to 60", "30"],
        [">= 60"],
    ),
    "interval as text": (
        VALID + 'schedule: {interval: "3600"}\n',
        16,
        "schedule.interval",
        ["valid integer"],
        [">= 60"],
    ),
    "both cron and interval": (
        VALID + 'schedule: {cron: "0 3 * * *", interval: 3600}\n',
        16,
        "schedule",
        ["give exactly one of cron or interval"],
        ["cron", "interval"],
    ),
    "unknown schedule key": (
        VALID + "schedule: {every: 3600}\n",
        16,
        "schedule.every",
        ["unknown key 'every'"],
        ["cron", "interval", "timezone"],
    ),
    "unknown runner kind": (
        VALID + "runner: {kind: spark}\n",
        16,
        "runner.kind",
        ["'spark' is not allowed"],
        ["'local'", "'dask'"],
    ),
    "no workers": (
        VALID + "runner: {kind: dask, workers: 0}\n",
        16,
        "runner.workers",
        ["greater than or equal to 1", "0"],
        ["from 1 to 64"],
    ),
    "no pages per round": (
        VALID + "runner: {kind: dask, round_pages: 0}\n",
        16,
        "runner.round_pages",
        ["greater than or equal to 1"],
        ["from 1 to 10000"],
    ),
    "address without dask": (
        VALID + "runner: {address: 'tcp://10.0.0.5:8786'}\n",
        16,
        "runner",
        ["an address needs kind: dask"],
        ["kind", "address", "workers"],
    ),
    "address that is no scheduler": (
        VALID + "runner: {kind: dask, address: '10.0.0.5:8786'}\n",
        16,
        "runner",
        ["'10.0.0.5:8786' is not a Dask scheduler address"],
        ["kind", "address"],
    ),
    "unknown runner key": (
        VALID + "runner: {kind: dask, nodes: 3}\n",
        16,
        "runner.nodes",
        ["unknown key 'nodes'"],
        ["kind", "address", "workers", "round_pages"],
    ),
    "missing budget": (
        VALID.replace("budget:\n  credits: 100\n", ""),
        1,
        "budget",
        ["required, but missing"],
        ["credits", "min_balance", "policy"],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_invalid_spec_names_file_line_field_and_allowed(tmp_path: Path, case: str) -> None:
    text, line, field, in_problem, in_allowed = CASES[case]
    path, problem = only(tmp_path, text)
    message = str(problem)
    assert message.startswith(f"{path}:{line}: {field}: "), message
    for fragment in in_problem:
        assert fragment in problem.problem, message
    assert problem.allowed is not None and message.endswith(f"; allowed: {problem.allowed}")
    for fragment in in_allowed:
        assert fragment in problem.allowed, message


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    text = (
        VALID.replace("name: brand-watch", "name: Brand")
        .replace("credits: 100", "credits: -1")
        .replace("sort_by: latest", "sort_by: newest")
        + "extra: 1\n"
    )
    path, found = problems(tmp_path, text)
    assert [p.field for p in found] == ["name", "budget.credits", "queries[0].params.sort_by", "extra"]
    assert [p.line for p in found] == [1, 3, 7, 16]
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert len(str(caught.value).splitlines()) == 4


def test_duplicate_derived_ids_say_they_were_derived(tmp_path: Path) -> None:
    query = "  - endpoint: /v1/pinboard/search\n    params: {query: a}\n"
    _, problem = only(tmp_path, HEAD + query + query)
    assert problem.field == "queries[1]" and problem.line == 7
    assert "derived from endpoint and params" in problem.problem


def test_ambiguous_parent_field_asks_for_kind(tmp_path: Path) -> None:
    text = (
        HEAD
        + "  - id: search\n    endpoint: /v1/video-platform/search\n    params: {query: x}\n"
        + "  - id: replies\n    endpoint: /v1/video-platform/video/comment/replies\n"
        + "    for_each: {continuationToken: {from: search, field: id}}\n"
    )
    _, problem = only(tmp_path, text)
    assert "say which with `kind`" in problem.problem
    assert "video_platform_videos" in (problem.allowed or "")
    fixed = text.replace("field: id}", "field: id, kind: video_platform_shorts}")
    assert parse_spec(fixed).queries[1].dependent["continuationToken"].kind == "video_platform_shorts"


def test_yaml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path, problem = only(tmp_path, VALID + "concurrency: [4\n")
    assert problem.line is not None and problem.line >= 16
    assert str(problem).startswith(f"{path}:{problem.line}: YAML syntax:")
    assert problem.allowed == "valid YAML"


def test_spec_that_is_not_a_mapping(tmp_path: Path) -> None:
    path, problem = only(tmp_path, "- just\n- a list\n")
    assert str(problem).startswith(f"{path}:1: the spec must be a YAML mapping")
    assert "name, service, budget" in (problem.allowed or "")


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert str(caught.value).startswith(f"{path}: no such file")
    assert isinstance(caught.value, UsageError) and caught.value.exit_code == 2


# ------------------------------------------------------------------------------------------- base URL
def test_base_url_precedence_cli_then_spec_then_env() -> None:
    spec = parse_spec(VALID.replace("budget:", "service: {base_url: 'https://spec.example/'}\nbudget:"))
    env = {"HARVEST_BASE_URL": "https://env.example"}
    assert resolve_base_url(spec, "https://cli.example", env) == "https://cli.example"
    assert resolve_base_url(spec, None, env) == "https://spec.example"
    assert resolve_base_url(parse_spec(VALID), None, env) == "https://env.example"
    assert resolve_base_url(parse_spec(VALID), "sandbox", {}) == "sandbox"


def test_no_base_url_is_refused_not_sandboxed() -> None:
    with pytest.raises(UsageError) as caught:
        resolve_base_url(parse_spec(VALID), None, {})
    message = str(caught.value)
    assert caught.value.exit_code == 2
    for fragment in ("service.base_url", "HARVEST_BASE_URL", "--base-url", "`sandbox`"):
        assert fragment in message


def test_bad_base_url_from_the_environment_is_refused() -> None:
    with pytest.raises(
        UsageError, match=r"HARVEST_BASE_URL: the URL does not start with http:// or https://"
    ):
        resolve_base_url(parse_spec(VALID), None, {"HARVEST_BASE_URL": "api.example"})


def test_checking_a_schedule_does_not_import_prefect(tmp_path: Path) -> None:
    """`harvest validate` answers at once and starts nothing of Prefect's (its telemetry included): checking a
    cron must not import Prefect (its vendored croniter would, ~1.5 s)."""
    import subprocess
    import sys

    spec = tmp_path / "nightly.yaml"
    spec.write_text(VALID + 'schedule: {cron: "0 3 * * *", timezone: Europe/Berlin}\n')
    code = (
        "import sys; from flows.spec import load_spec; "
        f"load_spec({str(spec)!r}); print(sorted(m for m in sys.modules if m.split('.')[0] == 'prefect'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
