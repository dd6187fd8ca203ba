"""`runner: {kind: dask, staging: s3://...}`: Dask workers that share no disk with the flow.

The scheduler and the workers are separate processes of another user (`nobody`), each in a working directory of
its own, and the job's output directory is root's, mode 0700: they cannot read or write it (checked). S3 is moto
on 127.0.0.1. The same job lands the same tables for the same credits as the local runner; a worker SIGKILLed
mid-run, or the flow SIGKILLed mid-run and run again, pays no staged page twice and never passes the budget.
A checkout `nobody` may not enter (cloned into `mktemp -d`, mode 0700) is run through hard links to it.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest

from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import RunningSandbox, running
from harvest.tasks.output.manifest import read_manifest
from tests.crawl_helpers import data_entries
from tests.endpoints import CREATIVE, PINS, PROFILE, REELS
from tests.flow_helpers import (
    BIG_BALANCE,
    ROOT,
    SECRET_KEY,
    expected_keys,
    job_spec,
    key_set,
    run_flow,
    scalar,
    write_spec,
)
from tests.net_helpers import free_port
from tests.process_helpers import finish, start_run, wait_for_requests
from tests.sandbox_gate import WAIT, GatedSandbox, gated, settle
from tests.test_dask_runner import CONFIG, RECORD_TABLES, job, paid, table

BUCKET = "stage"
CREATIVE_PARAMS = {"query": "desks", "limit": 5}
NOBODY = 65534
SLOW = SandboxConfig(
    api_keys={SECRET_KEY: BIG_BALANCE},
    pages_by_path={PINS: (8, 8), CREATIVE: (2, 2)},
    page_size=4,
    latency=0.08,
)
"""Pages slow enough that a kill lands while workers are paying."""

pytestmark = [
    pytest.mark.usefixtures("api_key"),
    pytest.mark.filterwarnings("ignore::distributed.versions.VersionMismatchWarning"),
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv"),
]


@pytest.fixture(scope="module")
def s3_env() -> Iterator[dict[str, str]]:
    """moto's S3 on 127.0.0.1, its bucket made, and the standard variables that point pyarrow at it."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_EC2_METADATA_DISABLED": "true",
    }  # fmt: skip
    fs = pafs.S3FileSystem(
        endpoint_override=env["AWS_ENDPOINT_URL"],
        access_key="testing",
        secret_key="testing",
        allow_bucket_creation=True,
    )
    fs.create_dir(BUCKET)
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        yield env
    server.stop()


def staged_objects(prefix: str = BUCKET) -> list[str]:
    fs, base = pafs.FileSystem.from_uri(f"s3://{prefix}")
    found = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    return [f.path for f in found if f.type == pafs.FileType.File]


READS_THE_CODE = (
    "import importlib.util as u, pathlib; assert u.find_spec('distributed');"
    " pathlib.Path(u.find_spec('harvest.tasks.round_task').origin).read_bytes()"
)
"""Whether the processes can run the checkout: they find distributed and read harvest's round task, by the import
name a worker unpickles it with. Found, not imported: importing Prefect and harvest cold costs seconds."""


