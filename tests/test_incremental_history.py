"""Incremental queries never lose data: a pass that did not reach the end of its listing (budget, `max_pages`,
a killed run abandoned with `--fresh`) is finished by later runs, new items at the head are collected meanwhile,
and the state survives `harvest rebuild` (a lost database means a full pass, not a silent stop). Each scenario
is a chain of real flow runs against the sandbox over HTTP, counted from the sandbox's own ledger and checked
against what the sandbox says a full crawl holds."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from harvest.flows.cli import app
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.expected import expected_pages
from harvest.sandbox.wire.serving import running
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import all_manifests
from tests.crawl_helpers import data_entries, paid_twice
from tests.declaring_helpers import Variant, aliased, builtin, variants
from tests.endpoints import (
    CHANNEL_VIDEOS,
    COMMENT_REPLIES,
    CREATIVE,
    CREATIVE_DETAIL,
    FEED,
    FORUM,
    PINS,
    POST,
    PROFILE,
    REELS,
    SHORT_COMMENTS,
    VIDEO_COMMENTS,
)
from tests.flow_helpers import (
    BIG_BALANCE,
    SECRET_KEY,
    expected_keys,
    held_duckdb,
    job_spec,
    key_set,
    rows,
    run_flow,
    write_spec,
)
from tests.process_helpers import Watched, finish, signal_group, start_run
from tests.sandbox_gate import gated

THREAD = POST
DESKS = {"query": "standing desks", "limit": 4, "order": "latest"}
DESKS_CONFIG = SandboxConfig(
    api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={CREATIVE: (3, 3)}, creative_default_limit=4
)
DESKS_AND_DETAILS = [
    {"id": "creatives", "endpoint": CREATIVE, "params": DESKS, "incremental": True},
    {"id": "details", "endpoint": CREATIVE_DETAIL, "for_each": {"material_id": {"from": "creatives", "field": "material_id"}}},
]  # fmt: skip
"""An incremental search of 3 pages of 4 materials, and each material's details: a dependent of it."""
NASA = {"handle": "nasa", "sort_by": "latest"}
CONFIG = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PROFILE: (7, 7)}, page_size=5)
"""33 videos on 7 pages, as in the audit's reproduction."""
runner = CliRunner()


def job(
    base_url: str,
    output: Path,
    queries: list[dict[str, Any]] | None = None,
    variant: Variant = builtin(PROFILE),
) -> dict[str, Any]:
    videos = {"id": "videos", "endpoint": variant.path, "params": NASA, "incremental": True}
    return variant.spec(
        job_spec(base_url, output, queries or [videos], name="incremental", credits=1000, concurrency=3)
    )


def videos_in(output: Path, variant: Variant = builtin(PROFILE)) -> set[tuple[Any, ...]]:
    return key_set(output / "harvest.duckdb", variant.table("short_video_videos"))


def all_videos(config: SandboxConfig, params: dict[str, Any] = NASA) -> set[tuple[Any, ...]]:
    return set(expected_keys([(PROFILE, params)], config)["short_video_videos"])


def history(output: Path, run_id: str, query_id: str = "videos") -> tuple[Any, ...]:
    (row,) = rows(
        output / "harvest.duckdb",
        "SELECT status, history FROM query_state WHERE run_id = ? AND query_id = ?",
        [run_id, query_id],
    )
    return row


@pytest.mark.parametrize("variant", variants(PROFILE))
def test_a_budget_stopped_first_pass_is_finished_by_the_next_runs(
    prefect_harness: None, tmp_path: Path, api_key: str, variant: Variant
) -> None:
    """Night 1 pays 2 of 7 pages; nights 2 and 3 each pay one head page (it shows nothing newer) and go on
    where the backfill stopped; night 4, with the history complete, pays one page. The same for the listing
    declared by a job: incremental holds for a declared newest-first endpoint."""
    output = tmp_path / "out"
    pages = expected_pages(PROFILE, NASA, CONFIG)
    with aliased(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, output, variant=variant))
        nights = [run_flow(spec, budget=2), run_flow(spec, budget=3), run_flow(spec)]
        before_last = data_entries(sb)
        unchanged = run_flow(spec)
        last = data_entries(sb)[len(before_last) :]
    assert [n.credits_spent for n in nights] == [2, 3, 1 + pages - 2 - 2]
    assert [history(output, n.run_id) for n in nights] == [
        ("budget_exhausted", "partial"),
        ("budget_exhausted", "partial"),
        ("complete", "complete"),
    ]
    assert videos_in(output, variant) == all_videos(CONFIG)  # all 33, not the 10 of the first night
    assert len(before_last) == pages + 2 and paid_twice(before_last) == 2  # only page 0, once per rerun
    assert len(last) == 1 and unchanged.queries[0]["status"] == "caught_up"


