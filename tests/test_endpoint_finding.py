"""Finding an endpoint: `harvest endpoints WORD...` by platform with each price rule, its JSON, and the endpoint
reference under docs/endpoints/, written from the catalog and kept fresh as docs/tables.md is."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harvest.connectors.catalog.job_catalog import builtin
from harvest.flows.cli import app
from tests.endpoints import COMMENT_REPLIES, VIDEO_COMMENTS
from tests.flow_helpers import HARVEST, ROOT, job_spec, subprocess_env
from tests.process_helpers import imported_packages, messages
from tests.published_helpers import SURFACE
from tests.test_docs_links import dead_links, nav_pages

runner = CliRunner()
DOCS = ROOT / "docs" / "endpoints"


def groups(stdout: str) -> dict[str, list[str]]:
    """Heading -> the endpoint paths printed under it (a heading is the line above a line of `=`)."""
    lines = stdout.splitlines()
    found: dict[str, list[str]] = {}
    heading = ""
    for line, below in zip(lines, [*lines[1:], ""], strict=True):
        if below and set(below) == {"="}:
            heading = line
            found[heading] = []
        elif line.startswith("/"):
            found[heading].append(line.split()[0])
    return found


def test_harvest_endpoints_video_comments_lists_the_matches_by_platform(tmp_path: Path) -> None:
    """What a user types: `harvest endpoints video comments`, in a real process (which imports no Prefect)."""
    proc = subprocess.run(
        [str(HARVEST), "endpoints", "video", "comments"],
        capture_output=True,
        text=True,
        timeout=120,
        env=subprocess_env(tmp_path, PYTHONPROFILEIMPORTTIME="1"),
    )
    assert proc.returncode == 0, proc.stderr
    assert messages(proc.stderr) == []
    assert not imported_packages(proc.stderr) & {"prefect", "duckdb"}
    catalog = builtin().endpoints
    in_platform = {
        p: sum(1 for path in catalog if path.split("/")[2] == p) for p in ("short-video", "video-platform")
    }
    assert groups(proc.stdout) == {
        f"short-video: 1 endpoint of {in_platform['short-video']}": ["/v1/short-video/video/comments"],
        f"video-platform: 2 endpoints of {in_platform['video-platform']}": [
            VIDEO_COMMENTS,
            COMMENT_REPLIES,  # its table: video_platform_comments
        ],
    }
    assert "/v1/video-platform/video/comments  1 credit\n" in proc.stdout
    assert "    order: string: top, newest\n" in proc.stdout
    assert proc.stdout.endswith(f"3 of {len(catalog)} endpoints hold every word of: video comments\n")
    assert all(len(line) <= 80 for line in proc.stdout.splitlines())


def test_each_endpoint_line_shows_its_price_rule_within_80_columns() -> None:
    result = runner.invoke(app, ["endpoints", "photo-app"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "/v2/photo-app/post/comments  1 credit; 15 with include_replies=true\n" in result.stdout
    assert (
        "/v1/photo-app/post  1 credit; as little as 0 with cache_max_age set;\n"
        "    10 (at least 1) with download_media=true\n"
    ) in result.stdout
    long_lines = [line for line in result.stdout.splitlines() if len(line) > 80]
    assert long_lines == [], "a sentence wider than 80 columns"


def test_words_match_case_insensitively_and_each_may_be_in_another_part() -> None:
    """`channel/shorts` in a path, `continuationToken` a parameter's name: both words, in different parts."""
    result = runner.invoke(app, ["endpoints", "Channel/Shorts", "CONTINUATIONTOKEN"])
    assert result.exit_code == 0, result.output
    assert list(groups(result.stdout).values()) == [["/v1/video-platform/channel/shorts"]]


def test_no_endpoint_holding_the_words_says_so_and_exits_1() -> None:
    result = runner.invoke(app, ["endpoints", "video", "zebra"])
    assert result.exit_code == 1
    assert result.stdout == ""
    said = " ".join(result.stderr.split())
    assert said.startswith("No endpoint holds every word of: video zebra.")
    assert f"`harvest endpoints` lists all {len(builtin().endpoints)}" in said
    assert all(len(line) <= 80 for line in result.stderr.splitlines())
    as_json = runner.invoke(app, ["endpoints", "--json", "video", "zebra"])
    assert as_json.exit_code == 1 and json.loads(as_json.stdout) == []


