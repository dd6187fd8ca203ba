"""`harvest serve`: one Prefect deployment per job spec, with the spec's schedule, served from this process.

A deployment carries the spec's YAML itself and an absolute output directory as its parameters, so its runs
depend neither on the working directory of the process that executes them nor on the spec file still being
there (edit the file, then restart `harvest serve` to update the deployment). Runs of one job never overlap: a
concurrency limit of 1 queues a run that comes due while the previous one still pays (the job lock in the
output directory is the second guard, for runs started outside Prefect).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harvest.flows.orchestrator.prefect_settings import SERVER_START
from harvest.flows.spec import UsageError, parse_spec, resolve_base_url
from harvest.flows.spec.job_options import Schedule, check_destination

SPEC_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class JobDeployment:
    """What `harvest serve` registers for one spec: plain data, built and checked before Prefect is imported."""

    name: str
    spec_file: Path
    schedule: Schedule | None
    parameters: dict[str, Any]
    output: Path
    needs_key: tuple[str, str | None, dict[str, str]] | None
    """(env var, secret block, `JobSpec.key_places`) unless the service is the sandbox."""
    catalogs: tuple[str, ...] = ()
    """The spec's catalog files (relative to its directory), searched for the key as the spec is."""

    def when(self) -> str:
        if self.schedule is None:
            return "no schedule (runs when triggered)"
        if self.schedule.cron is not None:
            return f"cron {self.schedule.cron} ({self.schedule.timezone})"
        return f"every {self.schedule.interval} s"


def is_job_spec(file: Path) -> bool:
    """Whether a YAML file found in a directory is a job spec: its top level is a mapping with `queries`.

    Other YAML beside the specs (Prefect's prefect.yaml, CI or tool configs) is skipped, not refused; a file
    that is not even YAML counts as a spec, so that its error is shown rather than the file silently dropped.
    """
    import yaml

    try:
        top = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError):
        return True
    return isinstance(top, dict) and "queries" in top


def spec_files(paths: list[Path]) -> tuple[list[Path], list[Path]]:
    """(spec files, skipped files): a file named is a spec; a directory stands for the job specs directly in it."""
    found: list[Path] = []
    skipped: list[Path] = []
    for path in paths:
        if path.is_dir():
            in_dir = sorted(p for p in path.iterdir() if p.suffix in SPEC_SUFFIXES and p.is_file())
            specs = [p for p in in_dir if is_job_spec(p)]
            if not specs:
                raise UsageError(
                    f"{path}: no job specs in this directory; allowed: *.yaml or *.yml files whose top level "
                    "has `queries` (a job spec)"
                )
            found.extend(specs)
            skipped.extend(p for p in in_dir if p not in specs)
        elif path.is_file():
            found.append(path)
        else:
            raise UsageError(f"{path}: no such spec file or directory")
    return found, skipped