class NobodyCluster:
    """A Dask scheduler and workers run as `nobody` (setpriv), each in a directory of its own under a 0755 root."""

    user = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--pdeathsig", "KILL"]
    """How its processes are started: as `nobody`, and killed by the kernel when the test process ends (they
    are in sessions of their own: a pytest worker that ended without its finalizers left them running)."""

    def __init__(self, api_url: str, s3: dict[str, str]) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="harvest-nobody-"))
        self.root.chmod(0o755)
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.api_url, self.s3 = api_url, s3
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.checkout = ROOT
        """The checkout (its `.venv` and code) the processes run: this one, or links to it (`linked_checkout`)."""

    @property
    def python(self) -> str:
        return str(self.checkout / ".venv" / "bin" / "python")

    def home(self, name: str) -> Path:
        path = self.root / name
        (path / "tmp").mkdir(parents=True, exist_ok=True)
        for p in (path, path / "tmp"):
            os.chown(p, NOBODY, NOBODY)
        return path

    def env(self, home: Path) -> dict[str, str]:
        return {
            "PATH": f"{self.checkout / '.venv' / 'bin'}:/usr/bin:/bin", "HOME": str(home), "TMPDIR": str(home / "tmp"),
            "PREFECT_HOME": str(home / ".prefect"), "PREFECT_API_URL": self.api_url,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "HARVEST_API_KEY": SECRET_KEY,
            "PYTHONDONTWRITEBYTECODE": "1", **self.s3,
        }  # fmt: skip

    def as_nobody(self, name: str, *command: str) -> subprocess.Popen[bytes]:
        home = self.home(name)
        with open(home / "log", "wb") as log:  # the child keeps its own descriptor
            proc = subprocess.Popen(
                [*self.user, *command],
                cwd=home, env=self.env(home), start_new_session=True, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.procs[name] = proc
        return proc

    def can(self, *command: str) -> bool:
        """Whether `nobody` succeeds at `command`."""
        done = subprocess.run(
            [*self.user, *command],
            env=self.env(self.home("probe")), cwd=self.root, capture_output=True, timeout=60,
        )  # fmt: skip
        return done.returncode == 0

    def linked_checkout(self) -> Path:
        """Hard links to the checkout (no bytes copied) under the 0755 root, for a checkout in a directory
        `nobody` may not enter (`mktemp -d` makes it 0700); the editable install's finder is pointed at them."""
        view = self.root / "checkout"
        try:
            view.mkdir()
            for entry in (e for e in ROOT.iterdir() if e.name != ".git"):
                if entry.is_dir() and not entry.is_symlink():
                    shutil.copytree(entry, view / entry.name, symlinks=True, copy_function=os.link)
                else:
                    os.link(entry, view / entry.name, follow_symlinks=False)
        except OSError as exc:
            pytest.skip(f"nobody cannot enter {ROOT}, and it cannot be linked under {self.root}: {exc}")
        for finder in view.glob(".venv/lib/python*/site-packages/__editable__*finder.py"):
            text = finder.read_text().replace(str(ROOT), str(view))
            finder.unlink()  # a link: writing through it would change the checkout's own file
            finder.write_text(text)
        return view

    def start(self, workers: int) -> None:
        if not self.can(self.python, "-c", READS_THE_CODE):
            self.checkout = self.linked_checkout()
        self.as_nobody("scheduler", self.python, "-m", "dask", "scheduler", "--host", "127.0.0.1",
                       "--port", str(self.port), "--no-dashboard")  # fmt: skip
        for n in range(workers):
            self.add_worker(f"worker-{n}")
        self.wait_for(workers)

    def add_worker(self, name: str) -> None:
        if (
            name in self.procs and self.procs[name].poll() is None
        ):  # never two: the first would be left running
            self.kill(name)
        shutil.rmtree(self.root / name / "tmp", ignore_errors=True)  # a killed worker's rounds left theirs
        self.as_nobody(name, self.python, "-m", "dask", "worker", self.address, "--name", name, "--nthreads", "1",
                       "--no-nanny", "--no-dashboard", "--local-directory", str(self.root / name))  # fmt: skip

    def log(self, name: str) -> str:
        return (self.root / name / "log").read_text(errors="replace")[-3000:]

    def wait_for(self, workers: int) -> None:
        from distributed import Client

        try:
            with Client(self.address, timeout=60) as client:
                client.wait_for_workers(workers, timeout=60)
        except (OSError, TimeoutError) as exc:
            logs = "\n".join(f"--- {name}:\n{self.log(name)}" for name in self.procs)
            raise AssertionError(f"the cluster did not come up ({exc}); its processes said:\n{logs}") from exc

    def kill(self, name: str) -> None:
        os.killpg(self.procs[name].pid, signal.SIGKILL)
        self.procs[name].wait(timeout=30)

    def paying(self, name: str) -> bool:
        """Whether worker `name` is inside a round that claimed its stage and sent a request: the round's scratch
        directory (in the worker's TMPDIR) holds a written file. A round Dask handed the worker but that had not
        started yet (still importing, on a slow machine) is run elsewhere as if new: killing it hits no round."""
        scratch = (self.root / name / "tmp").glob("harvest-round-*/**/*")
        try:
            return any(p.is_file() and p.stat().st_size > 0 for p in scratch)
        except FileNotFoundError:  # a round ending as it is looked at removes its scratch: not inside one now
            return False

    def kill_while_busy(self, name: str, sb: GatedSandbox, answered: int) -> threading.Thread:
        """SIGKILL worker `name` inside a round, once the sandbox answered `answered` pages.

        The gate then holds every request, so no round can end while the test looks at the worker: on a loaded
        machine a round that was paying when it was seen had often ended before the kill landed ("the kill hit
        no round"). A worker that is not inside a round gets the gate opened for a few more pages, then is looked
        at again."""
        from distributed import Client

        def busy(client: Any) -> bool:
            workers = client.scheduler_info(n_workers=-1)["workers"]
            mine = str(self.root / name)
            address = [a for a, w in workers.items() if w["local_directory"].startswith(mine)]
            assert address, f"{name} is not in the cluster: {workers}"
            return bool(client.processing(address)[address[0]]) and self.paying(name)

        def watch() -> None:
            try:
                with Client(self.address, timeout=60) as client:
                    deadline = time.monotonic() + WAIT
                    sb.gate.close_after(answered)
                    while True:
                        sb.gate.wait_held(1)  # every round in flight now waits on the gate
                        if busy(client):
                            self.kill(name)
                            return
                        assert time.monotonic() < deadline, f"{name} was never inside a round"
                        sb.gate.open()
                        sb.gate.close_after(2)
            finally:
                sb.gate.open()

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        """Every process SIGKILLed first, then reaped: one that cannot be waited for keeps none of the others
        alive."""
        for proc in self.procs.values():
            if proc.poll() is None:  # not reaped yet: its group is still its own
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
        for proc in self.procs.values():
            with suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
        shutil.rmtree(self.root, ignore_errors=True)


class SharedDiskCluster(NobodyCluster):
    """The same processes as the flow's user: workers that write the job's output directory where the flow reads
    it (a shared disk, no staging)."""

    user = ["setpriv", "--pdeathsig", "KILL"]


@pytest.fixture(scope="module")
def cluster(prefect_api_url: str, s3_env: dict[str, str]) -> Iterator[NobodyCluster]:
    nobody = NobodyCluster(prefect_api_url, s3_env)
    try:
        nobody.start(workers=2)
        yield nobody
    finally:
        nobody.stop()


def private_output(tmp_path: Path, cluster: NobodyCluster) -> Path:
    """An output directory the workers can neither read nor write (and proof that they could read the code)."""
    output = tmp_path / "out"
    output.mkdir(mode=0o700)
    assert cluster.can("test", "-r", str(cluster.checkout / "tasks" / "round_task.py"))
    assert not cluster.can("ls", str(output)), "a worker can read the output directory"
    assert not cluster.can("touch", str(output / "probe")), "a worker can write the output directory"
    return output


def staged_run(base_url: str, output: Path, cluster: NobodyCluster, credits: int = 1000) -> dict[str, Any]:
    runner = {"kind": "dask", "address": cluster.address, "round_pages": 2, "staging": f"s3://{BUCKET}/runs"}
    return job(base_url, output, runner, credits)


@pytest.mark.scenario
def test_workers_without_the_output_directory_land_what_the_local_runner_lands(
    prefect_harness: None, tmp_path: Path, cluster: NobodyCluster
) -> None:
    results = {}
    for name in ("local", "staged"):
        with running(CONFIG) as sb:
            if name == "local":
                spec = job(sb.base_url, tmp_path / "local", {"kind": "local"})
            else:
                spec = staged_run(sb.base_url, private_output(tmp_path, cluster), cluster)
            summary = run_flow(write_spec(tmp_path, spec, f"{name}.yaml"))
            results[name] = (summary, paid(data_entries(sb)), sb.billed_total(), Path(spec["output"]))
    (local, local_paid, local_billed, local_out), (staged, staged_paid, staged_billed, out) = results.values()
    assert local.status == staged.status == "complete", staged
    assert local_paid == staged_paid and set(staged_paid.values()) == {1}, "the same pages, each paid once"
    assert local_billed == staged_billed == local.credits_spent == staged.credits_spent
    for name in RECORD_TABLES:
        assert table(local_out / "harvest.duckdb", name) == table(out / "harvest.duckdb", name), name
    assert staged_objects() == [], "the store keeps nothing after the commit"
    manifest = read_manifest(out / "raw" / staged.run_id / "manifest.json")
    files = {f for _, f, _ in manifest.all_files()}
    assert files and all((out / f).is_file() for f in files), (
        "the manifest names files in the output directory"
    )
    assert all(f.endswith("-rounds.parquet") for f in files), "the rounds' files merged, one a table"
    assert (out / "raw").is_dir() and not list(out.rglob("*.tmp"))


@contextmanager
def said(logger: str) -> Iterator[list[str]]:
    """What `logger` says meanwhile (Prefect's logging setup keeps it from pytest's caplog)."""
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger(logger).addHandler(handler)
    try:
        yield lines
    finally:
        logging.getLogger(logger).removeHandler(handler)


@pytest.fixture(scope="module")
def expected_tables(prefect_harness: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Any]]:
    """The tables a local run of the same job lands (one run for the module's kill tests)."""
    tmp_path = tmp_path_factory.mktemp("local")
    with pytest.MonkeyPatch.context() as mp, running(SLOW) as sb:
        mp.setenv("HARVEST_API_KEY", SECRET_KEY)
        mp.delenv("HARVEST_BASE_URL", raising=False)
        spec = job(sb.base_url, tmp_path / "local", {"kind": "local"})
        assert run_flow(write_spec(tmp_path, spec, "local.yaml")).status == "complete"
    return {name: table(tmp_path / "local" / "harvest.duckdb", name) for name in RECORD_TABLES}


