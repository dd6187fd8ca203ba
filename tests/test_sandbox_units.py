"""The generator and the server without HTTP clients of their own: determinism across processes, paging
invariants for any scale, config checks, and the foreground `serve` used by `harvest sandbox`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harvest.sandbox.config import CLOCK_ENV, Quirks, SandboxConfig
from harvest.sandbox.emulation.triggers import BLOCKED, MISSING, NONEXISTENT
from harvest.sandbox.expected import crawl, expected_pages, full_crawl
from tests.endpoints import FORUM, PINS, PROFILE
from tests.net_helpers import wait_until_serving

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROBE = """
import orjson
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.expected import crawl
pages = list(crawl("/v1/forum/subreddit/search", {"subreddit": "python", "query": "gil"}, SandboxConfig(seed=5)))
print(orjson.dumps([p.body for p in pages]).decode())
"""


def test_same_answer_in_another_process_with_another_hash_seed() -> None:
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    here = [p.body for p in crawl(FORUM, {"subreddit": "python", "query": "gil"},
                                  SandboxConfig(seed=5))]  # fmt: skip
    assert json.loads(out) == json.loads(orjson.dumps(here))


def test_seed_changes_the_data() -> None:
    params = {"query": "lamps"}
    a = full_crawl(PINS, params, SandboxConfig(seed=1))["pins"]
    b = full_crawl(PINS, params, SandboxConfig(seed=2))["pins"]
    assert [p["id"] for p in a] != [p["id"] for p in b]


TRIGGER_WORDS = (NONEXISTENT, BLOCKED, MISSING)
"""Subjects holding these get the service's error answers (`sandbox.emulation.triggers`), not pages. Hypothesis draws
string constants it finds in the code under test, these words among them, so they are left out here."""


@settings(max_examples=40, deadline=None)
@given(
    lo=st.integers(1, 6),
    extra=st.integers(0, 6),
    size=st.integers(1, 30),
    handle=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_.", min_size=1, max_size=20).filter(
        lambda h: not any(word in h for word in TRIGGER_WORDS)
    ),
    trim=st.booleans(),
)
def test_paging_invariants(lo: int, extra: int, size: int, handle: str, trim: bool) -> None:
    """Any scale: the page count is within bounds, every page but the last is full, ids are distinct."""
    config = SandboxConfig(pages=(lo, lo + extra), page_size=size, quirks=Quirks(dangling_last_cursor=False))
    params = {"handle": handle, "trim": trim}
    pages = list(crawl(PROFILE, params, config))
    assert lo <= len(pages) <= lo + extra
    counts = [len(p.records["videos"]) for p in pages]
    assert all(c == size for c in counts[:-1]) and 1 <= counts[-1] <= size
    ids = [v["aweme_id"] for p in pages for v in p.records["videos"]]
    assert len(ids) == len(set(ids)) == len(full_crawl(PROFILE, params, config)["videos"])
    assert expected_pages(PROFILE, params, config) == len(pages)


@pytest.mark.parametrize(
    "bad",
    [
        {"pages": (0, 3)},
        {"pages": (4, 2)},
        {"page_size": 0},
        {"fault_rate": 1.5},
        {"creative_default_limit": 101},
        {"costs": {PINS: -1}},
        {"fault_kinds": ["gremlins"]},
    ],
)
def test_config_rejects_nonsense(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        SandboxConfig(**bad)  # type: ignore[arg-type]


def test_serve_in_the_foreground(free_port: int) -> None:
    """What `harvest sandbox --port P --api-key K --credits C --fault-rate 0 --seed 7` runs."""
    port = free_port
    code = f"from sandbox.wire.serving import serve; serve(port={port}, api_key='cli-key', credits=5, fault_rate=0.0, seed=7)"
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        response = wait_until_serving(
            f"http://127.0.0.1:{port}/v1/credit-balance", proc, headers={"x-api-key": "cli-key"}
        )
        assert response.json() == {"creditCount": 5}
        pins = httpx.get(
            f"http://127.0.0.1:{port}/v1/pinboard/search",
            params={"query": "q"},
            headers={"x-api-key": "cli-key"},
        )
        assert pins.json()["credits_remaining"] == 4
        assert (
            pins.json()["pins"]
            == full_crawl(PINS, {"query": "q"}, SandboxConfig(seed=7))["pins"][: len(pins.json()["pins"])]
        )
    finally:
        proc.terminate()
        proc.wait(timeout=10)


FRESH_CONFIG = """
from harvest.sandbox.config import configured
from harvest.sandbox.emulation.generic.service_catalog import service_catalog
cfg = configured(None, catalog={}, quirks={"repeat_items": False}, seed=3)
print(service_catalog.cache_info().misses, cfg.seed, cfg.quirks.repeat_items, cfg.quirks.dangling_last_cursor)
"""


def test_a_sandbox_handed_its_catalog_reads_no_catalog_file() -> None:
    """The embedded sandbox of every `harvest run` against `sandbox` is handed harvest's catalog: a default
    config built first and then replaced read the catalog files and built each endpoint (~0.75 s) for nothing.
    In a new process, so no earlier test has read them already; quirks given as a dict change only those."""
    out = subprocess.run(
        [sys.executable, "-c", FRESH_CONFIG], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.split()
    assert out == ["0", "3", "False", "True"]


def test_the_sandbox_clock_is_the_day_it_starts_unless_the_environment_fixes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A test session (or a killed run resumed against a new sandbox) that crosses midnight keeps one clock."""
    monkeypatch.setenv(CLOCK_ENV, "1700000000")
    assert SandboxConfig().clock == 1700000000
    monkeypatch.delenv(CLOCK_ENV)
    assert SandboxConfig().clock % 86400 == 0 and abs(SandboxConfig().clock - time.time()) <= 86400
    monkeypatch.setenv(CLOCK_ENV, "yesterday")
    with pytest.raises(ValueError, match="HARVEST_SANDBOX_CLOCK='yesterday': allowed: epoch seconds"):
        SandboxConfig()
