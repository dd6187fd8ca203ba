"""The parameter model of each endpoint, as the service's interface documents it (`docs/service-shapes.md`).

Unknown parameters are refused (`Params` forbids extras): the real service ignores them silently, which turns a
typo in a cursor or a filter into wrong, billed pages. Where the interface leaves open which of two
identifiers is required, `one_of` asks for at least one.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field as P

from connectors.catalog.params import Params

Trim = bool | None


class CreativeSearch(Params):
    query: str | None = None
    cursor: str | None = None
    limit: int | None = P(None, ge=1, le=100)
    order: Literal["relevance", "latest", "oldest"] | None = None
    language: str | None = P(None, min_length=2, max_length=8)
    style_tags: list[str] | None = None
    cta_type_tags: list[str] | None = None


class MaterialDetail(Params):
    path_params = ("material_id",)
    material_id: str = P(min_length=3, pattern=r"^[A-Za-z0-9_-]+:.+$")


class PagePhotos(Params):
    url: str
    next_page_id: str | None = None
    cursor: str | None = None


class GroupPosts(Params):
    one_of = ("url", "group_id")
    url: str | None = None
    group_id: str | None = None
    sort_by: Literal["TOP_POSTS", "RECENT_ACTIVITY", "CHRONOLOGICAL", "CHRONOLOGICAL_LISTINGS"] | None = None
    cursor: str | None = None


class SubredditSearch(Params):
    subreddit: str = P(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_]{1,30}$", description="bare name: no r/ prefix, no URL"
    )
    query: str | None = None
    sort: Literal["relevance", "hot", "top", "new", "comments"] | None = None
    timeframe: Literal["all", "year", "month", "week", "day", "hour"] | None = None
    cursor: str | None = None


class ByUrl(Params):
    url: str


class UserPosts(Params):
    one_of = ("handle", "user_id")
    handle: str | None = None
    user_id: str | None = None
    cursor: str | None = None


class ByQuery(Params):
    query: str


class ByHandle(Params):
    handle: str


class Reels(Params):
    one_of = ("user_id", "handle")
    user_id: str | None = None
    handle: str | None = None
    max_id: str | None = None
    trim: Trim = None


class PinSearch(Params):
    query: str
    cursor: str | None = None
    trim: Trim = None


class VideoSearch(Params):
    query: str
    uploadDate: Literal["today", "this_week", "this_month", "this_year"] | None = None
    sortBy: Literal["relevance", "popular"] | None = None
    filter: Literal["shorts"] | None = None
    region: str | None = P(None, pattern=r"^[A-Z]{2}$")
    continuationToken: str | None = None
    includeExtras: bool | None = None


class CommentReplies(Params):
    continuationToken: str


ShopRegion = Literal[
    "US", "GB", "DE", "FR", "IT", "ID", "MY", "MX", "PH", "SG", "ES", "TH", "VN", "BR", "JP", "IE"
]


class ShopProducts(Params):
    url: str
    cursor: str | None = None
    region: ShopRegion | None = None


class ProfileVideos(Params):
    handle: str
    user_id: str | None = None
    sort_by: Literal["latest", "popular"] | None = None
    max_cursor: str | None = None
    region: str | None = P(None, pattern=r"^[A-Z]{2}$")
    trim: Trim = None
