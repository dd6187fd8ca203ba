"""Declarations that say what the service's real answers do, read from its published samples: a place sent on a
query's first page only, lists inside lists to any depth, items of another kind mixed into a list, and a cursor
the declaration does not read.

The samples are read in place (`tests.published_samples`). The pages of a query are served over HTTP and paged by
harvest's own pager and client; the reading rules are held against single pages where the flow adds nothing.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import harvest.flows.collect  # noqa: F401  (Prefect binds its log handlers on first import: not inside CliRunner)
from harvest.connectors.catalog.declarations import EndpointDecl, plain
from harvest.connectors.catalog.endpoint_build import build_endpoint
from harvest.connectors.catalog.endpoints import Endpoint
from harvest.connectors.catalog.record_paths import compile_path
from harvest.connectors.credits.ledger import CreditLedger
from harvest.connectors.http.client import ServiceClient
from harvest.connectors.paging.pager import QuerySpec
from harvest.connectors.reading.extraction import convert_page
from harvest.flows.cli import app
from tests.crawl_helpers import collect
from tests.endpoints import FOLLOWERS, KEYWORD_SEARCH, PAGE_PROFILE, PINS, VIDEO_SEARCH
from tests.flow_helpers import job_spec, rows, scalar, write_spec
from tests.published_samples import sample, sample_service, thread_items

COMMENTS = "/v1/forum/post/comments"
BOARD = "/v1/pinboard/board"
PIN = "/v1/pinboard/pin"
STREAM_PROFILE = "/v1/streaming/profile"
FULL, TRIMMED = "_v1_forum_post_comments.json", "_v1_forum_post_comments.trimmed.json"
POST_KIND: dict[str, Any] = {
    "at": "post",
    "one": True,
    "key": "id",
    "columns": {"id": "text", "title": "text", "num_comments": "integer"},
}
COMMENT_KIND: dict[str, Any] = {
    "at": "comments",
    "nested": "replies.items",
    "key": "id",
    "columns": {
        "id": "text",
        "body": "text",
        "parent_id": "text",
        "created_at": {"type": "timestamp", "path": "created_utc"},
        "replied_to": {"type": "text", "path": "$parent.id"},
    },
}
TOP_COMMENT_KIND: dict[str, Any] = {
    "at": "comments",
    "key": "id",
    "columns": {"id": "text", "body": "text", "parent_id": "text"},
}
"""The thread's top-level comments only (what a declaration could say before `nested` took a path)."""
THREAD_PAGING = {"style": "cursor", "next": {"cursor": "more.cursor"}, "more": "more.has_more"}
runner = CliRunner()


def endpoint(path: str, declaration: dict[str, Any]) -> Endpoint:
    """The endpoint a job's declaration makes: checked, plain, built as a run builds it."""
    return build_endpoint(path, plain(path, EndpointDecl.model_validate(declaration)))


def thread(records: dict[str, Any], paging: dict[str, Any] = THREAD_PAGING) -> Endpoint:
    return endpoint(COMMENTS, {"params": {"url": {"type": "string"}}, "paging": paging, "records": records})


def cursor_page() -> dict[str, Any]:
    """A cursor page of the thread as the service sends it: comments, no `post`, no more pages (the trimmed
    sample's comments, another thread of the same shape)."""
    page = sample(TRIMMED)
    del page["post"]
    page["more"] = {"has_more": False, "cursor": None}
    return page


async def page_thread(decl: Endpoint, pages: dict[str | None, Any]) -> Any:
    """Page one query of `decl` over HTTP, the first page answered `pages[None]`, a cursor page `pages[cursor]`."""
    with sample_service({COMMENTS: lambda params: pages[params.get("cursor")]}) as (url, asked):
        ledger = CreditLedger(100)
        spec = QuerySpec("thread", COMMENTS, {"url": "https://forum.example/r/AskReddit/comments/ablzuq/"})
        async with ServiceClient(url, "k" * 24, ledger) as client:
            run = await collect(spec, decl, client, ledger)
    return run, [params for path, params in asked if path == COMMENTS]