@pytest.mark.scenario
def test_a_worker_killed_mid_run_loses_only_the_pages_it_had_in_flight(
    prefect_harness: None, tmp_path: Path, cluster: NobodyCluster, expected_tables: dict[str, list[Any]]
) -> None:
    want = expected_tables
    budget = 200
    with gated(SLOW) as sb:
        spec = staged_run(sb.base_url, private_output(tmp_path, cluster), cluster, credits=budget)
        killer = cluster.kill_while_busy("worker-0", sb, 12)
        try:
            with said("harvest.flows.run.dask.rounds") as warnings:
                summary = run_flow(write_spec(tmp_path, spec))
        finally:
            killer.join()
            cluster.add_worker("worker-0")  # the next test has two workers again
        billed, pages = sb.billed_total(), paid(data_entries(sb))
    out = Path(spec["output"])
    assert any("lost (its worker died)" in w for w in warnings), "the kill hit no round"
    assert summary.status == "complete", summary
    assert {q["status"] for q in summary.queries} == {"complete"}
    db = out / "harvest.duckdb"
    assert (
        scalar(db, "SELECT count(*) FROM query_state")
        == len(summary.queries)
        == len({q["query_id"] for q in summary.queries})
    )
    for name in RECORD_TABLES:
        assert table(db, name) == want[name], name
    twice = [page for page, n in pages.items() if n > 1]
    assert len(twice) <= 1 and max(pages.values()) <= 2, twice  # one worker thread: one page in flight
    assert billed <= summary.credits_spent <= budget, (billed, summary.credits_spent)
    assert staged_objects() == []
    cluster.wait_for(2)