def test_continue_picks_up_an_incremental_backfill(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    """The audit's reproduction: `--budget 2`, then `--continue` goes on at the saved cursor (no head page)."""
    output = tmp_path / "out"
    pages = expected_pages(PROFILE, NASA, CONFIG)
    with running(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, output))
        first = run_flow(spec, budget=2)
        continued = run_flow(spec, mode="continue")
        nothing = run_flow(spec, mode="continue")
        paid = data_entries(sb)
        rerun = run_flow(spec)
        rerun_paid = data_entries(sb)[len(paid) :]
    assert first.records == 10 and first.status == "budget_exhausted"
    assert continued.status == "complete" and continued.credits_spent == pages - 2
    assert nothing.status == "nothing_to_continue"
    assert len(paid) == pages and paid_twice(paid) == 0
    assert videos_in(output) == all_videos(CONFIG)
    assert len(rerun_paid) == 1 and rerun.queries[0]["status"] == "caught_up"


def test_max_pages_then_reruns_collect_the_whole_listing(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    """`max_pages: 2` over 4 pages: each rerun pays its head page and one more old page until the end."""
    config = CONFIG.replace(pages_by_path={PROFILE: (4, 4)})
    output = tmp_path / "out"
    with running(config) as sb:
        capped = {"id": "videos", "endpoint": PROFILE, "params": NASA, "incremental": True, "max_pages": 2}
        spec = write_spec(tmp_path, job(sb.base_url, output, [capped]))
        nights = [run_flow(spec) for _ in range(4)]
        paid = data_entries(sb)
    statuses = [n.queries[0]["status"] for n in nights]
    assert statuses == ["max_pages", "max_pages", "complete", "caught_up"]
    assert [n.credits_spent for n in nights] == [2, 2, 2, 1]
    assert videos_in(output) == all_videos(config)
    assert paid_twice(paid) == 3  # page 0 on each of the three reruns, nothing else


def test_new_items_at_the_head_while_a_backfill_is_unfinished_are_all_collected(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    """Night 1 stops after 2 pages of a profile and of a reels listing. By night 2 each shows 5 new items (a
    page's worth). Night 2 collects them at the head, then the rest of the old items. The reels cursor is an
    offset, so the new items move every old one back a page: where night 1 stopped, night 2 finds items night 1
    already had; paging must go on past them, not stop as if caught up."""
    config = CONFIG.replace(pages_by_path={PROFILE: (6, 6), REELS: (6, 6)})
    reels = {"handle": "nasa"}
    queries = [
        {"id": "videos", "endpoint": PROFILE, "params": NASA, "incremental": True},
        {"id": "reels", "endpoint": REELS, "params": reels, "incremental": True},
    ]
    output = tmp_path / "out"
    with running(config) as night1:
        spec = write_spec(tmp_path, job(night1.base_url, output, queries))
        first = run_flow(spec, budget=4)
    later = config.replace(new_items=5)
    with running(later) as night2:
        spec = write_spec(tmp_path, job(night2.base_url, output, queries))
        second = run_flow(spec)
        paid = Counter(e.path for e in data_entries(night2))
    assert {q["query_id"]: q["pages"] for q in first.queries} == {"videos": 2, "reels": 2}
    assert {q["status"] for q in second.queries} == {"complete"}
    assert videos_in(output) == all_videos(later)  # the old ones and the 5 new
    want_reels = set(expected_keys([(REELS, reels)], later)["photo_app_reels"])
    assert key_set(output / "harvest.duckdb", "photo_app_reels") == want_reels
    # the profile's cursor is a timestamp: 2 head pages (the new items, then known ones), then the 4 old pages
    assert paid[PROFILE] == 2 + 4
    assert paid[REELS] == 2 + 5  # the offset cursor shows one page of known items again


def test_the_state_survives_a_rebuild_and_a_lost_database_means_a_full_pass(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    output = tmp_path / "out"
    pages = expected_pages(PROFILE, NASA, CONFIG)
    with running(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, output))
        run_flow(spec, budget=2)
        rebuilt = runner.invoke(app, ["rebuild", str(output)])
        assert rebuilt.exit_code == 0, rebuilt.output
        after_rebuild = run_flow(spec)
        (output / "harvest.duckdb").unlink()
        without_db = run_flow(spec)
    assert after_rebuild.credits_spent == 1 + pages - 2  # the head page, then the backfill
    assert after_rebuild.queries[0]["status"] == "complete"
    assert without_db.credits_spent == pages  # nothing is trusted without the database: a full pass
    assert without_db.queries[0]["status"] == "complete"
    assert videos_in(output) == all_videos(CONFIG)


@pytest.mark.scenario
@pytest.mark.parametrize(
    "runner", [{"kind": "local"}, {"kind": "dask", "round_pages": 2}], ids=["local", "dask"]
)
def test_an_incremental_rerun_pays_dependents_only_for_what_it_did_not_collect(
    prefect_harness: None,
    tmp_path: Path,
    api_key: str,
    runner: dict[str, Any],
    request: pytest.FixtureRequest,
) -> None:
    """Audit bug 13: details of materials already collected are not fetched again by an incremental run;
    those a budget stop left out are; `--full` fetches them all again. In-process and in Dask rounds (on the
    shared cluster, `tests.fixtures_dask`)."""
    if runner["kind"] == "dask":
        runner = {**runner, "address": request.getfixturevalue("dask_address")}
    params, config, queries = DESKS, DESKS_CONFIG, DESKS_AND_DETAILS
    output = tmp_path / "out"
    with running(config) as sb:
        spec = write_spec(tmp_path, {**job(sb.base_url, output, queries), "runner": runner})
        first = run_flow(spec, budget=6)
        second = run_flow(spec)
        collected = data_entries(sb)
        unchanged = run_flow(spec)
        full = run_flow(spec, full=True)
    materials = set(expected_keys([(CREATIVE, params)], config)["creative_materials"])
    details = Counter(e.path_params.get("material_id") for e in collected if e.path_params)
    assert first.status == "budget_exhausted" and 0 < first.records < 2 * len(materials)
    assert second.status == "complete"
    assert set(details) == {m for (m,) in materials} and set(details.values()) == {1}  # each paid once
    assert unchanged.credits_spent == 1 and unchanged.queries[0]["status"] == "caught_up"
    assert full.credits_spent == expected_pages(CREATIVE, params, config) + len(materials)
    assert key_set(output / "harvest.duckdb", "creative_material_details") == materials


@pytest.mark.parametrize(
    "runner",
    [{"kind": "local"}, pytest.param({"kind": "dask", "round_pages": 2}, marks=pytest.mark.scenario)],
    ids=["local", "dask"],
)
def test_a_dependent_a_budget_stopped_goes_on_the_next_night_at_its_cursor_paying_no_page_twice(
    prefect_harness: None,
    tmp_path: Path,
    api_key: str,
    runner: dict[str, Any],
    request: pytest.FixtureRequest,
) -> None:
    """A profile's videos (incremental), each video's comments over 4 pages: the night's budget stopped some
    videos' comments pages in. The next plain night asked their comments from the first page again
    (paid twice, and a listing longer than a night's budget never ended); it goes on at the cursor kept, so
    three nights pay each page once and hold every comment. A `max_pages` counts the pages of every night."""
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PROFILE: (1, 1), SHORT_COMMENTS: (4, 4)}, page_size=5
    )  # fmt: skip
    if runner["kind"] == "dask":  # in Dask rounds too, on the shared cluster (`tests.fixtures_dask`)
        runner = {**runner, "address": request.getfixturevalue("dask_address")}
    comments = {
        "id": "comments",
        "endpoint": SHORT_COMMENTS,
        "for_each": {"url": {"from": "videos", "field": "url"}},
    }
    videos = {"id": "videos", "endpoint": PROFILE, "params": NASA, "incremental": True}
    output = tmp_path / "out"
    with running(config) as sb:
        spec = {**job(sb.base_url, output, [videos, comments]), "runner": runner}
        path = write_spec(tmp_path, {**spec, "concurrency": 1})
        nights = [run_flow(path, budget=7), run_flow(path, budget=3), run_flow(path, budget=20)]
        paid = [e for e in data_entries(sb) if e.path == SHORT_COMMENTS]
        capped = write_spec(tmp_path, {**spec, "concurrency": 1, "output": str(tmp_path / "capped"),
                                       "queries": [videos, {**comments, "max_pages": 3}]}, "capped.yaml")  # fmt: skip
        before = len(data_entries(sb))
        capped_nights = [run_flow(capped, budget=6), run_flow(capped, budget=20)]
        capped_paid = [e for e in data_entries(sb)[before:] if e.path == SHORT_COMMENTS]
    urls = {u for (u,) in rows(output / "harvest.duckdb", "SELECT url FROM short_video_videos")}
    assert [n.status for n in nights] == ["budget_exhausted", "budget_exhausted", "complete"]
    assert len(urls) == 3 and paid_twice(paid) == 0 and len(paid) == 3 * 4  # every page of every video once
    partway = [q for q in nights[0].queries if q["query_id"].startswith("comments[") and 0 < q["pages"] < 4]
    assert partway and all(q["status"] == "budget_exhausted" for q in partway), nights[0].queries
    assert (
        pages_by_query(nights) == dict.fromkeys(pages_by_query(nights), 4)
        and len(pages_by_query(nights)) == 3
    )
    expected = set(
        expected_keys([(SHORT_COMMENTS, {"url": u}) for u in urls], config)["short_video_comments"]
    )
    assert (
        len(key_set(output / "harvest.duckdb", "short_video_comments")) == len(expected) > 0
    )  # every comment
    assert (
        paid_twice(capped_paid) == 0 and len(capped_paid) == 3 * 3
    )  # at most 3 pages of each, over both nights
    assert capped_nights[1].status == "complete", capped_nights[1].queries
    assert set(pages_by_query(capped_nights).values()) == {3}


