"""Specs that would crash or hang a naive loader are refused at once, with file, line and what is allowed (exit 2).

Alias bombs, control characters, oversized files, credentials in service URLs, prices below the catalog's and
fan-outs into millions of queries. Anything that could hang runs in a subprocess with a timeout.

"At once" is asserted as bounded work, not wall time: the nodes the composer builds, the memory a refusal
takes. Both are exact, and break when a limit stops bounding the work (an alias expanded by walking it, a file
read whole), while a timed assertion on a shared machine either flakes or is too generous to catch that. The
subprocess timeouts only turn a hang into a failure.
"""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from harvest.flows.cli import app
from harvest.flows.spec import (
    MAX_FANOUT,
    SpecError,
    UsageError,
    check_base_url,
    load_spec,
    parse_spec,
    resolve_base_url,
)
from harvest.flows.spec import yaml_reader as spec_yaml
from tests.endpoints import CREATIVE, PINS
from tests.spec_texts import HEAD, VALID

ROOT = Path(__file__).parent.parent
runner = CliRunner()
QUERY = "  - endpoint: /v1/pinboard/search\n    params:\n      query: shoes\n"
"""Lines 5-7 of a spec built on HEAD."""


def harvest(*args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    """harvest in its own process: a hang fails the test at the timeout instead of stalling the suite."""
    return subprocess.run(
        [sys.executable, "-m", "harvest.flows.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def problems_of(text: str, file: str = "job.yaml") -> list[str]:
    with pytest.raises(SpecError) as caught:
        parse_spec(text, file)
    return [str(p) for p in caught.value.problems]


# ------------------------------------------------------------------------------------------ alias bombs
def alias_bomb(levels: int = 10) -> str:
    """The billion laughs: each level is nine aliases of the one before, 9^10 strings in all."""
    lines = ['      l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"      l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return HEAD + QUERY + "\n".join(lines) + "\n"


@pytest.fixture
def composed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many nodes the spec reader's composer built."""
    built: list[int] = [0]
    compose = spec_yaml.BoundedComposer.compose_node

    def counting(self: spec_yaml.BoundedComposer, parent: Any, index: Any) -> Any:
        built[0] += 1
        return compose(self, parent, index)

    monkeypatch.setattr(spec_yaml.BoundedComposer, "compose_node", counting)
    return built


def refusal_cost(refuse: Callable[[], object]) -> tuple[int, int]:
    """(Python function calls, bytes allocated at most) while `refuse` runs; it must raise SpecError."""
    calls = [0]

    def count(frame: Any, event: str, arg: Any) -> None:
        calls[0] += event == "call"

    tracemalloc.start()
    sys.setprofile(count)
    try:
        with pytest.raises(SpecError):
            refuse()
    finally:
        sys.setprofile(None)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return calls[0], peak


@pytest.mark.parametrize("libyaml", [True, False])
def test_an_alias_bomb_costs_what_its_text_costs(monkeypatch: pytest.MonkeyPatch, libyaml: bool) -> None:
    """9^10 strings written in 10 lines: refusing them takes ~700 Python calls (~8,000 without libyaml) and
    kilobytes; walking the expansion even up to the limit would take 100,000s of calls."""
    monkeypatch.setattr(yaml, "__with_libyaml__", libyaml and yaml.__with_libyaml__)
    calls, memory = refusal_cost(lambda: parse_spec(alias_bomb()))
    assert calls < 20_000 and memory < 1_000_000


def test_a_spec_of_plain_nodes_past_the_limit_is_refused_without_building_one(composed: list[int]) -> None:
    """libyaml's events are counted before the (Python, ~15 us a node) composer builds anything."""
    if not yaml.__with_libyaml__:
        pytest.skip("PyYAML without libyaml: the composer counts")
    values = ", ".join(["x"] * (spec_yaml.MAX_NODES * 3))
    (problem,) = problems_of(HEAD + QUERY + f"      many: [{values}]\n")
    assert problem.startswith("job.yaml:8: more than 100,000 YAML nodes")
    assert composed[0] == 0


def test_a_spec_of_any_size_is_refused_after_reading_a_megabyte(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("wb") as f:
        f.truncate(200 * spec_yaml.MAX_SPEC_BYTES)  # sparse: 200 MB to read, none on disk
    calls, memory = refusal_cost(lambda: load_spec(path))
    assert calls < 1_000 and memory < 3 * spec_yaml.MAX_SPEC_BYTES


@pytest.mark.parametrize("command", ["validate", "run"])
def test_an_alias_bomb_is_refused_at_once(tmp_path: Path, command: str) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb())
    proc = (
        harvest(command, str(path), "--base-url", "sandbox")
        if command == "run"
        else harvest(command, str(path))
    )
    assert proc.returncode == 2
    assert f"{path}:13: more than 100,000 YAML nodes with aliases expanded" in proc.stderr
    assert "allowed: up to 100,000 nodes" in proc.stderr
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr


def test_without_libyaml_the_python_parser_counts_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yaml, "__with_libyaml__", False)
    (problem,) = problems_of(alias_bomb())
    assert problem.startswith("job.yaml:13: more than 100,000 YAML nodes with aliases expanded")
    assert parse_spec(VALID).queries[2].dependent["material_id"].from_ == "creatives"


def test_aliases_within_the_limit_work_and_errors_inside_them_point_at_the_alias() -> None:
    text = HEAD + (
        "  - {id: a, endpoint: /v1/pinboard/search, params: &p {query: shoes}}\n"
        "  - {id: b, endpoint: /v1/pinboard/search, params: *p}\n"
        "  - id: c\n    endpoint: /v1/creative/materials\n    params: &bad {limit: 500}\n"
        "  - id: d\n    endpoint: /v1/creative/materials\n    params: *bad\n"
    )
    found = problems_of(text)
    assert len(found) == 2
    assert found[0].startswith("job.yaml:9: queries[2].params.limit: ")
    assert found[1].startswith("job.yaml:12: queries[3].params.limit: ")  # the alias's line, not the anchor's
    spec = parse_spec(text.replace("limit: 500", "limit: 50"))
    assert spec.queries[0].params == spec.queries[1].params == {"query": "shoes"}


def test_merge_keys_override_without_being_called_duplicates() -> None:
    text = (
        HEAD
        + "  - endpoint: /v3/short-video/profile/videos\n    params: &common {handle: nasa, sort_by: latest}\n"
        + "  - endpoint: /v3/short-video/profile/videos\n    params: {<<: *common, handle: esa}\n"
    )
    spec = parse_spec(text)
    assert spec.queries[1].params == {"handle": "esa", "sort_by": "latest"}


def test_a_recursive_alias_is_refused() -> None:
    (problem,) = problems_of(HEAD + "  - endpoint: /v1/pinboard/search\n    params: &p {query: *p}\n")
    assert problem == "job.yaml:6: alias *p is inside its own anchor; allowed: aliases of complete nodes"


DEEP_FLOW = HEAD + QUERY + "      deep: " + "[" * 2000 + "]" * 2000 + "\n"
"""Past libyaml's own limit (1,000 levels, PyYAML 6.0.4) as well as harvest's (64): line 8 opens level 65."""
DEEP_BLOCK = HEAD + QUERY + "      deep:\n        " + "- " * 1_200 + "x\n"
"""Block sequences nested on one line (`- - - x`), 1,200 deep: past libyaml's block limit too."""


@pytest.mark.parametrize("libyaml", [True, False])
@pytest.mark.parametrize(("text", "line"), [(DEEP_FLOW, 8), (DEEP_BLOCK, 9)], ids=["flow", "block"])
def test_deep_nesting_is_refused_as_harvests_limit_with_either_parser(
    monkeypatch: pytest.MonkeyPatch, libyaml: bool, text: str, line: int
) -> None:
    """The limit and its line are harvest's whatever PyYAML's own limits are (libyaml refuses at 1,000 itself)."""
    monkeypatch.setattr(yaml, "__with_libyaml__", libyaml and yaml.__with_libyaml__)
    (problem,) = problems_of(text)
    assert problem == f"job.yaml:{line}: nested deeper than 64 levels; allowed: up to 64 levels"


@pytest.mark.parametrize("libyaml", [True, False])
def test_nesting_up_to_the_limit_is_read(monkeypatch: pytest.MonkeyPatch, libyaml: bool) -> None:
    """64 levels are read (the document, queries, a query and params are the first four): the spec goes on to
    its field checks; one level more is refused."""
    monkeypatch.setattr(yaml, "__with_libyaml__", libyaml and yaml.__with_libyaml__)
    deep = HEAD + QUERY + "      deep: " + "[" * 60 + "]" * 60 + "\n"
    assert problems_of(deep) == [
        "job.yaml:8: queries[0].params.deep: 'deep' is not a parameter of this endpoint; "
        "allowed: query, cursor, trim"
    ]
    (problem,) = problems_of(deep.replace("[", "[[", 1).replace("]", "]]", 1))
    assert problem == "job.yaml:8: nested deeper than 64 levels; allowed: up to 64 levels"


@pytest.mark.scenario
def test_deep_nesting_is_refused_by_validate_and_run_before_prefect(tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(DEEP_FLOW)
    for args in (("validate", str(path)), ("run", str(path), "--base-url", "sandbox")):
        proc = harvest(*args)
        assert proc.returncode == 2, proc.stderr
        assert f"{path}:8: nested deeper than 64 levels; allowed: up to 64 levels" in proc.stderr
        assert "Traceback" not in proc.stderr and "maximum nesting depth" not in proc.stderr


def test_too_many_plain_nodes_are_refused() -> None:
    values = ", ".join(["x"] * (spec_yaml.MAX_NODES + 10))
    (problem,) = problems_of(HEAD + QUERY + f"      many: [{values}]\n")
    assert problem.startswith("job.yaml:8: more than 100,000 YAML nodes")


def test_an_oversized_file_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(VALID + "# " + "x" * spec_yaml.MAX_SPEC_BYTES + "\n")
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert str(caught.value) == (
        f"{path}: larger than 1,000,000 bytes; allowed: a spec up to 1,000,000 bytes"
    )
    assert problems_of("# " + "x" * spec_yaml.MAX_SPEC_BYTES) == [
        "job.yaml: larger than 1,000,000 bytes; allowed: a spec up to 1,000,000 bytes"
    ]


# ---------------------------------------------------------------------------------- control characters
@pytest.mark.parametrize(
    ("char", "name"),
    [("\x00", "U+0000 (NUL)"), ("\x1b", "U+001B (ESC)"), ("\x7f", "U+007F (DEL)"), ("\x01", "U+0001")],
)
@pytest.mark.parametrize("command", ["validate", "run"])
def test_control_characters_are_refused_with_line_and_column(
    tmp_path: Path, char: str, name: str, command: str
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(VALID.replace("query: shoes", f"query: sh{char}oes"))
    result = runner.invoke(app, [command, str(path)], env={"HARVEST_BASE_URL": "sandbox"})
    assert result.exit_code == 2
    assert isinstance(result.exception, SystemExit)  # no traceback
    assert f"{path}:12: control character {name} at column 23; allowed: printable text" in result.stderr


def test_many_control_characters_are_summed_up() -> None:
    found = problems_of(VALID + "#" + "\x00" * 40 + "\n")
    assert len(found) == 6
    assert (
        found[0]
        == "job.yaml:16: control character U+0000 (NUL) at column 2; allowed: printable text; tabs and line breaks"
    )
    assert found[-1].startswith("job.yaml:16: 35 more control characters, the first at column 7;")


@pytest.mark.parametrize(
    ("value", "line", "column", "char", "written"),
    [
        ('"sh\\eoes"', 12, 24, "U+001B (ESC)", "\\e"),
        ('"ü\\x1b"', 12, 23, "U+001B (ESC)", "\\x1b"),
        ('"a \\\\e \\0"', 12, 28, "U+0000 (NUL)", "\\0"),  # an escaped backslash, then NUL
        ('"first line\n      then \\u0007"', 13, 12, "U+0007 (BEL)", "\\u0007"),
        ('"x\\N"', 12, 23, "U+0085", "\\N"),
    ],
)
@pytest.mark.parametrize("libyaml", [True, False])
def test_control_characters_written_as_escapes_are_refused_with_line_and_column(
    monkeypatch: pytest.MonkeyPatch,
    value: str,
    line: int,
    column: int,
    char: str,
    written: str,
    libyaml: bool,
) -> None:
    monkeypatch.setattr(yaml, "__with_libyaml__", libyaml and yaml.__with_libyaml__)
    text = VALID.replace("{query: shoes,", f"{{query: {value},")
    assert problems_of(text) == [
        f"job.yaml:{line}: queries[1].params.query: control character {char} at column {column}, written as "
        f"{written}; allowed: printable text; tabs and line breaks"
    ]
    assert text.splitlines()[line - 1][column - 1 :].startswith(written)


def test_tabs_and_windows_line_breaks_are_fine() -> None:
    assert parse_spec(VALID.replace("\n", "\r\n") + "#\ta comment\r\n").name == "brand-watch"


# ----------------------------------------------------------------------------------- service URLs
SECRET = "s3cr3t-K3Y-9xQ"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        (f"http://{SECRET}@api.example", "carries a credential before the host"),
        (f"https://user:{SECRET}@api.example:8443/v1", "carries a credential before the host"),
        (f"user:{SECRET}@api.example", "carries a credential before the host"),
        (f"https://api.example/?api_key={SECRET}", "credential in its query string (api_key, not shown)"),
        (
            f"https://api.example/v1?x=1&access_token={SECRET}",
            "credential in its query string (access_token,",
        ),
        (f"https://api.example/v1?apikey={SECRET}#top", "credential in its query string (apikey,"),
        (f"https://api.example/v1?region={SECRET}", "'https://api.example/v1?...' has a query string"),
        (f"http:/{SECRET}@127.0.0.1:18800", "the URL does not start with http:// or https://"),
        (f"http//{SECRET}@127.0.0.1:18800", "the URL does not start with http:// or https://"),
        (f"http:/{SECRET}@127.0.0.1:18800?region=x", "the URL does not start with http:// or https://"),
        (f"http://127.0.0.1:{SECRET}/", "the URL has a port that is not a number"),
        (f"http://h/v1;apikey={SECRET}", "credential in its path parameters (apikey, not shown)"),
        (f"http://h/v1;region={SECRET}/x", "the URL carries path parameters (;name=value, not shown)"),
        (
            f"http://{SECRET}%40api.example",
            "credential before the host (user@ or user:password@, percent-encoded",
        ),
        (
            f"https://api.example/v1%3Fapi_key%3D{SECRET}",
            "credential in its query string (api_key, percent-encoded",
        ),
        (f"https://api.example/?token{SECRET}", "credential in its query string (unnamed, not shown)"),
    ],
)
def test_credentials_in_a_service_url_are_refused_without_repeating_them(url: str, problem: str) -> None:
    with pytest.raises(ValueError) as caught:
        check_base_url(url)
    assert problem in str(caught.value) and SECRET not in str(caught.value)
    spec = parse_spec(VALID)
    for source, cli, env in (("--base-url", url, {}), ("HARVEST_BASE_URL", None, {"HARVEST_BASE_URL": url})):
        with pytest.raises(UsageError) as refused:
            resolve_base_url(spec, cli, env)
        assert str(refused.value).startswith(f"{source}: ") and SECRET not in str(refused.value)
    text = VALID.replace("budget:", f"service: {{base_url: '{url}'}}\nbudget:")
    (found,) = problems_of(text)
    assert found.startswith("job.yaml:2: service.base_url: ") and SECRET not in found


@pytest.mark.parametrize(
    "url", ["https://api.example", "http://127.0.0.1:8765/", "https://api.example/v1/@me"]
)
def test_plain_service_urls_are_accepted(url: str) -> None:
    assert check_base_url(url) == url.rstrip("/")


def test_run_with_a_key_in_the_url_is_refused_before_anything_starts(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(VALID)
    url = f"http://{SECRET}@127.0.0.1:9"
    result = runner.invoke(
        app,
        ["run", str(path), "--base-url", url, "--output", str(tmp_path / "out")],
        env={"HARVEST_API_KEY": "k"},
    )
    assert result.exit_code == 2
    assert "error: --base-url: the URL carries a credential before the host" in result.stderr
    assert SECRET not in result.output + result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "url", [f"http:/{SECRET}@127.0.0.1:9", f"http//{SECRET}@127.0.0.1:9", f"http://h/v1;apikey={SECRET}"]
)
def test_a_malformed_url_with_a_key_is_refused_without_showing_it(tmp_path: Path, url: str) -> None:
    """A real `harvest run` process: nothing it prints (usage boxes, tracebacks, the error) holds the key."""
    path = tmp_path / "job.yaml"
    path.write_text(VALID)
    proc = harvest("run", str(path), "--base-url", url, "--output", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: --base-url: the URL ")
    assert SECRET not in proc.stdout + proc.stderr
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------------ costs
def test_costs_at_or_above_the_catalog_are_fine_and_below_needs_an_opt_in() -> None:
    raised = parse_spec(VALID + "costs:\n  /v1/creative/materials: 3\n  /v1/pinboard/search: 1\n")
    assert raised.endpoints()[CREATIVE].cost == 3
    (problem,) = problems_of(VALID + "costs:\n  /v1/creative/materials: 0\n")
    assert "0 is below the catalog's price of 1 credit" in problem
    negotiated = parse_spec(VALID + "costs:\n  /v1/creative/materials: 0\nallow_lower_costs: true\n")
    assert negotiated.endpoints()[CREATIVE].cost == 0
    with pytest.raises(ValueError, match="below the catalog's price"):
        type(raised).model_validate({**raised.model_dump(by_alias=True), "costs": {PINS: 0}})


# ------------------------------------------------------------------------------------------------ fan-out
def test_fanning_out_into_millions_of_queries_is_refused_at_once(tmp_path: Path) -> None:
    values = ", ".join(f"v{i}" for i in range(1000))
    path = tmp_path / "fan.yaml"
    path.write_text(
        HEAD
        + f"  - endpoint: /v1/pinboard/search\n    for_each:\n      query: &v [{values}]\n      cursor: *v\n"
    )
    proc = harvest("validate", str(path))
    assert proc.returncode == 2
    assert f"{path}:6: queries[0].for_each: the spec fans out to more than 10,000 queries" in proc.stderr
    assert "(this one alone to 1,000,000)" in proc.stderr


def test_a_fan_out_at_the_limit_is_valid() -> None:
    def query(prefix: str, n: int) -> str:
        values = ", ".join(f"{prefix}{i}" for i in range(n))
        return f"  - endpoint: /v1/pinboard/search\n    for_each:\n      query: [{values}]\n"

    half = MAX_FANOUT // 2
    assert len(parse_spec(HEAD + query("a", half) + query("b", half)).queries) == 2
    (problem,) = problems_of(HEAD + query("a", half) + query("b", half + 1))
    assert problem.startswith("job.yaml:9: queries[1].for_each: the spec fans out to more than 10,000")