def test_a_round_dask_runs_again_after_its_commit_pays_nothing(
    prefect_harness: None, tmp_path: Path, s3_env: dict[str, str]
) -> None:
    """Dask runs a finished task again when the worker holding its result dies while the flow still refers to
    it, after the flow committed the round too: the round's claim must outlive the commit. Here the task is
    run again as Dask runs it (the same function, the same parameters) on the flow's side of the store."""
    import asyncio
    from datetime import UTC, datetime

    from harvest.connectors.http.auth import ApiKey
    from harvest.connectors.paging.pager import QuerySpec
    from harvest.flows.run.dask.worker_run import run_info
    from harvest.flows.run.service_access import ServiceAccess
    from harvest.flows.spec.parse import load_spec
    from harvest.tasks.output.layout import OutputLayout
    from harvest.tasks.output.staging import open_staging
    from harvest.tasks.round_task import collect_round
    from harvest.tasks.staged_commit import StagedRun

    with running(CONFIG) as sb:
        runner = {"kind": "dask", "workers": 1, "round_pages": 2, "staging": f"s3://{BUCKET}/runs"}
        spec = load_spec(write_spec(tmp_path, job(sb.base_url, tmp_path / "out", runner)))
        layout, started = OutputLayout(spec.output), datetime.now(UTC)
        access = ServiceAccess(sb.base_url, ApiKey(SECRET_KEY), sb.base_url)
        run = run_info(spec, access, layout, "run-1", started.isoformat(), full=True)
        staged = StagedRun(open_staging(runner["staging"]), layout, spec.name, "run-1", started)
        query = QuerySpec("pins[query=oak]", PINS, {"query": "oak"})
        stage = staged.stage(1, query.query_id)
        params = {"run": run, "query": query.as_dict(), "state": None, "grant": 2, "part": 1, "round_no": 1,
                  "wanted": [], "stage": stage}  # fmt: skip
        first = asyncio.run(collect_round.fn(**params))
        assert first["spent"] == 2 and staged.commit_round(query.query_id, stage, first["staged"], [])
        again = asyncio.run(collect_round.fn(**params))
        assert again == {"rerun": True}
        assert sb.billed_total() == 2 and len(data_entries(sb)) == 2, "the committed round was paid again"
        staged.sweep()
    assert staged_objects() == [], "the run's last sweep takes the claims"


