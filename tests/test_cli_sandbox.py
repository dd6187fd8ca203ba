"""`harvest sandbox` as a user runs it: a real process serving on 127.0.0.1 with the options given."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_harvest_sandbox_serves_with_the_given_key_credits_and_scale() -> None:
    port = _free_port()
    harvest = Path(sys.executable).with_name("harvest")
    proc = subprocess.Popen(
        [str(harvest), "sandbox", "--port", str(port), "--api-key", "cli-key", "--credits", "3",
         "--pages", "2", "2", "--page-size", "7", "--no-quirks"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 15
        while True:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "exited"
            try:
                httpx.get(f"{base}/v1/credit-balance", headers={"x-api-key": "cli-key"}, timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "harvest sandbox did not come up"
                time.sleep(0.1)
        with httpx.Client(base_url=base, headers={"x-api-key": "cli-key"}) as client:
            first = client.get("/v1/pinboard/search", params={"query": "trail"}).json()
            assert len(first["pins"]) == 7 and first["cursor"]
            second = client.get("/v1/pinboard/search", params={"query": "trail", "cursor": first["cursor"]})
            assert second.json()["pins"] and not second.json().get("cursor")  # two pages exactly
            assert client.get("/v1/credit-balance").json() == {"creditCount": 1}
            # --no-quirks: a misspelled parameter is refused instead of silently ignored
            assert client.get("/v1/pinboard/search", params={"query": "x", "cursr": "a"}).status_code == 400
            assert client.get("/v1/pinboard/search", params={"query": "x"}).status_code == 200
            assert client.get("/v1/pinboard/search", params={"query": "y"}).status_code == 402  # balance 0
        assert httpx.get(f"{base}/v1/pinboard/search", params={"query": "x"}).status_code == 401
    finally:
        proc.terminate()
        proc.wait(timeout=10)
