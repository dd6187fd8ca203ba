"""Stopping `harvest serve` while a served run pays stops that run as `harvest run` stops: what systemd's
`systemctl stop` sends (SIGTERM to every process of the service), a terminal's Ctrl-C (SIGINT to the foreground
process group) and `kill <serve pid>` (SIGTERM to serve alone).

The run is frozen at the sandbox's door with requests in flight, serve is signalled, and only then the gate
opens: the requests in flight land (their pages stored, nothing paid for a page the run did not keep), the run
ends `interrupted` and loaded, its flow run ends Cancelled in Prefect, serve waits for it and exits 0 with the
schedules paused, and the next `harvest run` of the spec resumes it without paying any request twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from harvest.sandbox.config import SandboxConfig
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import all_manifests
from tests.crawl_helpers import data_entries, paid_twice
from tests.endpoints import PINS
from tests.flow_helpers import BIG_BALANCE, HARVEST, SECRET_KEY, job_spec, subprocess_env, write_spec
from tests.process_helpers import Watched, finish, start_run
from tests.sandbox_gate import gated

PARAMS = {"query": "oak desk"}
CONFIG = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (40, 40)}, page_size=5)
STOPPING = "stopping; letting the requests in flight land"


def _flow_run_state(flow_run_id: str) -> tuple[str, str]:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        state = client.read_flow_run(flow_run_id).state
    assert state is not None
    return state.type.value, state.message or ""


@pytest.mark.scenario
@pytest.mark.parametrize(
    ("sig", "to_group"),
    [(signal.SIGTERM, True), (signal.SIGINT, True), (signal.SIGTERM, False)],
    ids=["systemctl-stop", "ctrl-c", "kill-serve"],
)
def test_stopping_serve_mid_run_lets_the_requests_in_flight_land_and_the_run_resumes(
    prefect_api_url: str, tmp_path: Path, sig: signal.Signals, to_group: bool
) -> None:
    from prefect.deployments import run_deployment

    from tests.test_serve import _deployment

    output = tmp_path / "out"
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    with gated(CONFIG) as sb:
        spec = job_spec(
            sb.base_url, output, [{"id": "pins", "endpoint": PINS, "params": PARAMS}],
            name="served-stop", credits=1000, concurrency=2, schedule={"cron": "0 3 * * *"},
        )  # fmt: skip
        spec_file = write_spec(jobs, spec, "served.yaml")
        env = subprocess_env(tmp_path, HARVEST_API_KEY=SECRET_KEY, PREFECT_API_URL=prefect_api_url)
        proc = subprocess.Popen(
            [str(HARVEST), "serve", str(jobs)], cwd=tmp_path, env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        serving = Watched(proc)
        try:
            _deployment("served-stop", time.monotonic() + 120, serving.proc, output)
            sb.gate.close_after(4, path=PINS)
            flow_run = run_deployment("collect_job/served-stop", timeout=0)
            held = sb.gate.wait_frozen(serving.proc)  # the run's one page in flight waits at the door
            (os.killpg if to_group else os.kill)(serving.proc.pid, sig)
            serving.wait_for_stderr(STOPPING)
            sb.gate.open()
            code, out, err = serving.finish(timeout=180)
        finally:
            if serving.proc.poll() is None:
                os.killpg(serving.proc.pid, signal.SIGKILL)
        paid_at_stop = data_entries(sb)
        state = _flow_run_state(str(flow_run.id))
        listed = subprocess.run(
            [str(HARVEST), "runs", str(output)], env=env, text=True, capture_output=True, timeout=120
        )
        (stopped,) = all_manifests(OutputLayout(output))
        code2, out2, err2 = finish(start_run(spec_file, tmp_path, prefect_api_url))
        entries = data_entries(sb)
    assert code == 0, (code, out, err)
    # serve's stop request and the signal itself (to the group) reach the run in either order: one stop
    assert err.count(STOPPING) == 1 and "abandon" not in err, err  # nobody presses Ctrl-C again under serve
    assert "schedules are paused until `harvest serve` runs again" in err, err
    assert "Traceback" not in err and "CancelledError" not in err, err
    assert held == 1 and len(paid_at_stop) == 4 + held, "the request in flight was answered and paid"
    assert stopped.status == "interrupted" and stopped.loaded, stopped.status
    assert stopped.credits_spent == sum(e.credits for e in paid_at_stop)
    assert "interrupted" in listed.stdout and "killed" not in listed.stdout, listed.stdout + listed.stderr
    hint = "the next run of its deployment resumes it, `prefect deployment run collect_job/served-stop -p mode=fresh`"
    assert hint in " ".join((listed.stdout + listed.stderr).split()), listed.stdout + listed.stderr
    assert state[0] == "CANCELLED" and "interrupted" in state[1], state
    assert code2 == 0, out2 + err2
    (done,) = all_manifests(OutputLayout(output))
    assert done.run_id == stopped.run_id and done.status == "complete" and done.resumes == 1
    assert paid_twice(entries) == 0, "the resume paid no request twice"


def test_a_run_that_starts_after_serve_was_stopped_pays_nothing(
    prefect_harness: None, api_key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Serve stopped while its poller was handing it a run (picked up, its process not started yet): the run's
    process starts after the stop, past serve's stop request to the runs it saw. It inherits serve's
    `HARVEST_SERVE_STOPPING` and stops before paying, as if asked; before, it paid its budget after "All
    deployments have been paused!". The flow run here is the one the spawned process runs, in this process,
    with serve's environment (this process's parent standing in for serve)."""
    from harvest.flows import stop_signals
    from harvest.sandbox.wire.serving import running
    from tests.flow_helpers import run_flow

    monkeypatch.setenv(stop_signals.SERVED_BY, str(os.getppid()))
    monkeypatch.setenv(stop_signals.SERVE_STOPPING, str(os.getppid()))
    with running(CONFIG) as sb:
        spec = job_spec(
            sb.base_url, tmp_path / "out", [{"id": "pins", "endpoint": PINS, "params": PARAMS}],
            name="served-late", credits=1000,
        )  # fmt: skip
        summary = run_flow(write_spec(tmp_path, spec, "served.yaml"))
        paid = data_entries(sb)
    assert paid == [], "a run that started after serve's stop sent no paid request"
    assert summary.status == "interrupted" and summary.credits_spent == 0, summary
    assert "harvest serve stopped" in (summary.error or ""), summary.error
