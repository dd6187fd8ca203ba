"""A declared endpoint on the wire, as the sandbox's own endpoints are: parameters checked as declared (400 naming
the parameter, not billed), the declared price billed (per parameter value), faults and trigger words, a
declaration it cannot serve refused by name; and the values the interface's chains pass on are accepted."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from harvest.connectors.catalog.job_catalog import BUILTIN_DIR, builtin_declarations
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import RunningSandbox
from tests.declared_helpers import declaration, http_pages, records
from tests.endpoints import ADVERTISERS, COMMENT_REPLIES, PINS, VIDEO_COMMENTS, VIDEO_SEARCH
from tests.published_helpers import PUBLISHED
from tests.test_cli_sandbox import harvest_sandbox

ADS = "/v1/search-engine/company/ads"
VIDEO = "/v1/video-platform/video"


def catalog() -> dict[str, Any]:
    """harvest's catalog as plain declarations: what the sandboxes harvest starts are handed (`catalog=`); the
    endpoints the sandbox emulates no other way are served from them, as a job's declared ones are."""
    return builtin_declarations()


def filed(tmp_path: Path) -> Path:
    """A catalog file of the user's: one endpoint harvest does not ship."""
    file = tmp_path / "mine.yaml"
    file.write_text(yaml.safe_dump({"endpoints": {"/v1/x/filed": declaration()}}), encoding="utf-8")
    return file


@pytest.fixture
def catalog_sandbox(sandbox_factory: Callable[..., RunningSandbox]) -> RunningSandbox:
    """A sandbox serving harvest's catalog beside its own emulations (among them the three endpoints the
    interface refers to without listing them: a video's record, its comments, a company's ads)."""
    return sandbox_factory(SandboxConfig(api_keys={"k": 1000}, catalog=catalog()))


REFUSED = [
    ({"topic": "all"}, "domain", "one of domain or advertiser_id is required"),
    ({"domain": "acme.example", "topic": "sports"}, "topic", "allowed: all, political"),
    ({"domain": "acme.example", "region": "usa"}, "region", "does not match"),
    ({"domain": "acme.example", "start_date": "2026-1-1"}, "start_date", "does not match"),
    ({"domain": "acme.example", "get_ad_details": "maybe"}, "get_ad_details", "must be a boolean"),
]


@pytest.mark.parametrize(("params", "named", "says"), REFUSED, ids=[r[1] for r in REFUSED])
def test_a_request_against_the_declaration_is_answered_400_naming_the_parameter_unbilled(
    catalog_sandbox: RunningSandbox, params: dict[str, str], named: str, says: str
) -> None:
    with catalog_sandbox.client() as client:
        answer = client.get(ADS, params=params)
    assert answer.status_code == 400, answer.text
    body = answer.json()
    assert body["parameter"] == named and says in body["message"]
    assert body["credits_charged"] == 0 and catalog_sandbox.balance() == 1000 == body["credits_remaining"]


def test_required_bounds_and_lengths_are_checked_as_declared(
    sandbox_factory: Callable[..., RunningSandbox],
) -> None:
    decl = declaration()
    decl["params"]["n"] = {"type": "integer", "min": 1, "max": 5}
    decl["params"]["code"] = {"type": "string", "min_length": 2, "max_length": 3}
    sb = sandbox_factory(SandboxConfig(api_keys={"k": 10}, declared={"/v1/x/things": decl}))
    cases = [({}, "q"), ({"q": "a", "n": "0"}, "n"), ({"q": "a", "n": "6"}, "n"), ({"q": "a", "n": "two"}, "n"),
             ({"q": "a", "code": "c"}, "code"), ({"q": "a", "code": "long"}, "code")]  # fmt: skip
    with sb.client() as client:
        answers = [client.get("/v1/x/things", params=params) for params, _ in cases]
        fine = client.get("/v1/x/things", params={"q": "a", "n": "5", "code": "ab"})
    assert [(a.status_code, a.json()["parameter"]) for a in answers] == [(400, named) for _, named in cases]
    assert fine.status_code == 200 and sb.balance() == 9


