"""Nothing lost, nothing silent, for the shapes a naive reader lets slip through: values no naive conversion survives,
a renamed secondary list, a list turned object or null, empty keys, and errors nobody foresaw.

Each test runs the real flow over HTTP against a sandbox serving the changed shape, and checks what a user
would: exit code, the one message, rows, `query_state` counts, the raw pages and `requests`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from typer.testing import CliRunner

import harvest.flows.collect  # noqa: F401  (Prefect binds its log handlers on first import: not inside CliRunner)
from harvest.connectors.catalog import endpoints as catalog
from harvest.connectors.catalog.fields import coercer, integer, number, text, timestamp
from harvest.connectors.paging import pager
from harvest.connectors.reading import extraction
from harvest.flows.cli import app
from harvest.sandbox.config import Drift, SandboxConfig
from harvest.sandbox.drift_shapes import SHAPES, combine
from harvest.sandbox.emulation.variation import ODD_COUNT, ODD_TIMESTAMPS
from harvest.sandbox.expected import crawl, full_crawl
from harvest.sandbox.wire.serving import running
from harvest.tasks import landing as collect
from tests.crawl_helpers import data_entries
from tests.endpoints import FEED, FORUM, PINS, VIDEO_SEARCH
from tests.flow_helpers import (
    BIG_BALANCE,
    SECRET_KEY,
    one_query,
    query_pages,
    rows,
    run_flow,
    scalar,
    table_counts,
)

FEED_PARAMS = {"handle": "nasa.example"}
runner = CliRunner()


pytestmark = pytest.mark.usefixtures("api_key")  # harvest's key in the environment (conftest)


def sandbox(drift: Drift, pages: int = 3, size: int = 5) -> SandboxConfig:
    return SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages=(pages, pages), page_size=size, drift=drift
    )


def raw_pages(tmp_path: Path, query: str = "q") -> list[Any]:
    return query_pages(tmp_path / "out", query)


def changed_shape(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "changed shape" in line]


ODD_TEXT = st.one_of(
    st.text(st.characters(categories=("Nd", "No"))),  # digits to `str.isdigit`: "²", "٣", ...
    st.text("0123456789", min_size=4290, max_size=4400),  # around Python's 4300-digit limit
    st.text("0123456789,.", min_size=4290, max_size=4400),
)


@given(st.one_of(ODD_TEXT, st.text(), st.integers(), st.floats(), st.booleans(), st.none()))
@example("\u00b2")  # a digit to `str.isdigit`, not to `int` (the audit's `indexedAt: "²"`)
@example("1" * 5000)  # beyond the 4300 digits Python converts
@example("1.5" + "0" * 5000)
@example(2**64 - 1)
def test_no_value_makes_a_conversion_raise(value: Any) -> None:
    for fld in (integer("i"), number("n"), timestamp("t"), text("s")):
        coercer(fld)(value)  # a value that does not fit is None, never an exception


POST, COMMENT = {"id": "p1", "title": "t"}, {"id": "c1", "body": "b"}


@pytest.mark.parametrize(
    ("body", "lost"),
    [
        ({"posts": [POST], "media": []}, []),  # no comments on this page: left out, not lost
        (
            {"posts": [POST], "comments": None, "media": [], "tags": ["a", "b"]},
            [],
        ),  # plain values are no records
        ({"posts": [POST], "media": [], "replies": [COMMENT]}, ["forum_comments: comments"]),
        ({"posts": [POST], "comments": {"c1": COMMENT}, "media": []}, ["forum_comments: comments"]),
        ({"posts": {"p1": POST}, "comments": [COMMENT], "media": []}, ["forum_posts: posts"]),
        ({"posts": None, "items": [POST], "comments": [], "media": []}, ["forum_posts: posts"]),
        ({"posts": None, "cursor": None}, []),  # nothing anywhere: an empty answer, not drift
    ],
)
def test_which_missing_list_is_drift(body: dict[str, Any], lost: list[str]) -> None:
    report = extraction.convert_page(catalog.get(FORUM).kinds, body, {}).report
    assert list(report.missing_lists) == lost and bool(report.lost) == bool(lost)


def test_a_timestamp_beyond_64_bits_is_a_misfit_on_every_row() -> None:
    body = {"feed": [{"uri": f"at://p/{n}", "indexedAt": 2**64 - 1} for n in range(3)]}
    page = extraction.convert_page(catalog.get(FEED).kinds, body, {})
    table = page.report.tables["microblog_b_posts"]
    assert (table.kept, table.misfits) == (3, {"indexed_at": 3}) and not page.report.lost
    assert page.tables["microblog_b_posts"].column("indexed_at").null_count == 3


def test_values_no_naive_conversion_survives_are_null_counted_and_kept(
    prefect_harness: None, tmp_path: Path
) -> None:
    config = sandbox(Drift(odd_values=1.0), pages=2, size=4)
    with running(config) as sb:
        result = runner.invoke(app, ["run", str(one_query(tmp_path, sb.base_url, FEED, FEED_PARAMS))])
    assert result.exit_code == 0, result.output
    db = tmp_path / "out" / "harvest.duckdb"
    posts = full_crawl(FEED, FEED_PARAMS, config)["posts"]
    assert sorted(r[0] for r in rows(db, "SELECT uri FROM microblog_b_posts")) == sorted(
        p["uri"] for p in posts
    )
    assert scalar(db, "SELECT count(*) FROM microblog_b_posts WHERE indexed_at IS NOT NULL") == 0
    assert scalar(db, "SELECT count(*) FROM microblog_b_posts WHERE like_count IS NOT NULL") == 0
    sent = [orjson.loads(r[0]) for r in rows(db, "SELECT raw FROM microblog_b_posts")]
    assert {p["indexedAt"] for p in sent} == set(ODD_TIMESTAMPS) and {p["likeCount"] for p in sent} == {
        ODD_COUNT
    }
    odd = sum(
        v == ODD_COUNT or v in ODD_TIMESTAMPS for p in sent for v in p.values() if not isinstance(v, dict)
    )
    assert rows(db, "SELECT status, values_misfit, records_without_key FROM query_state") == [
        ("complete", odd, 0)
    ]
    assert len(raw_pages(tmp_path)) == 2 == scalar(db, "SELECT count(*) FROM requests")
    assert "did not fit their column" in result.stderr and "Traceback" not in result.output


def _break_second_call(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> None:
    """The second call breaks; `to_arrow`'s calls for a child table's items are not counted: the second
    call is the second page's."""
    real, calls = getattr(module, name), []

    def breaks(*args: Any, **kwargs: Any) -> Any:
        if name == "to_arrow" and kwargs.get("raw") is False:
            return real(*args, **kwargs)
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("a case nobody foresaw")
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, breaks)