# ------------------------------------------------------------------------------------- first page only
@pytest.mark.parametrize(
    "records",
    [
        {"forum_post_details": POST_KIND, "forum_post_comments": TOP_COMMENT_KIND},
        {"forum_post_comments": TOP_COMMENT_KIND, "forum_post_details": POST_KIND},
        {
            "forum_post_details": {**POST_KIND, "first_page_only": True},
            "forum_post_comments": TOP_COMMENT_KIND,
        },
        {"forum_post_details": POST_KIND, "forum_post_comments": COMMENT_KIND},
    ],
    ids=["post-first", "comments-first", "first_page_only", "post-first-with-replies"],
)
async def test_a_place_on_the_first_page_only_is_no_drift_in_either_order(records: dict[str, Any]) -> None:
    """The post comes beside the first page of its comments only: paging goes on to the cursor page and ends
    complete, every comment (and reply, when declared) of both pages landed, whatever the kinds' order."""
    first = sample(FULL)
    run, asked = await page_thread(thread(records), {None: first, first["more"]["cursor"]: cursor_page()})
    pages = [first["comments"], cursor_page()["comments"]]
    nested = "nested" in records["forum_post_comments"]
    comments = [c for page in pages for c in (thread_items(page) if nested else page)]
    assert (run.outcome.status, run.outcome.error) == ("complete", None)
    assert [params.get("cursor") for params in asked] == [None, first["more"]["cursor"]]
    landed = [page.records for page in run.pages]
    assert [r["id"] for r in landed[0]["forum_post_details"]] == [first["post"]["id"]]
    assert landed[1]["forum_post_details"] == []
    got = [r["id"] for page in landed for r in page["forum_post_comments"]]
    assert got == [c["id"] for c in comments] and len(set(got)) == len(comments) == (13 if nested else 2)
    assert run.outcome.extraction.lost == 0 and run.outcome.records == 1 + len(comments)


def test_first_page_only_says_a_later_page_has_no_such_place_whatever_else_it_holds() -> None:
    """Without the flag, a place missing from a later page beside a list of objects nothing reads (a renamed
    list?) is drift; declared `first_page_only`, the post is simply not on that page."""
    page = cursor_page()
    page["awards"] = [{"name": "gold", "count": 1}]  # a list of objects no kind of the declaration reads
    for flag, lost in ((False, ["forum_post_details: post"]), (True, [])):
        decl = thread(
            {
                "forum_post_details": {**POST_KIND, "first_page_only": flag},
                "forum_post_comments": COMMENT_KIND,
            }
        )
        report = convert_page(decl.kinds, page, {}, earlier={"forum_post_details"}, later=True).report
        assert list(report.missing_lists) == lost


# ------------------------------------------------------------------------------------- lists inside lists
def test_every_comment_and_reply_of_the_thread_is_a_record_once_knowing_its_parent() -> None:
    body = sample(FULL)
    decl = thread({"forum_post_comments": COMMENT_KIND})
    page = convert_page(decl.kinds, body, {})
    rows = page.tables["forum_post_comments"].to_pylist()
    everything = thread_items(body["comments"])
    assert [r["id"] for r in rows] == [c["id"] for c in everything] and len(everything) == 4
    holder = {reply["id"]: c["id"] for c in everything for reply in c["replies"]["items"]}
    assert [r["replied_to"] for r in rows] == [holder.get(c["id"]) for c in everything]
    assert all(r["parent_id"] == f"t1_{r['replied_to']}" for r in rows[1:])  # the service's own link agrees
    assert "replies" not in page.report.tables["forum_post_comments"].new_fields


@pytest.mark.parametrize(
    ("name", "at", "expected"),
    [
        (
            FULL,
            "comments[].replies.items[]",
            lambda b: [r for c in b["comments"] for r in c["replies"]["items"]],
        ),
        (
            TRIMMED,
            "comments[].replies.items[]",
            lambda b: [r for c in b["comments"] for r in c["replies"]["items"]],
        ),
        (
            "_v1_photo-app_profile.json",
            "data.user.edge_owner_to_timeline_media.edges[].node",
            lambda b: [e["node"] for e in b["data"]["user"]["edge_owner_to_timeline_media"]["edges"]],
        ),
    ],
    ids=["forum-replies", "forum-replies-trimmed", "photo-app-timeline"],
)
def test_brackets_in_at_take_every_item_of_every_list(name: str, at: str, expected: Any) -> None:
    body = sample(name)
    decl = endpoint(
        "/v1/example/listing", {"records": {"items": {"at": at, "key": "id", "columns": {"id": "text"}}}}
    )
    page = convert_page(decl.kinds, body, {})
    want = [item["id"] for item in expected(body)]
    assert [r["id"] for r in page.tables["items"].to_pylist()] == want and want
    assert page.report.lost == 0


