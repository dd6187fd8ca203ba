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


def test_a_max_pages_stop_that_paged_nothing_after_a_page_that_never_landed_is_not_collected() -> None:
    """Outputs of earlier versions: a page damaged on both tries counted as the query's one page (`failed`, 1
    page, 0 records), so its `--continue` stopped at `max_pages` with no request. That stop is not collected: the
    next night asks for the query again. A stop that paged nothing after a page that landed records (drift on the
    query's last allowed page) was collected, and still is."""
    damaged = coverage_of([run("1", q("failed", 1, records=0)), run("2", q("max_pages", 0, records=0))])
    assert "v" not in damaged.collected
    drifted = [run("1", q("drift", 1, {"c": "2"}, records=5)), run("2", q("max_pages", 0, records=0))]
    assert "v" in coverage_of(drifted).collected
    assert "v" in coverage_of([run("1", q("max_pages", 2, records=9))]).collected


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


def test_a_default_a_later_catalog_adds_leaves_what_a_dependent_asks_alone() -> None:
    """`QuerySpec.asks` digests the parameters as set: a harvest upgrade whose catalog gives a parameter a
    default (the service's own, as `region: US`) sends it, but an incremental night does not take every
    collected dependent for a changed one and pay for all of them again. A parameter set is a change."""
    from harvest.connectors.catalog.declared_params import params_model
    from harvest.flows.run.plan import DependentQuery, instantiate

    url = {"url": {"type": "string", "required": True}}
    region = {"region": {"type": "string", "default": "US"}}

    def dep(params: dict[str, dict[str, object]], fixed: dict[str, object]) -> DependentQuery:
        return DependentQuery(
            template_id="det", endpoint="/v1/x/video", params=fixed, param="url", parent="videos",
            field="url", kind="x_videos", params_model=params_model("/v1/x/video", params, ()),
        )  # fmt: skip

    before = instantiate(dep(url, {}), "https://x.example/1")
    after = instantiate(dep({**url, **region}, {}), "https://x.example/1")
    set_ = instantiate(dep({**url, **region}, {"region": "DE"}), "https://x.example/1")
    assert after.params == {"url": "https://x.example/1", "region": "US"}  # sent
    assert before.asks == after.asks != set_.asks