def pages_by_query(nights: list[Any]) -> Counter[str]:
    """The pages each dependent query paid over the nights."""
    out: Counter[str] = Counter()
    for n in nights:
        out.update({q["query_id"]: q["pages"] for q in n.queries if q["query_id"].startswith("comments[")})
    return out


@pytest.mark.scenario
def test_a_night_while_a_notebook_holds_the_database_pays_what_a_night_with_it_free_would(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    """An analyst's DuckDB session left open read-write overnight: the night cannot read harvest.duckdb, so it
    reads what its incremental query and their dependents collected from the job's Parquet instead, and pays
    what the night with the file free pays: the head page, no detail again. (It paid every page and every
    detail again: 52 credits where 11 would do on a nightly job.) Its load waits for `harvest load`."""
    output = tmp_path / "out"
    with running(DESKS_CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, output, DESKS_AND_DETAILS))
        assert run_flow(spec).status == "complete"
        with held_duckdb(output / "harvest.duckdb"):
            held = run_flow(spec)
        free = run_flow(spec)
    assert held.credits_spent == free.credits_spent == 1, (held.credits_spent, free.credits_spent)
    assert held.queries[0]["status"] == free.queries[0]["status"] == "caught_up"


@pytest.mark.scenario
def test_an_interrupted_full_run_resumed_by_the_nightly_command_goes_on_fully(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """`harvest run SPEC --full` stopped with Ctrl-C part-way, then the nightly command without `--full`, as
    cron runs it: the resume goes on as its run began and fetches every detail the full pass still had to. It
    went on as a plain night: the details the full pass had listed stayed `interrupted` for ever, unsaid, and
    the night ended well."""
    params, config, queries = DESKS, DESKS_CONFIG, DESKS_AND_DETAILS
    output = tmp_path / "out"
    with gated(config) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, output, queries))
        assert finish(start_run(spec, tmp_path, prefect_api_url))[0] == 0  # a first night: everything once
        sb.gate.close_after(5)  # the full pass: its 3 pages and 2 details, then the door holds the next
        full = Watched(start_run(spec, tmp_path, prefect_api_url, "--full"))
        sb.gate.wait_frozen(full.proc)
        signal_group(full.proc, signal.SIGINT)
        full.wait_for_stderr("stopping; letting the requests in flight land")
        sb.gate.open()
        assert full.finish()[0] == 130
        code, _, err = finish(start_run(spec, tmp_path, prefect_api_url))  # the nightly command
        entries = data_entries(sb)
    assert code == 0, err
    materials = {m for (m,) in expected_keys([(CREATIVE, params)], config)["creative_materials"]}
    details = Counter(e.path_params.get("material_id") for e in entries if e.path_params)
    assert set(details) == materials and set(details.values()) == {2}, (
        details
    )  # the first night, the full pass
    (run,) = [m for m in all_manifests(OutputLayout(output)) if m.resumes]
    assert run.full and run.status == "complete", run.queries
    states = rows(
        output / "harvest.duckdb", "SELECT DISTINCT status FROM query_state WHERE run_id = ?", [run.run_id]
    )
    assert states == [("complete",)], states