def test_the_price_of_a_parameter_value_is_billed(catalog_sandbox: RunningSandbox) -> None:
    """Company ads: 25 credits with `get_ad_details=true` (or 1), 1 without it or with false."""
    asked = [{"get_ad_details": "true"}, {"get_ad_details": "1"}, {}, {"get_ad_details": "false"}]
    with catalog_sandbox.client() as client:
        answers = [client.get(ADS, params={"advertiser_id": "AR0161", **extra}).json() for extra in asked]
    assert [a["credits_charged"] for a in answers] == [25, 25, 1, 1]
    assert [a["credits_remaining"] for a in answers] == [975, 950, 949, 948]
    assert [e.credits for e in catalog_sandbox.ledger] == [25, 25, 1, 1]


def test_faults_and_trigger_words_apply_to_a_declared_endpoint(
    sandbox_factory: Callable[..., RunningSandbox],
) -> None:
    """A forced 500 and 429 are not billed; `missing` answers the service's "not found" (200, empty lists, no
    cursor) and `blocked` a 403, both billed; `nonexistent` a 400, not billed."""
    sb = sandbox_factory(
        SandboxConfig(
            api_keys={"k": 1000},
            catalog=catalog(),
            fault_plan_by_path={VIDEO_COMMENTS: ["server_error", "rate_limit"]},
        )
    )
    with sb.client() as client:
        faulted = [
            client.get(VIDEO_COMMENTS, params={"url": "https://v.example/watch?v=a"}).status_code
            for _ in range(2)
        ]
        missing = client.get(VIDEO_COMMENTS, params={"url": "https://v.example/missing"})
        blocked = client.get(VIDEO_COMMENTS, params={"url": "https://v.example/blocked"})
        nonexistent = client.get(VIDEO_COMMENTS, params={"url": "https://v.example/nonexistent"})
    assert faulted == [500, 429]
    assert missing.status_code == 200 and missing.json()["comments"] == []
    assert missing.json()["continuationToken"] is None and missing.json()["success"] is True
    assert blocked.status_code == 403 and nonexistent.status_code == 400
    assert [e.credits for e in sb.ledger] == [0, 0, 1, 1, 0] and sb.balance() == 998


DECLARATIONS_REFUSED = [
    ({**declaration(), "paging": {"style": "offset"}}, "paging.style: 'offset' is not a paging style"),
    ({**declaration(), "records": {}}, "records: an endpoint needs at least one record kind"),
]


@pytest.mark.parametrize(("decl", "says"), DECLARATIONS_REFUSED, ids=["style", "records"])
def test_a_declaration_the_sandbox_cannot_serve_is_refused_naming_it(decl: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match="declared endpoint /v1/x/things: " + says.replace("(", r"\(")):
        SandboxConfig(declared={"/v1/x/things": decl})
    bad_key = declaration()
    bad_key["records"]["things"]["key"] = "nope"
    with pytest.raises(ValueError, match=r"records.things.key: 'nope' is not one of its columns"):
        SandboxConfig(declared={"/v1/x/things": bad_key})
    with pytest.raises(
        ValueError, match=r"records.things.at: a list that is the answer itself leaves no room"
    ):
        SandboxConfig(declared={"/v1/x/things": declaration("cursor", records_at="")})
    with pytest.raises(ValueError, match=f"already serves {VIDEO_SEARCH}"):
        SandboxConfig(declared={VIDEO_SEARCH: declaration()})