# ------------------------------------------------------------------------------------- items of another kind
RELATED = {
    "type": "story",
    "id": "5312741902214418411",
    "title": {"format": "Related Interests", "args": []},
    "objects": [{"type": "interest", "id": "918530398158"}],
}
"""The "Related Interests" module a board's `pins` hold beside its pins (its title an object, its objects no pins)."""


def board(where: Any) -> Endpoint:
    kind = {
        "at": "pins",
        "key": "id",
        "where": where,
        "columns": {"id": "text", "title": "text", "link": "text"},
    }
    return endpoint(BOARD, {"params": {"board_url": {"type": "string"}}, "paging": {"style": "cursor"},
                            "records": {"pinboard_board_pins": kind}})  # fmt: skip


@pytest.mark.parametrize(
    ("where", "kept"), [({"type": "pin"}, ["full"]), ({"type": ["pin", None]}, ["full", "trimmed"])]
)
def test_where_keeps_the_pins_and_counts_what_it_left_out(where: Any, kept: list[str]) -> None:
    """A board's first page (full pins, `type: pin`, and the module) and a trimmed one (its pins say no type)."""
    full, trimmed = sample("_v1_pinboard_board.json"), sample("_v1_pinboard_board.trimmed.json")
    full["pins"].insert(1, RELATED)
    decl = board(where)
    pages = {"full": convert_page(decl.kinds, full, {}), "trimmed": convert_page(decl.kinds, trimmed, {})}
    for name, page in pages.items():
        pins = {"full": full, "trimmed": trimmed}[name]["pins"]
        table = page.report.tables["pinboard_board_pins"]
        want = [p["id"] for p in pins if p is not RELATED] if name in kept else []
        assert [r["id"] for r in page.tables["pinboard_board_pins"].to_pylist()] == want
        assert table.dropped == len(pins) - len(want) and table.kept == len(want)
        assert page.report.lost == 0 and page.report.totals()["items_dropped"] == table.dropped
    assert "Related Interests" in (pages["full"].report.tables["pinboard_board_pins"].dropped_example or "")


# ------------------------------------------------------------------------------------- a cursor not read
@pytest.mark.parametrize(
    ("name", "paging", "unread"),
    [
        (FULL, {"style": "cursor"}, {"field": "more.cursor", "param": "cursor"}),
        (FULL, THREAD_PAGING, None),
        (
            "_v1_photo-app_user_reels.json",
            {"style": "cursor"},
            {"field": "paging_info.max_id", "param": "cursor"},
        ),
        ("_v1_photo-app_user_reels.json", {"style": "max_id"}, None),
        (
            "_v1_pinboard_board.json",
            {"style": "cursor", "next": {"cursor": "bookmark"}},
            {"field": "cursor", "param": "cursor"},
        ),
        ("_v1_pinboard_board.json", {"style": "single"}, None),
    ],
    ids=[
        "thread-default-style",
        "thread-declared",
        "reels-as-cursor",
        "reels-max-id",
        "board-misnamed",
        "single",
    ],
)
def test_a_cursor_the_declaration_does_not_read_is_named(name: str, paging: Any, unread: Any) -> None:
    body = sample(name)
    decl = endpoint(
        "/v1/example/listing",
        {"paging": paging, "records": {"items": {"at": "x", "key": "id", "columns": {"id": "text"}}}},
    )
    assert convert_page(decl.kinds, body, {}, paging=decl.paging).report.unread_cursor == unread


def test_a_last_page_that_says_no_more_names_no_cursor() -> None:
    last = copy.deepcopy(sample(FULL))
    last["more"] = {"has_more": False, "cursor": "opaque"}
    decl = thread({"forum_post_comments": COMMENT_KIND}, {"style": "cursor", "more": "more.has_more"})
    assert convert_page(decl.kinds, last, {}, paging=decl.paging).report.unread_cursor is None


