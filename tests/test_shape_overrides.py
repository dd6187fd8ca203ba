"""A changed shape read from the job spec, without a release: the drift message names the override, `harvest
rebuild --spec` lands the pages already paid with it (no request), `harvest run` reads it from then on; a GraphQL
Relay connection is read wherever a list belongs. Over real HTTP against the sandbox, real Prefect flow runs."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

import harvest.flows.collect  # noqa: F401  (Prefect binds its log handlers on first import: not inside CliRunner)
from harvest.connectors.catalog.record_paths import path_problem
from harvest.flows.cli import app
from harvest.flows.spec.model import RECORD_PATH_PATTERN
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.drift_shapes import SHAPES
from harvest.sandbox.expected import full_crawl
from harvest.sandbox.wire.serving import running
from tests.crawl_helpers import data_entries
from tests.declaring_helpers import Variant, aliased, variants
from tests.endpoints import CLIP, FEED
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, job_spec, rows, scalar, write_spec

runner = CliRunner()


def spec_of(tmp_path: Path, base_url: str, endpoint: str, params: dict[str, Any], **extra: Any) -> Path:
    return write_spec(
        tmp_path,
        job_spec(
            base_url,
            tmp_path / "out",
            [{"id": "q", "endpoint": endpoint, "params": params}],
            name="shapes",
            **extra,
        ),
    )


@pytest.mark.parametrize("variant", variants(FEED))
def test_the_drift_message_names_the_override_and_the_spec_reads_the_new_shape(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variant: Variant
) -> None:
    """The same for a declared endpoint: its drift is said, its `shapes:` read, its pages rebuilt."""
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    params = {"handle": "nasa.example"}
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages=(3, 3), page_size=5, drift=SHAPES["renamed-list"].drift
    )
    output, db = tmp_path / "out", tmp_path / "out" / "harvest.duckdb"
    posts_table = variant.table("microblog_b_posts")
    with aliased(config) as sb:
        spec = spec_of(tmp_path, sb.base_url, variant.path, params, **variant.spec({}))
        drifted = runner.invoke(app, ["run", str(spec)])
        assert drifted.exit_code == 1, drifted.output
        said = " ".join(drifted.stderr.split())
        text = yaml.safe_load(spec.read_text())
        if variant.declared:
            # The job's own declaration is what to fix: the message names it, in the spec, at the `at`'s line.
            fix = re.search(r"set `at: (\S+)` for (\w+) in (\S+):(\d+),", said)
            assert fix is not None, said
            assert (json.loads(fix.group(1)), fix.group(2), fix.group(3)) == ("items", posts_table, str(spec))
            assert "at:" in spec.read_text().splitlines()[int(fix.group(4)) - 1]
            assert "add to the job spec `shapes:" not in said and "changed shape" not in said
            kind = text["endpoints"][variant.path]["records"][posts_table]
            kind["at"] = ["items", *kind["at"]]  # the new place first, as an override would read it
            spec.write_text(yaml.safe_dump(text))
        else:
            hint = re.search(r"add to the job spec `shapes: (\{.*?\})`", said)
            assert hint is not None, drifted.stderr
            shapes = yaml.safe_load(hint.group(1))
            assert shapes == {variant.path: {posts_table: {"records": "items"}}}
            # The user pastes the override into the spec: the paid page lands with it, no request sent.
            spec.write_text(yaml.safe_dump({**text, "shapes": shapes}))
        assert runner.invoke(app, ["validate", str(spec)]).exit_code == 0
        paid = len(sb.ledger)
        rebuilt = runner.invoke(app, ["rebuild", str(output), "--spec", str(spec)])
        assert rebuilt.exit_code == 0, rebuilt.output
        assert len(sb.ledger) == paid, "rebuild sent a request"
        assert scalar(db, f"SELECT count(*) FROM {posts_table}") == 5
        assert rows(db, "SELECT status, records, lists_missing FROM query_state") == [("drift", 5, 0)]

        # A plain rebuild later reads the pages the same way (the manifest keeps the override).
        assert runner.invoke(app, ["rebuild", str(output)]).exit_code == 0
        assert scalar(db, f"SELECT count(*) FROM {posts_table}") == 5

        continued = runner.invoke(app, ["run", str(spec), "--continue"])
        assert continued.exit_code == 0, continued.output
        asked = [e.params for e in data_entries(sb)]

    posts = full_crawl(FEED, params, config)["posts"]
    assert sorted(r[0] for r in rows(db, f"SELECT uri FROM {posts_table}")) == sorted(p["uri"] for p in posts)
    assert len(asked) == 3 and len({str(sorted(a.items())) for a in asked}) == 3, "a page was paid twice"
    assert scalar(db, "SELECT sum(credits_spent) FROM runs") == 3


def test_a_field_override_reads_a_renamed_column(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fields: {column: path}`: the column is read at the spec's path first (the catalog's `likeCount` is not
    sent under that name by this answer: `views` stands in for a renamed counter)."""
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages=(1, 1), page_size=4)
    params = {"handle": "nasa.example"}
    with running(config) as sb:
        shapes = {FEED: {"microblog_b_posts": {"fields": {"like_count": ["repostCount"]}}}}
        spec = spec_of(tmp_path, sb.base_url, FEED, params, shapes=shapes)
        done = runner.invoke(app, ["run", str(spec)])
        assert done.exit_code == 0, done.output
    db = tmp_path / "out" / "harvest.duckdb"
    posts = full_crawl(FEED, params, config)["posts"]
    assert sorted(rows(db, "SELECT uri, like_count FROM microblog_b_posts")) == sorted(
        (p["uri"], p["repostCount"]) for p in posts
    )