def test_the_interface_chains_values_are_taken_by_the_endpoints_they_lead_to(
    catalog_sandbox: RunningSandbox,
) -> None:
    """A comment's `repliesContinuationToken` starts a thread on the built-in replies endpoint, an advertiser's
    `advertiser_id` finds its ads, a video search result's `url` its video record (each echoing what it was
    asked for)."""
    endpoints = catalog()
    with catalog_sandbox.client() as client:
        comments = http_pages(
            client, VIDEO_COMMENTS, endpoints[VIDEO_COMMENTS], {"url": "https://v.example/watch?v=a"}
        )
        tokens = [c["repliesContinuationToken"] for b in comments for c in b["comments"]]
        threads = [client.get(COMMENT_REPLIES, params={"continuationToken": t}) for t in tokens]
        advertisers = client.get(ADVERTISERS, params={"query": "running shoes"}).json()["advertisers"]
        ads = {
            a["advertiser_id"]: client.get(ADS, params={"advertiser_id": a["advertiser_id"]})
            for a in advertisers
        }
        urls = [v["url"] for v in client.get(VIDEO_SEARCH, params={"query": "trail"}).json()["videos"]]
        videos = [client.get(VIDEO, params={"url": url}) for url in urls]
    assert len(tokens) == len(set(tokens)) >= 1 and all(t and " " not in t for t in tokens)
    assert all(t.status_code == 200 and t.json()["comments"] for t in threads)
    reply_ids = [r["id"] for t in threads for r in t.json()["comments"]]
    assert len(reply_ids) == len(set(reply_ids))  # each token is a thread of its own
    assert all(a.status_code == 200 and a.json()["ads"] for a in ads.values())
    assert all(ad["advertiserId"] == asked for asked, a in ads.items() for ad in a.json()["ads"])
    assert [v.status_code for v in videos] == [200] * len(urls) and urls
    assert [v.json()["url"] for v in videos] == urls
    assert len({v.json()["id"] for v in videos}) == len(urls)
    kind = endpoints[VIDEO]["records"]["video_platform_video_details"]
    assert all(len(records(v.json(), kind)) == 1 for v in videos)


def test_the_embedded_sandbox_serves_the_endpoints_the_job_declares(tmp_path: Path) -> None:
    """`service.base_url: sandbox`: the sandbox a run starts serves harvest's catalog, the job's `catalogs:` and
    its `endpoints:`."""
    from harvest.flows.run.service_access import open_service
    from harvest.flows.spec import load_spec

    spec = _declaring_spec(tmp_path, {"base_url": "sandbox"})

    async def ask() -> list[httpx.Response]:
        async with open_service(load_spec(spec), None) as access:
            headers = {"x-api-key": access.api_key.reveal()}
            async with httpx.AsyncClient(base_url=access.url, headers=headers) as client:
                return [
                    await client.get(ADS, params={"advertiser_id": "AR1", "get_ad_details": "true"}),
                    await client.get("/v1/x/things", params={"q": "a"}),
                    await client.get("/v1/x/filed", params={"q": "a"}),
                ]

    ads, things, from_file = asyncio.run(ask())
    assert ads.status_code == 200 and ads.json()["credits_charged"] == 25
    assert {ad["advertiserId"] for ad in ads.json()["ads"]} == {"AR1"}
    assert things.status_code == 200 and things.json()["items"]
    assert from_file.status_code == 200 and from_file.json()["items"]


def _declaring_spec(tmp_path: Path, service: dict[str, Any]) -> Path:
    """A job naming a catalog file of its own and declaring an endpoint inline; its one query is a pin search."""
    spec = tmp_path / "job.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "declares",
                "service": service,
                "budget": {"credits": 10},
                "catalogs": [str(filed(tmp_path))],
                "endpoints": {"/v1/x/things": declaration()},
                "queries": [{"id": "pins", "endpoint": PINS, "params": {"query": "q"}}],
            }
        ),
        encoding="utf-8",
    )
    return spec


