"""docs/tables.md's join queries find rows on the demo: an analyst trying a documented join on a first demo sees
it work, as the service's ids do.

Read on the session's landed demo (`tests.landed_demo`): every query `join_queries()` writes for a column the
catalog says `joins` another table's, where both tables hold rows, finds at least one row, but those of
`LEFT_EMPTY`, each left for the reason beside it.
"""

from __future__ import annotations

import duckdb

from harvest.connectors.catalog.job_catalog import builtin
from harvest.flows.commands.tables_doc import join_queries
from tests.landed_demo import LandedDemo

SEARCH = "a search's results are by many accounts, not the demo's one profile or listing"
LEFT_EMPTY = {
    # a site-wide search, or a search within a subreddit, finds other posts than the listings the demo asks
    "forum_comments.post_id": "a subreddit search's comments are on posts that search need not find",
    "forum_search_posts.id": SEARCH,
    "forum_search_posts.subreddit": SEARCH,
    "forum_search_posts.subreddit_id": SEARCH,
    "forum_subreddit_posts.id": "the subreddit's hot posts are not the posts its search found",
    "microblog_a_tweets.user_id": "a community's tweets are by its members, not the profile the demo asks",
    "microblog_b_replies.author_did": "replies are by other accounts than the profile the demo asks",
    "microblog_b_replies.author_handle": "replies are by other accounts than the profile the demo asks",
    "network_a_profiles.ad_library_page_id": "the ads' details are asked by an ad's id alone, which names no page",
    "network_a_reels.post_id": "a reel's post is asked for by no query: the posts' details are the page's posts'",
    "photo_app_audio_reels.owner_id": "an audio's reels are by many accounts",
    "photo_app_audio_reels.owner_username": "an audio's reels are by many accounts",
    "photo_app_highlight_details.owner_id": "a highlight is asked by its id alone, which names no owner",
    "photo_app_highlight_details.owner_username": "a highlight is asked by its id alone, which names no owner",
    "photo_app_highlight_items.owner_id": "a highlight is asked by its id alone, which names no owner",
    "photo_app_highlight_items.owner_username": "a highlight is asked by its id alone, which names no owner",
    "photo_app_profile_search_results.id": SEARCH,
    "pinboard_board_pins.id": "a board's pins are not the pins a search found",
    "pinboard_pin_details.board_id": "the pins a search found are on other accounts' boards",
    "search_engine_ad_details.advertiser_id": "a website's ads name no advertiser the search found (the service "
    "links a domain to no advertiser)",
    "short_video_collection_videos.aweme_id": "a collection is asked by its URL alone, which names no videos",
    "short_video_collection_videos.author_uid": "a collection is asked by its URL alone, which names no account",
    "short_video_collection_videos.author_unique_id": "a collection is asked by its URL alone",
    "short_video_popular_creator_videos.id": "popular creators are site-wide, not the demo's profiles",
    "short_video_popular_creators.user_id": "popular creators are site-wide, not the demo's profiles",
    "short_video_product_videos.id": "a product's videos are by many creators",
    "short_video_shop_search_products.seller_id": SEARCH,
    "short_video_showcase_products.seller_id": "a creator's showcase holds other sellers' products",
    "streaming_featured_clips.id": "the clip endpoint takes a URL, which the featured clips do not give",
    "streaming_recent_broadcasts.id": "a streamer's recent broadcasts are not among the videos its listing gives",
    "streaming_schedule_videos.id": "a schedule's videos are not among the videos the listing gives",
    "video_platform_channel_details.id": "the channels a search found are others than the channel asked",
    "video_platform_comments.author_channel_id": "replies are by other channels than the one asked",
    "video_platform_hashtag_videos.id": SEARCH,
    "video_platform_hashtag_videos.channel_id": SEARCH,
    "video_platform_playlist_details.owner_id": "a playlist is asked by its id alone, which names no owner",
    "video_platform_shelf_items.channel_id": SEARCH,
    "video_platform_shorts.channel_id": SEARCH,
    "video_platform_trending_shorts.channel_id": "trending shorts are site-wide",
    "video_platform_video_comments.author_channel_id": "comments are by other channels than the one asked",
    "video_platform_videos.channel_id": SEARCH,
}
"""`table.column` of the join queries left finding no row on the demo, and why: what the demo asks (a search, a
site-wide list, others' replies) holds other records than the table joined, or the request names no more than an
id (the sandbox cannot know the owner of a highlight or playlist asked by its id alone)."""


def _count(db: duckdb.DuckDBPyConnection, sql: str) -> int:
    row = db.execute(sql).fetchone()
    return int(row[0]) if row else 0


def test_every_documented_join_query_finds_rows_on_the_demo(landed_demo: LandedDemo) -> None:
    """Each join query of docs/tables.md whose two tables hold rows finds one, but those `LEFT_EMPTY` says why
    not; and each of those is still a join query of the demo's tables (the list holds no stale entry)."""
    empty, asked = [], set()
    with duckdb.connect(str(landed_demo.output / "harvest.duckdb"), read_only=True) as db:
        tables = {name for (name,) in db.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        for table, kind in sorted(builtin().kinds().items()):
            for query in join_queries(table, kind.schema):
                other = query.split(" JOIN ")[1].split()[0]
                column = query.removeprefix("SELECT t.").split(",")[0]
                if not {table, other} <= tables or not all(
                    _count(db, f"SELECT count(*) FROM {t}") for t in (table, other)
                ):
                    continue
                asked.add(f"{table}.{column}")
                if not db.execute(query).fetchall() and f"{table}.{column}" not in LEFT_EMPTY:
                    empty.append(query)
    assert empty == []
    assert set(LEFT_EMPTY) <= asked, set(LEFT_EMPTY) - asked
