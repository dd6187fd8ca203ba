"""The table of the endpoints the sandbox emulates with code of their own: one entry per path holds all that is particular to it.

Parameters, enums, record kinds and primary keys are taken from the service's interface as
`docs/service-shapes.md` records it; each entry also names the builder of its pages and its "not found" answer, so the
serving code (`sandbox.emulation.generate`, `sandbox.emulation.triggers`, `sandbox.emulation.variation`, `sandbox.wire.asgi_app`) is the same for every
path. `tests/test_sandbox_matches_catalog.py` holds this table to harvest's catalog (`connectors.catalog.endpoints`).

Adding an endpoint: write its record generators (`sandbox.emulation.platforms.<platform>`) and its builder (`sandbox.emulation.paged`
for paged answers, `sandbox.emulation.single` for one-page ones, or reuse one), then add its entry here.
"""

from __future__ import annotations

from typing import Any

from harvest.sandbox.emulation import creative, paged, single
from harvest.sandbox.emulation import cursor_values as cursors
from harvest.sandbox.emulation.emulated import (
    EmulatedEndpoint,
    EndpointTable,
    NewItems,
    NotFoundAnswer,
    QueryParam,
)
from harvest.sandbox.served_paths import (
    CLIP,
    CREATIVE_DETAIL,
    CREATIVE_SEARCH,
    MB_FEED,
    MB_POST,
    PINS,
    PROFILE_VIDEOS,
    REELS,
    REPLIES,
    VIDEO_SEARCH,
)
from harvest.sandbox.wire.validation import RequestParams

CREATIVE_ORDERS = ("relevance", "latest", "oldest")
UPLOAD_DATES = ("today", "this_week", "this_month", "this_year")
VIDEO_SORTS = ("relevance", "popular")
VIDEO_FILTERS = ("shorts",)
"""`filter`, which `type` replaced: the service ignores it now (harvest warns a spec that sets it)."""
VIDEO_TYPES = ("videos", "shorts", "channels", "playlists")
VIDEO_DURATIONS = ("under_3_min", "between_3_and_20_min", "over_20_min")
PROFILE_SORTS = ("latest", "popular")
CACHE_AGES = ("1d", "3d", "7d", "14d", "30d")
"""`cache_max_age`: how old a cached answer may be (the sandbox answers afresh whatever it is)."""


def _subject(name: str, required: bool = False) -> QueryParam:
    return QueryParam(name, required=required, identity=True, subject=True)


def _enum(name: str, values: tuple[str, ...], default: str | None = None) -> QueryParam:
    return QueryParam(name, enum=values, identity=True, default=default)


def _account(body: dict[str, Any]) -> dict[str, Any]:
    """An account lookup's "not found": the empty answer, saying the account is deactivated."""
    return {**body, "account_deactivated": True}


def _video_search_effective(params: RequestParams) -> RequestParams:
    """`filter=shorts` has no effect when `uploadDate` or `sortBy` is used: drop it so that it changes
    nothing."""
    if params.get("filter") and (params.get("uploadDate") or params.get("sortBy") in VIDEO_SORTS):
        return params.with_values(filter=None)
    return params


def _replies_subjects(params: RequestParams) -> list[tuple[str, str]]:
    """Comment replies look up the thread of the root continuation token, whatever page is asked for."""
    root, _ = cursors.decode_replies(params.get("continuationToken") or "")
    return [("continuationToken", root)]


