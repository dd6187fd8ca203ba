"""Every endpoint of the service, described once.

Adding or fixing an endpoint is one edit here: its documented path, a parameter model, a paging style and the
record kinds its answers hold. Field names on the wire follow `docs/service-shapes.md`; column names are
snake_case so that analysts can write SQL without quoting (and `desc`, an SQL keyword, becomes `caption`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal
from urllib.parse import quote

from pydantic import Field as P

from connectors import paging
from connectors.paging import Paging
from connectors.params import Params
from connectors.records import RecordKind, b, f, i, j, ls, s, ts


@dataclass(frozen=True)
class NewestFirst:
    """When an endpoint lists newest items first: always, or when `param` has one of `values`.

    Incremental queries need it: their paging stops at the first page of items seen before, which is only
    right when everything after that page is older.
    """

    param: str | None = None
    values: tuple[str, ...] = ()

    def holds(self, params: Mapping[str, Any]) -> bool:
        return self.param is None or params.get(self.param) in self.values

    def describe(self) -> str:
        return "" if self.param is None else f" with {self.param}: {' or '.join(self.values)}"


@dataclass(frozen=True)
class Endpoint:
    path: str
    """The documented path, with `{name}` for path parameters: also the endpoint's name everywhere in harvest."""
    summary: str
    params: type[Params]
    paging: Paging
    kinds: tuple[RecordKind, ...]
    cost: int = 1
    newest_first: NewestFirst | None = None
    """Set where the service lists newest first (so `incremental: true` is allowed)."""

    def url_path(self, params: Params) -> str:
        return self.path.format(**{k: quote(v, safe=":") for k, v in params.path_values().items()})

    def kind(self, table: str) -> RecordKind:
        return next(k for k in self.kinds if k.table == table)


# ---------------------------------------------------------------------------------------------- parameters
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


# ---------------------------------------------------------------------------------------------- record kinds
def kind(
    table: str, location: str | tuple[str, ...], key: str | tuple[str, ...], *fields: object
) -> RecordKind:
    locations = (location,) if isinstance(location, str) else location
    primary_key = (key,) if isinstance(key, str) else key
    return RecordKind(table, locations, primary_key, tuple(fields))  # type: ignore[arg-type]


CLIP_FIELDS = (
    s("id"), s("slug"), s("url"), s("embed_url", "embedURL"), s("title"), i("view_count", "viewCount"),
    s("language"), i("duration_seconds", "durationSeconds"), ts("created_at", "createdAt"),
    s("game_id", "game.id"), s("game_name", "game.name"), s("broadcaster_id", "broadcaster.id"),
    s("broadcaster_login", "broadcaster.login"), s("broadcaster_display_name", "broadcaster.displayName"),
    i("broadcaster_followers", "broadcaster.followers"), s("thumbnail_url", "thumbnailURL"),
    j("video_qualities", "videoQualities"),
)  # fmt: skip

MICROBLOG_B_POST_FIELDS = (
    s("uri"), s("cid"), s("text", "record.text"), ts("created_at", "record.createdAt"),
    s("author_did", "author.did"), s("author_handle", "author.handle"),
    s("author_display_name", "author.displayName"), j("embed"), i("reply_count", "replyCount"),
    i("repost_count", "repostCount"), i("like_count", "likeCount"), i("quote_count", "quoteCount"),
    ts("indexed_at", "indexedAt"),
)  # fmt: skip

VIDEO_FIELDS = (
    s("id"), s("title"), s("url"), s("thumbnail"), i("views"), s("published_time", "publishedTime"),
    i("length_seconds", "lengthSeconds"), s("channel_id", "channel.id"), s("channel_title", "channel.title"),
    s("channel_url", "channel.url"), ls("badges"), i("like_count", "likeCount"),
    i("comment_count", "commentCount"), s("description"),
)  # fmt: skip

MICROBLOG_B_POSTS = kind("microblog_b_posts", ("feed", "post"), "uri", *MICROBLOG_B_POST_FIELDS)