def test_numbered_pages_name_no_cursor_while_their_flag_says_more() -> None:
    """Pages counted by the client (`page_number`) read no cursor from the answer: a page that says there is more
    is any page but the last, not a cursor the declaration missed."""
    from harvest.connectors.catalog import endpoints as catalog

    creators = catalog.get("/v1/short-video/creators/popular")
    first = copy.deepcopy(sample("_v1_short-video_creators_popular.json"))
    first["pagination"]["has_more"] = True
    page = convert_page(creators.kinds, first, {}, paging=creators.paging)
    assert page.tables["short_video_popular_creators"].num_rows and page.report.unread_cursor is None


# ------------------------------------------------------------------------------------- one run of a job
THREAD_PATH = "/v1/declared/forum/post/comments"
BOARD_PATH = "/v1/declared/pinboard/board"
"""The samples' endpoints under paths of the job's own: a path harvest ships is not declared again."""


def test_a_job_lands_the_thread_and_the_board_and_says_what_it_did_not_read(
    prefect_harness: None, api_key: str, tmp_path: Path
) -> None:
    """One `harvest run`: the thread declared as a new user would (`paging: {style: cursor}`, its cursor is at
    `more.cursor`) lands every comment and reply once and ends complete, naming the cursor it did not read; the
    board keeps its pins (those that say no type too) and counts the module it left out. Both in
    `query_state`, `runs` and the run's summary."""
    full, board_page, trimmed = (
        sample(FULL),
        sample("_v1_pinboard_board.json"),
        sample("_v1_pinboard_board.trimmed.json"),
    )
    board_page["pins"].insert(1, RELATED)
    del trimmed["cursor"]
    routes = {
        THREAD_PATH: lambda params: full,
        BOARD_PATH: lambda params: trimmed if params.get("cursor") == board_page["cursor"] else board_page,
    }
    pins = {
        "at": "pins",
        "key": "id",
        "where": {"type": ["pin", None]},
        "columns": {"id": "text", "title": "text"},
    }
    with sample_service(routes) as (url, asked):
        endpoints = {
            THREAD_PATH: {"params": {"url": {"type": "string", "required": True}}, "paging": {"style": "cursor"},
                          "records": {"declared_forum_post_details": POST_KIND,
                                      "declared_forum_post_comments": COMMENT_KIND}},
            BOARD_PATH: {"params": {"board_url": {"type": "string", "required": True}},
                         "paging": {"style": "cursor"}, "records": {"declared_pinboard_board_pins": pins}},
        }  # fmt: skip
        queries = [
            {"id": "thread", "endpoint": THREAD_PATH, "params": {"url": "https://forum.example/comments/ablzuq/"}},
            {"id": "board", "endpoint": BOARD_PATH, "params": {"board_url": "https://pinboard.example/b/"}},
        ]  # fmt: skip
        spec = write_spec(
            tmp_path, job_spec(url, tmp_path / "out", queries, name="shapes", credits=20, endpoints=endpoints)
        )
        result = runner.invoke(app, ["run", str(spec)])
    assert result.exit_code == 0, result.output
    db = tmp_path / "out" / "harvest.duckdb"
    everything = thread_items(full["comments"])
    landed = rows(db, "SELECT id, replied_to FROM declared_forum_post_comments ORDER BY created_at")
    holder = {reply["id"]: c["id"] for c in everything for reply in c["replies"]["items"]}
    assert sorted(landed) == sorted((c["id"], holder.get(c["id"])) for c in everything) and len(landed) == 4
    assert rows(db, "SELECT id FROM declared_pinboard_board_pins ORDER BY id") == sorted(
        [(board_page["pins"][0]["id"],), (trimmed["pins"][0]["id"],)]
    )
    state = dict(rows(db, "SELECT query_id, (status, pages, items_dropped, cursor_unread) FROM query_state"))
    assert state == {"thread": ("complete", 1, 0, "more.cursor"), "board": ("complete", 2, 1, None)}
    assert scalar(db, "SELECT items_dropped FROM runs") == 1
    comments = dict(
        rows(db, "SELECT column_name, comment FROM duckdb_columns() WHERE table_name = 'query_state'")
    )
    assert "`where`" in comments["items_dropped"] and "paging.next" in comments["cursor_unread"]
    said = " ".join(result.stderr.split())
    assert "thread (/v1/declared/forum/post/comments): paging ended where the answer had no cursor" in said
    assert "declare `next: {cursor: more.cursor}`" in said
    assert (
        "1 item the pages held did not match its record kind's `where`" in said
        and "Related Interests" in said
    )
    assert "harvest: thread: complete, 1 page, 5 records, 1 credit; `more.cursor` unread" in said  # its line
    assert "harvest: board: complete, 2 pages, 2 records, 2 credits; 1 item left out" in said
    table = " ".join(result.stdout.split())
    assert "`more.cursor` unread" in table and "1 item left out" in table
    assert [path for path, _ in asked].count(THREAD_PATH) == 1, "paging ended after the one page"


