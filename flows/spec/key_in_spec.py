"""The API key written where harvest keeps or prints what it was given, refused before anything is sent: a
light module (no HTTP stack), since `harvest run` checks it before Prefect starts."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harvest.connectors.errors import MissingApiKey
from harvest.connectors.http.auth import DEFAULT_ENV_VAR, KEY_SPOTTED, ApiKey, environment_keys, redact
from harvest.flows.spec.problems import Problem, SpecError, UsageError

if TYPE_CHECKING:
    from harvest.flows.spec.model import JobSpec


def refuse_key_in(spec_file: Path, base_url: str, key: ApiKey, catalogs: Sequence[str] = ()) -> None:
    """The API key written where harvest keeps or prints what it was given: the service URL (the `runs` table,
    the run's manifest, Prefect's flow-run parameters), the spec or its catalog files (`catalogs`, relative to
    the spec's directory: a deployment's parameters, the journal, raw pages' parameters, a parameter's default
    sent in the query string). Refused before anything is sent, naming the line, never repeating the key."""
    if not _refuse_in_url(f"{spec_file}: service.base_url (or --base-url)", base_url, key):
        return
    for file, what in [
        (spec_file, "the spec"),
        *((spec_file.parent / c, "the catalog file") for c in catalogs),
    ]:
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue  # read once already (`load_spec`); a file gone since is not the key's business
        number = _line_holding(text, key)
        if number is not None:
            raise UsageError(f"{file}:{number}: {what} holds the API key; {_where(key)}")


class KeyInSpec(SpecError):
    """A spec or catalog file holding the API key: said alone (nothing else of the file is worth reading)."""


def refuse_known_key(text: str, file: str, names: Iterable[str] = (), what: str = "the spec") -> None:
    """A spec's or catalog file's text holding a key harvest can see before it loads one (the value of
    HARVEST_API_KEY, or of a variable the spec's `service.api_key_env` names), refused before the text is read
    as YAML: validation echoes a value it refuses (`service.api_key_env: ... got '<the key>'`), and `harvest
    validate` or a team's flow (Prefect's database keeps the message) printed the key. `names`: the variables
    the spec names. Raises SpecError naming the file and line, never the key."""
    for key in known_keys(names):
        number = _line_holding(text, key)
        if number is not None:
            raise KeyInSpec([Problem(file, number, "", f"{what} holds the API key; {_where(key)}")])


def known_keys(names: Iterable[str] = ()) -> list[ApiKey]:
    """The keys harvest can see in the environment (`environment_keys`), each usable as one."""
    found = []
    for name, value in environment_keys(names):
        try:
            found.append(ApiKey(value, source=f"the environment variable {name}"))
        except MissingApiKey:
            continue  # no usable key (spaces, control characters): harvest refuses it where it is loaded
    return found


def spec_key_names(text: str) -> list[str]:
    """The environment variables a spec's text names as `service.api_key_env`, as written (before validation),
    in block, flow or JSON style: a name missed here left that variable's key unseen by `refuse_known_key`, and
    `harvest validate` printed it where a field refused it (`service: {api_key_env: MY_KEY}` on one line)."""
    return [found.group(4) for found in _KEY_PLACE.finditer(text) if found.group(2) == "env"]


def _line_holding(text: str, key: ApiKey) -> int | None:
    """The first line of `text` holding `key` (any form `redact` cuts), or None."""
    if redact(text, key) == text:
        return None
    for number, line in enumerate(text.splitlines(), 1):
        if redact(line, key) != line:
            return number
    return 1  # split across lines (a folded scalar): the file holds it all the same


def refuse_key_in_spec(spec: JobSpec, base_url: str, key: ApiKey) -> None:
    """The same refusal for a run `harvest run` did not start (a team's own flow awaiting `collect_job`, a
    deployment's worker): from the spec as read, when the flow loads the key, before anything is sent or kept.
    Without it the key went out in a query string and landed in Parquet, DuckDB and the run's journal."""
    if not _refuse_in_url(f"job {spec.name}: service.base_url (or the flow's base_url)", base_url, key):
        return
    text = json.dumps(spec.model_dump(mode="json", by_alias=True), ensure_ascii=False, default=str)
    if redact(text, key) != text:
        raise UsageError(f"job {spec.name}: the spec holds the API key; {_where(key)}")
    for path, declaration in spec.declared().items():  # a catalog file's declarations are not in the dump
        text = json.dumps(declaration, ensure_ascii=False, default=str)
        if redact(text, key) != text:
            raise UsageError(f"job {spec.name}: the declaration of {path} holds the API key; {_where(key)}")


def _refuse_in_url(named: str, base_url: str, key: ApiKey) -> bool:
    """Refuses a service URL holding the key (`named`: where it was given); whether the spec is worth searching
    too (a key shorter than `KEY_SPOTTED` would match words that are not it)."""
    if redact(base_url, key) != base_url:
        raise UsageError(f"{named} holds the API key; {_where(key)}")
    return len(key.reveal()) >= KEY_SPOTTED


def _where(key: ApiKey) -> str:
    return f"the key belongs in {key.source} only, never in a URL, a spec or a catalog file"


_USERINFO = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/?#@]*@")


def keyless_parameters(parameters: dict[str, Any]) -> dict[str, Any]:
    """`collect_job`'s parameters as Prefect records the flow run: without the API key (of HARVEST_API_KEY, or
    the variable a `spec_text` names) and without a URL's credentials. The flow refuses either at once
    (`refuse_key_in_spec`), but Prefect records the parameters before the flow body runs, so a team's flow
    passing a key by mistake kept it in Prefect's database and UI."""
    text = parameters.get("spec_text")
    keys = [value for _, value in environment_keys(spec_key_names(text) if isinstance(text, str) else ())]
    shown = {}
    for name, value in parameters.items():
        if isinstance(value, str):
            for key in keys:
                value = redact(value, key)
            if name == "base_url":
                value = _USERINFO.sub(r"\1***@", value)
            elif name == "spec_text":
                value = _KEY_PLACE.sub(_unless_said, value)
        shown[name] = value
    return shown


_KEY_PLACE = re.compile(r"""(\bapi_key_(env|secret)['"]?\s*:[ \t]*)(['"]?)([^\s,'"{}\[\]#]+)\3""")
"""Where a spec's text says the key's place (`api_key_env: NAME`, `{api_key_env: NAME}`, `"api_key_env": "NAME"`):
group 2 says which field, group 4 the value."""


def _unless_said(found: re.Match[str]) -> str:
    """A spec text's `api_key_env` or `api_key_secret` value as Prefect may keep it: `***` unless it cannot be
    the key. A key pasted there while harvest knows no key is a valid name (`refuse_known_key` cannot see it),
    so the text a team's flow passed kept it in Prefect's database. Said as written: HARVEST_API_KEY and a
    variable that is set, as `auth.load_api_key` says them; a Secret block's name is never recorded (whether it
    loads is known only later)."""
    value = found.group(4)
    if found.group(2) == "env" and (value == DEFAULT_ENV_VAR or value in os.environ):
        return found.group(0)
    return f"{found.group(1)}{found.group(3)}***{found.group(3)}"