# ---------------------------------------------------------------------------------------------- endpoints
ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        "/v1/creative/materials", "Search creative materials by keyword and filters.", CreativeSearch,
        paging.envelope_cursor(),
        (kind("creative_materials", "data", "material_id",
              s("material_id"), s("type"), s("title"), s("language"), ls("style_tags"), ls("cta_type_tags"),
              s("advertiser"), s("thumbnail_url"), i("duration_seconds"), ts("created_at"), f("relevance")),),
        newest_first=NewestFirst("order", ("latest",)),
    ),
    Endpoint(
        "/v1/creative/materials/{material_id}", "One creative material in detail.", MaterialDetail,
        paging.single(),
        (kind("creative_material_details", "data", "material_id",
              s("material_id"), s("type"), s("title"), j("structured_fields"), ls("structured_tags"),
              ls("labels"), j("related_context"), s("script"), s("cta_type", "cta.type"),
              s("cta_text", "cta.text"), s("cta_url", "cta.url"),
              s("latest_ad_advertiser", "latest_ad_context.advertiser"),
              ts("latest_ad_first_seen", "latest_ad_context.first_seen"),
              ts("latest_ad_last_seen", "latest_ad_context.last_seen"),
              ls("latest_ad_platforms", "latest_ad_context.platforms")),),
    ),
    Endpoint(
        "/v1/network-a/profile/photos", "Photos of a public page.", PagePhotos, paging.page_id_and_cursor(),
        (kind("network_a_photos", "photos", "photo_id",
              s("photo_id"), s("accessibility_caption"), s("viewer_image_uri", "viewer_image.uri"),
              i("viewer_image_height", "viewer_image.height"), i("viewer_image_width", "viewer_image.width"),
              s("thumbnail"), s("url")),),
    ),
    Endpoint(
        "/v1/network-a/group/posts", "Posts of a public group (at most 3 a page).", GroupPosts, paging.cursor(),
        (kind("network_a_group_posts", "posts", "id",
              s("id"), s("text"), s("url"), i("reaction_count", "reactionCount"),
              i("comment_count", "commentCount"), ts("publish_time", "publishTime"),
              j("video_details", "videoDetails"), j("top_comments", "topComments")),),
        newest_first=NewestFirst("sort_by", ("CHRONOLOGICAL", "CHRONOLOGICAL_LISTINGS")),
    ),
    Endpoint(
        "/v1/forum/subreddit/search", "Posts, comments and media of one subreddit matching a query.",
        SubredditSearch, paging.cursor(),
        (kind("forum_posts", "posts", "id",
              s("id"), s("title"), i("votes"), i("num_comments"), s("url"), ts("created_at")),
         kind("forum_comments", "comments", "id",
              s("id"), s("author"), s("body"), i("votes"), ts("created_at"), s("post_id", "post.id"),
              s("post_title", "post.title"), s("post_url", "post.url")),
         kind("forum_media", "media", "id",
              s("id"), s("title"), s("media_type"), i("width"), i("height"), i("gallery_count"), s("url"))),
        newest_first=NewestFirst("sort", ("new",)),
    ),
    Endpoint(
        "/v1/streaming/clip", "One clip and more clips of its broadcaster.", ByUrl, paging.single(),
        (kind("streaming_clips", "[0].data.clip", "id", *CLIP_FIELDS),
         kind("streaming_broadcaster_clips", "[1].data.user.clips", "id", *CLIP_FIELDS)),
    ),
    Endpoint(
        "/v1/video-platform/community-post", "One community post.", ByUrl, paging.single(),
        (kind("video_platform_community_posts", "", "id",
              s("id"), s("channel_id", "channel.id"), s("channel_title", "channel.title"),
              s("channel_url", "channel.url"), s("content"), ls("images"), i("like_count", "likeCount"),
              s("published_time", "publishedTime"), s("video_id", "video.id"),
              s("video_title", "video.title"), s("video_url", "video.url")),),
    ),
    Endpoint(
        "/v1/microblog-b/post", "One post and its threaded replies.", ByUrl, paging.single(),
        (MICROBLOG_B_POSTS,
         kind("microblog_b_replies", "replies", "uri", *MICROBLOG_B_POST_FIELDS, s("parent_uri"))),
    ),
    Endpoint(
        "/v1/microblog-b/user/posts", "A user's feed of posts.", UserPosts, paging.cursor(), (MICROBLOG_B_POSTS,),
        newest_first=NewestFirst(),
    ),
    Endpoint(
        "/v1/microblog-a/community/tweets", "Tweets of a community (one page).", ByUrl, paging.single(),
        (kind("microblog_a_tweets", "tweets", "id",
              s("id"), s("full_text"), i("view_count"), i("favorite_count"), i("retweet_count"),
              i("reply_count"), i("bookmark_count"), i("quote_count"), ts("created_at"), s("source"),
              s("user_name", "user.name"), s("user_screen_name", "user.screen_name"),
              s("user_avatar", "user.avatar"), i("user_followers_count", "user.followers_count"),
              b("user_is_blue_verified", "user.is_blue_verified")),),
    ),
    Endpoint(
        "/v1/search-engine/adLibrary/advertisers/search", "Advertisers of the ad library by name.", ByQuery,
        paging.single(),
        (kind("search_engine_advertisers", "advertisers", "advertiser_id",
              s("advertiser_id"), s("name"), s("region"), i("number_of_ads_estimate")),
         kind("search_engine_websites", "websites", "domain", s("domain"))),
    ),
    Endpoint(
        "/v1/photo-app/user/embed", "A user's embeddable profile card.", ByHandle, paging.single(),
        (kind("photo_app_embeds", "", "handle", s("handle", "$params.handle"), s("html")),),
    ),
    Endpoint(
        "/v1/photo-app/user/reels", "A user's public reels.", Reels, paging.max_id(),
        (kind("photo_app_reels", ("items[].media", "items"), "id",
              s("id"), s("code"), i("play_count"), i("like_count"), i("comment_count"), ts("taken_at"),
              s("video_url", "video_versions[0].url|video_url"),
              s("thumbnail_url", "image_versions2.candidates[0].url|thumbnail_url"),
              s("owner_id", "owner.id"), s("owner_username", "owner.username"),
              j("video_versions")),),
        newest_first=NewestFirst(),
    ),
    Endpoint(
        "/v1/pinboard/search", "Pins matching a query.", PinSearch, paging.cursor(),
        (kind("pinboard_pins", "pins", "id",
              s("id"), s("url"), s("title"), s("description"), s("image_url", "images.orig.url"), s("link"),
              s("domain"), s("board_id", "board.id"), s("board_name", "board.name"),
              s("board_url", "board.url"), s("pinner_id", "pinner.id"),
              s("pinner_username", "pinner.username"), s("pinner_full_name", "pinner.full_name")),),
    ),
    Endpoint(
        "/v1/video-platform/search", "Videos, channels, playlists, shorts, shelves and lives for a query.",
        VideoSearch, paging.continuation_token(),
        (kind("video_platform_videos", "videos", "id", *VIDEO_FIELDS),
         kind("video_platform_channels", "channels", "id",
              s("id"), s("title"), s("url"), i("subscriber_count", "subscriberCount")),
         kind("video_platform_playlists", "playlists", "id",
              s("id"), s("title"), s("url"), i("video_count", "videoCount")),
         kind("video_platform_shorts", "shorts", "id", *VIDEO_FIELDS),
         kind("video_platform_shelves", "shelves", ("type", "title"), s("type"), s("title"), j("items")),
         kind("video_platform_lives", "lives", "id", s("id"), s("title"), s("url"), i("watching"))),
    ),
    Endpoint(
        "/v1/video-platform/video/comment/replies", "Replies to a comment.", CommentReplies,
        paging.continuation_token(),
        (kind("video_platform_comments", "comments", "id",
              s("id"), s("content"), s("author_name", "author.name"),
              s("author_channel_id", "author.channelId"), s("author_avatar", "author.avatar"),
              b("author_is_verified", "author.isVerified"), b("author_is_creator", "author.isCreator"),
              i("like_count", "likeCount"), s("published_time", "publishedTime")),),
    ),
    Endpoint(
        "/v1/short-video/shop/products", "All products of one shop.", ShopProducts,
        paging.cursor(more="has_more"),
        (kind("short_video_products", "products", "id",
              s("id"), s("title"), ls("cover"), s("url"), s("price_currency", "price.currency"),
              f("price_amount", "price.amount"), i("sold_count"), i("review_count"), f("rating")),
         kind("short_video_shops", "shopInfo", "id",
              s("id"), s("name"), s("url"), i("followers"), s("region"))),
        newest_first=NewestFirst(),
    ),
    Endpoint(
        "/v3/short-video/profile/videos", "A user's videos, latest or most popular first.", ProfileVideos,
        paging.max_cursor(),
        (kind("short_video_videos", "aweme_list", "aweme_id",
              s("aweme_id"), s("caption", "desc"), ts("create_time"),
              i("play_count", "statistics.play_count"), i("digg_count", "statistics.digg_count"),
              i("comment_count", "statistics.comment_count"), i("share_count", "statistics.share_count"),
              i("collect_count", "statistics.collect_count"), i("duration_ms", "video.duration"),
              s("cover_url", "video.cover.url_list[0]"), s("play_url", "video.play_addr.url_list[0]"),
              s("author_uid", "author.uid"), s("author_unique_id", "author.unique_id")),),
        newest_first=NewestFirst("sort_by", ("latest",)),
    ),
)  # fmt: skip