def test_json_is_filtered_by_the_words_too() -> None:
    result = runner.invoke(app, ["endpoints", "--json", "video", "comments"])
    assert result.exit_code == 0, result.output
    infos = json.loads(result.stdout)
    assert [(i["platform"], i["path"]) for i in infos] == [
        ("short-video", "/v1/short-video/video/comments"),
        ("video-platform", VIDEO_COMMENTS),
        ("video-platform", COMMENT_REPLIES),
    ]
    comments = infos[1]
    assert comments["price"] == "1 credit"
    order = next(p for p in comments["params"] if p["name"] == "order")
    assert order["allowed"] == ["top", "newest"] and order["description"]
    detailed = json.loads(runner.invoke(app, ["endpoints", "--json", "download_media"]).stdout)
    assert {i["path"]: i["price"] for i in detailed} == {
        path: "1 credit; as little as 0 with cache_max_age set; 10 (at least 1) with download_media=true"
        for path in ("/v1/photo-app/post", "/v2/short-video/video")
    }


def test_an_endpoint_says_when_it_lists_newest_first_and_a_spec_may_be_incremental_there(
    tmp_path: Path,
) -> None:
    """A nightly job's author finds where `incremental: true` is allowed without writing a spec to be refused."""
    listed = runner.invoke(app, ["endpoints", "channel-videos"], env={"COLUMNS": "200"})
    assert "  newest first with sort: latest, so incremental: true is allowed\n" in listed.stdout
    (info,) = json.loads(runner.invoke(app, ["endpoints", "--json", "channel-videos"]).stdout)
    assert info["newest_first"] == {"param": "sort", "values": ["latest"]}
    verdicts = {}
    for sort in ("latest", "popular"):
        query = {
            "id": "v",
            "endpoint": info["path"],
            "params": {"handle": "nasa", "sort": sort},
            "incremental": True,
        }
        spec = tmp_path / f"{sort}.yaml"
        spec.write_text(json.dumps(job_spec("sandbox", tmp_path / "out", [query])))
        verdicts[sort] = runner.invoke(app, ["validate", str(spec)]).exit_code
    assert verdicts == {"latest": 0, "popular": 2}


@pytest.mark.skipif(
    not SURFACE.exists(), reason=f"{SURFACE} is absent: the service's surface is read in place"
)
def test_json_lists_every_data_endpoint_with_every_published_parameter() -> None:
    listed = {i["path"]: i for i in json.loads(runner.invoke(app, ["endpoints", "--json"]).stdout)}
    surface = json.loads(SURFACE.read_text(encoding="utf-8"))["endpoints"]
    data = [e for e in surface if not e["path"].startswith("/v1/account/")]
    assert [e["path"] for e in data if e["path"] not in listed] == []
    missing = [
        (e["path"], p["name"])
        for e in data
        for p in e["params"]
        if p["name"] not in {q["name"] for q in listed[e["path"]]["params"]}
    ]
    assert missing == []


