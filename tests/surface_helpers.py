"""Endpoints shaped as the service's published ones, under paths and tables harvest does not have, as a job
declares them (`tests/data/declared/surface-requests.yaml`: page numbers, POST, follow-up cursors, prices by
outcome, rules between parameters), and the service's published sample answers, read in place from
`../shared/spec/` beside the repository (never copied into it): a test that needs them skips, saying why, where
they are absent.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import pytest
import yaml

from harvest.connectors.catalog.declarations import EndpointDecl, plain
from harvest.connectors.catalog.endpoints import Endpoint
from harvest.connectors.catalog.job_catalog import for_job
from harvest.flows.spec.declared import catalog_file_endpoints

ROOT = Path(__file__).resolve().parent.parent
CATALOG = ROOT / "tests" / "data" / "declared" / "surface-requests.yaml"
SAMPLES = ROOT.parent / "shared" / "spec" / "service-samples"
needs_samples = pytest.mark.skipif(
    not SAMPLES.is_dir(),
    reason=f"the service's published sample answers are not here ({SAMPLES}): they are read in place, never copied",
)

SEARCH = "/v1/example-search-engine/search"
CREATORS = "/v1/example-short-video/creators/popular"
LIBRARY_ADS = "/v1/example-network-a/adLibrary/search/ads"
COMMENTS = "/v1/example-forum/post/comments"
PROFILE = "/v1/example-short-video/profile"
COMPANY_ADS = "/v1/example-search-engine/company/ads"
CHANNEL_VIDEOS = "/v1/example-video-platform/channel-videos"


@functools.cache
def _declared() -> dict[str, dict[str, Any]]:
    return catalog_file_endpoints(CATALOG)


def declared(*paths: str) -> dict[str, dict[str, Any]]:
    """The plain declarations of `paths` (all of the file's when none is named), each a fresh copy."""
    return {p: copy.deepcopy(d) for p, d in _declared().items() if not paths or p in paths}


def endpoint(path: str, declarations: dict[str, dict[str, Any]] | None = None) -> Endpoint:
    return for_job(declarations or declared(path)).get(path)


def sample(name: str) -> bytes:
    """A published sample answer's bytes, as published (`_v1_forum_post_comments.json`)."""
    return (SAMPLES / name).read_bytes()


def variant(path: str, **keys: Any) -> dict[str, dict[str, Any]]:
    """`path`'s declaration as the file writes it with some keys written anew (`paging={...}`), as plain data."""
    raw = yaml.safe_load(CATALOG.read_text(encoding="utf-8"))["endpoints"][path] | keys
    return {path: plain(path, EndpointDecl.model_validate(raw))}
