"""The service's endpoints as the sandbox serves them when it is handed no catalog: harvest's catalog files
(`connectors/catalog/endpoints/*.yaml`, package data beside the sandbox), read as plain data.

The sandbox imports no code of harvest's catalog: it reads the files the way it reads any declaration
(`declared_form`), so a `SandboxConfig()` answers every endpoint of the service the way `harvest sandbox` and
the embedded sandbox (handed harvest's checked declarations) do.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

CATALOG_FILES = Path(__file__).resolve().parents[3] / "connectors" / "catalog" / "endpoints"
"""Beside the sandbox in a checkout and in an installed wheel alike (`harvest/connectors/...`)."""

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def service_catalog() -> Mapping[str, Mapping[str, Any]]:
    """Path -> declaration of every endpoint harvest's catalog files declare, read once per process; empty
    where the files are not there."""
    declared: dict[str, Mapping[str, Any]] = {}
    for file in sorted(CATALOG_FILES.glob("*.yaml")):
        data = yaml.load(file.read_text(encoding="utf-8"), Loader=_LOADER) or {}
        declared.update(data.get("endpoints") or {})
    return declared
