"""The API key written where harvest keeps or prints what it was given, refused before anything is sent: a
light module (no HTTP stack), since `harvest run` checks it before Prefect starts."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harvest.connectors.http.auth import ApiKey, redact
from harvest.flows.spec.problems import UsageError

if TYPE_CHECKING:
    from harvest.flows.spec.model import JobSpec

KEY_SPOTTED = 8
"""A key at least this long found in a spec is the key, not a word that happens to match it."""


def refuse_key_in(spec_file: Path, base_url: str, key: ApiKey) -> None:
    """The API key written where harvest keeps or prints what it was given: the service URL (the `runs` table,
    the run's manifest, Prefect's flow-run parameters) or the spec (a deployment's parameters, the journal, raw
    pages' parameters). Refused before anything is sent, naming the line, never repeating the key."""
    if not _refuse_in_url(f"{spec_file}: service.base_url (or --base-url)", base_url, key):
        return
    try:
        lines = spec_file.read_text(encoding="utf-8").splitlines()
    except OSError:
        return  # read once already (`load_spec`); a file gone since is not the key's business
    for number, line in enumerate(lines, 1):
        if redact(line, key) != line:
            raise UsageError(f"{spec_file}:{number}: the spec holds the API key; {_where(key)}")


def refuse_key_in_spec(spec: JobSpec, base_url: str, key: ApiKey) -> None:
    """The same refusal for a run `harvest run` did not start (a team's own flow awaiting `collect_job`, a
    deployment's worker): from the spec as read, when the flow loads the key, before anything is sent or kept.
    Without it the key went out in a query string and landed in Parquet, DuckDB and the run's journal."""
    if not _refuse_in_url(f"job {spec.name}: service.base_url (or the flow's base_url)", base_url, key):
        return
    text = json.dumps(spec.model_dump(mode="json", by_alias=True), ensure_ascii=False, default=str)
    if redact(text, key) != text:
        raise UsageError(f"job {spec.name}: the spec holds the API key; {_where(key)}")


def _refuse_in_url(named: str, base_url: str, key: ApiKey) -> bool:
    """Refuses a service URL holding the key (`named`: where it was given); whether the spec is worth searching
    too (a key shorter than `KEY_SPOTTED` would match words that are not it)."""
    if redact(base_url, key) != base_url:
        raise UsageError(f"{named} holds the API key; {_where(key)}")
    return len(key.reveal()) >= KEY_SPOTTED


def _where(key: ApiKey) -> str:
    return f"the key belongs in {key.source} only, never in a URL or a spec"


_KEY_ENV = re.compile(r"^\s*api_key_env:\s*[\'\"]?([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)
_USERINFO = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/?#@]*@")


def keyless_parameters(parameters: dict[str, Any]) -> dict[str, Any]:
    """`collect_job`'s parameters as Prefect records the flow run: without the API key (of HARVEST_API_KEY, or
    the variable a `spec_text` names) and without a URL's credentials. The flow refuses either at once
    (`refuse_key_in_spec`), but Prefect records the parameters before the flow body runs, so a team's flow
    passing a key by mistake kept it in Prefect's database and UI."""
    names = {"HARVEST_API_KEY"}
    text = parameters.get("spec_text")
    if isinstance(text, str):
        names.update(_KEY_ENV.findall(text))
    keys = [
        os.environ[name].strip()
        for name in sorted(names)
        if len(os.environ.get(name, "").strip()) >= KEY_SPOTTED
    ]
    shown = {}
    for name, value in parameters.items():
        if isinstance(value, str):
            for key in keys:
                value = redact(value, key)
            if name == "base_url":
                value = _USERINFO.sub(r"\1***@", value)
        shown[name] = value
    return shown