@pytest.mark.scenario
def test_only_new_parent_items_start_their_dependents(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    """Audit bug 13 at the head: a feed's unchanged rerun pays its head page and no thread; when 4 posts are
    new, their 4 threads are fetched, once each, and no thread of an older post is paid for again."""
    feed = {"handle": "nasa"}
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={FEED: (3, 3)}, page_size=5)
    queries = [
        {"id": "feed", "endpoint": FEED, "params": feed, "incremental": True},
        {"id": "threads", "endpoint": THREAD, "for_each": {"url": {"from": "feed", "field": "uri"}}},
    ]  # fmt: skip
    output = tmp_path / "out"
    with running(config) as night1:
        spec = write_spec(tmp_path, job(night1.base_url, output, queries))
        first = run_flow(spec)
        unchanged = run_flow(spec)
        old_threads = Counter(e.params["url"] for e in data_entries(night1) if e.path == THREAD)
    later = config.replace(new_items=4)
    with running(later) as night2:
        spec = write_spec(tmp_path, job(night2.base_url, output, queries))
        second = run_flow(spec)
        new_threads = Counter(e.params["url"] for e in data_entries(night2) if e.path == THREAD)
    old_posts = set(expected_keys([(FEED, feed)], config)["microblog_b_posts"])
    all_posts = set(expected_keys([(FEED, feed)], later)["microblog_b_posts"])
    assert first.status == "complete" and {(u,) for u in old_threads} == old_posts
    assert set(old_threads.values()) == {1}
    assert unchanged.credits_spent == 1  # the head page only: no thread paid again
    assert {(u,) for u in new_threads} == all_posts - old_posts and len(new_threads) == 4
    assert set(new_threads.values()) == {1}
    assert second.credits_spent == 2 + 4  # the page of new posts, one of known ones, 4 threads
    assert all_posts <= key_set(output / "harvest.duckdb", "microblog_b_posts")


