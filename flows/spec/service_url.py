"""Which service a run talks to, and never a key inside its URL."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import unquote

from harvest.flows.spec.problems import UsageError

if TYPE_CHECKING:
    from harvest.flows.spec.model import JobSpec

BASE_URL_ENV = "HARVEST_BASE_URL"
SANDBOX = "sandbox"
EMBEDDED_SANDBOX = "sandbox (embedded)"
"""How a run against the embedded sandbox records its service (manifest, `runs` table)."""
URL_ALLOWED = "an http(s) URL without credentials or query string (scheme://host[:port][/path]), or `sandbox`"
_SECRET_WORDS = re.compile(r"key|token|secret|pass|pwd|auth|sig|credential|session|bearer", re.IGNORECASE)
"""Query parameter names that carry a credential (api_key, access_token, apikey, signature, ...)."""


_URL = re.compile(r"https?://(?P<host>[^/\s:@%;\[\]]+)(:\d+)?(/\S*)?", re.IGNORECASE)
_NOT_SHOWN = "the URL is not shown: it may carry a credential"
_KEY_HINT = "the key belongs in the environment variable named by service.api_key_env (or a Prefect Secret)"


def check_base_url(value: str) -> str:
    """An http(s) URL with a host, or the word `sandbox` (the embedded sandbox must be asked for by name).

    A key written into the URL (`http://KEY@host`, `?api_key=...`, `;apikey=...`, or any of them
    percent-encoded: `http://KEY%40host`) would be stored wherever the URL is: the manifest, the `runs` table,
    Prefect. So credentials are refused, and no message repeats the URL: a malformed one (`http:/KEY@host`) may
    hold a key too. A query string or path parameters are refused whatever their names: the client appends
    paths to the base URL, which they would break. Only the part harvest would have stored anyway is shown.
    """
    value = value.strip()
    if value == SANDBOX:
        return value
    _refuse_credentials(value, "")
    decoded = unquote(value)
    if decoded != value:
        _refuse_credentials(decoded, ", percent-encoded")
    base = value.partition("?")[0].partition("#")[0]
    if not _URL.fullmatch(base):
        raise ValueError(f"the URL {_shape_problem(base)} ({_NOT_SHOWN})")
    if base != value:
        raise ValueError(
            f"{base + '?...'!r} has a query string or fragment; harvest sends its own parameters"
        )
    return value.rstrip("/")


def _refuse_credentials(url: str, how: str) -> None:
    rest = url.partition("://")[2] if "://" in url else url
    authority, _, path = rest.partition("/")
    authority = re.split(r"[?#]", authority, maxsplit=1)[0]
    if "@" in authority:
        raise ValueError(
            f"the URL carries a credential before the host (user@ or user:password@{how}, not shown); {_KEY_HINT}"
        )
    query = url.partition("?")[2].partition("#")[0]
    secret = _secret_names(query.split("&"))
    if secret is not None:
        raise ValueError(
            f"the URL carries a credential in its query string ({secret}{how}, not shown); {_KEY_HINT}"
        )
    path = path.partition("?")[0].partition("#")[0]
    if ";" in path:
        params = [p for segment in path.split("/") for p in segment.split(";")[1:]]
        secret = _secret_names(params)
        what = (
            f"a credential in its path parameters ({secret}{how}, not shown); {_KEY_HINT}"
            if secret
            else (f"path parameters (;name=value{how}, not shown); harvest sends its own parameters")
        )
        raise ValueError(f"the URL carries {what}")


def _secret_names(params: list[str]) -> str | None:
    """The names of `name=value` parameters that look like a credential, or 'unnamed' for a credential-like
    parameter without `=` (its text may be the key itself, so it is never shown); None when none looks so."""
    named = [(name, sep) for name, sep, _ in (p.partition("=") for p in params) if _SECRET_WORDS.search(name)]
    if not named:
        return None
    shown = sorted({name for name, sep in named if sep and re.fullmatch(r"[A-Za-z0-9_.-]{1,40}", name)})
    return ", ".join(shown) if len(shown) == len(named) else ", ".join([*shown, "unnamed"])


def _shape_problem(url: str) -> str:
    """What is wrong with a URL that is not scheme://host[:port][/path], in words that do not repeat it."""
    scheme, sep, rest = url.partition("://")
    host_port = rest.partition("/")[0]
    if not sep or scheme.lower() not in ("http", "https"):
        return "does not start with http:// or https://"
    if any(c.isspace() for c in url):
        return "has a space or line break in it"
    if not host_port or host_port.startswith(":"):
        return "has no host"
    if host_port.startswith("["):
        return "has an IPv6 address as its host (harvest takes host names and IPv4 addresses)"
    if ":" in host_port and not host_port.rpartition(":")[2].isdigit():
        return "has a port that is not a number"
    return "is not of the form scheme://host[:port][/path]"


def recorded_url(service: str) -> str:
    """The `--base-url` that reaches the service a run recorded (`RunManifest.service`) again."""
    return SANDBOX if service == EMBEDDED_SANDBOX else service


def resolve_base_url(spec: JobSpec, cli_value: str | None, env: Mapping[str, str] | None = None) -> str:
    """The service URL: `--base-url`, then the spec, then HARVEST_BASE_URL. Never the sandbox by default.

    Falling back to the sandbox silently would write synthetic rows into tables meant for real data.
    """
    env = os.environ if env is None else env
    for source, value in (
        ("--base-url", cli_value),
        ("service.base_url", spec.service.base_url),
        (BASE_URL_ENV, env.get(BASE_URL_ENV)),
    ):
        if value and value.strip():
            try:
                return check_base_url(value)
            except ValueError as exc:
                raise UsageError(f"{source}: {exc}; allowed: {URL_ALLOWED}") from None
    raise UsageError(
        "no service URL: set `service.base_url` in the spec, export HARVEST_BASE_URL, or pass --base-url. "
        "The embedded sandbox is used only when asked for by name (`sandbox`), so that synthetic rows never "
        "mix into real tables."
    )
