"""The catalogue of the 18 endpoints: paths, parameters, enums, record kinds and primary keys.

Declarations only, taken from `shared/spec/service-interface.md` and `docs/service-shapes.md`; validation
(`sandbox.validation`) and the page builders (`sandbox.pages`) read it, so an enum or a parameter is written
once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

Check = Literal["text", "limit", "bool", "subreddit", "region2", "nonneg_int", "multi", "flag"]

CREATIVE_SEARCH = "/v1/creative/materials"
CREATIVE_DETAIL = "/v1/creative/materials/{material_id}"
PHOTOS = "/v1/network-a/profile/photos"
GROUP_POSTS = "/v1/network-a/group/posts"
FORUM_SEARCH = "/v1/forum/subreddit/search"
CLIP = "/v1/streaming/clip"
COMMUNITY_POST = "/v1/video-platform/community-post"
MB_POST = "/v1/microblog-b/post"
MB_FEED = "/v1/microblog-b/user/posts"
TWEETS = "/v1/microblog-a/community/tweets"
ADVERTISERS = "/v1/search-engine/adLibrary/advertisers/search"
EMBED = "/v1/photo-app/user/embed"
REELS = "/v1/photo-app/user/reels"
PINS = "/v1/pinboard/search"
VIDEO_SEARCH = "/v1/video-platform/search"
REPLIES = "/v1/video-platform/video/comment/replies"
SHOP = "/v1/short-video/shop/products"
PROFILE_VIDEOS = "/v3/short-video/profile/videos"

CREDIT_BALANCE = "/v1/credit-balance"

NEW_ITEMS_LISTINGS: dict[str, tuple[str | None, tuple[str, ...]]] = {
    MB_FEED: (None, ()),
    REELS: (None, ()),
    SHOP: (None, ()),
    PROFILE_VIDEOS: ("sort_by", ("latest",)),
    GROUP_POSTS: ("sort_by", ("CHRONOLOGICAL", "CHRONOLOGICAL_LISTINGS")),
}
"""Newest-first listings that show `SandboxConfig.new_items` newer items at their front: always, or when the
parameter has one of the values. (Creative search by `latest` and forum search by `new` are newest-first on the
service too; the sandbox does not add items to them.)"""

SHOP_REGIONS = (
    "US",
    "GB",
    "DE",
    "FR",
    "IT",
    "ID",
    "MY",
    "MX",
    "PH",
    "SG",
    "ES",
    "TH",
    "VN",
    "BR",
    "JP",
    "IE",
)
GROUP_SORTS = ("TOP_POSTS", "RECENT_ACTIVITY", "CHRONOLOGICAL", "CHRONOLOGICAL_LISTINGS")
FORUM_SORTS = ("relevance", "hot", "top", "new", "comments")
FORUM_COMMENT_SORTS = ("relevance", "top", "new")
FORUM_TIMEFRAMES = ("all", "year", "month", "week", "day", "hour")
CREATIVE_ORDERS = ("relevance", "latest", "oldest")
UPLOAD_DATES = ("today", "this_week", "this_month", "this_year")
VIDEO_SORTS = ("relevance", "popular")
VIDEO_FILTERS = ("shorts",)
PROFILE_SORTS = ("latest", "popular")


@dataclass(frozen=True)
class QueryParam:
    """One query parameter.

    `identity`: the value is part of what the query is about, so it decides which records exist (a handle, a
    sort order); cursors and output switches such as `trim` are not. `subject`: the value names the thing
    looked up, so the trigger words of `sandbox.triggers` apply to it."""

    name: str
    required: bool = False
    enum: tuple[str, ...] = ()
    check: Check = "text"
    identity: bool = False
    subject: bool = False
    default: str | None = None


@dataclass(frozen=True)
class EmulatedEndpoint:
    path: str
    params: tuple[QueryParam, ...]
    kinds: dict[str, str] = field(default_factory=dict)
    """Record kind -> primary key field (see docs/service-shapes.md)."""
    one_of: tuple[str, ...] = ()
    """At least one of these must be given (the "one of two identifiers" endpoints). When both are, the
    first one of `one_of` that is given names the account and the other is ignored (ids before handles and
    URLs: the interface says ids answer faster, so the service goes by them)."""
    search: bool = False
    """A search endpoint: the repeat-items quirk applies."""
    paged: bool = True
    user_scoped: bool = False
    """Looks up one account: "not found" is answered with `account_deactivated: true`."""

    def param(self, name: str) -> QueryParam | None:
        for p in self.params:
            if p.name == name:
                return p
        return None

    @property
    def names(self) -> frozenset[str]:
        return frozenset(p.name for p in self.params)


def _subject(name: str, required: bool = False) -> QueryParam:
    return QueryParam(name, required=required, identity=True, subject=True)


def _enum(name: str, values: tuple[str, ...], default: str | None = None) -> QueryParam:
    return QueryParam(name, enum=values, identity=True, default=default)


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
        search=True,
    ),
    EmulatedEndpoint(CREATIVE_DETAIL, (), kinds={"material_details": "material_id"}, paged=False),
    EmulatedEndpoint(
        PHOTOS,
        (_subject("url", required=True), QueryParam("next_page_id"), QueryParam("cursor")),
        kinds={"photos": "photo_id"},
        user_scoped=True,
    ),
    EmulatedEndpoint(
        GROUP_POSTS,
        (_subject("url"), _subject("group_id"), _enum("sort_by", GROUP_SORTS), QueryParam("cursor")),
        kinds={"group_posts": "id"},
        one_of=("group_id", "url"),
    ),
    EmulatedEndpoint(
        FORUM_SEARCH,
        (
            QueryParam("subreddit", required=True, check="subreddit", identity=True, subject=True),
            QueryParam("query", identity=True, subject=True),
            _enum("sort", FORUM_SORTS),
            _enum("timeframe", FORUM_TIMEFRAMES),
            QueryParam("cursor"),
        ),
        kinds={"posts": "id", "comments": "id", "media": "id"},
        search=True,
    ),
    EmulatedEndpoint(
        CLIP, (_subject("url", required=True),), kinds={"clips": "id", "broadcaster_clips": "id"}, paged=False
    ),
    EmulatedEndpoint(
        COMMUNITY_POST, (_subject("url", required=True),), kinds={"community_posts": "id"}, paged=False
    ),
    EmulatedEndpoint(
        MB_POST, (_subject("url", required=True),), kinds={"posts": "uri", "replies": "uri"}, paged=False
    ),
    EmulatedEndpoint(
        MB_FEED,
        (_subject("handle"), _subject("user_id"), QueryParam("cursor")),
        kinds={"posts": "uri"},
        one_of=("user_id", "handle"),
        user_scoped=True,
    ),
    EmulatedEndpoint(TWEETS, (_subject("url", required=True),), kinds={"tweets": "id"}, paged=False),
    EmulatedEndpoint(
        ADVERTISERS,
        (_subject("query", required=True),),
        kinds={"advertisers": "advertiser_id", "websites": "domain"},
        paged=False,
    ),
    EmulatedEndpoint(
        EMBED, (_subject("handle", required=True),), kinds={"embeds": "handle"}, paged=False, user_scoped=True
    ),
    EmulatedEndpoint(
        REELS,
        (_subject("user_id"), _subject("handle"), QueryParam("max_id"), QueryParam("trim", check="bool")),
        kinds={"reels": "id"},
        one_of=("user_id", "handle"),
        user_scoped=True,
    ),
    EmulatedEndpoint(
        PINS,
        (_subject("query", required=True), QueryParam("cursor"), QueryParam("trim", check="bool")),
        kinds={"pins": "id"},
        search=True,
    ),
    EmulatedEndpoint(
        VIDEO_SEARCH,
        (
            _subject("query", required=True),
            _enum("uploadDate", UPLOAD_DATES),
            _enum("sortBy", VIDEO_SORTS),
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
        search=True,
    ),
    EmulatedEndpoint(REPLIES, (QueryParam("continuationToken", required=True),), kinds={"comments": "id"}),
    EmulatedEndpoint(
        SHOP,
        (
            _subject("url", required=True),
            QueryParam("cursor"),
            QueryParam("region", enum=SHOP_REGIONS, identity=True, default="US"),
        ),
        kinds={"products": "id", "shops": "id"},
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
        user_scoped=True,
    ),
)

BY_PATH: dict[str, EmulatedEndpoint] = {e.path: e for e in ENDPOINTS}

_DETAIL_RE = re.compile(r"^/v1/creative/materials/([^/]+)$")


def match(path: str) -> EmulatedEndpoint | None:
    """The endpoint a request path addresses (the detail path carries the material id), or None."""
    found = BY_PATH.get(path)
    if found is not None:
        return found
    if _DETAIL_RE.match(path):
        return BY_PATH[CREATIVE_DETAIL]
    return None
