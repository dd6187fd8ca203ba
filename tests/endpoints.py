"""The service's endpoints the tests collect from, each named once: a test says what it collects (`PINS`,
`FEED`), and a path written once cannot differ between two tests that mean the same endpoint."""

from __future__ import annotations

PINS = "/v1/pinboard/search"
"""Pin search: the sandbox's workhorse (cursor pages, a sentinel page at the end)."""
FEED = "/v1/microblog-b/user/posts"
"""A user's posts on microblog-b: wrapped records, the shape overrides' and drift tests' feed."""
PROFILE = "/v3/short-video/profile/videos"
"""A short-video profile's videos (`handle`), the nightly jobs' fan-out."""
CREATIVE = "/v1/creative/materials"
"""Creative search: the list whose `material_id`s the details fan out over."""
CREATIVE_DETAIL = "/v1/creative/materials/{material_id}"
"""One creative, by the id a creative search found."""
VIDEO_SEARCH = "/v1/video-platform/search"
REELS = "/v1/photo-app/user/reels"
FORUM = "/v1/forum/subreddit/search"
TWEETS = "/v1/microblog-a/community/tweets"
SHOP = "/v1/short-video/shop/products"
VIDEO_COMMENTS = "/v1/video-platform/video/comments"
COMMENT_REPLIES = "/v1/video-platform/video/comment/replies"
GROUP = "/v1/network-a/group/posts"
ADVERTISERS = "/v1/search-engine/adLibrary/advertisers/search"
