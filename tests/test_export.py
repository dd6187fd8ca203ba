"""`harvest export` to a real S3 API on 127.0.0.1 (moto in server mode), read back as a warehouse loader would:
through `_exports/<id>/_SUCCESS` and the `_manifest.json` beside it.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from harvest.flows.cli import app
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import RunningSandbox, running
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import all_manifests
from tests.declared_helpers import declaration
from tests.flow_helpers import (
    BIG_BALANCE,
    HARVEST,
    SECRET_KEY,
    job_spec,
    rows,
    run_flow,
    subprocess_env,
    write_spec,
)
from tests.nightly_helpers import CONFIG, job, night

BUCKET = "lake"
THINGS = "/v1/x/things"
runner = CliRunner()


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> pafs.FileSystem:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": s3_endpoint, "AWS_EC2_METADATA_DISABLED": "true",
    }.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    fs = pafs.S3FileSystem(
        endpoint_override=s3_endpoint, access_key="testing", secret_key="testing", allow_bucket_creation=True
    )
    fs.create_dir(BUCKET)
    return fs


def committed(fs: pafs.FileSystem, prefix: str) -> list[dict[str, Any]]:
    """The exports a loader would take: those whose _SUCCESS exists, oldest first."""
    found = fs.get_file_info(pafs.FileSelector(f"{prefix}/_exports", allow_not_found=True))
    out = []
    for folder in sorted(f.path for f in found if f.type == pafs.FileType.Directory):
        if fs.get_file_info(f"{folder}/_SUCCESS").is_file:
            with fs.open_input_stream(f"{folder}/_manifest.json") as f:
                out.append(json.loads(f.read()))
    return out


def table_rows(tables: list[pa.Table]) -> list[tuple[Any, ...]]:
    return sorted((tuple(r.values()) for t in tables for r in t.to_pylist()), key=repr)


def test_export_to_s3_sends_each_run_once_and_reads_back(
    prefect_harness: None, s3: pafs.FileSystem, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    output, prefix = tmp_path / "out", f"{BUCKET}/nightly"
    first = night(tmp_path, output, 0, monkeypatch)
    result = runner.invoke(app, ["export", str(output), "--to", f"s3://{prefix}"])
    assert result.exit_code == 0, result.output
    (one,) = committed(s3, prefix)
    assert one["runs"] == [first] and one["kind"] == "increment"

    layout = OutputLayout(output)
    for table, entry in one["tables"].items():
        assert entry["primary_key"] and all(not f["key"].startswith("/") for f in entry["files"])
        exported = [pq.read_table(f"{prefix}/{f['key']}", filesystem=s3) for f in entry["files"]]
        local = [pq.read_table(layout.parquet_root / f["key"]) for f in entry["files"]]
        assert table_rows(exported) == table_rows(local) and entry["rows"] == sum(
            t.num_rows for t in exported
        )
        names = [c["name"] for c in entry["schema"]]
        assert names == exported[0].column_names
        merged = rows(output / "harvest.duckdb", f'SELECT count(*) FROM "{table}"')[0][0]
        keys = {tuple(r[k] for k in entry["primary_key"]) for t in exported for r in t.to_pylist()}
        assert len(keys) == merged, table

    second = night(tmp_path, output, 1, monkeypatch)
    again = runner.invoke(app, ["export", str(output), "--to", f"s3://{prefix}/"])
    assert again.exit_code == 0, again.output
    one_again, two = committed(s3, prefix)
    assert one_again == one and two["runs"] == [second], "the second export sends only the new run"
    assert {f["run_id"] for e in two["tables"].values() for f in e["files"]} == {second}

    nothing = runner.invoke(app, ["export", str(output), "--to", f"s3://{prefix}"])
    assert nothing.exit_code == 0 and "nothing new" in nothing.output
    assert len(committed(s3, prefix)) == 2
    exported_runs = rows(output / "harvest.duckdb", "SELECT DISTINCT run_id FROM exports ORDER BY 1")
    assert exported_runs == sorted([(first,), (second,)])

    everything = s3.get_file_info(pafs.FileSelector(prefix, recursive=True))
    for info in everything:
        if info.is_file:
            with s3.open_input_stream(info.path) as f:
                assert SECRET_KEY.encode() not in f.read(), info.path


def test_snapshot_exports_the_merged_tables(
    prefect_harness: None, s3: pafs.FileSystem, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    output, prefix = tmp_path / "out", f"{BUCKET}/snapshot"
    night(tmp_path, output, 0, monkeypatch)
    night(tmp_path, output, 1, monkeypatch)
    result = runner.invoke(app, ["export", str(output), "--to", f"s3://{prefix}", "--snapshot"])
    assert result.exit_code == 0, result.output
    assert s3.get_file_info(f"{prefix}/_SUCCESS").is_file
    with s3.open_input_stream(f"{prefix}/_manifest.json") as f:
        manifest = json.loads(f.read())
    assert manifest["runs"] == [m.run_id for m in all_manifests(OutputLayout(output))]
    db = output / "harvest.duckdb"
    for table, entry in manifest["tables"].items():
        (only,) = entry["files"]
        snapshot = pq.read_table(f"{prefix}/{only['key']}", filesystem=s3)
        assert snapshot.num_rows == rows(db, f'SELECT count(*) FROM "{table}"')[0][0] == entry["rows"]
    plays = rows(db, "SELECT aweme_id, play_count FROM short_video_videos")
    exported = pq.read_table(f"{prefix}/short_video_videos/snapshot.parquet", filesystem=s3)
    assert sorted(
        zip(*exported.select(["aweme_id", "play_count"]).to_pydict().values(), strict=True)
    ) == sorted(plays)


def test_a_snapshot_and_an_increment_of_one_job_have_one_schema_per_table(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warehouse loader that takes a snapshot, then increments, sees one schema per table: the landed files'
    (timestamps in UTC, list items named `element`, each column's description), in the files and in both
    `_manifest.json`s, on a machine in another zone too (DuckDB hands TIMESTAMPTZ over in its session's zone)."""
    output, snap, inc = tmp_path / "out", tmp_path / "snap", tmp_path / "inc"
    night(tmp_path, output, 0, monkeypatch)
    for to in (["--to", str(snap), "--snapshot"], ["--to", str(inc)]):
        done = subprocess.run(
            [str(HARVEST), "export", str(output), *to], env=subprocess_env(tmp_path, TZ="America/New_York"),
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
    snapshot = json.loads((snap / "_manifest.json").read_text(encoding="utf-8"))
    (increment,) = [json.loads(p.read_text(encoding="utf-8")) for p in inc.glob("_exports/*/_manifest.json")]
    assert increment["tables"] and set(increment["tables"]) <= set(snapshot["tables"])
    for table, entry in increment["tables"].items():
        snapshot_file = pq.read_schema(snap / table / "snapshot.parquet")
        for file in entry["files"]:
            increment_file = pq.read_schema(inc / file["key"])
            assert increment_file.equals(snapshot_file, check_metadata=True), (
                table,
                increment_file,
                snapshot_file,
            )
        assert snapshot["tables"][table]["schema"] == entry["schema"], table
    said = {c["type"] for e in snapshot["tables"].values() for c in e["schema"]}
    assert {"timestamp[us, tz=UTC]", "list<element: string>"} <= said, said


def test_a_snapshot_keeps_its_columns_where_the_increments_have_them_after_a_column_is_added(
    prefect_harness: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sandbox_factory: Callable[..., RunningSandbox],
) -> None:
    """A declaration gains a column between two others: the next night's files have it in its place, and so
    must a snapshot (DuckDB's table got it at its end), whether or not a rebuild made the table anew: a loader
    matching columns by position must not see them move from one night to the next."""
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    later = declaration()
    first = copy.deepcopy(later)
    del first["records"]["things"]["columns"]["score"]  # between `views` and `verified`
    sb = sandbox_factory(SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, declared={THINGS: later}))
    output = tmp_path / "out"
    for n, decl in enumerate((first, later)):
        queries = [{"id": "things", "endpoint": THINGS, "params": {"q": f"oak{n}"}}]
        spec = job_spec(sb.base_url, output, queries, name="grown", endpoints={THINGS: decl})
        summary = run_flow(write_spec(tmp_path, spec))
        assert summary.status == "complete"
    for rebuilt in (False, True):
        if rebuilt:
            assert runner.invoke(app, ["rebuild", str(output)]).exit_code == 0
        snap, inc = tmp_path / f"snap-{rebuilt}", tmp_path / f"inc-{rebuilt}"
        for to in (["--to", str(snap), "--snapshot"], ["--to", str(inc)]):
            assert runner.invoke(app, ["export", str(output), *to]).exit_code == 0
        # The later night's file: two runs in one second have ids that do not sort in the order they ran.
        (newest,) = inc.glob(f"things/*/{summary.run_id}-*.parquet")
        names = pq.read_schema(newest).names
        assert names.index("views") + 2 == names.index("verified") == names.index("score") + 1, names
        assert pq.read_schema(snap / "things" / "snapshot.parquet").names == names, rebuilt
        snapshot = json.loads((snap / "_manifest.json").read_text(encoding="utf-8"))
        assert [c["name"] for c in snapshot["tables"]["things"]["schema"]] == names, rebuilt


