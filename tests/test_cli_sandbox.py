"""`harvest sandbox` as a user runs it: a real process serving on 127.0.0.1 with the options given."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from harvest.sandbox.drift_shapes import SHAPES
from tests.endpoints import FEED, FORUM, OLD_BALANCE, PINS, TWEETS
from tests.net_helpers import free_port, wait_until_serving
from tests.published_helpers import PUBLISHED


@contextmanager
def harvest_sandbox(*options: str) -> Iterator[str]:
    """`harvest sandbox` in its own process with `options`, up and answering; yields its base URL."""
    port = free_port()
    harvest = Path(sys.executable).with_name("harvest")
    proc = subprocess.Popen(
        [str(harvest), "sandbox", "--port", str(port), *options],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(f"{base}/v1/credit-balance", proc)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_harvest_sandbox_serves_with_the_given_key_credits_and_scale() -> None:
    options = [
        "--api-key",
        "cli-key",
        "--credits",
        "3",
        "--pages",
        "2",
        "2",
        "--page-size",
        "7",
        "--no-quirks",
    ]
    with harvest_sandbox(*options) as base:
        with httpx.Client(base_url=base, headers={"x-api-key": "cli-key"}) as client:
            first = client.get(PINS, params={"query": "trail"}).json()
            assert len(first["pins"]) == 7 and first["cursor"]
            second = client.get(PINS, params={"query": "trail", "cursor": first["cursor"]})
            assert second.json()["pins"] and not second.json().get("cursor")  # two pages exactly
            assert client.get(OLD_BALANCE).json() == {"creditCount": 1}
            # --no-quirks: a misspelled parameter is refused instead of silently ignored
            assert client.get(PINS, params={"query": "x", "cursr": "a"}).status_code == 400
            assert client.get(PINS, params={"query": "x"}).status_code == 200
            assert client.get(PINS, params={"query": "y"}).status_code == 402  # balance 0
        assert httpx.get(f"{base}/v1/pinboard/search", params={"query": "x"}).status_code == 401


def test_harvest_sandbox_serves_the_drift_shapes_it_names() -> None:
    with (
        harvest_sandbox("--drift", "renamed-secondary", "--drift", "keyed-list") as base,
        httpx.Client(base_url=base, headers={"x-api-key": "sandbox-key"}) as client,
    ):
        forum = client.get(FORUM, params={"subreddit": "running", "sort": "top"}).json()
        assert forum["replies"] and "comments" not in forum and forum["posts"]
        feed = client.get(FEED, params={"handle": "nasa.example"}).json()
        assert isinstance(feed["feed"], dict) and all("uri" in post for post in feed["feed"].values())
        pins = client.get(PINS, params={"query": "trail"}).json()
        assert isinstance(pins["pins"], list)  # shapes not asked for stay as documented


def test_harvest_sandbox_refuses_an_unknown_drift_and_lists_the_shapes() -> None:
    harvest = Path(sys.executable).with_name("harvest")
    listed = subprocess.run([str(harvest), "sandbox", "--help"], capture_output=True, text=True, timeout=30)
    refused = subprocess.run(
        [str(harvest), "sandbox", "--drift", "renamed-lists"], capture_output=True, text=True, timeout=30
    )
    assert refused.returncode == 2
    assert "--drift: no shape 'renamed-lists'" in refused.stderr
    for name in SHAPES:
        assert name in refused.stderr and f"{name}: " in listed.stdout, name


def test_harvest_sandbox_latency_delays_every_data_answer() -> None:
    """`--latency`: a service that takes its time per page, as the fan-out bench's second row serves it."""
    import time

    with (
        harvest_sandbox("--api-key", "cli-key", "--latency", "0.5") as base,
        httpx.Client(base_url=base, headers={"x-api-key": "cli-key"}) as client,
    ):
        for query in ("trail", "lake"):
            began = time.monotonic()
            assert client.get(PINS, params={"query": query}).status_code == 200
            assert time.monotonic() - began >= 0.5


def test_harvest_sandbox_replays_an_answer_as_it_is(tmp_path: Path) -> None:
    """`--replay PATH=FILE`: a published (or recorded) answer, served byte for byte and billed; other paths are
    emulated; a path that is not the service's is refused."""
    published = PUBLISHED / "v1_pinboard_search--cli.json"
    if not published.exists():
        pytest.skip(f"{published} is absent: the published answers are read in place from ../shared/spec/")
    with (
        harvest_sandbox(
            "--api-key", "cli-key", "--credits", "5", "--replay", f"/v1/pinboard/search={published}"
        ) as base,
        httpx.Client(base_url=base, headers={"x-api-key": "cli-key"}) as client,
    ):
        answer = client.get(PINS, params={"query": "Italian Pot Roast"})
        assert answer.content == published.read_bytes()
        assert client.get(OLD_BALANCE).json() == {"creditCount": 4}
        assert client.get(PINS, params={}).status_code == 400  # still validated
        assert "tweets" in client.get(TWEETS, params={"url": "u"}).json()
    harvest = Path(sys.executable).with_name("harvest")
    refused = subprocess.run(
        [str(harvest), "sandbox", "--replay", f"/v1/nope={published}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert refused.returncode == 2 and "--replay '/v1/nope=" in refused.stderr


def test_harvest_sandbox_on_a_port_in_use_says_so_in_one_line_and_serves_nothing() -> None:
    """Another process listens on the port: one line naming it, exit 2 as any usage error, and never a
    "serving" line (a user would point a run at the other process)."""
    harvest = Path(sys.executable).with_name("harvest")
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        refused = subprocess.run(
            [str(harvest), "sandbox", "--port", str(port)], capture_output=True, text=True, timeout=60
        )
    assert refused.returncode == 2, refused.stderr
    assert refused.stdout == "" and refused.stderr.splitlines() == [
        f"harvest sandbox: cannot serve on 127.0.0.1:{port}: Address already in use; pick another --port"
    ], refused.stderr


@pytest.mark.parametrize("port", ["-1", "70000"])
def test_harvest_sandbox_refuses_a_port_out_of_range_in_one_line(port: str) -> None:
    harvest = Path(sys.executable).with_name("harvest")
    refused = subprocess.run(
        [str(harvest), "sandbox", "--port", port], capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.splitlines() == [
        f"harvest sandbox: --port {port} is not a port; allowed: 1 to 65535, or 0 for any free one"
    ], refused.stderr


def test_harvest_sandbox_on_port_0_says_the_port_it_serves_on() -> None:
    """`--port 0` (any free port) said "serving on http://127.0.0.1:0": a URL nothing answers on."""
    harvest = Path(sys.executable).with_name("harvest")
    proc = subprocess.Popen(
        [str(harvest), "sandbox", "--port", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line.startswith("sandbox serving on http://127.0.0.1:") and ":0 " not in line, line
        base = line.split()[3]
        wait_until_serving(f"{base}/v1/credit-balance", proc)
        assert httpx.get(f"{base}/v1/credit-balance", headers={"x-api-key": "sandbox-key"}).status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=10)
