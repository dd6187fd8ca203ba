"""The single entry point from a request to its page: validate, apply trigger words, run the endpoint's
builder.

The HTTP handler and `sandbox.expected` both go through here, so what a test expects is computed by the very
code that answers."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sandbox import creative, paged, single
from sandbox import endpoints as ep
from sandbox.config import SandboxConfig
from sandbox.page import Ctx, ServedPage
from sandbox.triggers import triggered
from sandbox.validation import validate
from sandbox.variation import vary

BUILDERS: dict[str, Callable[[Ctx], ServedPage]] = {
    ep.CREATIVE_SEARCH: creative.search,
    ep.CREATIVE_DETAIL: creative.detail,
    ep.PHOTOS: paged.photos,
    ep.GROUP_POSTS: paged.group_posts,
    ep.FORUM_SEARCH: paged.forum_search,
    ep.CLIP: single.clip,
    ep.COMMUNITY_POST: single.community_post,
    ep.MB_POST: single.thread,
    ep.MB_FEED: paged.feed,
    ep.TWEETS: single.tweets,
    ep.ADVERTISERS: single.advertisers,
    ep.EMBED: single.embed,
    ep.REELS: paged.reels,
    ep.PINS: paged.pins,
    ep.VIDEO_SEARCH: paged.video_search,
    ep.REPLIES: paged.comment_replies,
    ep.SHOP: paged.shop_products,
    ep.PROFILE_VIDEOS: paged.profile_videos,
}
assert set(BUILDERS) == set(ep.BY_PATH), "every endpoint needs a builder"


def make_ctx(
    endpoint: ep.EmulatedEndpoint,
    items: Sequence[tuple[str, str]],
    config: SandboxConfig,
    path_value: str | None = None,
) -> Ctx:
    """Validate a request's query parameters (raises `BadRequest`)."""
    params = validate(endpoint, items, config.quirks)
    if endpoint.path == ep.VIDEO_SEARCH:
        params = paged.effective_video_params(params)
    return Ctx(endpoint, params, config, path_value)


def build(ctx: Ctx) -> ServedPage:
    """The page answering a validated request (raises `BadRequest` for a bad cursor or a `nonexistent`
    subject)."""
    forced = triggered(ctx)
    if forced is not None:
        return forced
    return vary(ctx, BUILDERS[ctx.endpoint.path](ctx))
