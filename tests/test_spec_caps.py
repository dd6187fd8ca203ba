"""A cap no request fits in, on a dependent query or a fan-out's total: refused before anything is sent, with
the file, line, field and price, when the spec alone fixes the price; accepted when the parent's value can make
a request fit."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from harvest.flows.cli import app
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import running

runner = CliRunner()

FULL_VIDEOS = """\
name: full-videos
budget: {credits: 100}
output: OUT
queries:
  - id: vids
    endpoint: /v3/short-video/profile/videos
    params: {handle: nasa, sort_by: latest}
    incremental: true
  - id: full
    endpoint: /v2/short-video/video
    params: {download_media: true}
    for_each: {url: {from: vids, field: url}}
    max_credits: 5
"""
"""The media of every new video at 10 credits a request (`download_media`), each capped at 5: the parent fills
`url`, which the price does not read, so no instance could ever send a request."""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(text.replace("OUT", str(tmp_path / "out")))
    return path


def said(result: object) -> str:
    return " ".join(result.stderr.split())  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", [["validate"], ["plan", "--check"]])
def test_a_dependent_whose_price_the_spec_fixes_is_refused_below_it(
    tmp_path: Path, command: list[str]
) -> None:
    path = write(tmp_path, FULL_VIDEOS)
    result = runner.invoke(app, [command[0], str(path), *command[1:]])
    assert result.exit_code == 2, result.output
    assert (
        f"{path}:13: queries[1].max_credits: 5 is below the price of one request: /v2/short-video/video with "
        "these parameters costs 10 credits a request, so the query could never send one; allowed: an integer "
        ">= 10, or no max_credits"
    ) in said(result)
    assert "nothing was sent" in result.stderr
    fits = path.read_text().replace("max_credits: 5", "max_credits: 10")
    assert runner.invoke(app, ["validate", str(write(tmp_path, fits))]).exit_code == 0


def test_a_dependent_fans_out_total_below_its_price_is_refused(tmp_path: Path) -> None:
    """`max_credits_total` caps all instances together: below one request's price, none could send one (a run
    would pay its parent and tell `--continue` to pick them up, which never can)."""
    path = write(tmp_path, FULL_VIDEOS.replace("max_credits: 5", "max_credits_total: 9"))
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert (
        f"{path}:13: queries[1].max_credits_total: 9 is below the price of one request: /v2/short-video/video "
        "with these parameters costs 10 credits a request, so none of its queries could ever send one; allowed: "
        "an integer >= 10, or no max_credits_total"
    ) in said(result)


def test_a_fan_outs_total_below_its_cheapest_request_is_refused(tmp_path: Path) -> None:
    """A fan-out of values: its total must fit the cheapest request (details cost 25, the rest 1)."""
    spec = """\
name: ads
budget: {credits: 100}
queries:
  - id: ads
    endpoint: /v1/search-engine/company/ads
    params: {topic: all, get_ad_details: true}
    for_each: {domain: [a.com, b.com]}
    max_credits_total: 24
"""
    path = write(tmp_path, spec)
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert f"{path}:8: queries[0].max_credits_total: 24 is below the price of one request" in said(result)
    assert "costs 25 credits a request" in said(result)
    mixed = spec.replace("topic: all, get_ad_details: true", "topic: all").replace(
        "{domain: [a.com, b.com]}", "{domain: [a.com], get_ad_details: [true, false]}"
    )
    assert runner.invoke(app, ["validate", str(write(tmp_path, mixed))]).exit_code == 0


PARENT = """\
name: priced-by-parent
budget: {credits: 100}
queries:
  - id: vids
    endpoint: /v3/short-video/profile/videos
    params: {handle: nasa, sort_by: latest}
"""


def test_a_dependent_whose_price_its_parents_value_decides_is_accepted(tmp_path: Path) -> None:
    """The parent fills `get_ad_details`, which the price reads (25 credits when true, else 1): a value can fit
    in 5 credits, so the spec is valid (a run says apart each instance that costs more)."""
    spec = PARENT + (
        "  - id: ads\n    endpoint: /v1/search-engine/company/ads\n    params: {topic: all, domain: a.com}\n"
        "    for_each: {get_ad_details: {from: vids, field: url}}\n    max_credits: 5\n"
    )
    result = runner.invoke(app, ["validate", str(write(tmp_path, spec))])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("ok: 2 queries (0 fanned out, 1 dependent)")


def test_a_dependent_no_value_of_which_fits_is_refused_with_the_least_it_costs(tmp_path: Path) -> None:
    """`use_ai_as_fallback` takes one value only ("true", 11 credits): whatever the parent gives, 5 is too few."""
    spec = PARENT + (
        "  - id: tr\n    endpoint: /v1/short-video/video/transcript\n    params: {url: 'https://x.example/v/1'}\n"
        "    for_each: {use_ai_as_fallback: {from: vids, field: url}}\n    max_credits: 5\n"
    )
    path = write(tmp_path, spec)
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert (
        f"{path}:11: queries[1].max_credits: 5 is below the price of one request: /v1/short-video/video/transcript "
        "with these parameters costs at least 11 credits a request whatever value of use_ai_as_fallback its parent "
        "vids gives, so the query could never send one; allowed: an integer >= 11"
    ) in said(result)


def test_a_run_of_the_refused_dependent_spends_nothing(tmp_path: Path) -> None:
    """README: an invalid spec spends nothing. Against a real sandbox the parent's page is not paid either."""
    with running(SandboxConfig(api_keys={"k": 100})) as sb:
        path = write(tmp_path, FULL_VIDEOS + f"service: {{base_url: '{sb.base_url}'}}\n")
        result = runner.invoke(app, ["run", str(path)], env={"HARVEST_API_KEY": "k"})
        sent, billed = sb.ledger, sb.billed_total()
    assert result.exit_code == 2, result.output
    assert f"{path}:13: queries[1].max_credits: 5 is below the price of one request" in said(result)
    assert sent == [] and billed == 0
    assert not (tmp_path / "out").exists()
