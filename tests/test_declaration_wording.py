"""What a refused declaration says reads as English: `an integer`, not `a integer`; a closest name is offered only
when it is close (`pth` -> path), not for any key sharing two letters with one (`min` is not `joins`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from harvest.flows.cli import app

runner = CliRunner()

CATALOG = """\
endpoints:
  /v9/mine/group/posts:
    params:
      url: {type: string, required: true}
      limit: {type: integer, default: 10}
    records:
      mine_group_posts:
        at: posts
        key: id
        columns:
          id: text
          reaction_count: {type: integer, path: reactionCount}
"""


def refused(tmp_path: Path, catalog: str) -> str:
    (tmp_path / "mine.yaml").write_text(catalog)
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: mine\nbudget: {credits: 5}\ncatalogs: [mine.yaml]\nqueries:\n"
        "  - {endpoint: /v9/mine/group/posts, params: {url: 'https://group.example/1'}}\n"
    )
    result = runner.invoke(app, ["validate", str(spec)])
    assert result.exit_code == 2, result.output
    [line] = [line for line in result.stderr.splitlines() if line.startswith(f"{tmp_path / 'mine.yaml'}:")]
    return line.split(": ", 1)[1]


def test_a_default_that_is_no_integer_is_said_to_need_an_integer(tmp_path: Path) -> None:
    line = refused(tmp_path, CATALOG.replace("default: 10", "default: abc"))
    assert line == (
        'endpoints["/v9/mine/group/posts"].params.limit.default: '
        "'abc' is not an allowed value; allowed: an integer"
    )


@pytest.mark.parametrize(("key", "hint"), [("min", ""), ("pth", " (the closest: path)")])
def test_an_unknown_column_key_is_offered_a_closest_name_only_when_one_is_close(
    tmp_path: Path, key: str, hint: str
) -> None:
    line = refused(tmp_path, CATALOG.replace("path: reactionCount}", f"path: reactionCount, {key}: 0}}"))
    assert line == (
        f'endpoints["/v9/mine/group/posts"].records.mine_group_posts.columns.reaction_count.{key}: '
        f"unknown key '{key}'{hint}; allowed: type, path, description, renamed_from, joins, template"
    )


@pytest.mark.parametrize(
    ("declared", "said"),
    [
        ("{type: integer, min: 1, max: 10, default: 50}", "default: 50 is outside its own bounds; allowed: 1 to 10"),
        ("{type: integer, max: 0, default: 5}", "default: 5 is outside its own bounds; allowed: at most 0"),
        ("{type: string, pattern: '^[A-Z]{2}$', default: abc}",
         "default: 'abc' does not match its own pattern; allowed: a text matching ^[A-Z]{2}$"),
        ("{type: string, max_length: 2, default: abc}",
         "default: 'abc' is not of its own length; allowed: at most 2 characters"),
        ("{type: integer, min: 1, max: 0}", "min: min 1 is above max 0: no value fits; allowed: min at most max"),
    ],
)  # fmt: skip
def test_a_default_its_own_bounds_refuse_and_a_range_no_value_fits_are_refused_before_the_run(
    tmp_path: Path, declared: str, said: str
) -> None:
    """They validated, and every night's query then failed at run time in pydantic's words (a model's class
    name, no file, no line), with a `--continue` that failed the same way."""
    line = refused(tmp_path, CATALOG.replace("{type: integer, default: 10}", declared))
    assert line == f'endpoints["/v9/mine/group/posts"].params.limit.{said}'