def job_deployments(paths: list[Path], base_url: str | None = None) -> list[JobDeployment]:
    """Validate every spec (all problems of all files before anything is served) and describe its deployment."""
    jobs: list[JobDeployment] = []
    for file in spec_files(paths)[0]:
        text = file.read_text(encoding="utf-8")
        spec = parse_spec(text, file=str(file))
        output = Path(spec.output).expanduser().resolve()  # relative to where `harvest serve` was started
        resolved = resolve_base_url(spec, base_url)
        parameters: dict[str, Any] = {
            "spec_text": text,
            "spec_path": str(file.resolve()),
            "output": str(output),
        }
        if spec.export is not None:  # a relative directory: where `harvest serve` starts, as `output`
            parameters["export_to"] = check_destination(spec.export.to)
        if base_url is not None:
            parameters["base_url"] = base_url
        service = spec.service
        key = (
            None
            if resolved == "sandbox"
            else (service.api_key_env, service.api_key_secret, spec.key_places())
        )
        jobs.append(
            JobDeployment(spec.name, file, spec.schedule, parameters, output, key, tuple(spec.catalogs))
        )
    names = [job.name for job in jobs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        files = ", ".join(str(j.spec_file) for j in jobs if j.name in twice)
        raise UsageError(f"job names must be unique across served specs: {', '.join(twice)} in {files}")
    return jobs


def runner_deployment(job: JobDeployment) -> Any:
    """The Prefect deployment of one job (imports Prefect)."""
    from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy
    from prefect.deployments.runner import EntrypointType
    from prefect.schedules import Cron, Interval

    from harvest.flows.collect import collect_job

    schedules: list[Any] = []
    if job.schedule is not None and job.schedule.cron is not None:
        schedules.append(Cron(job.schedule.cron, timezone=job.schedule.timezone))
    elif job.schedule is not None and job.schedule.interval is not None:
        schedules.append(Interval(job.schedule.interval, timezone=job.schedule.timezone))
    return collect_job.to_deployment(
        name=job.name,
        schedules=schedules,
        parameters=job.parameters,
        concurrency_limit=ConcurrencyLimitConfig(
            limit=1, collision_strategy=ConcurrencyLimitStrategy.ENQUEUE
        ),
        tags=["harvest", f"job:{job.name}"],
        description=f"harvest job {job.name} from {job.spec_file.resolve()}; output {job.output}",
        entrypoint_type=EntrypointType.MODULE_PATH,  # harvest.flows.collect.collect_job: wherever harvest is installed
    )


NO_SERVER = (
    "harvest serve needs a Prefect server that outlives it (schedules, run history, the UI): start one with "
    f"`{SERVER_START}` and set PREFECT_API_URL=http://127.0.0.1:4200/api (or `prefect config set "
    "PREFECT_API_URL=...`)"
)


def check_ready(jobs: list[JobDeployment]) -> None:
    """What would fail every scheduled run, refused now: no Prefect server, an unwritable output, no API key."""
    from harvest.connectors.http.auth import load_api_key
    from harvest.flows.orchestrator.temporary_server import configured_api_url
    from harvest.flows.run.preflight import check_output_dir
    from harvest.flows.spec.key_in_spec import refuse_key_in

    if configured_api_url() is None:
        raise UsageError(NO_SERVER)
    for job in jobs:
        check_output_dir(job.output)
        if job.needs_key is not None:
            env_var, block, places = job.needs_key
            key = load_api_key(env_var=env_var, secret_block=block, places=places)
            refuse_key_in(job.spec_file, str(job.parameters.get("base_url") or ""), key, job.catalogs)


async def crash_killed_runs(jobs: list[JobDeployment]) -> list[tuple[str, str]]:
    """For each job whose newest run was killed (manifest `running`, nobody holding the job's lock), set its
    flow runs still Running in Prefect to Crashed: a killed `harvest serve` left them so, and they hold the
    deployment's concurrency slot until Prefect's lease on it expires. Returns (run id, flow run id) pairs."""
    from harvest.flows.orchestrator.prefect_runs import crash_stale_flow_runs
    from harvest.flows.run.start import unfinished_run
    from harvest.tasks.output.layout import OutputLayout
    from harvest.tasks.output.run_list import killed

    crashed: list[tuple[str, str]] = []
    for job in jobs:
        layout = OutputLayout(job.output)
        run = unfinished_run(layout, job.name)
        if run is None or not killed(layout, run):
            continue
        why = (
            f"harvest serve found run {run.run_id} of job {job.name} killed (its process is gone, its job lock "
            "free); the job's next run resumes it"
        )
        crashed += [(run.run_id, fid) for fid in await crash_stale_flow_runs(run.flow_runs(), None, why)]
    return crashed


async def tell_owed_jobs(jobs: list[JobDeployment]) -> list[Any]:
    """What Prefect missed of each job's runs while its API was away (`flows.orchestrator.prefect_record`), told
    now; a job whose lock is held is left to that run, which tells it when it ends."""
    from harvest.flows.orchestrator.prefect_record import tell_owed
    from harvest.tasks.output.job_lock import JobLocked, acquire
    from harvest.tasks.output.layout import OutputLayout

    told: list[Any] = []
    for job in jobs:
        layout = OutputLayout(job.output)
        try:
            lock = acquire(layout.lock_file(job.name))
        except (JobLocked, OSError):
            continue
        try:
            told += await tell_owed(layout, job.name)
        finally:
            lock.release()
    return told


def serve(paths: list[Path], base_url: str | None) -> None:
    """Register the jobs' deployments and run their scheduled (and triggered) runs until stopped."""
    import asyncio

    from harvest.flows import console

    jobs = job_deployments(paths, base_url)
    check_ready(jobs)
    for file in spec_files(paths)[1]:
        console.note(f"skipped {file}: not a job spec (no top-level `queries`)")
    for run_id, flow_run_id in asyncio.run(crash_killed_runs(jobs)):
        console.note(
            f"flow run {flow_run_id} of killed run {run_id} set Crashed in Prefect; the next run resumes it"
        )
    from harvest.flows.orchestrator.prefect_record import told_line

    for told in asyncio.run(tell_owed_jobs(jobs)):
        console.note(told_line(told))
    table = console.table("deployment", "schedule", "output", title="harvest serve")
    for job in jobs:
        console.add_row(table, f"collect_job/{job.name}", job.when(), str(job.output))
    console.out.print(table)
    serve_until_stopped([runner_deployment(job) for job in jobs])


def serve_until_stopped(deployments: list[Any]) -> None:
    """`prefect.serve`, but stopped by SIGTERM, SIGINT or SIGHUP as `flows.orchestrator.serve_stop` says: the
    runs in progress stop cleanly and are waited for, then the schedules are paused and the call returns."""
    import asyncio

    from harvest.flows.orchestrator.serve_stop import StopsItsRuns
    from harvest.flows.stop_signals import lost_on_its_way

    # before the runner registers the deployments, which un-pauses their schedules (only its exit pauses them)
    lost_on_its_way()
    runner = StopsItsRuns()
    for deployment in deployments:
        runner.add_deployment(deployment)
    asyncio.run(runner.start())