@pytest.mark.scenario
def test_a_dependent_that_asks_something_else_under_the_same_id_is_asked_for_every_earlier_record(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    """A nightly job's dependent (`det`, one per video) edited in the spec under the same id: another parameter,
    then another endpoint. Each edit asks for every video the job has, once, and `harvest plan` expects it;
    the night after, only new videos would (none here), and the plan expects that, not an average with the
    catch-up in it. Before, an incremental night saw `det` collected and asked nothing (the new endpoint was
    never fetched for the videos the job had, and nothing said so), and the plan expected 0."""
    transcript, video = "/v1/short-video/video/transcript", "/v2/short-video/video"
    output = tmp_path / "out"
    asked: list[Counter[str]] = []
    expected: list[str] = []
    with running(CONFIG) as sb:
        for endpoint, params in (
            (transcript, {}),
            (transcript, {"language": "de"}),
            (video, {}),
            (video, {}),
        ):
            det = {
                "id": "det",
                "endpoint": endpoint,
                "params": params,
                "for_each": {"url": {"from": "videos", "field": "url"}},
            }
            videos = {"id": "videos", "endpoint": PROFILE, "params": NASA, "incremental": True}
            spec = write_spec(tmp_path, job(sb.base_url, output, [videos, det]))
            _, planned = _plan(spec)
            (line,) = [row for row in planned.splitlines() if row.startswith("│ det[url=*]")]
            expected.append(line.split("│")[3].strip())
            before = len(data_entries(sb))
            assert run_flow(spec).status == "complete"
            asked.append(Counter(e.path for e in data_entries(sb)[before:] if e.path != PROFILE))
    n = len(all_videos(CONFIG))
    assert asked[0] == {transcript: n}  # the first night: every video's transcript
    assert asked[1] == {transcript: n}  # in German now: every video's again
    assert asked[2] == {video: n}  # another endpoint: every video's
    assert asked[3] == {}  # nothing changed: no video is new
    assert expected == ["unknown", str(n), str(n), "0"], expected  # the first: nothing to learn from yet


def _plan(spec: Path, *options: str) -> tuple[int, str]:
    """`harvest plan` as a person (or a nightly script) runs it."""
    import subprocess

    from tests.flow_helpers import HARVEST

    done = subprocess.run(
        [str(HARVEST), "plan", str(spec), *options], capture_output=True, text=True, timeout=120,
        env={**__import__("os").environ, "COLUMNS": "200"},
    )  # fmt: skip
    return done.returncode, done.stdout


def _figures(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("worst case: "))


def test_the_plan_expects_the_worst_case_of_dependents_when_a_fan_out_value_was_added_to_their_parent(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    """Two accounts' feeds (incremental), each post's thread; a third account added to the fan-out: its first
    pass finds every post new and starts a thread each, but the plan expected the threads of the nights before
    (new posts only: none), and a budget sized by `--check-expected` came up short without a word."""
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={FEED: (2, 2)}, page_size=5)
    threads = {"id": "threads", "endpoint": THREAD, "for_each": {"url": {"from": "feed", "field": "uri"}}}
    output = tmp_path / "out"

    def feed(*handles: str) -> dict[str, Any]:
        return {
            "id": "feed",
            "endpoint": FEED,
            "incremental": True,
            "max_pages": 2,
            "for_each": {"handle": list(handles)},
        }

    with running(config) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, output, [feed("nasa", "esa"), threads]))
        nights = [run_flow(spec), run_flow(spec)]
        code, before = _plan(spec, "--budget", "10", "--check-expected")
        grown = write_spec(
            tmp_path, job(sb.base_url, output, [feed("nasa", "esa", "jaxa"), threads]), "grown.yaml"
        )
        grown_code, grown_plan = _plan(grown, "--budget", "10", "--check-expected")
        third = run_flow(grown, budget=100)
    assert nights[1].credits_spent == 2 and code == 0, before  # a head page each, no new post: no thread
    assert grown_code == 3, grown_plan  # the budget of 10 does not cover the new account's night
    row = next(line for line in grown_plan.splitlines() if line.startswith("│ threads[url=*]"))
    assert row.split("│")[3:5] == ["  unknown ", "  unbounded "], grown_plan  # its worst case: not 0
    assert third.credits_spent > 10


