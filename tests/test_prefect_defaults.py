"""README: "harvest switches off Prefect's analytics and telemetry by default."

The test session sets those variables for itself (conftest), so a check inside it would prove nothing. These
checks start harvest in processes whose environment has none of them and read what Prefect resolved there:
the flow module a Prefect worker or deployment imports, and a real `harvest run` whose temporary Prefect
server is asked for its settings while the run pays its first page.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from harvest.flows.orchestrator.deployments import NO_SERVER
from harvest.flows.orchestrator.prefect_settings import SERVER_START
from harvest.sandbox.config import SandboxConfig
from tests.crawl_helpers import data_entries
from tests.endpoints import PINS
from tests.flow_helpers import BIG_BALANCE, HARVEST, PYTHON, ROOT, SECRET_KEY, one_query, subprocess_env
from tests.net_helpers import free_port, wait_until_serving
from tests.process_helpers import children, finish, server_port
from tests.sandbox_gate import gated

SWITCHES = (
    "PREFECT_SERVER_ANALYTICS_ENABLED",
    "PREFECT_CLOUD_ENABLE_ORCHESTRATION_TELEMETRY",
    "PREFECT_TELEMETRY_ENABLE_RESOURCE_METRICS",
    "DO_NOT_TRACK",
)
"""What harvest sets (harvest.flows.orchestrator.prefect_settings) and a clean environment lacks."""

QUIET_SECONDS = 10
"""How long the started server is watched for an error line after it answers."""

OFF = {"analytics": False, "orchestration_telemetry": False, "resource_metrics": False}

RESOLVED = """
import json, sys
import harvest.flows.collect  # the flow module: what `prefect deploy` and a worker import
from prefect.settings import get_current_settings

s = get_current_settings()
print(json.dumps({
    "analytics": s.server.analytics_enabled,
    "orchestration_telemetry": s.cloud.enable_orchestration_telemetry,
    "resource_metrics": s.telemetry.enable_resource_metrics,
}))
"""


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A harvest process's environment (`subprocess_env`) without any of the switches, plus `extra`."""
    env = {k: v for k, v in subprocess_env(tmp_path).items() if k not in SWITCHES}
    assert not set(SWITCHES) & set(env)
    return {**env, **extra}


def resolved(env: dict[str, str]) -> dict[str, bool]:
    proc = subprocess.run(
        [PYTHON, "-c", RESOLVED],
        env={**env, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    found: dict[str, bool] = json.loads(proc.stdout.splitlines()[-1])
    return found


def test_the_flow_module_switches_prefects_analytics_and_telemetry_off(tmp_path: Path) -> None:
    assert resolved(clean_env(tmp_path)) == OFF


@pytest.mark.scenario
def test_a_team_module_that_imports_prefect_first_still_gets_harvests_defaults(tmp_path: Path) -> None:
    """`from prefect import flow` above `from harvest import collect_job`: Prefect had read its settings
    before harvest set its defaults, so the team's flow kept telemetry on and a 20 s start for its temporary
    server (a first run on a busy machine failed: "Timed out while attempting to connect")."""
    env = clean_env(tmp_path)
    env.pop("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", None)
    timeout = "\nprint(json.dumps(get_current_settings().server.ephemeral.startup_timeout_seconds))"
    proc = subprocess.run(
        [PYTHON, "-c", "import prefect\nfrom prefect import flow\n" + RESOLVED + timeout],
        env={**env, "PYTHONPATH": str(ROOT)}, cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    *_, settings, seconds = proc.stdout.splitlines()
    assert json.loads(settings) == OFF and json.loads(seconds) == 120


@pytest.mark.scenario
def test_a_users_own_setting_is_kept(tmp_path: Path) -> None:
    """Each is a default only (harvest.flows.orchestrator.prefect_settings): the control that the check above reads what harvest set."""
    env = clean_env(tmp_path, PREFECT_SERVER_ANALYTICS_ENABLED="true")
    assert resolved(env) == {**OFF, "analytics": True}


def test_a_harvest_run_and_its_temporary_server_run_with_analytics_and_telemetry_off(tmp_path: Path) -> None:
    """`harvest run` as a user without a Prefect server starts it: no PREFECT_API_URL, a clean environment.
    While the run's first page waits at the sandbox's door, the temporary server (started by harvest, with
    harvest's environment) answers what its Prefect resolved: analytics, orchestration telemetry and resource
    metrics off."""
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages=(1, 1))
    with gated(config) as sb:
        spec = one_query(tmp_path, sb.base_url, PINS, {"query": "desks"})
        env = clean_env(tmp_path, HARVEST_API_KEY=SECRET_KEY)
        assert "PREFECT_API_URL" not in env and not any("ANALYTICS" in k or "TELEMETRY" in k for k in env)
        sb.gate.close_after(0)
        proc = subprocess.Popen(
            [str(HARVEST), "run", str(spec)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            sb.gate.wait_frozen(proc)  # the run is paying: its server is up and serving it
            (server,) = children(proc.pid)
            settings = httpx.get(
                f"http://127.0.0.1:{server_port(server)}/api/admin/settings", timeout=60
            ).json()
            server_env = (Path("/proc") / str(server) / "environ").read_bytes().split(b"\0")
        finally:
            sb.gate.open()
        code, out, err = finish(proc)
        paid = len(data_entries(sb))
    assert code == 0 and paid == 2, out + err  # the one page of pins and the page ending pin search (`-end-`)
    assert {
        "analytics": settings["server"]["analytics_enabled"],
        "orchestration_telemetry": settings["cloud"]["enable_orchestration_telemetry"],
        "resource_metrics": settings["telemetry"]["enable_resource_metrics"],
    } == OFF
    # harvest put them there: the environment it gave its server holds every switch
    assert {v.split(b"=", 1)[0].decode() for v in server_env if b"=" in v} >= set(SWITCHES)


@pytest.mark.scenario
def test_the_prefect_server_the_docs_start_logs_no_error_offline(tmp_path: Path) -> None:
    """The docs' `prefect server start` line, typed in a shell that has only PATH and HOME (a user's own server
    reads none of harvest's defaults), on a machine without internet access: its telemetry is off (it asks
    Prefect's collector as it starts, and logs an ERROR each time it cannot reach it), and it logs no error.
    `harvest serve`'s hints name the same command."""
    docs = (ROOT / "docs" / "deployments-and-dask.md").read_text()
    (line,) = [line for line in docs.splitlines() if line.startswith(".venv/bin/prefect server start")]
    command = line.split("&", 1)[0].strip()
    assert command == f".venv/bin/{SERVER_START}"
    assert SERVER_START in NO_SERVER and SERVER_START in str(serve_help())
    home = tmp_path / "home"
    home.mkdir()
    port = free_port()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "PREFECT_SERVER_API_PORT": str(port)}
    log = tmp_path / "server.log"
    with log.open("wb") as sink:
        server = subprocess.Popen(
            ["bash", "-c", f"exec {command} --no-ui"], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
            stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        wait_until_serving(f"http://127.0.0.1:{port}/api/health", server, timeout=300)
        settings = httpx.get(f"http://127.0.0.1:{port}/api/admin/settings", timeout=60).json()
        time.sleep(QUIET_SECONDS)  # the telemetry service's first heartbeat goes out as the server starts
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
    text = log.read_text(errors="replace")
    assert settings["server"]["analytics_enabled"] is False
    assert "ERROR" not in text and "telemetry" not in text.lower(), text


def serve_help() -> str:
    """`harvest serve --help`, as a user reads it."""
    proc = subprocess.run([str(HARVEST), "serve", "--help"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return " ".join(proc.stdout.split())