@pytest.mark.scenario
@pytest.mark.parametrize(
    ("module", "name"), [(extraction, "to_arrow"), (pager, "convert_page"), (collect, "land_tables")]
)
def test_an_unforeseen_error_keeps_the_paid_page_and_nothing_is_paid_twice(
    prefect_harness: None, tmp_path: Path, module: Any, name: str
) -> None:
    """Reading (or landing) page 2 raises: the query stops there as drift with page 2 kept and its attempt in
    `requests`; `--continue` pays for page 3 only, and `harvest rebuild` lands page 2."""
    config = sandbox(Drift())
    spec = one_query(tmp_path, "http://127.0.0.1:9", FEED, FEED_PARAMS)
    db = tmp_path / "out" / "harvest.duckdb"
    with running(config) as sb:
        with pytest.MonkeyPatch.context() as patch:
            _break_second_call(patch, module, name)
            first = run_flow(spec, base_url=sb.base_url)
        (query,) = first.queries
        assert (query["status"], query["pages"], first.status) == ("drift", 2, "failed")
        assert "a case nobody foresaw" in query["error"] and "raw store" in query["error"]
        assert len(raw_pages(tmp_path)) == 2 == scalar(db, "SELECT count(*) FROM requests")
        second = run_flow(spec, base_url=sb.base_url, mode="continue")
        assert second.status == "complete" and second.credits_spent == 1
        cursors = [orjson.dumps(e.params) for e in data_entries(sb)]
        assert len(cursors) == 3 == len(set(cursors)) == sb.billed_total(), "a page was paid twice"
    assert runner.invoke(app, ["rebuild", str(tmp_path / "out")]).exit_code == 0
    posts = full_crawl(FEED, FEED_PARAMS, config)["posts"]
    assert sorted(r[0] for r in rows(db, "SELECT uri FROM microblog_b_posts")) == sorted(
        p["uri"] for p in posts
    )


def test_a_renamed_secondary_list_is_drift_said_once_per_query(prefect_harness: None, tmp_path: Path) -> None:
    config = sandbox(SHAPES["renamed-secondary"].drift)
    videos = {"id": "videos", "endpoint": VIDEO_SEARCH, "params": {"query": "marathon"}}
    with running(config) as sb:
        spec = one_query(tmp_path, sb.base_url, FORUM, {"subreddit": "running", "sort": "top"}, videos)
        result = runner.invoke(app, ["run", str(spec)])
        paid = len(data_entries(sb))
    assert result.exit_code == 1, result.output
    assert paid == 2, "each query stopped after the first page it could not read whole"
    db = tmp_path / "out" / "harvest.duckdb"
    assert rows(db, "SELECT query_id, status, lists_missing FROM query_state ORDER BY 1") == [
        ("q", "drift", 1),
        ("videos", "drift", 1),
    ]
    forum, video = sorted(changed_shape(result.stderr))
    for line, table, where, now in (
        (forum, "forum_comments", "comments", "replies"),
        (video, "video_platform_channels", "channels", "channel_results"),
    ):
        for part in (table, f"{table}: {where}", f"`{now}` holds", '"id"', "raw store", "harvest rebuild"):
            assert part in line, (part, line)
    assert FORUM in forum and VIDEO_SEARCH in video
    landed = table_counts(db)
    assert landed.get("forum_comments", 0) == 0 < landed["forum_posts"]
    assert b'"replies"' in raw_pages(tmp_path)[0].body


