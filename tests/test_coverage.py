"""What earlier runs collected, folded from run manifests: incremental histories (including manifests written
before histories were recorded) and the queries whose data was collected."""

from __future__ import annotations

from typing import Any

from harvest.flows.run.coverage import QueryHistory, coverage_of
from harvest.tasks.output.manifest import RunManifest


def run(run_id: str, *queries: dict[str, Any], status: str = "complete") -> RunManifest:
    return RunManifest(
        run_id=run_id, job="j", spec_hash="h", service="s", started=run_id, finished=run_id, status=status,
        budget=10, credits_spent=0, queries=list(queries),
    )  # fmt: skip


def q(status: str, pages: int = 1, cursor: dict[str, str] | None = None, **more: Any) -> dict[str, Any]:
    return {"query_id": "v", "status": status, "pages": pages, "next_cursor": cursor, **more}


def test_old_manifests_a_rerun_that_caught_up_on_an_unfinished_pass_leaves_it_partial() -> None:
    """The audit's case, as runs before this change recorded it: the history is partial where night 1 stopped."""
    got = coverage_of([run("1", q("budget_exhausted", 2, {"c": "2"})), run("2", q("caught_up"))])
    assert got.histories["v"] == QueryHistory("partial", {"c": "2"}, None)
    assert "v" in got.collected  # its newest status says so; the history decides how it pages


def test_old_manifests_a_complete_pass_then_caught_up_reruns_stay_complete() -> None:
    got = coverage_of([run("1", q("complete", 7)), run("2", q("caught_up")), run("3", q("stopped", 0))])
    assert got.histories["v"] == QueryHistory("complete", None, "2")
    assert "v" not in got.collected  # the newest status (a stop before any page) decides


def test_recorded_histories_keep_the_run_they_were_last_complete_in() -> None:
    got = coverage_of(
        [
            run("1", q("complete", 7, history="complete")),
            run("2", q("budget_exhausted", 3, {"c": "9"}, history="partial", backfill_cursor={"c": "4"})),
            run(
                "3", q("budget_exhausted", 0, history="partial", backfill_cursor={"c": "4"}), status="running"
            ),
        ]
    )
    assert got.histories["v"] == QueryHistory("partial", {"c": "4"}, "1")  # the unfinished run is not read
