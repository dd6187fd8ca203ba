"""A declaration read wrong loses nothing silently: a job's own endpoint, declared in its catalog file, is run
(`harvest run`) against the service's published samples served over HTTP on 127.0.0.1, with one place of the
declaration wrong as a user may write it. Every such run stops as drift (exit 1), counts what it lost in
`query_state`, and says where in the user's own catalog file the fix goes; the same declaration written right
runs complete and quiet.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

import harvest.flows.collect  # noqa: F401  (Prefect binds its log handlers on first import: not inside CliRunner)
from harvest.flows.cli import app
from tests.flow_helpers import job_spec, rows, write_spec
from tests.published_samples import sample, sample_service

runner = CliRunner()
GROUP, CLIP = "/v9/mine/group/posts", "/v9/mine/clip"
COMMENTS = "mine_group_post_top_comments"
POSTS: dict[str, Any] = {
    "params": {"url": {"type": "string", "required": True}},
    "records": {
        "mine_group_posts": {
            "at": "posts",
            "key": "id",
            "columns": {
                "id": "text",
                "url": "text",
                "comment_count": {"type": "integer", "path": "commentCount"},
            },
            "children": {
                COMMENTS: {
                    "at": "topComments",
                    "columns": {
                        "id": "text",
                        "text": "text",
                        "author_id": {"type": "text", "path": "author.id"},
                    },
                }
            },
        }
    },
}
CLIPS: dict[str, Any] = {
    "params": {"url": {"type": "string", "required": True}},
    "records": {
        "mine_clips": {
            "at": "[0].data.clip",
            "one": True,
            "key": "id",
            "columns": {"id": "text", "title": "text"},
        },
        "mine_broadcaster_clips": {
            "at": "[1].data.user.clips.edges[].node",
            "key": "id",
            "columns": {"id": "text", "title": "text"},
        },
    },
}


def run(tmp_path: Path, path: str, declaration: dict[str, Any], answer: Any) -> tuple[Any, Path, Path]:
    """One `harvest run` of one query of `path`, declared in the job's catalog file `mine.yaml`, the server
    answering `answer`: the result, the output database and the catalog file."""
    catalog = tmp_path / "mine.yaml"
    catalog.write_text(yaml.safe_dump({"endpoints": {path: declaration}}, sort_keys=False))
    with sample_service({path: lambda params: answer}) as (url, _):
        query = {"id": "q", "endpoint": path, "params": {"url": "https://example.test/x"}}
        spec = write_spec(
            tmp_path, job_spec(url, tmp_path / "out", [query], name="mine", catalogs=[str(catalog)])
        )
        result = runner.invoke(app, ["run", str(spec)])
    return result, tmp_path / "out" / "harvest.duckdb", catalog


def said(result: Any) -> str:
    return " ".join(result.stderr.split())


def line_of(catalog: Path, text: str) -> int:
    """The line of the catalog file holding `text`."""
    return next(n for n, line in enumerate(catalog.read_text().splitlines(), 1) if text in line)


def test_a_child_at_that_misses_the_list_every_record_holds_stops_as_drift(
    prefect_harness: None, api_key: str, tmp_path: Path
) -> None:
    group = sample("_v1_network-a_group_posts.json")
    del group["cursor"]
    wrong = copy.deepcopy(POSTS)
    wrong["records"]["mine_group_posts"]["children"][COMMENTS]["at"] = "topComment"
    result, db, catalog = run(tmp_path, GROUP, wrong, group)
    assert result.exit_code == 1, result.output
    assert rows(db, "SELECT status, lists_missing FROM query_state") == [("drift", 1)]
    text = said(result)
    assert f"the answers of {GROUP} do not match its declaration in {catalog}:" in text, text
    assert (
        f"{COMMENTS}: topComment: the list is missing although the page had content (absent from 3 record(s) "
        "of mine_group_posts that hold an unread list of objects: `topComments` (2 items in the first)); the "
        f"declaration's `records.mine_group_posts.children.{COMMENTS}.at` is in "
        f"{catalog}:{line_of(catalog, 'at: topComment')}"
    ) in text, text
    assert "changed shape" not in text and "shapes:" not in text and "answer's keys" not in text


def test_a_record_without_its_child_list_is_quiet(
    prefect_harness: None, api_key: str, tmp_path: Path
) -> None:
    group = sample("_v1_network-a_group_posts.json")
    del group["cursor"], group["posts"][1]["topComments"]
    result, db, _ = run(tmp_path, GROUP, POSTS, group)
    assert result.exit_code == 0, result.output
    assert rows(db, "SELECT status, lists_missing FROM query_state") == [("complete", 0)]
    assert rows(db, f"SELECT count(*) FROM {COMMENTS}") == [(4,)]
    assert "changed shape" not in said(result) and "is missing" not in said(result)


def test_a_one_object_at_that_misses_its_object_beside_other_kinds_stops_as_drift(
    prefect_harness: None, api_key: str, tmp_path: Path
) -> None:
    clip = sample("_v1_streaming_clip.json")
    wrong = copy.deepcopy(CLIPS)
    wrong["records"]["mine_clips"]["at"] = "[0].data.clips"
    result, db, catalog = run(tmp_path, CLIP, wrong, clip)
    assert result.exit_code == 1, result.output
    assert rows(db, "SELECT status, lists_missing FROM query_state") == [("drift", 1)]
    text = said(result)
    assert "mine_clips: [0].data.clips: the object is missing although the page had content" in text, text
    assert f'`clip` holds an unread object: {{"id":"{clip[0]["data"]["clip"]["id"]}"' in text, text
    assert "`[0].data` holds: clip (an object)" in text, text
    place = f"{catalog}:{line_of(catalog, '[0].data.clips')}"
    assert f"the declaration's `records.mine_clips.at` is in {place}" in text, text
    assert "no keys" not in text and "the list is missing" not in text


def test_a_kind_at_one_object_without_one_true_is_told_to_declare_it(
    prefect_harness: None, api_key: str, tmp_path: Path
) -> None:
    clip = sample("_v1_streaming_clip.json")
    wrong = copy.deepcopy(CLIPS)
    del wrong["records"]["mine_clips"]["one"]
    result, db, catalog = run(tmp_path, CLIP, wrong, clip)
    assert result.exit_code == 1, result.output
    assert rows(db, "SELECT status, lists_missing FROM query_state") == [("drift", 1)]
    text = said(result)
    assert (
        "mine_clips: [0].data.clip: the list is missing although the page had content (an object, not a list:"
        in text
    )
    assert (
        f"`records.mine_clips.at` is in {catalog}:{line_of(catalog, '[0].data.clip')}: if that object is the one "
        "record the answer holds, declare the kind `one: true`"
    ) in text, text


def test_the_override_printed_for_an_empty_child_column_validates_and_fills_it(
    prefect_harness: None, api_key: str, tmp_path: Path
) -> None:
    group = sample("_v1_network-a_group_posts.json")
    del group["cursor"]
    renamed = copy.deepcopy(POSTS)
    renamed["records"]["mine_group_posts"]["children"][COMMENTS]["columns"]["created_at"] = {
        "type": "timestamp",
        "path": "publish_time",
    }
    result, db, _ = run(tmp_path, GROUP, renamed, group)
    assert result.exit_code == 0, result.output
    assert rows(db, f"SELECT count(*), count(created_at) FROM {COMMENTS}") == [(6, 0)]
    hint = re.search(r"add to the job spec `shapes: (\{.*?\})`", said(result))
    assert hint is not None, said(result)
    shapes = yaml.safe_load(hint.group(1))
    assert shapes == {GROUP: {COMMENTS: {"fields": {"created_at": "publishTime"}}}}
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({**yaml.safe_load(spec.read_text()), "shapes": shapes}))
    checked = runner.invoke(app, ["validate", str(spec)])
    assert checked.exit_code == 0, checked.output
    rebuilt = runner.invoke(app, ["rebuild", str(tmp_path / "out"), "--spec", str(spec)])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert rows(db, f"SELECT count(*), count(created_at) FROM {COMMENTS}") == [(6, 6)]