@pytest.mark.scenario
def test_a_flow_killed_mid_run_resumes_from_what_was_staged(
    prefect_harness: None,
    prefect_api_url: str,
    tmp_path: Path,
    cluster: NobodyCluster,
    expected_tables: dict[str, list[Any]],
) -> None:
    want = expected_tables
    with running(SLOW) as sb:
        spec = staged_run(sb.base_url, private_output(tmp_path, cluster), cluster)
        path = write_spec(tmp_path, spec)
        proc = start_run(path, tmp_path, prefect_api_url)
        wait_for_requests(sb, 14, proc)
        os.killpg(proc.pid, signal.SIGKILL)
        finish(proc)
        quiet(sb)  # the workers end the rounds they had: they pay within their grants and stage it
        at_kill = len(data_entries(sb))
        left = [o for o in staged_objects() if o.endswith(".frame")]
        assert left, "the killed flow left staged pages to resume from"
        summary = run_flow(path)
        pages = paid(data_entries(sb))
    assert summary.status == "complete", summary
    for name in RECORD_TABLES:
        assert table(Path(spec["output"]) / "harvest.duckdb", name) == want[name], name
    assert set(pages.values()) == {1}, [p for p, n in pages.items() if n > 1]
    assert len(pages) > at_kill and staged_objects() == []


def quiet(sb: RunningSandbox, seconds: float = 1.5) -> None:
    """Until the sandbox answered nothing new for `seconds` (workers of a killed flow finish their rounds)."""
    count, since = -1, time.monotonic()
    while time.monotonic() - since < seconds:
        now = len(data_entries(sb))
        if now != count:
            count, since = now, time.monotonic()
        time.sleep(0.05)
    settle(sb)


def test_a_staging_store_that_fails_stops_the_run_before_a_credit_is_spent(
    prefect_harness: None, tmp_path: Path, cluster: NobodyCluster
) -> None:
    with running(CONFIG) as sb:
        spec = staged_run(sb.base_url, private_output(tmp_path, cluster), cluster)
        spec["runner"]["staging"] = "s3://no-such-bucket/runs"
        summary = run_flow(write_spec(tmp_path, spec))
        billed, entries = sb.billed_total(), data_entries(sb)
    assert billed == 0 and entries == [], "nothing is paid while the store cannot take pages"
    assert summary.status == "interrupted", summary
    assert "s3://no-such-bucket/runs" in (summary.machine_fault or ""), summary.machine_fault
    assert SECRET_KEY not in str(summary.machine_fault) and "testing" not in str(summary.machine_fault)


NEWEST_FIRST = SandboxConfig(
    api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PROFILE: (6, 6), REELS: (6, 6)}, page_size=5
)
INCREMENTAL_TABLES = ("short_video_videos", "photo_app_reels")


def incremental_job(base_url: str, output: Path, runner: dict[str, Any]) -> dict[str, Any]:
    queries = [
        {"id": "videos", "endpoint": PROFILE, "params": {"handle": "nasa", "sort_by": "latest"}, "incremental": True},
        {"id": "reels", "endpoint": REELS, "params": {"handle": "nasa"}, "incremental": True},
    ]  # fmt: skip
    return job_spec(base_url, output, queries, name="nightly", credits=1000, concurrency=4, runner=runner)


def nights_of(tmp_path: Path, output: Path, runner: dict[str, Any]) -> list[tuple[int, int, list[str]]]:
    """Night 1 of the incremental job, then night 2 with 4 new items at the head of each listing: per night what
    the sandbox billed, what the run says it spent, and how its queries ended."""
    nights = []
    for config in (NEWEST_FIRST, NEWEST_FIRST.replace(new_items=4)):
        with running(config) as sb:
            spec = incremental_job(sb.base_url, output, runner)
            summary = run_flow(write_spec(tmp_path, spec, f"{output.parent.name}.yaml"))
            nights.append(
                (sb.billed_total(), summary.credits_spent, sorted(q["status"] for q in summary.queries))
            )
    return nights


