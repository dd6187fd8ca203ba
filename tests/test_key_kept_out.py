"""The API key stays out of what harvest keeps and prints, where a user or the service put it by mistake: a
spec's parameter or URL that holds it is refused before a request is sent (naming the line, never quoting the
key), and an error answer that echoes it (a short key, a URL-quoted one) is cut out of its message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import harvest.flows.collect  # noqa: F401  (Prefect's log handlers bind to the real stderr first)
from harvest.connectors.errors import ServiceAnswer
from harvest.connectors.http.answers import typed_error
from harvest.connectors.http.auth import ApiKey
from harvest.flows.cli import app
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import running
from tests.endpoints import PINS
from tests.flow_helpers import BIG_BALANCE, job_spec, write_spec

KEY = "sk-kept-out/41+a="


@pytest.mark.parametrize("where", ["query-parameter", "base-url-path"])
def test_a_spec_that_holds_the_key_is_refused_before_a_request_naming_the_line_not_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    monkeypatch.setenv("HARVEST_API_KEY", KEY)
    with running(SandboxConfig(api_keys={KEY: BIG_BALANCE})) as sb:
        params = {"query": KEY if where == "query-parameter" else "trail"}
        spec = write_spec(
            tmp_path,
            job_spec(sb.base_url, tmp_path / "out", [{"id": "q", "endpoint": PINS, "params": params}]),
        )  # a spec's own base URL holding the key is the spec holding it (the next tests)
        base = ["--base-url", sb.base_url + "/" + KEY] if where == "base-url-path" else []
        result = CliRunner().invoke(app, ["run", str(spec), *base])
        asked = list(sb.ledger)
    assert result.exit_code == 2, result.output
    assert asked == []  # not even the balance
    said = result.output
    assert KEY not in said and "sk-kept-out" not in said, said
    if where == "query-parameter":
        line = next(n for n, text in enumerate(spec.read_text().splitlines(), 1) if "query:" in text)
        assert f"{spec}:{line}: the spec holds the API key" in said, said
    else:
        assert "service.base_url (or --base-url) holds the API key" in said, said
    assert "the environment variable HARVEST_API_KEY" in said
    assert not (tmp_path / "out").exists()


@pytest.mark.scenario
@pytest.mark.parametrize("where", ["query-parameter", "base-url-path", "spec-text", "base-url-credentials"])
def test_a_team_s_own_flow_awaiting_collect_job_is_refused_the_same_before_a_request(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """The README's way to run harvest inside one's own Prefect flow (`await collect_job(...)`) skipped the
    check `harvest run` makes: the key went to the service in a query string and landed in Parquet, DuckDB and
    the journal. The flow's run is Failed now, before any request, its message naming the place, not the key;
    and the flow run Prefect recorded (its parameters, which Prefect's UI shows) holds no key either: it kept a
    `base_url` or `spec_text` holding one, as given, before the flow body refused it."""
    import asyncio

    from prefect import flow
    from prefect.client.orchestration import get_client

    from harvest import collect_job

    monkeypatch.setenv("HARVEST_API_KEY", KEY)
    with running(SandboxConfig(api_keys={KEY: BIG_BALANCE})) as sb:
        params = {"query": KEY if where in ("query-parameter", "spec-text") else "trail"}
        spec = write_spec(
            tmp_path,
            job_spec(sb.base_url, tmp_path / "out", [{"id": "q", "endpoint": PINS, "params": params}]),
        )
        base = {
            "base-url-path": sb.base_url + "/" + KEY,
            "base-url-credentials": sb.base_url.replace("://", f"://harvest:{KEY}@"),
        }.get(where)
        text = spec.read_text() if where == "spec-text" else None

        @flow
        async def nightly() -> str:
            state = await collect_job(spec_path=str(spec), base_url=base, spec_text=text, return_state=True)
            return f"{state.type.value}: {state.message}"

        async def recorded() -> str:
            async with get_client() as client:
                runs = await client.read_flow_runs()
            return json.dumps([r.parameters for r in runs])

        said = asyncio.run(nightly())
        asked = list(sb.ledger)
        kept = asyncio.run(recorded())
    assert KEY not in kept and "sk-kept-out" not in kept, "the key is in a flow run Prefect recorded"
    assert (
        said.startswith("FAILED: ")
        and ("holds the API key" in said or "credential" in said)
        and KEY not in said
        and "sk-kept-out" not in said
    ), said
    assert asked == []  # not even the balance
    assert not list((tmp_path / "out").rglob("*.parquet")) and not list((tmp_path / "out").rglob("*.jsonl"))


@pytest.mark.parametrize(
    ("key", "echoed"),
    [
        ("sk-SHORT9x1", "sk-SHORT9x1"),  # shorter than a key cut out of a success's body
        ("sk-kept-out/41+a=", "sk-kept-out%2F41%2Ba%3D"),
        ("sk-kept-out/41+a=", "sk-kept-out%2f41%2ba%3d"),
    ],
)
def test_an_error_page_that_echoes_the_key_is_kept_and_said_without_it(key: str, echoed: str) -> None:
    """A wrong base URL's HTML 404 page that quotes the request (the key in it, as sent or URL-quoted): the
    kept answer and the error's message both lose the key."""
    api_key = ApiKey(key)
    page = f"<html><body>No route for /v1/x?token={echoed}</body></html>".encode()
    raw = api_key.scrub_answer(page, 404)
    assert echoed.encode() not in raw and b"***" in raw
    error = typed_error(ServiceAnswer(404, None, page), api_key.scrub, endpoint="/v1/x")
    assert echoed not in str(error) and "***" in str(error), str(error)
    if len(key) < 16:  # a success's body keeps what looks like a short key: it may be data (a cursor, an id)
        assert api_key.scrub_answer(b'{"cursor": "sk-SHORT9x1"}', 200) == b'{"cursor": "sk-SHORT9x1"}'


@pytest.mark.parametrize(
    ("key", "echoed"),
    [
        ("TEAM&SECRET<k3y>9f8e7d", "TEAM\\u0026SECRET\\u003ck3y\\u003e9f8e7d"),  # Go's encoder
        ("TEAM&SECRET<k3y>9f8e7d", "TEAM\\u0026SECRET\\u003Ck3y\\u003E9f8e7d"),
        ("sk-kept-out/41+a=0123", "sk-kept-out\\/41+a=0123"),
    ],
)
def test_a_success_that_echoes_the_key_json_escaped_keeps_it_out_of_what_lands(key: str, echoed: str) -> None:
    """A 200 whose record echoes the key as a JSON encoder escapes it (`\\u0026`, `\\u003c`, as Go's
    does): the body was scrubbed as bytes before it is decoded, so only the plain and URL-quoted forms were
    cut, and the decoded key landed in Parquet, DuckDB and `harvest raw`."""
    body = ('{"pins": [{"id": "1", "title": "echo ' + echoed + '"}]}').encode()
    kept = ApiKey(key).scrub_answer(body, 200)
    title = json.loads(kept)["pins"][0]["title"]
    assert key not in title and title == "echo ***", title


WRITTEN = "sk-kept-out-0123456789abcdef"
"""A key as a user writes it where the key's place belongs: no variable's name, a valid block name."""


def refused_without_the_key(tmp_path: Path, command: str, spec: Path, env: dict[str, str]) -> str:
    """What a real `harvest COMMAND SPEC` printed, refused (exit 2) without printing the key."""
    proc = subprocess.run(
        [sys.executable, "-m", "harvest.flows.cli", command, str(spec)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    said = proc.stdout + proc.stderr
    assert proc.returncode == 2, said
    assert WRITTEN not in said and "0123456789abcdef" not in said, said
    return said


@pytest.mark.parametrize(
    ("field", "command", "known"),
    [
        ("api_key_env", "validate", True),
        ("api_key_env", "run", True),
        ("api_key_secret", "validate", True),
        ("api_key_secret", "run", True),
        ("api_key_env", "validate", False),
        ("api_key_env", "run", False),
    ],
)
def test_the_key_written_as_the_place_of_the_key_is_never_printed(
    tmp_path: Path, field: str, command: str, known: bool
) -> None:
    """`service.api_key_env: <the key>` was refused as `string should match pattern ..., got '<the key>'`, and
    `api_key_secret: <the key>` as `the Prefect Secret block '<the key>' could not be loaded (...named <the
    key>)`, even with HARVEST_API_KEY holding that key: a spec holding the key harvest knows is refused before
    anything reads it, and a value refused for naming where the key lives is not shown."""
    spec = write_spec(
        tmp_path,
        job_spec("http://127.0.0.1:9", tmp_path / "out", [{"id": "q", "endpoint": PINS, "params": {}}],
                 service={field: WRITTEN}),
    )  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "HARVEST_API_KEY"}
    if known:
        env["HARVEST_API_KEY"] = WRITTEN
    said = refused_without_the_key(tmp_path, command, spec, env)
    line = next(n for n, text in enumerate(spec.read_text().splitlines(), 1) if f"{field}:" in text)
    if known:
        assert f"{spec}:{line}: the spec holds the API key" in said, said
        assert "the environment variable HARVEST_API_KEY" in said, said
    else:
        assert f"{spec}:{line}: service.api_key_env: names an environment variable" in said, said
        assert "the value is not shown" in said, said
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("style", ["block", "flow", "json"])
def test_a_key_in_a_field_validation_refuses_is_never_printed_whatever_the_spec_s_style(
    tmp_path: Path, style: str
) -> None:
    """A spec naming its key's variable on one line (`service: {api_key_env: TEAM_KEY}`) or in JSON, with that
    key in a field validation refuses (`max_pages: <the key>`): `harvest validate` printed `queries[0].max_pages:
    input should be a valid integer, got '<the key>'`, since only a block-style `api_key_env:` line told harvest
    which variable's key to look for before it reads the spec."""
    query = {"id": "q", "endpoint": PINS, "params": {"query": "oak"}, "max_pages": WRITTEN}
    spec = job_spec("http://127.0.0.1:9", tmp_path / "out", [query], service={"api_key_env": "TEAM_KEY"})
    path = tmp_path / "job.yaml"
    if style == "json":
        path.write_text(json.dumps(spec, indent=2))
    else:
        path.write_text(
            yaml.safe_dump(spec, sort_keys=False, default_flow_style=None if style == "flow" else False)
        )
    assert ("{base_url" in path.read_text()) == (style == "flow")
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if WRITTEN in text)
    env = {k: v for k, v in os.environ.items() if k != "HARVEST_API_KEY"} | {"TEAM_KEY": WRITTEN}
    for command in ("validate", "run"):
        said = refused_without_the_key(tmp_path, command, path, env)
        assert f"{path}:{line}: the spec holds the API key" in said, said
        assert "the environment variable TEAM_KEY" in said, said
    assert not (tmp_path / "out").exists()


def catalog_declaring(tmp_path: Path, default: str) -> tuple[Path, dict[str, Any]]:
    """A catalog file beside the spec declaring a parameter whose default is `default`, and its declarations
    as the sandbox serves them (read before the key is in the environment)."""
    from harvest.flows.spec.declared import catalog_file_endpoints

    catalog = tmp_path / "catalogs" / "c.yaml"
    catalog.parent.mkdir()
    catalog.write_text(
        "endpoints:\n"
        "  /v1/short-video/profile-x:\n"
        "    params:\n"
        "      handle: {type: string, required: true}\n"
        f"      token: {{type: string, default: {default}}}\n"
        "    records:\n"
        "      kc_profiles: {at: user, one: true, key: id, columns: {id: text}}\n"
    )
    return catalog, catalog_file_endpoints(catalog)


CATALOG_QUERY = {"id": "p", "endpoint": "/v1/short-video/profile-x", "params": {"handle": "acmerunning"}}


def test_a_catalog_file_holding_the_key_is_refused_as_the_spec_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A parameter's default holding the key was refused under the spec's `endpoints:`, not in a catalog file
    the spec names: the key was sent, kept in the raw pages, the journal and the manifest, and printed by
    `harvest raw`. Refused now before a request, naming the catalog file and line, not the key."""
    catalog, declared = catalog_declaring(tmp_path, WRITTEN)
    monkeypatch.setenv("HARVEST_API_KEY", WRITTEN)
    with running(SandboxConfig(api_keys={WRITTEN: BIG_BALANCE}, declared=declared)) as sb:
        spec = write_spec(
            tmp_path, job_spec(sb.base_url, tmp_path / "out", [CATALOG_QUERY], catalogs=["catalogs/c.yaml"])
        )
        result = CliRunner().invoke(app, ["run", str(spec)])
        validated = CliRunner().invoke(app, ["validate", str(spec)])
        asked = list(sb.ledger)
    assert asked == []  # not even the balance
    for said in (result, validated):
        assert said.exit_code == 2, said.output
        assert f"{catalog}:5: the catalog file holds the API key" in said.output, said.output
        assert WRITTEN not in said.output and "0123456789abcdef" not in said.output, said.output
    kept = [p for p in tmp_path.rglob("*") if p.is_file() and WRITTEN in p.read_text(errors="replace")]
    assert kept == [catalog], kept  # nothing harvest wrote holds it


@pytest.mark.parametrize("where", ["api-key-env", "catalog-default"])
def test_a_team_s_flow_keeps_the_key_out_of_prefect_s_records_wherever_the_spec_holds_it(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A team's flow awaiting `collect_job` with a spec whose `service.api_key_env` holds the key (or a catalog
    file's parameter default): the refusal quoting it became the flow run's state message in Prefect's database
    (the catalog's key was sent and landed). Both flow runs' states and logs hold no key now."""
    import asyncio

    from prefect import flow

    from harvest import collect_job
    from tests.prefect_helpers import end_services, flow_runs, run_log

    _, declared = catalog_declaring(tmp_path, WRITTEN if where == "catalog-default" else "plain")
    monkeypatch.setenv("HARVEST_API_KEY", WRITTEN)
    with running(SandboxConfig(api_keys={WRITTEN: BIG_BALANCE}, declared=declared)) as sb:
        service = {"api_key_env": WRITTEN} if where == "api-key-env" else None
        spec = write_spec(
            tmp_path,
            job_spec(
                sb.base_url, tmp_path / "out", [CATALOG_QUERY], service=service, catalogs=["catalogs/c.yaml"]
            ),
        )

        @flow
        async def nightly() -> tuple[str, str, str]:
            from prefect.runtime import flow_run

            state = await collect_job(spec_path=str(spec), spec_text=spec.read_text(), return_state=True)
            child = str(state.state_details.flow_run_id)
            return f"{state.type.value}: {state.message}", child, str(flow_run.id)

        said, child, parent = asyncio.run(nightly())
        asked = list(sb.ledger)
    end_services()  # what the flows logged is sent before it is read
    assert said.startswith("FAILED: ") and "holds the API key" in said and WRITTEN not in said, said
    assert asked == []  # not even the balance
    recorded = json.dumps(
        [[r.state.message if r.state else None, r.parameters] for r in flow_runs([child, parent]).values()]
        + [run_log(child), run_log(parent)],
        default=str,
    )
    assert "holds the API key" in recorded and WRITTEN not in recorded, "the key is in Prefect's database"
    assert not list((tmp_path / "out").rglob("*.jsonl"))