def test_a_private_page_and_an_age_restricted_one_are_told_apart_in_the_service_s_words(
    prefect_harness: None, api_key: str, tmp_path: Path
) -> None:
    """The network-a profile of a private page and of an age-restricted one (the service's published answers,
    served over HTTP): both end `not_found`, billed and kept. The run said the same bare `not_found` for both, the
    service's `message` lost, and warned of a row "skipped with a NULL primary key" that was neither. Now each
    query's line and `query_state.error` carry what the service said, and no row or warning stands for them."""
    answers = {name: sample(f"_v1_network-a_profile.{name}.json") for name in ("private", "age_restricted")}
    route = {PAGE_PROFILE: lambda params: answers[params["url"].rsplit("/", 1)[-1]]}
    with sample_service(route) as (url, asked):
        queries = [
            {"id": name, "endpoint": PAGE_PROFILE, "params": {"url": f"https://network-a.example/{name}"}}
            for name in answers
        ]
        spec = write_spec(tmp_path, job_spec(url, tmp_path / "out", queries, name="profiles", credits=20))
        result = runner.invoke(app, ["run", str(spec)], env={"COLUMNS": "2000"})
    assert result.exit_code == 0, result.output
    assert len([path for path, _ in asked if path == PAGE_PROFILE]) == 2
    for name, answer in answers.items():
        line = next(x for x in result.stderr.splitlines() if x.startswith(f"harvest: {name}: not_found"))
        assert f"message: {answer['message']}; account_status: {answer['account_status']}" in line, line
    assert "NULL primary key" not in result.output, result.output
    db = tmp_path / "out" / "harvest.duckdb"
    errors = dict(rows(db, "SELECT query_id, error FROM query_state WHERE status = 'not_found'"))
    assert errors == {
        name: f"the service answered: message: {a['message']}; account_status: {a['account_status']}"
        for name, a in answers.items()
    }
    assert not list((tmp_path / "out" / "parquet").glob("network_a_profiles/**/*.parquet"))


def test_a_profile_that_lost_its_key_beside_its_videos_is_drift_not_a_silent_complete(
    prefect_harness: None, api_key: str, tmp_path: Path
) -> None:
    """The streaming profile's published answer without its top-level `id`, served over HTTP to two handles.
    Its videos and broadcasts still came, so the service found the streamer: the profile lost its key. It was
    counted as the service's "not found", but only a page that kept nothing is that: each query ended
    `complete`, exit 0, `records_without_key` 0, and `streaming_profiles` was never made. Now each ends
    `drift` (exit 1), the profile counted without its key and named in the message, the videos landed."""
    answer = sample("_v1_streaming_profile.json")
    del answer["id"]
    videos = {video["id"] for video in answer["allVideos"]}
    with sample_service({STREAM_PROFILE: lambda params: answer}) as (url, asked):
        query = {"id": "prof", "endpoint": STREAM_PROFILE, "for_each": {"handle": ["a", "b"]}}
        spec = write_spec(tmp_path, job_spec(url, tmp_path / "out", [query], name="prof", credits=20))
        result = runner.invoke(app, ["run", str(spec)], env={"COLUMNS": "2000"})
    assert result.exit_code == 1, result.output
    assert [path for path, _ in asked].count(STREAM_PROFILE) == 2
    for handle in ("a", "b"):
        line = next(
            x for x in result.stderr.splitlines() if x.startswith(f"harvest: prof[handle={handle}]: ")
        )
        assert line.startswith(f"harvest: prof[handle={handle}]: drift"), line
    assert "streaming_profiles: 1 record(s) without their primary key (id)" in result.output, result.output
    db = tmp_path / "out" / "harvest.duckdb"
    states = rows(db, "SELECT status, records_without_key, items_seen, records FROM query_state ORDER BY 1")
    seen = 1 + len(answer["allVideos"]) + len(answer["recentBroadcasts"])
    assert states == [("drift", 1, seen, seen - 1)] * 2, states
    assert {v for (v,) in rows(db, "SELECT id FROM streaming_videos")} == videos