@pytest.mark.scenario
def test_an_incremental_rerun_on_staging_workers_stops_at_the_known_keys_as_locally(
    prefect_harness: None, tmp_path: Path, cluster: NobodyCluster
) -> None:
    """Locally night 2 pays each listing's head pages down to the first page of items night 1 landed, and
    stops. Workers that cannot read the job's DuckDB must stop there too (the flow stages each query's known
    keys for them), not page to the end again."""
    local, staged = tmp_path / "local" / "out", tmp_path / "staged"
    staged.mkdir()
    staged = private_output(staged, cluster)
    runner = {"kind": "dask", "address": cluster.address, "round_pages": 2, "staging": f"s3://{BUCKET}/runs"}
    local_nights = nights_of(tmp_path, local, {"kind": "local"})
    staged_nights = nights_of(tmp_path, staged, runner)
    assert local_nights[1] == (4, 4, ["caught_up", "caught_up"]), local_nights  # 2 head pages a listing
    assert staged_nights == local_nights
    assert staged_objects() == [], "the store keeps nothing after the runs, known keys included"
    for name in INCREMENTAL_TABLES:
        assert table(staged / "harvest.duckdb", name) == table(local / "harvest.duckdb", name), name
        assert table(staged / "harvest.duckdb", name), name


@pytest.mark.scenario
def test_a_round_dask_runs_again_on_a_shared_disk_pays_nothing(
    prefect_harness: None, prefect_api_url: str, tmp_path: Path
) -> None:
    """On a shared disk (no staging) Dask runs a finished round again when the worker holding its result dies
    before the flow took it. Here the flow waits on the creatives' round (held at the sandbox's door) while the
    other worker finishes a pins round and holds its result; that worker is killed. The round's attempt on the
    other worker finds the round's claim and pays nothing; the flow lands the pins' pages from the disk and goes
    on from the last: every page billed once."""
    from distributed import Client

    shared = SharedDiskCluster(prefect_api_url, {})
    pins = {"query": "oak"}
    with gated(SLOW) as sb, ExitStack() as cleanup:
        cleanup.callback(shared.stop)  # a cluster that failed to come up is stopped too
        shared.start(workers=2)
        spec = {**job(sb.base_url, tmp_path / "out", {"kind": "dask", "address": shared.address, "round_pages": 3}),
                "queries": [{"id": "creatives", "endpoint": CREATIVE, "params": CREATIVE_PARAMS},
                            {"id": "pins", "endpoint": PINS, "params": pins}]}  # fmt: skip
        sb.gate.close()
        sb.gate.let_through(3, PINS)  # the pins' first round pays its 3 pages, the creatives wait at the door

        def kill_the_holder() -> None:
            """Once one worker holds a finished round and the other is inside its round: SIGKILL the first."""
            with Client(shared.address, timeout=60) as client:
                deadline = time.monotonic() + WAIT
                while True:
                    busy, held = client.processing(), client.has_what()
                    done = [w for w in held if held[w] and not busy.get(w)]
                    if done and any(busy.values()):
                        home = client.scheduler_info(n_workers=-1)["workers"][done[0]]["local_directory"]
                        shared.kill(
                            next(n for n in ("worker-0", "worker-1") if home.startswith(str(shared.root / n)))
                        )
                        break
                    assert time.monotonic() < deadline, f"no worker held a finished round: {busy} {held}"
                    time.sleep(0.05)
            sb.gate.open()

        killer = threading.Thread(target=kill_the_holder, daemon=True)
        killer.start()
        try:
            with said("harvest.flows.run.dask.rounds") as warnings:
                summary = run_flow(write_spec(tmp_path, spec))
        finally:
            killer.join(timeout=WAIT)
            sb.gate.open()
        billed, pages = sb.billed_total(), paid(data_entries(sb))
    assert any("lost (its worker died)" in w for w in warnings), warnings
    assert summary.status == "complete", summary
    assert set(pages.values()) == {1}, [p for p, n in pages.items() if n > 1]
    assert billed <= summary.credits_spent
    want = expected_keys([(PINS, pins), (CREATIVE, CREATIVE_PARAMS)], SLOW)
    db = tmp_path / "out" / "harvest.duckdb"
    for name in ("pinboard_pins", "creative_materials"):
        assert key_set(db, name) == set(want[name]), name
    assert not list((tmp_path / "out" / "raw").glob("*/rounds")), "the rounds' claims outlive the run"
