"""A declared endpoint served by the sandbox with no code of its own, over real HTTP on 127.0.0.1: each paging
style pages to its end with that style's traps on, records carry every declared column at its path with a value
of its type, keys are unique within a result set and the same from two sandboxes of one seed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from harvest.connectors.catalog import job_catalog
from harvest.connectors.paging.pager import OK_STATUSES
from harvest.sandbox.config import Drift, SandboxConfig
from harvest.sandbox.emulation.endpoint_table import BY_PATH
from harvest.sandbox.expected import expected_pages, full_crawl
from harvest.sandbox.wire.serving import RunningSandbox, running
from tests.crawl_helpers import run_query
from tests.declared_helpers import COLUMNS, MISSING, column_path, declaration, dig, fits, http_pages, records
from tests.declaring_helpers import request_of

PATH = "/v1/example-platform/things"
PARAMS = {"q": "lanterns"}

STYLES: list[tuple[str, dict[str, Any], str]] = [
    ("cursor", {"next": {"cursor": "cursor"}, "end_values": ["-end-"]}, "sentinel"),
    ("cursor", {"next": {"cursor": "cursor"}, "more": "has_more"}, "dangling"),
    ("cursor", {"next": {"cursor": "cursor"}, "end_values": []}, "null"),
    ("continuation_token", {"next": {"continuationToken": "continuationToken"}}, "null"),
    ("envelope_cursor", {"next": {"cursor": "metadata.cursor"}}, "null"),
    ("page_id_and_cursor", {"next": {"next_page_id": "next_page_id", "cursor": "cursor"}}, "half"),
    ("max_id", {"next": {"max_id": "paging_info.max_id"}, "more": "paging_info.more_available"}, "dangling"),
    ("max_id", {"next": {"max_id": "max_id"}, "more": []}, "kept"),
    ("max_cursor", {"next": {"max_cursor": "max_cursor"}, "more": "has_more"}, "dangling"),
    ("max_cursor", {"next": {"max_cursor": "max_cursor"}, "more": []}, "kept"),
]
"""(style, paging, how its last page ends): as the sandbox's built-in endpoints of the style end theirs."""


def _config(decl: dict[str, Any], **overrides: Any) -> SandboxConfig:
    options: dict[str, Any] = {"api_keys": {"k": 10_000}, "pages": (3, 3), "page_size": 4, "seed": 7}
    return SandboxConfig(declared={PATH: decl}, **{**options, **overrides})


def _cursor(body: Any, paging: dict[str, Any]) -> Any:
    return {p: dig(body, where) for p, where in paging["next"].items()}


def _check_trap(sb: RunningSandbox, decl: dict[str, Any], bodies: list[Any], end: str) -> None:
    paging, kind = decl["paging"], decl["records"]["things"]
    last, cursor = bodies[-1], _cursor(bodies[-1], paging)
    if end == "sentinel":  # the last page of records carried a cursor: the page it names holds only `-end-`
        assert records(bodies[-2], kind) and cursor == {"cursor": "-end-"} and "items" not in last
    elif end == "null":
        assert records(last, kind) and set(cursor.values()) == {None}
    elif end == "kept":  # the last page of records keeps its cursor; it names an empty page without one
        assert records(bodies[-2], kind) and all(_cursor(bodies[-2], paging).values())
        assert records(last, kind) == [] and not any(cursor.values())
    elif end == "dangling":  # the flag says no more while the cursor is still there; following it is billed
        assert records(last, kind) and not dig(last, paging["more"]) and all(cursor.values())
        with sb.client() as client:
            behind = client.get(PATH, params={**PARAMS, **{p: str(v) for p, v in cursor.items()}})
        assert behind.status_code == 200 and behind.json()["credits_charged"] == 1
        assert records(behind.json(), kind) == [] and not any(_cursor(behind.json(), paging).values())
    else:  # half: the last page keeps `cursor` without `next_page_id`; sent alone it is refused, unbilled
        assert cursor["next_page_id"] is None and cursor["cursor"]
        before = sb.balance()
        with sb.client() as client:
            alone = client.get(PATH, params={**PARAMS, "cursor": cursor["cursor"]})
        assert alone.status_code == 400 and alone.json()["parameter"] == "next_page_id"
        assert sb.balance() == before