def test_a_relay_connection_is_read_where_a_list_belongs(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clip's other clips come as the platform pages them, a GraphQL connection (the published answer)."""
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    params = {"url": "https://clips.streaming.example/SomeClip-abc"}
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE})
    with running(config) as sb:
        spec = spec_of(tmp_path, sb.base_url, CLIP, params)
        done = runner.invoke(app, ["run", str(spec)])
        assert done.exit_code == 0, done.output
        body = sb.client().get(CLIP, params=params).json()
    assert set(body[1]["data"]["user"]["clips"]) == {"edges", "pageInfo"}  # the sandbox did send a connection
    db = tmp_path / "out" / "harvest.duckdb"
    clips = full_crawl(CLIP, params, config)["broadcaster_clips"]
    assert clips and sorted(r[0] for r in rows(db, "SELECT id FROM streaming_broadcaster_clips")) == sorted(
        c["id"] for c in clips
    )
    assert rows(db, "SELECT status, lists_missing, records_without_key FROM query_state") == [
        ("complete", 0, 0)
    ]


@pytest.mark.parametrize(
    ("shapes", "problem"),
    [
        ({"/v1/nope": {"t": {"records": "x"}}}, 'shapes["/v1/nope"]: unknown endpoint'),
        ({FEED: {"nope": {"records": "x"}}}, f'shapes["{FEED}"].nope: {FEED} has no record or child table'),
        ({FEED: {"microblog_b_posts": {"records": "a..b"}}}, "records[0]: 'a..b' is not a record path"),
        ({FEED: {"microblog_b_posts": {"fields": {"likes": "x"}}}}, "fields.likes: 'likes' is not a column"),
        ({FEED: {"microblog_b_posts": {"records": "a|b"}}}, "'a|b' is not a record path"),
        ({FEED: {"microblog_b_posts": {}}}, "names neither `records` nor `fields`"),
        ({FEED: {"microblog_b_posts": {"where": "x"}}}, "unknown key 'where'; allowed: records, fields"),
    ],
)
def test_a_bad_override_is_refused_with_its_line_before_anything_is_paid(
    tmp_path: Path, shapes: dict[str, Any], problem: str
) -> None:
    spec = spec_of(tmp_path, "sandbox", FEED, {"handle": "x"}, shapes=shapes)
    for command in (["validate", str(spec)], ["run", str(spec)]):
        refused = runner.invoke(app, command)
        assert refused.exit_code == 2, refused.output
        assert f"{spec}:" in refused.stderr and problem in refused.stderr, refused.stderr
        assert "allowed:" in refused.stderr


@given(st.text(alphabet=st.sampled_from("ab .[]|0"), max_size=12))
def test_the_json_schema_pattern_and_the_spec_check_agree(path: str) -> None:
    """Editors (the JSON Schema) and `harvest validate` accept the same record paths."""
    assert (re.fullmatch(RECORD_PATH_PATTERN, path) is not None) == (path_problem(path) is None), path


@pytest.mark.parametrize("path", ["0 []", "a .b", "items []", "a.b [0]"])
def test_a_key_with_a_space_before_its_brackets_is_refused_by_both(path: str) -> None:
    """Found by the property above on a loaded machine (hypothesis tried `0 []`): the check took it, the
    schema did not."""
    assert path_problem(path) is not None and re.fullmatch(RECORD_PATH_PATTERN, path) is None