ENDPOINTS: tuple[EmulatedEndpoint, ...] = (
    EmulatedEndpoint(
        CREATIVE_SEARCH,
        (
            QueryParam("query", identity=True, subject=True),
            QueryParam("cursor"),
            QueryParam("limit", check="limit"),
            _enum("order", CREATIVE_ORDERS),
            QueryParam("language", identity=True),
            QueryParam("style_tags", check="multi", identity=True),
            QueryParam("cta_type_tags", check="multi", identity=True),
        ),
        kinds={"materials": "material_id"},
        builder=creative.search,
        not_found=NotFoundAnswer({"data": [], "metadata": {"cursor": None, "total": 0}}),
        search=True,
    ),
    EmulatedEndpoint(
        CREATIVE_DETAIL,
        (),
        kinds={"material_details": "material_id"},
        builder=creative.detail,  # answers an id that was never issued with its own 404
        paged=False,
    ),
    EmulatedEndpoint(
        CLIP,
        (_subject("url", required=True), QueryParam("cache_max_age", enum=CACHE_AGES)),
        kinds={"clips": "id", "broadcaster_clips": "id"},
        builder=single.clip,
        not_found=NotFoundAnswer(
            [{"data": {"clip": None}}, {"data": {"user": None}}, {"data": {"user": None}}], envelope=False
        ),
        paged=False,
    ),
    EmulatedEndpoint(
        MB_POST,
        (_subject("url", required=True),),
        kinds={"posts": "uri", "replies": "uri"},
        builder=single.thread,
        not_found=NotFoundAnswer({"post": None, "replies": []}),
        paged=False,
    ),
    EmulatedEndpoint(
        MB_FEED,
        (_subject("handle"), _subject("user_id"), QueryParam("cursor")),
        kinds={"posts": "uri"},
        builder=paged.feed,
        not_found=NotFoundAnswer(
            {"error": "not_found"}, status=404
        ),  # with `success: true`, as the service does
        one_of=("user_id", "handle"),
        new_items=NewItems(),
        feed_list="feed",
    ),
    EmulatedEndpoint(
        REELS,
        (_subject("user_id"), _subject("handle"), QueryParam("max_id"), QueryParam("trim", check="bool")),
        kinds={"reels": "id"},
        builder=paged.reels,
        not_found=NotFoundAnswer(
            _account({"items": [], "paging_info": {"max_id": None, "more_available": False}}),
            trimmed=_account({"items": [], "max_id": None}),
        ),
        one_of=("user_id", "handle"),
        new_items=NewItems(),
    ),
    EmulatedEndpoint(
        PINS,
        (_subject("query", required=True), QueryParam("cursor"), QueryParam("trim", check="bool")),
        kinds={"pins": "id"},
        builder=paged.pins,
        not_found=NotFoundAnswer({"pins": [], "cursor": None}),
        search=True,
    ),
    EmulatedEndpoint(
        VIDEO_SEARCH,
        (
            _subject("query", required=True),
            _enum("uploadDate", UPLOAD_DATES),
            _enum("sortBy", VIDEO_SORTS),
            _enum("type", VIDEO_TYPES),
            _enum("duration", VIDEO_DURATIONS),
            _enum("filter", VIDEO_FILTERS),
            QueryParam("region", check="region2", identity=True),
            QueryParam("continuationToken"),
            QueryParam("includeExtras", check="flag"),
        ),
        kinds={
            "videos": "id",
            "channels": "id",
            "playlists": "id",
            "shorts": "id",
            "shelves": "type+title",
            "lives": "id",
        },
        builder=paged.video_search,
        not_found=NotFoundAnswer(
            {
                "videos": [],
                "channels": [],
                "playlists": [],
                "shorts": [],
                "shelves": [],
                "lives": [],
                "continuationToken": None,
            }
        ),
        search=True,
        effective=_video_search_effective,
    ),
    EmulatedEndpoint(
        REPLIES,
        (QueryParam("continuationToken", required=True),),
        kinds={"comments": "id"},
        builder=paged.comment_replies,
        not_found=NotFoundAnswer({"comments": [], "continuationToken": None}),
        subjects_of=_replies_subjects,
    ),
    EmulatedEndpoint(
        PROFILE_VIDEOS,
        (
            _subject("handle", required=True),
            QueryParam("user_id"),
            _enum("sort_by", PROFILE_SORTS, default="latest"),
            QueryParam("max_cursor", check="nonneg_int"),
            QueryParam("region", check="region2", identity=True, default="US"),
            QueryParam("trim", check="bool"),
        ),
        kinds={"videos": "aweme_id"},
        builder=paged.profile_videos,
        not_found=NotFoundAnswer(
            _account({"aweme_list": [], "has_more": 0, "max_cursor": 0}),
            trimmed=_account({"aweme_list": [], "max_cursor": 0}),
        ),
        new_items=NewItems("sort_by", ("latest",)),
    ),
)

BUILT_IN = EndpointTable(ENDPOINTS)
BY_PATH: dict[str, EmulatedEndpoint] = BUILT_IN.by_path


def match(path: str) -> EmulatedEndpoint | None:
    """The built-in endpoint a request path addresses (a path parameter filled in, or its documented `{name}`),
    or None."""
    return BUILT_IN.match(path)
