"""Run heads stand in for whole manifests where a run only needs to know what each earlier run is: every run of
the job, oldest first by start (not by run id), and never stale after a manifest is rewritten."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import RunManifest, all_manifests, run_heads, write_manifest


def _run(run_id: str, started: str, job: str = "nightly", status: str = "complete") -> RunManifest:
    return RunManifest(
        run_id=run_id, job=job, spec_hash="h", service="s", started=started, finished=None, status=status,
        budget=10, credits_spent=1, queries=[{"query_id": "q", "status": status, "pages": 1, "records": 1}],
    )  # fmt: skip


def test_heads_list_the_runs_of_all_manifests_in_the_same_order_and_follow_rewrites(tmp_path: Path) -> None:
    layout = OutputLayout(tmp_path)
    runs = [
        _run("20261124T010203Z-ffffff", "2026-11-24T01:02:03.100000+00:00"),
        _run("20261124T010203Z-000000", "2026-11-24T01:02:03.900000+00:00"),  # same second, started later
        _run("20261123T235959Z-abcdef", "2026-11-23T23:59:59.000000+00:00", status="interrupted"),
        _run("20261124T020000Z-123456", "2026-11-24T02:00:00.000000+00:00", job="other"),
    ]
    for run in runs:
        write_manifest(layout, run)
    oldest_first = [runs[2].run_id, runs[0].run_id, runs[1].run_id]  # by start, not by run id
    assert [h.run_id for h in run_heads(layout, "nightly")] == oldest_first
    assert [h.run_id for h in run_heads(layout, "other")] == [runs[3].run_id]
    assert [h.run_id for h in run_heads(layout)] == [*oldest_first, runs[3].run_id]
    assert [m.run_id for m in all_manifests(layout, "nightly")] == oldest_first
    first = run_heads(layout, "nightly")[0]
    assert (first.run_id, first.unfinished) == ("20261123T235959Z-abcdef", True)
    assert first.manifest().queries == runs[2].queries

    write_manifest(layout, replace(runs[2], status="complete", loaded=True, resumes=1))  # resumed and loaded
    again = run_heads(layout, "nightly")[0]
    assert (again.status, again.loaded, again.resumes, again.unfinished) == ("complete", True, 1, False)