@pytest.mark.scenario
def test_lists_the_service_leaves_out_stay_quiet(prefect_harness: None, tmp_path: Path) -> None:
    config = sandbox(SHAPES["omitted-lists"].drift)
    forum_params = {"subreddit": "running", "sort": "hot"}  # the page ending the search sends no lists
    video_params = {"query": "marathon"}
    served = [
        set(p.body) for q in ((FORUM, forum_params), (VIDEO_SEARCH, video_params)) for p in crawl(*q, config)
    ]
    assert any("comments" not in keys for keys in served) and any("lives" not in keys for keys in served)
    videos = {"id": "videos", "endpoint": VIDEO_SEARCH, "params": video_params}
    with running(config) as sb:
        result = runner.invoke(
            app, ["run", str(one_query(tmp_path, sb.base_url, FORUM, forum_params, videos))]
        )
    assert result.exit_code == 0, result.output
    assert not changed_shape(result.stderr)
    db = tmp_path / "out" / "harvest.duckdb"
    assert rows(db, "SELECT status, lists_missing FROM query_state") == [("complete", 0)] * 2
    landed = table_counts(db)
    for path, params, prefix in (
        (FORUM, forum_params, "forum_"),
        (VIDEO_SEARCH, video_params, "video_platform_"),
    ):
        for kind, records in full_crawl(path, params, config).items():
            table = kind if kind.startswith(prefix) else prefix + kind  # a declared kind is its table
            assert landed.get(table, 0) == len(records), kind


@pytest.mark.parametrize(("shape", "why"), [("keyed-list", "an object, not a list"), ("null-list", "null")])
def test_a_list_turned_object_or_null_is_drift(
    prefect_harness: None, tmp_path: Path, shape: str, why: str
) -> None:
    with running(sandbox(SHAPES[shape].drift)) as sb:
        result = runner.invoke(app, ["run", str(one_query(tmp_path, sb.base_url, FEED, FEED_PARAMS))])
        paid = len(data_entries(sb))
    assert result.exit_code == 1, result.output
    assert paid == 1
    (message,) = changed_shape(result.stderr)
    for part in (FEED, "microblog_b_posts: feed or post", f"({why}", '"uri":"at://', "raw store"):
        assert part in message, part
    db = tmp_path / "out" / "harvest.duckdb"
    assert rows(db, "SELECT status, lists_missing, records FROM query_state") == [("drift", 1, 0)]
    assert len(raw_pages(tmp_path)) == 1 == scalar(db, "SELECT count(*) FROM requests")


def test_empty_keys_are_records_without_key_and_progress_counts_what_was_kept(
    prefect_harness: None, tmp_path: Path
) -> None:
    with running(sandbox(SHAPES["empty-keys"].drift, size=10)) as sb:
        result = runner.invoke(app, ["run", str(one_query(tmp_path, sb.base_url, PINS, {"query": "lamps"}))])
    assert result.exit_code == 1, result.output
    db = tmp_path / "out" / "harvest.duckdb"
    status, without, seen, kept = rows(
        db, "SELECT status, records_without_key, items_seen, records FROM query_state"
    )[0]
    assert status == "drift" and without > 0 and kept == seen - without
    assert scalar(db, "SELECT count(*) FROM pinboard_pins") == kept
    assert scalar(db, "SELECT count(*) FROM pinboard_pins WHERE id = ''") == 0
    (message,) = changed_shape(result.stderr)
    assert (
        "without their primary key (search_query, id) or with an empty one" in message
        and '"id":""' in message
    )
    assert f"harvest: q: drift, 1 page, {kept} records" in result.stderr
    assert f"records: {kept};" in result.stdout.replace("\n", " ")


def test_a_query_that_drifted_on_its_last_page_is_not_paid_again(
    prefect_harness: None, tmp_path: Path
) -> None:
    """Its pages are all paid and kept: `--continue` has nothing to ask for (`harvest rebuild` lands them). Its
    one page of pins is the last: it carries the sentinel that ends pin search."""
    with running(sandbox(combine(["missing-keys", "sentinel-with-pins"]), pages=1, size=10)) as sb:
        spec = str(one_query(tmp_path, sb.base_url, PINS, {"query": "lamps"}))
        assert runner.invoke(app, ["run", spec]).exit_code == 1
        again = runner.invoke(app, ["run", spec, "--continue"])
        paid = len(data_entries(sb))
    assert again.exit_code == 0, again.output
    assert paid == 1