DEFAULT_COSTS: dict[str, int] = {e.path: e.cost for e in ENDPOINTS}
"""Credits per request. The interface prices 11 endpoints at 1 and leaves 7 unstated; the real service is known to
charge 1 for all. Users override entries from their job spec (`costs:`) or `configs/defaults.yaml`."""


class UnknownEndpoint(KeyError):
    def __str__(self) -> str:
        return f"unknown endpoint {self.args[0]!r}; `harvest endpoints` lists the documented paths"


def endpoints(costs: Mapping[str, int] | None = None) -> dict[str, Endpoint]:
    """The catalog by documented path, with cost overrides applied."""
    costs = costs or {}
    unknown = set(costs) - set(DEFAULT_COSTS)
    if unknown:
        raise UnknownEndpoint(sorted(unknown)[0])
    return {e.path: replace(e, cost=costs.get(e.path, e.cost)) for e in ENDPOINTS}


def get(path: str, costs: Mapping[str, int] | None = None) -> Endpoint:
    try:
        return endpoints(costs)[path]
    except KeyError:
        raise UnknownEndpoint(path) from None


def all_kinds() -> dict[str, RecordKind]:
    """Every record kind by table name (kinds shared by endpoints appear once)."""
    return {k.table: k for e in ENDPOINTS for k in e.kinds}