def _check_records(decl: dict[str, Any], bodies: list[Any]) -> dict[str, dict[str, Any]]:
    """Every record carries every declared column at its path, of its type; key -> record, with a record seen
    twice (the last of a page repeated at the top of the next) the same both times."""
    kind, by_key = decl["records"]["things"], {}
    for body in bodies:
        for record in records(body, kind):
            for name, spec in COLUMNS.items():
                kind_of, path = column_path(spec, name)
                if not path.startswith("$params."):
                    assert fits(kind_of, dig(record, path)), (name, path, dig(record, path))
            assert by_key.setdefault(record["id"], record) == record
    return by_key


@pytest.mark.scenario
@pytest.mark.parametrize(("style", "paging", "end"), STYLES, ids=[f"{s}-{e}" for s, _, e in STYLES])
def test_a_declared_endpoint_pages_to_its_end_in_its_style_with_its_traps(
    sandbox_factory: Callable[..., RunningSandbox], style: str, paging: dict[str, Any], end: str
) -> None:
    decl = declaration(style, **paging)
    sb = sandbox_factory(_config(decl))
    with sb.client() as client:
        bodies = http_pages(client, PATH, decl, PARAMS)
    assert len(bodies) == expected_pages(PATH, PARAMS, sb.config) >= 3
    assert [e.credits for e in sb.ledger] == [1] * len(bodies)
    assert all(b["success"] is True and b["credits_charged"] == 1 for b in bodies)
    _check_trap(sb, decl, bodies, end)
    by_key = _check_records(decl, bodies)
    assert (
        len(by_key) == len(full_crawl(PATH, PARAMS, sb.config)["things"]) >= 9
    )  # 3 pages of 4, the last 1-4
    # not newest first: the last record of a page comes again at the top of the next (keys stay unique)
    pages = [records(b, decl["records"]["things"]) for b in bodies]
    assert pages[1][0] == pages[0][-1]
    # the same seed serves the same records from another sandbox; another seed, other keys
    with sandbox_factory(_config(decl)).client() as client:
        assert http_pages(client, PATH, decl, PARAMS) == _without_balances(bodies)
    with sandbox_factory(_config(decl, seed=8)).client() as client:
        other = _check_records(decl, http_pages(client, PATH, decl, PARAMS))
    assert not set(other) & set(by_key)


def _without_balances(bodies: list[Any]) -> list[Any]:
    """The bodies as another sandbox with the same balance sends them (only `credits_remaining` moves)."""
    return [{**b, "credits_remaining": 10_000 - n - 1} for n, b in enumerate(bodies)]


def test_records_are_placed_deep_wrapped_and_one_object_at_the_answer_itself(
    sandbox_factory: Callable[..., RunningSandbox],
) -> None:
    """`at` with a mapped list (`data.edges[].node`), records wrapped as `unwrap` declares, and a detail endpoint
    whose record is the answer itself (`at: ""`, `one: true`), with two path parameters (one checked as declared)."""
    wrapped = declaration("cursor", records_at="data.edges[].node", next={"cursor": "data.page.next"})
    wrapped["records"]["things"]["unwrap"] = {"key": "post", "extras": {"reason": "text"}}
    detail = {
        "params": {"thing_id": {"type": "string", "pattern": "^t[0-9]+$", "in": "path"}},
        "records": {"thing_details": {"at": "", "one": True, "key": "item_id", "columns": COLUMNS}},
    }
    sb = sandbox_factory(
        SandboxConfig(
            pages=(2, 2),
            page_size=3,
            declared={PATH: wrapped, "/v1/example-platform/{owner}/thing/{thing_id}": detail},
        )
    )
    with sb.client() as client:
        bodies = http_pages(client, PATH, wrapped, PARAMS)
        one = client.get("/v1/example-platform/ann/thing/t42")
        refused = client.get("/v1/example-platform/ann/thing/x42")
    edges = [edge for body in bodies for edge in body["data"]["edges"]]
    assert len(bodies) == 3 and bodies[-1]["data"] == {
        "page": {"next": "-end-"},
        "edges": [],
    }  # the sentinel page
    assert edges and all(set(e["node"]) == {"post", "reason"} for e in edges)
    assert _check_records(wrapped, bodies) and all(fits("text", e["node"]["reason"]) for e in edges)
    assert one.status_code == 200 and _check_records(
        {"records": {"things": detail["records"]["thing_details"]}}, [one.json()]
    )
    assert refused.status_code == 400 and refused.json()["parameter"] == "thing_id"
    assert sb.ledger[-2].path_params == {"owner": "ann", "thing_id": "t42"} and sb.ledger[-1].credits == 0


