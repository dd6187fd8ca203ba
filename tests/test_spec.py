"""Job spec validation: every invalid spec names the file, the line, the field and what is allowed."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from harvest.flows.spec import (
    JobSpec,
    Problem,
    SpecError,
    UsageError,
    derive_id,
    load_spec,
    parse_spec,
    resolve_base_url,
)
from tests.spec_texts import CASES, HEAD, VALID


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


def test_a_misspelled_order_of_an_incremental_query_is_said_once_with_its_newest_first_value(
    tmp_path: Path,
) -> None:
    """The misspelled `sort_by` is refused with its values; the incremental problem then says only which of them
    lists newest first, not every endpoint that can (a paragraph of some 600 characters)."""
    query = "  - endpoint: /v3/short-video/profile/videos\n    params: {handle: nasa, sort_by: lates}\n"
    path, found = problems(tmp_path, HEAD + query + "    incremental: true\n")
    assert [str(p) for p in found] == [
        f"{path}:6: queries[0].params.sort_by: 'lates' is not allowed; allowed: one of: latest, popular",
        f"{path}:7: queries[0].incremental: /v3/short-video/profile/videos lists newest first only with "
        "sort_by: latest; allowed: sort_by: latest; or no incremental",
    ]
    _, wrong = only(tmp_path, HEAD + query.replace("lates", "popular") + "    incremental: true\n")
    assert "/v1/forum/subreddit with sort: new" in wrong.allowed  # a valid order: every listing that can


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


def test_every_name_the_spec_package_exports_resolves_to_its_module() -> None:
    """`harvest.flows.spec` imports a part when one of its names is first used: each exported name must be in
    its table of homes, or the first use of it fails."""
    import importlib

    import harvest.flows.spec as spec

    for name in spec.__all__:
        value = getattr(spec, name)
        assert any(
            getattr(importlib.import_module(f"harvest.flows.spec.{part}"), name, None) is value
            for part in ("checks", "describe", "identity", "model", "parse", "problems", "service_url")
        ), name
