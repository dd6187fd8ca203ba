"""The key pasted where the name of its place belongs (`service.api_key_env: <key>`, `api_key_secret: <key>`)
while harvest knows no key: a valid name, so validation passes, and the run's refusal said "the environment
variable <the key> is not set" (or the Prefect Secret block '<the key>' could not be loaded): printed on the
terminal, and from a team's flow kept in Prefect's database. The refusal now names the file, the line and the
field, and says why the name is not repeated."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.endpoints import PINS
from tests.flow_helpers import HARVEST, job_spec, subprocess_env, write_spec

PASTED = "sk7Hq2LpX9aZ4mN8vR3tW6yBq0"
"""A key as a user pastes it: letters and digits only, so it is a valid environment variable's name."""
PASTED_BLOCK = "sk7hq2lpx9az4mn8vr3tw6ybq0"
"""A key of lower-case letters and digits: a valid Prefect Secret block's name."""
WHY = "the name is not repeated here: a value there is often the key itself"


def spec_pasting(tmp_path: Path, field: str, value: str, style: str = "block") -> tuple[Path, int]:
    """A spec with `value` as `service.<field>`, and the line it is on. `flow`: the service written as
    `service: {..., field: value}`, as a user writes it on one line."""
    spec = job_spec(
        "http://127.0.0.1:9", tmp_path / "out", [{"id": "q", "endpoint": PINS, "params": {"query": "oak"}}]
    )
    if style == "flow":
        path = tmp_path / "job.yaml"
        lines = write_spec(tmp_path, spec).read_text().splitlines()
        at = next(n for n, text in enumerate(lines) if text.startswith("service:"))
        end = next(n for n in range(at + 1, len(lines)) if not lines[n].startswith(" "))
        flow = f"service: {{base_url: 'http://127.0.0.1:9', {field}: {value}}}"
        path.write_text("\n".join([*lines[:at], flow, *lines[end:]]) + "\n")
    else:
        path = write_spec(tmp_path, {**spec, "service": {**spec["service"], field: value}})
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if f"{field}:" in text)
    return path, line


def harvest(tmp_path: Path, *args: str, **env: str) -> tuple[int, str]:
    """A real `harvest` process without HARVEST_API_KEY (`subprocess_env` leaves out HARVEST_*)."""
    proc = subprocess.run(
        [str(HARVEST), *args], cwd=tmp_path, env=subprocess_env(tmp_path, **env),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return proc.returncode, proc.stdout + proc.stderr


def assert_said_by_place(said: str, spec: Path, line: int, field: str, key: str) -> None:
    assert key not in said and key.lower() not in said and key[4:16].lower() not in said.lower(), said
    assert f"{spec}:{line}: service.{field}" in said, said
    assert WHY in said and "never the key itself" in said, said


@pytest.mark.parametrize("style", ["block", "flow"])
def test_a_key_pasted_as_the_variable_s_name_is_not_printed_by_validate_or_run(
    tmp_path: Path, style: str
) -> None:
    """`harvest run` said `the environment variable sk7Hq2... is not set`; it says the spec's file, line and
    field now. `harvest validate` reads no key (the variable may be set where the job runs): it passes the spec
    without printing the name either."""
    spec, line = spec_pasting(tmp_path, "api_key_env", PASTED, style)
    code, said = harvest(tmp_path, "validate", str(spec))
    assert code == 0 and PASTED not in said, said
    code, said = harvest(tmp_path, "run", str(spec))
    assert code == 2, said
    assert_said_by_place(said, spec, line, "api_key_env", PASTED)
    assert "Export" not in said  # nothing to copy that would put the key in a shell's history
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("field", "value", "command"),
    [
        ("api_key_secret", PASTED_BLOCK, "run"),
        ("api_key_secret", PASTED_BLOCK, "serve"),
        ("api_key_env", PASTED, "serve"),
    ],
    ids=["secret-run", "secret-serve", "env-serve"],  # the test's ids name the place, never the pasted key
)
def test_a_key_pasted_as_the_name_of_its_place_is_not_printed_by_run_or_serve(
    prefect_api_url: str, tmp_path: Path, field: str, value: str, command: str
) -> None:
    """`api_key_secret: <the key>` with no Secret block of that name on the Prefect server the run reports to:
    `harvest run` said `the Prefect Secret block '<the key>' could not be loaded (Unable to find block document
    named <the key> ...)`; `harvest serve` (which checks the key of every job before it serves) said the same,
    or `the environment variable <the key> is not set`."""
    spec, line = spec_pasting(tmp_path, field, value)
    code, said = harvest(tmp_path, command, str(spec), PREFECT_API_URL=prefect_api_url)
    assert code == 2, said
    assert_said_by_place(said, spec, line, field, value)
    if field == "api_key_secret":
        assert "could not be loaded" in said, said
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("field", "value", "given"),
    [
        ("api_key_secret", PASTED_BLOCK, "spec_path"),
        ("api_key_env", PASTED, "spec_path"),
        ("api_key_secret", PASTED_BLOCK, "spec_text"),
        ("api_key_env", PASTED, "spec_text"),
    ],
    ids=["secret", "env", "secret-text", "env-text"],
)
def test_a_team_s_flow_keeps_a_key_pasted_as_the_name_of_its_place_out_of_prefect(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, field: str, value: str, given: str
) -> None:
    """A team's flow awaiting `collect_job` with such a spec: the refusal naming the block (or variable) was the
    flow run's state message, kept in Prefect's database and shown in its UI. Its state, and both flow runs'
    states and logs, say the place now. Passed as `spec_text` (as a deployment passes a spec), the text was
    the flow run's parameter, the key in it: its value there is `***` now."""
    import asyncio

    from prefect import flow

    from harvest import collect_job
    from tests.prefect_helpers import end_services, flow_runs, run_log

    monkeypatch.delenv("HARVEST_API_KEY", raising=False)
    spec, line = spec_pasting(tmp_path, field, value)

    @flow
    async def nightly() -> tuple[str, str, str]:
        from prefect.runtime import flow_run

        text = {"spec_text": spec.read_text()} if given == "spec_text" else {}
        state = await collect_job(spec_path=str(spec), **text, return_state=True)
        child = str(state.state_details.flow_run_id)
        return f"{state.type.value}: {state.message}", child, str(flow_run.id)

    said, child, parent = asyncio.run(nightly())
    end_services()  # what the flows logged is sent before it is read
    assert said.startswith("FAILED: "), said
    assert_said_by_place(said, spec, line, field, value)
    recorded = json.dumps(
        [[r.state.message if r.state else None, r.parameters] for r in flow_runs([child, parent]).values()]
        + [run_log(child), run_log(parent)],
        default=str,
    )
    assert f"service.{field}" in recorded and value not in recorded, "the key is in Prefect's database"
    if given == "spec_text":
        assert f"{field}: '***'" in recorded or f"{field}: ***" in recorded, recorded
    assert not list((tmp_path / "out").rglob("*.jsonl"))