def test_a_newest_first_declared_endpoint_shows_items_published_since_at_its_front(
    sandbox_factory: Callable[..., RunningSandbox],
) -> None:
    """`newest_first`: a night later (`new_items`) two newer records lead the first page, every earlier record
    keeps its key and values, and nothing repeats across pages (the repeat quirk is the searches')."""
    decl = declaration("cursor", next={"cursor": "cursor"}, newest_first=True)
    decl["newest_first"] = True
    before = full_crawl(PATH, PARAMS, _config(decl))["things"]
    sb = sandbox_factory(_config(decl, new_items=2))
    with sb.client() as client:
        bodies = http_pages(client, PATH, decl, PARAMS)
    after = [r for b in bodies for r in records(b, decl["records"]["things"])]
    assert after[2:] == before and len({r["id"] for r in after}) == len(after) == len(before) + 2
    times = [r["publishedAt"] for r in after]
    assert times == sorted(times, reverse=True)


def test_the_records_per_page_parameter_sets_the_page_size(
    sandbox_factory: Callable[..., RunningSandbox],
) -> None:
    decl = declaration("cursor", next={"cursor": "cursor"})
    decl["params"]["limit"] = {"type": "integer", "min": 1, "max": 50, "default": 6}
    decl["records_per_page"] = "limit"
    sb = sandbox_factory(SandboxConfig(pages=(2, 2), declared={PATH: decl}))
    with sb.client() as client:
        six = client.get(PATH, params=PARAMS).json()
        nine = client.get(PATH, params={**PARAMS, "limit": "9"}).json()
    assert len(six["items"]) == 6 and len(nine["items"]) == 9
    assert dig(six, "cursor") is not MISSING


def test_records_that_are_the_answer_itself_come_as_a_bare_list(
    sandbox_factory: Callable[..., RunningSandbox],
) -> None:
    """`at: ""` without `one`: the answer is a JSON array of records, with no envelope (as the clip endpoint's
    answer has none), billed; its "not found" an empty array."""
    decl = declaration("single", records_at="")
    sb = sandbox_factory(SandboxConfig(api_keys={"k": 10}, declared={PATH: decl}))
    with sb.client() as client:
        found = client.get(PATH, params=PARAMS).json()
        missing = client.get(PATH, params={"q": "missing lanterns"}).json()
    assert isinstance(found, list) and found and _check_records(decl, [found])
    assert missing == [] and [e.credits for e in sb.ledger] == [1, 1]


def test_a_stuck_cursor_comes_back_wherever_the_declaration_puts_it(
    sandbox_factory: Callable[..., RunningSandbox],
) -> None:
    """The `stuck_cursor` drift on a declared path: pages after the first hand back the cursor they were asked
    with, here a token inside an object (`paging_info.max_id`), as a repeated cursor a client must notice."""
    decl = declaration("max_id", next={"max_id": "paging_info.max_id"}, more="paging_info.more_available")
    sb = sandbox_factory(_config(decl, drift=Drift(stuck_cursor=frozenset({PATH}))))
    with sb.client() as client:
        first = client.get(PATH, params=PARAMS).json()
        asked = first["paging_info"]["max_id"]
        second = client.get(PATH, params={**PARAMS, "max_id": asked}).json()
    assert asked and second["paging_info"]["max_id"] == asked and second["items"]


# ------------------------------------------------------------------------------------ harvest's catalog
GENERIC = sorted(set(job_catalog.builtin().endpoints) - set(BY_PATH))
"""The catalog's endpoints the sandbox has no emulation of: served from their declarations alone."""


@pytest.fixture(scope="module")
def catalog_sandbox() -> Iterator[RunningSandbox]:
    """One sandbox serving harvest's catalog, as the sandbox harvest starts does."""
    config = SandboxConfig(catalog=job_catalog.builtin_declarations(), pages=(2, 2), page_size=3, seed=7)
    with running(config) as sb:
        yield sb


