"""`harvest serve` as a Prefect user meets it: a directory of specs becomes one deployment per job with its
schedule, its parameters (the spec's content, an absolute output) and a concurrency limit of one; a triggered
run executes in the serving process against the sandbox over HTTP and lands its tables where the spec said,
whatever the working directory of the run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from harvest.flows.cli import app
from harvest.flows.orchestrator.deployments import job_deployments, spec_files
from harvest.flows.spec import SpecError, UsageError
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.expected import full_crawl
from harvest.sandbox.wire.serving import running
from tests.crawl_helpers import data_entries
from tests.endpoints import CREATIVE, PINS
from tests.flow_helpers import BIG_BALANCE, HARVEST, SECRET_KEY, job_spec, rows, scalar, subprocess_env

CONFIG = SandboxConfig(
    api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (3, 3), CREATIVE: (2, 2)}, page_size=4
)


def specs(folder: Path, base_url: str) -> Path:
    folder.mkdir()
    nightly = job_spec(
        base_url,
        "out/nightly-pins",  # relative: resolved where `harvest serve` starts
        [{"id": "pins", "endpoint": PINS, "params": {"query": "oak desk"}}],
        name="nightly-pins",
        schedule={"cron": "0 3 * * *", "timezone": "Europe/Berlin"},
    )
    hourly = job_spec(
        base_url,
        "out/hourly-forum",
        [{"id": "creatives", "endpoint": CREATIVE, "params": {"query": "standing desks"}}],
        name="hourly-forum",
        schedule={"interval": 3600},
    )
    (folder / "nightly.yaml").write_text(yaml.safe_dump(nightly))
    (folder / "hourly.yml").write_text(yaml.safe_dump(hourly))
    (folder / "notes.txt").write_text("not a spec")
    (folder / "prefect.yaml").write_text("name: harvest\ndeployments: []\n")  # Prefect's, beside the specs
    return folder


def test_serve_describes_one_deployment_per_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    folder = specs(tmp_path / "jobs", "http://127.0.0.1:9")
    jobs = {job.name: job for job in job_deployments([folder])}
    assert set(jobs) == {"nightly-pins", "hourly-forum"}
    nightly = jobs["nightly-pins"]
    assert nightly.parameters["output"] == str(tmp_path / "out" / "nightly-pins")
    assert nightly.parameters["spec_text"] == (folder / "nightly.yaml").read_text()
    assert (
        nightly.when() == "cron 0 3 * * * (Europe/Berlin)" and jobs["hourly-forum"].when() == "every 3600 s"
    )

    (folder / "copy.yaml").write_text((folder / "nightly.yaml").read_text())
    with pytest.raises(UsageError, match=r"unique.*nightly-pins"):
        job_deployments([folder])
    (folder / "copy.yaml").write_text("name: broken\nbudget: {credits: 10}\nqueries: []\n")
    with pytest.raises(SpecError) as bad:
        job_deployments([folder])
    assert "copy.yaml" in str(bad.value) and "queries" in str(bad.value)


def test_a_directory_gives_its_job_specs_and_skips_other_yaml(tmp_path: Path) -> None:
    from tests.flow_helpers import ROOT

    configs = ROOT / "configs"
    found, skipped = spec_files([configs])
    assert found == [configs / "demo.yaml"] and skipped == [configs / "prefect.yaml"]
    assert [job.name for job in job_deployments([configs])] == ["demo"]
    (tmp_path / "prefect.yaml").write_text((configs / "prefect.yaml").read_text())
    (tmp_path / "broken.yaml").write_text("queries: [\n")  # not even YAML: shown as a spec error, not skipped
    with pytest.raises(SpecError, match=r"broken\.yaml"):
        job_deployments([tmp_path])
    (tmp_path / "broken.yaml").unlink()
    with pytest.raises(UsageError, match=r"no job specs in this directory.*top level has `queries`"):
        job_deployments([tmp_path])


def test_an_invalid_schedule_is_refused_before_prefect(tmp_path: Path) -> None:
    folder = specs(tmp_path / "jobs", "http://127.0.0.1:9")
    nightly = folder / "nightly.yaml"
    nightly.write_text(nightly.read_text().replace("0 3 * * *", "99 99 * * *"))
    for command in ("validate", "serve"):
        result = CliRunner().invoke(app, [command, str(nightly)], env={"COLUMNS": "200"})
        assert result.exit_code == 2, (command, result.output)
        assert f"{nightly}:" in result.output and "schedule.cron: '99 99 * * *' is not a valid cron" in (
            result.output
        ), result.output
        assert "allowed: minute 0-59" in result.output and "Traceback" not in result.output


@pytest.mark.scenario
def test_serve_refuses_without_a_prefect_server(tmp_path: Path) -> None:
    folder = specs(tmp_path / "jobs", "http://127.0.0.1:9")
    env = subprocess_env(
        tmp_path, HARVEST_API_KEY=SECRET_KEY, PREFECT_PROFILES_PATH=str(tmp_path / "none.toml")
    )
    result = subprocess.run([str(HARVEST), "serve", str(folder)], env=env, capture_output=True, text=True)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "prefect server start" in result.stderr and "PREFECT_API_URL" in result.stderr
    bad = CliRunner().invoke(app, ["serve", str(tmp_path / "nowhere")])
    assert bad.exit_code == 2 and "no such spec file or directory" in bad.output


def _deployment(
    name: str, deadline: float, serving: subprocess.Popen[str], output: Path | None = None
) -> Any:
    """The deployment `serving` created; with `output`, only once it writes there: the session's Prefect keeps
    deployments of earlier tests under the same name (a run triggered before `harvest serve` updated it would
    take the earlier test's parameters: its sandbox, gone)."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        while True:
            try:
                found = client.read_deployment_by_name(f"collect_job/{name}")
                if output is None or found.parameters.get("output") == str(output):
                    return found
            except ObjectNotFound:
                pass
            assert serving.returncode is not None or serving.poll() is None, serving.communicate()
            assert time.monotonic() < deadline, "harvest serve never created its deployments"
            time.sleep(0.2)


def test_served_deployments_carry_schedules_and_a_triggered_run_completes(
    prefect_api_url: str, tmp_path: Path
) -> None:
    from prefect.deployments import run_deployment

    with running(CONFIG) as sb:
        folder = specs(tmp_path / "jobs", sb.base_url)
        env = subprocess_env(tmp_path, HARVEST_API_KEY=SECRET_KEY, PREFECT_API_URL=prefect_api_url)
        serving = subprocess.Popen(
            [str(HARVEST), "serve", str(folder)], cwd=tmp_path, env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            nightly = _deployment("nightly-pins", deadline, serving, tmp_path / "out" / "nightly-pins")
            hourly = _deployment("hourly-forum", deadline, serving, tmp_path / "out" / "hourly-forum")
            (cron,) = nightly.schedules
            assert (cron.schedule.cron, cron.schedule.timezone) == ("0 3 * * *", "Europe/Berlin")
            (every,) = hourly.schedules
            assert every.schedule.interval.total_seconds() == 3600
            assert nightly.parameters["output"] == str(tmp_path / "out" / "nightly-pins")
            assert "queries" in nightly.parameters["spec_text"] and "job:nightly-pins" in nightly.tags
            assert (
                nightly.global_concurrency_limit is not None and nightly.global_concurrency_limit.limit == 1
            )
            assert nightly.concurrency_options.collision_strategy == "ENQUEUE"

            assert not nightly.paused and not hourly.paused

            flow_run = run_deployment("collect_job/nightly-pins", timeout=240)
            assert flow_run.state is not None and flow_run.state.is_completed(), flow_run.state
        finally:
            serving.send_signal(signal.SIGINT)
            out, err = serving.communicate(timeout=60)
        pins_paid = [e for e in data_entries(sb) if e.path == PINS]
    assert serving.returncode == 0 and "schedules are paused until `harvest serve` runs again" in err, err
    for name in ("nightly-pins", "hourly-forum"):  # Ctrl-C paused the schedules: no run comes due unserved
        assert _deployment(name, time.monotonic() + 10, serving).paused, name
    db = tmp_path / "out" / "nightly-pins" / "harvest.duckdb"
    assert len(pins_paid) == 4, (out, err)  # three pages of pins and the page ending pin search (`-end-`)
    assert rows(db, "SELECT count(*) FROM runs WHERE status = 'complete'") == [(1,)]
    assert scalar(db, "SELECT sum(credits_spent) FROM runs") == sum(e.credits for e in pins_paid)
    expected = {pin["id"] for pin in full_crawl(PINS, {"query": "oak desk"}, CONFIG)["pins"]}
    assert {r[0] for r in rows(db, "SELECT id FROM pinboard_pins")} == expected
    assert SECRET_KEY not in out + err


def test_the_prefect_yaml_example_deploys_a_real_spec_with_valid_parameters() -> None:
    from harvest.flows.collect import collect_job
    from harvest.flows.spec import load_spec
    from tests.flow_helpers import ROOT

    doc = yaml.safe_load((ROOT / "configs" / "prefect.yaml").read_text())
    (deployment,) = doc["deployments"]
    from prefect.utilities.importtools import import_object

    assert deployment["entrypoint"] == "harvest.flows.collect:collect_job"
    assert import_object(deployment["entrypoint"]) is collect_job  # as a worker loads it
    collect_job.validate_parameters(deployment["parameters"])  # raises on a parameter the flow does not take
    spec = load_spec(deployment["parameters"]["spec_path"].replace("/srv/harvest/", f"{ROOT}/"))
    (schedule,) = deployment["schedules"]
    assert spec.schedule is not None and (spec.schedule.cron, spec.schedule.timezone) == (
        schedule["cron"], schedule["timezone"],
    )  # fmt: skip
    assert deployment["concurrency_limit"] == {"limit": 1, "collision_strategy": "ENQUEUE"}


def _wait_for(check: Any, what: str, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, what
        time.sleep(0.1)
    return found


@pytest.mark.scenario
def test_a_run_killed_under_serve_is_crashed_when_serve_restarts_and_the_next_run_does_not_wait(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """kill -9 of `harvest serve` and its run leaves the flow run Running, holding the deployment's concurrency
    slot for Prefect's 300 s lease; the next `harvest serve` sets it Crashed, so a triggered run gets the slot
    at once and resumes the killed run."""
    import orjson
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment

    from harvest.tasks.output.layout import OutputLayout
    from harvest.tasks.output.manifest import all_manifests

    config = CONFIG.replace(pages_by_path={PINS: (30, 30)}, latency=0.1)
    output = tmp_path / "out" / "nightly-pins"
    with running(config) as sb:
        folder = specs(tmp_path / "jobs", sb.base_url)
        env = subprocess_env(tmp_path, HARVEST_API_KEY=SECRET_KEY, PREFECT_API_URL=prefect_api_url)

        def serve() -> subprocess.Popen[str]:
            proc = subprocess.Popen(
                [str(HARVEST), "serve", str(folder)], cwd=tmp_path, env=env, text=True,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
            )  # fmt: skip
            started.append(proc)
            return proc

        started: list[subprocess.Popen[str]] = []
        try:
            first = serve()
            _deployment("nightly-pins", time.monotonic() + 120, first, output)
            zombie = run_deployment("collect_job/nightly-pins", timeout=0)
            # a served run starts in a new process that imports Prefect: slow on a loaded machine
            _wait_for(lambda: len(data_entries(sb)) >= 5, "the served run never got going", timeout=240)
            holder = orjson.loads((output / ".harvest-nightly-pins.lock").read_bytes())
            os.killpg(first.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):  # the flow run's process, whatever its group
                os.kill(int(holder["pid"]), signal.SIGKILL)
            first.communicate(timeout=30)
            with get_client(sync_client=True) as client:
                assert client.read_flow_run(zombie.id).state.type.value == "RUNNING"

            second = serve()
            with get_client(sync_client=True) as client:
                crashed = _wait_for(
                    lambda: (s := client.read_flow_run(zombie.id).state).type.value == "CRASHED" and s,
                    "harvest serve did not set the killed run's flow run Crashed",
                    timeout=180,
                )
                t0 = time.monotonic()
                resumed = run_deployment("collect_job/nightly-pins", timeout=240)
                took = time.monotonic() - t0
                states = [s.name for s in client.read_flow_run_states(resumed.id)]
            second.send_signal(signal.SIGINT)
            out, err = second.communicate(timeout=60)
        finally:
            for proc in started:  # a failed check never leaves a `harvest serve` behind
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.communicate(timeout=30)
        pins_paid = [e for e in data_entries(sb) if e.path == PINS]
    (run,) = all_manifests(OutputLayout(output))
    assert f"harvest serve found run {run.run_id} of job nightly-pins killed" in crashed.message
    assert f"flow run {zombie.id} of killed run {run.run_id} set Crashed" in err, err
    assert resumed.state is not None and resumed.state.is_completed(), (resumed.state, took, out, err)
    # the slot was free at once: the run never waited for the killed run's lease (~300 s) to expire
    assert "AwaitingConcurrencySlot" not in states, (states, took)
    assert run.status == "complete" and run.resumes == 1 and run.flow_run_ids[0] == str(zombie.id)
    assert (
        len(pins_paid) - 31 <= 1
    )  # the resume went on where the kill stopped it (31: the page ending pins too)
    db = output / "harvest.duckdb"
    expected = {pin["id"] for pin in full_crawl(PINS, {"query": "oak desk"}, config)["pins"]}
    assert {r[0] for r in rows(db, "SELECT id FROM pinboard_pins")} == expected