def test_export_refuses_bad_destinations(tmp_path: Path) -> None:
    (tmp_path / "out" / "raw").mkdir(parents=True)
    for bad, why in [
        ("ftp://host/x", "not a destination"),
        ("s3://key:secret@bucket/x", "credentials"),
        ("s3:///nobucket", "names no bucket"),
    ]:
        result = runner.invoke(app, ["export", str(tmp_path / "out"), "--to", bad])
        assert result.exit_code == 2 and why in result.output, (bad, result.output)
    a_file = tmp_path / "a-file"
    a_file.write_text("kept")
    for extra in ([], ["--snapshot"], ["--format", "delta"], ["--format", "iceberg"]):
        # was exit 1 with "[Errno 17] File exists" or delta-rs's NotADirectory
        result = runner.invoke(app, ["export", str(tmp_path / "out"), "--to", str(a_file), *extra])
        assert result.exit_code == 2 and "is a file" in result.output, (extra, result.output)
    assert a_file.read_text() == "kept"
    result = runner.invoke(app, ["export", str(tmp_path / "nowhere"), "--to", str(tmp_path / "x")])
    assert result.exit_code == 2 and "not a harvest output directory" in result.output


def test_export_as_a_step_of_the_run_and_its_failure_is_loud(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio
    from dataclasses import replace

    from harvest.flows.collect import collect_job

    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    output, lake = tmp_path / "out", tmp_path / "lake"
    with running(replace(CONFIG, observation=0)) as sb:
        spec = write_spec(tmp_path, {**job(output), "export": {"to": str(lake)}})
        summary = run_flow(spec, base_url=sb.base_url)
        assert summary.status == "complete" and summary.export["runs"] == 1, summary
        (folder,) = (lake / "_exports").iterdir()
        assert (folder / "_SUCCESS").exists() and (folder / "_manifest.json").exists()

        blocked = tmp_path / "a-file"
        blocked.write_text("not a directory")
        write_spec(tmp_path, {**job(output), "export": {"to": str(blocked / "lake")}})
        state = asyncio.run(collect_job(spec_path=str(spec), base_url=sb.base_url, return_state=True))
    assert state.is_failed(), state
    failed = asyncio.run(state.aresult(raise_on_failure=False)).summary  # harvest.RunFailed
    assert "export failed" in failed.export["error"] and "harvest export" in failed.export["error"]
    runs = rows(output / "harvest.duckdb", "SELECT status FROM runs ORDER BY started")
    assert runs == [("complete",), ("complete",)], "the run's data landed and loaded all the same"


def test_a_bad_export_destination_in_a_spec_is_refused(tmp_path: Path) -> None:
    from harvest.flows.spec import SpecError, parse_spec

    text = "name: j\nbudget: {credits: 5}\nexport: {to: 's3://k:s@lake/x'}\n"
    text += "queries: [{endpoint: /v1/pinboard/search, params: {query: a}}]\n"
    with pytest.raises(SpecError) as bad:
        parse_spec(text, file="job.yaml")
    assert "job.yaml" in str(bad.value) and "export.to" in str(bad.value) and "credentials" in str(bad.value)


@pytest.mark.parametrize("to", ["out/parquet", "out", "./out/../out/lake"])
def test_harvest_validate_refuses_an_export_into_the_jobs_own_output(tmp_path: Path, to: str) -> None:
    """Refused as the spec is checked, before a night is paid: at the run's export step the night had landed
    already, and its export could only fail."""
    text = f"name: j\nbudget: {{credits: 5}}\noutput: out\nexport: {{to: '{to}'}}\n"
    text += "queries: [{endpoint: /v1/pinboard/search, params: {query: a}}]\n"
    (tmp_path / "job.yaml").write_text(text, encoding="utf-8")
    done = subprocess.run(
        [str(HARVEST), "validate", "job.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done
    assert done.stderr.startswith(f"job.yaml:4: export.to: {to!r} is inside the job's output directory "), (
        done
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"], "nothing made"
    outside = text.replace(f"to: '{to}'", "to: lake")
    (tmp_path / "job.yaml").write_text(outside, encoding="utf-8")
    done = subprocess.run(
        [str(HARVEST), "validate", "job.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done


def test_a_relative_export_in_a_served_spec_lands_where_serve_started(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`export.to: lake` is resolved where `harvest serve` starts, as `output` is, not where the run happens."""
    import asyncio
    from dataclasses import replace

    from harvest.flows.collect import collect_job
    from harvest.flows.orchestrator.deployments import job_deployments

    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    served, worker = tmp_path / "served", tmp_path / "worker"
    served.mkdir()
    worker.mkdir()
    monkeypatch.chdir(served)
    spec = write_spec(tmp_path, {**job(Path("out")), "export": {"to": "lake"}})
    (deployment,) = job_deployments([spec])
    assert deployment.parameters["export_to"] == str(served / "lake")

    monkeypatch.chdir(worker)  # a worker started elsewhere runs the deployment's parameters
    with running(replace(CONFIG, observation=0)) as sb:
        summary = asyncio.run(collect_job(**deployment.parameters, base_url=sb.base_url))
    assert summary.status == "complete" and summary.export["runs"] == 1, summary
    (folder,) = (served / "lake" / "_exports").iterdir()
    assert (folder / "_SUCCESS").exists() and not (worker / "lake").exists()


@pytest.mark.parametrize("signals", [1, 2])
def test_ctrl_c_during_the_export_step_finishes_it_or_leaves_it_for_later(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signals: int
) -> None:
    """A destination that stops answering must not hold a run forever: one Ctrl-C during the export lets it
    finish (exit 0); a second one abandons it (exit 130, nothing committed), and `harvest export` sends it."""
    import os
    import signal
    from dataclasses import replace

    import harvest.flows.handoff.export

    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    output, lake = tmp_path / "out", tmp_path / "lake"
    real_copy = harvest.flows.handoff.export._copy_run  # Ctrl-C mid-copy: no public call stops there

    def copy(*args: Any, **kwargs: Any) -> Any:
        for _ in range(signals):
            os.kill(os.getpid(), signal.SIGINT)
        return real_copy(*args, **kwargs)

    monkeypatch.setattr(harvest.flows.handoff.export, "_copy_run", copy)
    with running(replace(CONFIG, observation=0)) as sb:
        spec = write_spec(tmp_path, {**job(output), "export": {"to": str(lake)}})
        result = CliRunner().invoke(app, ["run", str(spec), "--base-url", sb.base_url])
    (run,) = all_manifests(OutputLayout(output))
    assert run.status == "complete" and run.loaded, "landed and loaded either way"
    assert "finishing the export" in result.stderr
    committed_exports = list(lake.glob("_exports/*/_SUCCESS"))
    if signals == 1:
        assert result.exit_code == 0, result.output
        assert len(committed_exports) == 1
        assert re.search(r"[\d.]+ s loading, [\d.]+ s exporting, [\d.]+ s start and end", result.stdout)
        return
    assert result.exit_code == 130, result.output
    assert "export interrupted by SIGINT" in result.stderr and f"harvest export {output}" in result.stderr
    assert committed_exports == []
    monkeypatch.setattr(harvest.flows.handoff.export, "_copy_run", real_copy)
    later = CliRunner().invoke(app, ["export", str(output), "--to", str(lake)])
    assert later.exit_code == 0, later.output
    assert len(list(lake.glob("_exports/*/_SUCCESS"))) == 1


def test_an_export_into_the_jobs_own_output_is_refused_and_empties_nothing(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--to OUT/parquet` copied each landed file onto itself, which truncates it first: every Parquet file of
    the output was left empty, the export said "nothing was committed". A destination that is the output or
    inside it is refused before anything is written, as an empty one (which meant the current directory)."""
    output = tmp_path / "out"
    night(tmp_path, output, 0, monkeypatch)
    landed = {p: p.read_bytes() for p in output.rglob("*.parquet")}
    assert landed
    for to, fmt in [
        (output / "parquet", "parquet"),
        (output, "parquet"),
        (output / "raw", "delta"),
        ("", "parquet"),
    ]:
        result = runner.invoke(app, ["export", str(output), "--to", str(to), "--format", fmt])
        assert result.exit_code == 2, (to, result.output)
        assert ("inside the job's output directory" in result.output) == (to != ""), result.output
    assert {p: p.read_bytes() for p in output.rglob("*.parquet")} == landed