def test_docs_endpoints_are_the_catalog_written_out(tmp_path: Path) -> None:
    """docs/endpoints/ is generated (`harvest endpoints --markdown docs/endpoints`): stale, this fails."""
    result = runner.invoke(app, ["endpoints", "--markdown", str(tmp_path)])
    assert result.exit_code == 0, result.output
    written = {p.name: p.read_text(encoding="utf-8") for p in tmp_path.glob("*.md")}
    committed = {p.name: p.read_text(encoding="utf-8") for p in DOCS.glob("*.md")}
    assert sorted(written) == sorted(committed), (
        "run `harvest endpoints --markdown docs/endpoints` (and remove stale pages)"
    )
    stale = [name for name in written if written[name] != committed[name]]
    assert stale == [], "docs/endpoints/ is stale: run `harvest endpoints --markdown docs/endpoints`"
    platforms = {path.split("/")[2] for path in builtin().endpoints}
    assert set(written) == {"README.md", *(f"{p}.md" for p in platforms)}
    nav = nav_pages((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert sorted(n for n in nav if n.startswith("endpoints/")) == sorted(f"endpoints/{n}" for n in written)
    assert [
        problem for page in sorted(DOCS.glob("*.md")) for problem in dead_links(page, page.read_text())
    ] == []


def test_markdown_never_overwrites_a_file_harvest_did_not_write_and_refuses_a_file_for_its_directory(
    tmp_path: Path,
) -> None:
    """A team's wiki folder with its own README.md: `--markdown` wrote harvest's index over it, not a word.
    Refused before any page is written; harvest's own pages there are written again (`make docs`)."""
    theirs = tmp_path / "wiki" / "README.md"
    theirs.parent.mkdir()
    theirs.write_text("# Our team's notes\n\nkept for years\n")
    result = runner.invoke(app, ["endpoints", "--markdown", str(theirs.parent)])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: --markdown: {theirs} is not a page harvest wrote"), result.output
    assert theirs.read_text() == "# Our team's notes\n\nkept for years\n"
    assert [p.name for p in theirs.parent.iterdir()] == ["README.md"], "nothing written"

    ours = tmp_path / "pages"
    assert runner.invoke(app, ["endpoints", "--markdown", str(ours)]).exit_code == 0
    again = runner.invoke(app, ["endpoints", "--markdown", str(ours)])
    assert again.exit_code == 0 and "wrote 13 pages" in again.output, again.output

    a_file = tmp_path / "notes.md"
    a_file.write_text("mine")
    refused = runner.invoke(app, ["endpoints", "--markdown", str(a_file)])
    assert refused.exit_code == 2 and refused.output.startswith(f"error: --markdown: {a_file} is a file")
    assert a_file.read_text() == "mine"


def test_a_platform_page_holds_parameters_prices_paging_and_tables() -> None:
    page = (DOCS / "video-platform.md").read_text(encoding="utf-8")
    section = page.split("## `/v1/video-platform/video/comments`\n", 1)[1].split("\n## ", 1)[0]
    assert "- Price: 1 credit\n" in section
    assert "- Paging: continuation_token: `continuationToken` from the answer's" in section
    assert "| `url` | string | yes |  |" in section
    assert "| `order` | string |  | `top`, `newest` |" in section
    assert "[`video_platform_video_comments`](#video_platform_video_comments) (key `id`)" in section
    table = page.split("### video_platform_video_comments\n", 1)[1].split("\n### ", 1)[0]
    assert "| `created_at` | TIMESTAMP WITH TIME ZONE |" in table and "| `_fetched_at` |" not in table
    short = (DOCS / "short-video.md").read_text(encoding="utf-8")
    assert (
        "- Price: 1 credit; as little as 0 with cache_max_age set; 10 (at least 1) with download_media=true"
        in short
    )
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    assert "- [`/v1/video-platform/video/comments`](video-platform.md#v1video-platformvideocomments)" in index


def test_markdown_writes_every_page_so_words_are_refused() -> None:
    result = runner.invoke(app, ["endpoints", "--markdown", "docs/endpoints", "video"])
    assert result.exit_code == 2
    assert "--markdown writes every endpoint's page" in result.stderr


@pytest.mark.skipif(
    not SURFACE.exists(), reason=f"{SURFACE} is absent: the service's surface is read in place"
)
def test_every_endpoint_a_cached_answer_makes_free_says_so_as_the_surface_does() -> None:
    """The published surface says a young cached answer costs 0 on each endpoint taking `cache_max_age`; four
    of them (a pin, microblog-a's profile, tweet and tweet transcript) were declared at a flat 1 credit, so
    `harvest endpoints` and the plan said "1 credit" where the others say "as little as 0"."""
    surface = json.loads(SURFACE.read_text())["endpoints"]
    free = {e["path"] for e in surface if any("cache_max_age" in o for o in e["price"]["outcome_dependent"])}
    result = runner.invoke(app, ["endpoints", "--json", "cache_max_age"])
    assert result.exit_code == 0, result.output
    said = {
        i["path"] for i in json.loads(result.stdout) if "as little as 0 with cache_max_age set" in i["price"]
    }
    assert said == free, (sorted(free - said), sorted(said - free))