def test_a_job_renamed_in_its_spec_is_told_its_first_run_goes_on_from_nothing_the_old_name_collected(
    prefect_api_url: str, tmp_path: Path, api_key: str
) -> None:
    """A team renamed its nightly job (`name:`) and kept the output: the next night paid every page again (an
    incremental query pages fully for a job with no runs), without a word. Its first run says so and how to go
    on from the old runs; its second says nothing."""
    output = tmp_path / "out"
    with running(CONFIG) as sb:
        spec = job(sb.base_url, output)
        old = write_spec(tmp_path, spec)
        renamed = write_spec(tmp_path, {**spec, "name": "incremental-v2"}, "renamed.yaml")
        said = [finish(start_run(path, tmp_path, prefect_api_url)) for path in (old, old, renamed, renamed)]
    assert [code for code, _, _ in said] == [0, 0, 0, 0], said
    warning = (
        f"{output} holds runs of job 'incremental' but none of job 'incremental-v2': this run goes on from"
    )
    assert [warning in err for _, _, err in said] == [False, False, True, False], said[2][2]
    assert "setting it back goes on from those runs" in said[2][2]


def test_a_full_night_a_fan_out_cap_stopped_leaves_the_dependents_it_never_started_collected(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    """Every post's thread collected; then a `--full` night (as the docs suggest now and then) whose fan-out cap
    stopped the threads after 4: the threads it never started counted as never collected, and the next plain
    nights paid for them again, each collected before. They stay collected: the next night pays its head page."""
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={FEED: (2, 2)}, page_size=5)
    feed = {"id": "feed", "endpoint": FEED, "params": {"handle": "nasa"}, "incremental": True}
    threads = {"id": "threads", "endpoint": THREAD, "for_each": {"url": {"from": "feed", "field": "uri"}}}
    output = tmp_path / "out"
    with running(config) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, output, [feed, threads]))
        capped = {**threads, "max_credits_total": 4}
        capped_spec = write_spec(tmp_path, job(sb.base_url, output, [feed, capped]), "capped.yaml")
        first = run_flow(spec)
        full = run_flow(capped_spec, full=True)
        after = [run_flow(capped_spec), run_flow(capped_spec)]
    posts = len(expected_keys([(FEED, {"handle": "nasa"})], config)["microblog_b_posts"])
    assert first.status == "complete" and first.credits_spent == 2 + posts
    started = [q for q in full.queries if q["query_id"].startswith("threads[") and q["pages"]]
    assert len(started) == 4 and full.credits_spent == 2 + 4, full.queries
    assert [n.credits_spent for n in after] == [1, 1], [n.queries for n in after]  # the head page alone