def test_alt_text_moves_past_a_null_the_published_pin_and_board_send(
    prefect_harness: None, api_key: str, tmp_path: Path
) -> None:
    """The pinboard pin's and board's published answers, served over HTTP. Their first alt text field is null
    (`altText`, `alt_text`) and a later one holds the text (`autoAltText`, `seo_alt_text`): `a|b` moved on only
    when `a` was absent, so `alt_text` ("the pinner's, else the platform's") landed NULL with the text in
    `raw`. A null moves on too now, to the first alternative with a value."""
    pin, board = sample("_v1_pinboard_pin.json"), sample("_v1_pinboard_board.json")
    assert pin["altText"] is None and board["pins"][0]["alt_text"] is None  # what the samples send
    with sample_service({PIN: lambda params: pin, BOARD: lambda params: board}) as (url, _asked):
        queries = [
            {"id": "pin", "endpoint": PIN, "params": {"url": "https://pinboard.example/pin/1/"}},
            {
                "id": "board",
                "endpoint": BOARD,
                "params": {"url": "https://pinboard.example/b/"},
                "max_pages": 1,
            },
        ]
        spec = write_spec(tmp_path, job_spec(url, tmp_path / "out", queries, name="alt", credits=20))
        result = runner.invoke(app, ["run", str(spec)])
    assert result.exit_code == 0, result.output
    db = tmp_path / "out" / "harvest.duckdb"
    assert rows(db, "SELECT alt_text FROM pinboard_pin_details") == [(pin["autoAltText"],)]
    texts = {p["id"]: p["seo_alt_text"] for p in board["pins"] if p.get("type") == "pin"}
    assert texts and all(texts.values()), texts
    assert dict(rows(db, "SELECT id, alt_text FROM pinboard_board_pins")) == texts


ASKED_TWICE = {
    # endpoint: (its published answer, where its items are, their id, the table, the column of what was asked)
    KEYWORD_SEARCH: ("_v1_short-video_search_keyword.json", "search_item_list", "aweme_info.aweme_id",
                     "short_video_keyword_videos", "search_query", "aweme_id"),
    PINS: ("_v1_pinboard_search.json", "pins", "id", "pinboard_pins", "search_query", "id"),
    VIDEO_SEARCH: ("_v1_video-platform_search.json", "videos", "id", "video_platform_videos", "search_query", "id"),
    FOLLOWERS: ("_v1_short-video_user_followers.json", "followers", "uid", "short_video_followers",
                "followed_user", "uid"),
}  # fmt: skip


@pytest.mark.parametrize(
    ("endpoint", "param"),
    [(KEYWORD_SEARCH, "query"), (PINS, "query"), (VIDEO_SEARCH, "query"), (FOLLOWERS, "handle"),
     (FOLLOWERS, "user_id")],
)  # fmt: skip
def test_an_item_two_fanned_out_requests_return_belongs_to_each(
    prefect_harness: None, api_key: str, tmp_path: Path, endpoint: str, param: str
) -> None:
    """The service's published answer, served over HTTP to a fan-out over two values (two searches, two
    accounts' followers): the same item is a result of both. Keyed on the item alone, it landed once, with the
    newest request's value, and "which videos rank for cat" or "who follows brand a" lost it; keyed by what was
    asked, each keeps it (a follower list asked by handle or by id alike)."""
    name, at, item_id, table, asked, column = ASKED_TWICE[endpoint]
    answer = sample(name)
    ids = {str(compile_path(item_id)(item)) for item in answer[at]}
    with sample_service({endpoint: lambda params: answer}) as (url, _asked):
        query = {"id": "asked", "endpoint": endpoint, "for_each": {param: ["a1", "b2"]}, "max_pages": 1}
        spec = write_spec(tmp_path, job_spec(url, tmp_path / "out", [query], name="asked", credits=20))
        result = runner.invoke(app, ["run", str(spec)])
    assert result.exit_code == 0, result.output
    landed = rows(tmp_path / "out" / "harvest.duckdb", f"SELECT {asked}, {column} FROM {table}")
    assert sorted(landed) == sorted((v, i) for v in ("a1", "b2") for i in ids) and ids, landed
