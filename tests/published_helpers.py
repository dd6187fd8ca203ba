"""Where the service's published answers are: `shared/spec/` in a directory above the project (or beside the
samples `HARVEST_SERVICE_SAMPLES` names, `tests.published_samples`), read in place and never copied into it. A
test module that needs them skips whole, saying why, where that directory is absent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.flow_helpers import ROOT
from tests.published_samples import SAMPLES as FOUND_SAMPLES

SPEC = FOUND_SAMPLES.parent if FOUND_SAMPLES is not None else ROOT.parent / "shared" / "spec"
SURFACE = SPEC / "service-surface.json"
"""Every endpoint of the service: its parameters, paging, price, records and samples."""
SAMPLES = SPEC / "service-samples"
"""The sample answers `SURFACE` names (each endpoint's `samples`)."""
PUBLISHED = SPEC / "published-examples"
"""The answers the service's documentation publishes (its command-line client's and its OpenAPI examples), with
`index.json` saying which request each answers."""


def skip_without(path: Path) -> None:
    """Skips the calling test module when `path` is absent."""
    if not path.exists():
        pytest.skip(
            f"{path} is absent: the service's published answers are read in place from ../shared/spec/, never "
            "copied into the project",
            allow_module_level=True,
        )


def published_index() -> list[dict[str, Any]]:
    """The entries of `PUBLISHED/index.json` (call after `skip_without(PUBLISHED)`)."""
    examples: list[dict[str, Any]] = json.loads((PUBLISHED / "index.json").read_text())["examples"]
    return examples