def test_the_plan_does_not_learn_a_plain_night_from_a_full_one(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    """An incremental feed and each post's thread: after a `--full` night (every page, every thread again) the
    plan expected the next plain night to cost the average of it and the plain night before; a plain night
    pays the head page. It learns from plain nights only."""
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={FEED: (2, 2)}, page_size=5)
    feed = {"id": "feed", "endpoint": FEED, "params": {"handle": "nasa"}, "incremental": True, "max_pages": 2}
    threads = {"id": "threads", "endpoint": THREAD, "for_each": {"url": {"from": "feed", "field": "uri"}}}
    output = tmp_path / "out"
    with running(config) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, output, [feed, threads]))
        nights = [run_flow(spec), run_flow(spec), run_flow(spec, full=True)]
        _, planned = _plan(spec)
        plain = run_flow(spec)
    assert [n.credits_spent for n in nights[1:]] == [1, nights[0].credits_spent] and plain.credits_spent == 1
    assert "expected: 1 (learned from the job's last nights)" in _figures(planned), planned


def test_the_plan_learns_a_query_s_nights_only_from_what_it_asks_now_and_never_past_its_worst_case(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    """Nights of a pin search capped at 3 pages: with the cap lowered to 2 the plan expected 3 against a worst
    case of 2; with a forum search under the same id it expected what the pin search paid (3), where that
    search's nights say nothing (its worst case is unbounded: unknown); nor do a search's for other words."""
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (6, 6)})
    pins = {"id": "search", "endpoint": PINS, "params": {"query": "oak desk"}, "max_pages": 3}
    forum = {"subreddit": "running", "query": "shoes", "sort": "new", "timeframe": "all"}
    output = tmp_path / "out"
    with running(config) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, output, [pins]))
        nights = [run_flow(spec), run_flow(spec)]
        lowered = write_spec(tmp_path, job(sb.base_url, output, [{**pins, "max_pages": 2}]), "lowered.yaml")
        searched = {"id": "search", "endpoint": FORUM, "params": forum}
        other = write_spec(tmp_path, job(sb.base_url, output, [searched]), "forum.yaml")
        raised = write_spec(tmp_path, job(sb.base_url, output, [{**pins, "max_pages": 5}]), "raised.yaml")
        words = {**pins, "max_pages": 5, "params": {"query": "pine shelf"}}
        reworded = write_spec(tmp_path, job(sb.base_url, output, [words]), "reworded.yaml")
    assert [n.credits_spent for n in nights] == [3, 3]
    assert _figures(_plan(spec)[1]).startswith("worst case: 3; expected: 3 (learned")
    assert _figures(_plan(lowered)[1]).startswith("worst case: 2; expected: 2 (learned"), _plan(lowered)[1]
    assert _figures(_plan(other)[1]).startswith("worst case: unbounded; expected: unknown"), _plan(other)[1]
    assert _figures(_plan(raised)[1]).startswith("worst case: 5; expected: 3 (learned")  # the same search
    assert _figures(_plan(reworded)[1]).startswith("worst case: 5; expected: 5 ("), _plan(reworded)[1]