@pytest.mark.parametrize("path", GENERIC)
def test_the_sandbox_serves_each_catalog_endpoint_as_harvest_reads_it(
    path: str, catalog_sandbox: RunningSandbox
) -> None:
    """Each endpoint of the catalog the sandbox does not emulate is paged by harvest's own pager from the
    sandbox's answers: records land with every column the declaration reads, nothing lost, nothing misfit, no
    field the declaration does not know."""
    endpoint = job_catalog.builtin().get(path)
    params = request_of(path)
    run = asyncio.run(run_query(catalog_sandbox, endpoint, params, max_pages=2))
    outcome = run.outcome
    assert outcome.status in OK_STATUSES, outcome.error
    report = outcome.extraction
    assert outcome.records > 0 and not report.lost and report.misfits == 0
    assert not report.new_fields and not report.empty_columns, report.as_dict()
    tables = [table for page in run.pages for table in page.tables.items() if table[1].num_rows]
    empty = {(name, column) for name, table in tables for column in table.column_names}
    empty -= {
        (name, column)
        for name, table in tables
        for column in table.column_names
        if table[column].null_count < table.num_rows
    }
    unasked = {  # a column of a request value the query did not set
        (kind.table, f.name)
        for kind in endpoint.landed_kinds
        for f in kind.columns
        if f.path.startswith("$params.") and f.path.removeprefix("$params.") not in params
    }
    assert empty - unasked == set(), "columns no record of the sandbox's fills"


THREAD = "/v1/example-forum/post/comments"


async def test_a_thread_declared_as_the_service_answers_it_pages_whole_through_harvest(
    sandbox_factory: Callable[..., RunningSandbox],
) -> None:
    """The post on the first page only, replies nested to any depth, an item of another kind among the comments
    on every page: served from the declaration alone, paged by harvest to its end without drift, every record
    once, each reply knowing the comment it answers, the other items counted."""
    from harvest.connectors.catalog.declarations import EndpointDecl, plain
    from harvest.connectors.catalog.endpoint_build import build_endpoint
    from tests.crawl_helpers import run_query

    comment = {"id": "text", "body": "text", "replied_to": {"type": "text", "path": "$parent.id"}}
    declaration = plain(THREAD, EndpointDecl.model_validate({
        "params": {"url": {"type": "string", "required": True}},
        "paging": {"style": "cursor", "next": {"cursor": "more.cursor"}, "more": "more.has_more"},
        "records": {
            "forum_post_details": {"at": "post", "one": True, "first_page_only": True, "key": "id",
                                   "columns": {"id": "text", "title": "text"}},
            "forum_post_comments": {"at": "comments", "nested": "replies.items", "key": "id",
                                    "where": {"kind": "t1"}, "columns": comment},
        },
    }))  # fmt: skip
    config = SandboxConfig(
        declared={THREAD: declaration}, api_keys={"k" * 20: 10_000}, pages=(3, 3), page_size=2
    )
    sb = sandbox_factory(config)
    run = await run_query(sb, build_endpoint(THREAD, declaration), {"url": "https://forum.example/t/1"})
    assert (run.outcome.status, run.outcome.error, run.outcome.extraction.lost) == ("complete", None, 0)
    expected = full_crawl(THREAD, {"url": "https://forum.example/t/1"}, config)
    posts = [page.records["forum_post_details"] for page in run.pages]
    assert [len(p) for p in posts] == [1, 0, 0] and posts[0][0]["id"] == expected["forum_post_details"][0][
        "id"
    ]
    rows = [row for page in run.pages for row in page.tables["forum_post_comments"].to_pylist()]
    assert {r["id"] for r in rows} == {c["id"] for c in expected["forum_post_comments"]}
    by_id = {r["id"]: r for r in rows}
    depths = [len(list(_ancestors(by_id, r))) for r in rows]
    assert max(depths) >= 2 and all(r["replied_to"] is None or r["replied_to"] in by_id for r in rows)
    assert (
        run.outcome.extraction.tables["forum_post_comments"].dropped == 3
    )  # one item of another kind a page


def _ancestors(by_id: dict[str, Any], row: dict[str, Any]) -> Any:
    while row["replied_to"] is not None:
        row = by_id[row["replied_to"]]
        yield row