@pytest.mark.scenario
def test_harvest_sandbox_serves_a_catalog_file_and_a_spec(tmp_path: Path) -> None:
    """`harvest sandbox --catalog FILE` and `--spec SPEC` (its `catalogs:` and `endpoints:`) serve the declared
    endpoints offline beside harvest's catalog, priced as declared; a declaration harvest refuses exits 2 naming
    the file, the field and the value, serving nothing."""
    spec = _declaring_spec(tmp_path, {})
    for option in (["--catalog", str(filed(tmp_path))], ["--spec", str(spec)]):
        with harvest_sandbox(*option, "--api-key", "k", "--credits", "100") as base:
            with httpx.Client(base_url=base, headers={"x-api-key": "k"}) as client:
                ads = client.get(ADS, params={"domain": "acme.example", "get_ad_details": "true"})
                video = client.get(VIDEO, params={"url": "https://v.example/watch?v=a"})
                things = client.get("/v1/x/things", params={"q": "a"})
                from_file = client.get("/v1/x/filed", params={"q": "a"})
            assert from_file.status_code == 200 and from_file.json()["items"]
            assert ads.status_code == 200 and ads.json()["credits_charged"] == 25 and ads.json()["ads"]
            assert video.status_code == 200 and video.json()["url"] == "https://v.example/watch?v=a"
            assert things.status_code == (200 if option[0] == "--spec" else 404)
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "endpoints:\n  /v1/x/things:\n    paging: {style: offset}\n"
        "    records: {things: {at: a, key: id, columns: {id: text}}}\n",
        encoding="utf-8",
    )
    harvest = Path(sys.executable).with_name("harvest")
    done = subprocess.run(
        [str(harvest), "sandbox", "--catalog", str(bad)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert f"{bad}:3" in done.stderr and "paging.style" in done.stderr and "offset" in done.stderr


def test_the_test_gate_counts_and_holds_requests_to_a_declared_endpoint() -> None:
    """`tests/sandbox_gate.py` (the kill and stop tests' door) sees a declared path as it sees a built-in one."""
    from tests.sandbox_gate import gated

    with gated(SandboxConfig(catalog=catalog())) as sb, sb.client() as client:
        sb.gate.close_after(1, path=VIDEO_COMMENTS)
        assert client.get(VIDEO_COMMENTS, params={"url": "https://v.example/watch?v=a"}).status_code == 200
        assert sb.gate.passed_by_path == {VIDEO_COMMENTS: 1} and sb.gate.closed


def test_the_sandbox_serves_harvests_plain_declarations_as_the_yaml_written() -> None:
    """The contract: what harvest hands the sandbox (`builtin_declarations`: checked, every default filled) is
    served exactly as the catalog file's own YAML is, page for page."""
    from harvest.sandbox.expected import crawl

    asked_paths = (VIDEO, VIDEO_COMMENTS, ADS)
    yaml_written = {
        path: decl
        for file in sorted(BUILTIN_DIR.glob("*.yaml"))
        for path, decl in yaml.safe_load(file.read_text(encoding="utf-8"))["endpoints"].items()
        if path in asked_paths
    }
    plain = SandboxConfig(pages=(2, 3), page_size=4, declared={p: catalog()[p] for p in asked_paths})
    written = SandboxConfig(pages=(2, 3), page_size=4, declared=yaml_written)
    asked = {
        VIDEO: {"url": "https://v.example/watch?v=a"},
        VIDEO_COMMENTS: {"url": "https://v.example/watch?v=a", "order": "newest"},
        ADS: {"domain": "acme.example", "get_ad_details": True},
    }
    for path, params in asked.items():
        pages = [(p.body, p.next, p.dangling) for p in crawl(path, params, plain, follow_dangling=True)]
        assert pages == [
            (p.body, p.next, p.dangling) for p in crawl(path, params, written, follow_dangling=True)
        ]
        assert pages[-1][0] != {"cursor": "-end-"} or path == ADS  # the cursor style ends as pin search does


def test_a_declared_path_replays_a_recorded_answer(sandbox_factory: Callable[..., RunningSandbox]) -> None:
    """`--replay PATH=FILE` takes a path served from its declaration: the service's published video answer
    served as it is, after the declared checks, billed."""
    from harvest.sandbox.served_paths import replay_answers

    published = PUBLISHED / "v1_video-platform_video--cli.json"
    if not published.exists():
        pytest.skip(f"{published} is absent: the published answers are read in place from ../shared/spec/")
    with pytest.raises(ValueError, match="one of the served paths"):
        replay_answers([f"/v1/x/things={published}"], also=tuple(catalog()))
    replayed = replay_answers([f"{VIDEO}={published}"], also=tuple(catalog()))
    sb = sandbox_factory(SandboxConfig(api_keys={"k": 10}, catalog=catalog(), replay=replayed))
    with sb.client() as client:
        answer = client.get(VIDEO, params={"url": "https://www.youtube.com/watch?v=Y2Ah_DFr8cw"})
        refused = client.get(VIDEO)
    assert answer.content == published.read_bytes() and refused.status_code == 400
    assert [e.credits for e in sb.ledger] == [1, 0]