@pytest.mark.scenario
def test_the_plan_expects_what_the_last_nights_paid_beside_the_worst_case(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    """An incremental feed (3 pages of posts) and each post's thread: the first night pays for all, and from
    then on the plan expects what a night pays (its head page; a thread per new post), the worst case beside."""
    feed = {"handle": "nasa"}
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={FEED: (3, 3)}, page_size=5)
    queries = [
        {"id": "feed", "endpoint": FEED, "params": feed, "incremental": True, "max_pages": 3},
        {"id": "threads", "endpoint": THREAD, "for_each": {"url": {"from": "feed", "field": "uri"}}},
    ]  # fmt: skip
    output = tmp_path / "out"
    with running(config) as night1:
        spec = write_spec(tmp_path, {**job(night1.base_url, output, queries), "budget": {"credits": 10}})
        code, before = _plan(spec, "--check")
        assert code == 3 and _figures(
            before
        ) == (  # a post's thread each: the feed's page size is not declared
            "worst case: unbounded; expected: unknown (no earlier run of the job to learn from: the worst case)"
        )
        first = run_flow(spec, budget=100)
        code, after_first = _plan(spec, "--check-expected")
        unchanged = run_flow(spec)
        code_after_second, after_second = _plan(spec)
    later = config.replace(new_items=4)
    with running(later) as night3:
        spec = write_spec(tmp_path, {**job(night3.base_url, output, queries), "budget": {"credits": 10}})
        third = run_flow(spec)
        _, after_third = _plan(spec, "--check")
    posts = len(expected_keys([(FEED, feed)], config)["microblog_b_posts"])
    assert first.credits_spent == 3 + posts and unchanged.credits_spent == 1 and third.credits_spent == 2 + 4
    # after the first night: the next one pays its head page, no thread (no new post known): the budget covers it
    assert code == 0 and _figures(after_first) == (
        "worst case: unbounded; expected: 1 (learned from the job's last nights)"
    ), after_first
    assert "1 page: caught up after its full pass" in after_first
    assert "new feed records only: none known yet" in after_first
    # after the unchanged night: what it paid
    assert _figures(after_second).endswith("expected: 1 (learned from the job's last nights)")
    assert code_after_second == 0 and "the last night" in after_second
    # after a night of 4 new posts: the average of the nights since the full pass, rounded up
    assert "expected: 4 (" in _figures(after_third), after_third  # feed (1 + 2) / 2, threads (0 + 4) / 2
    assert "the average of the last 2 nights" in after_third


def replies_paid(sb: Any) -> Counter[str]:
    """How many times the sandbox was paid for each comment's replies (by its `continuationToken`)."""
    return Counter(e.params.get("continuationToken") for e in data_entries(sb) if e.path == COMMENT_REPLIES)


@pytest.mark.scenario
def test_a_grandchild_a_cap_left_unstarted_starts_the_next_night_from_its_collected_parent(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    """A channel's videos (incremental), their comments, the comments' replies, each fan-out under its cap: the
    night the replies' cap stopped some, the next plain night starts those, and only those, from the comments
    the database holds (the videos and the comments were collected: neither is paid again); a third night pays
    the head page alone. The plan before the second night expects what it pays."""
    comments = {"order": "newest"}
    queries = [
        {"id": "vids", "endpoint": CHANNEL_VIDEOS, "params": {"handle": "nasa", "sort": "latest"},
         "incremental": True, "max_pages": 2},
        {"id": "comments", "endpoint": VIDEO_COMMENTS, "params": comments, "max_pages": 1,
         "for_each": {"url": {"from": "vids", "field": "url"}}, "max_credits_total": 20},
        {"id": "replies", "endpoint": COMMENT_REPLIES, "max_pages": 1, "max_credits_total": 15,
         "for_each": {"continuationToken": {"from": "comments", "field": "replies_token"}}},
    ]  # fmt: skip
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE})
    output = tmp_path / "out"
    with running(config) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, output, queries))
        first = run_flow(spec, budget=60)
        planned = {
            b: runner.invoke(app, ["plan", str(spec), "--budget", str(b), "--check-expected"]) for b in (5, 6)
        }
        night1 = replies_paid(sb)
        second = run_flow(spec, budget=60)
        night2 = replies_paid(sb)
        third = run_flow(spec, budget=60)
        paid = Counter(e.path for e in data_entries(sb))
    tokens = {t for (t,) in rows(output / "harvest.duckdb", "SELECT DISTINCT replies_token FROM video_platform_video_comments WHERE replies_token IS NOT NULL")}  # fmt: skip
    unstarted = [q for q in first.queries if q["query_id"].startswith("replies[") and not q["pages"]]
    assert len(unstarted) == len(tokens) - len(night1) > 0
    assert set(night1) < tokens and set(night1.values()) == {1}  # the cap stopped some
    assert set(night2) == tokens and set(night2.values()) == {1}  # the rest, each once, nothing twice
    assert second.credits_spent == 1 + len(tokens) - len(night1) == 6  # the head page and the replies left
    assert (planned[5].exit_code, planned[6].exit_code) == (3, 0), planned[5].output  # the plan expected it
    assert third.credits_spent == 1 and paid[COMMENT_REPLIES] == len(tokens)
    assert paid[VIDEO_COMMENTS] == sum(1 for q in first.queries if q["query_id"].startswith("comments["))
