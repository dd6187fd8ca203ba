"""Which service a run talks to, and never a key inside its URL."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from flows.spec.problems import UsageError

if TYPE_CHECKING:
    from flows.spec.model import JobSpec

BASE_URL_ENV = "HARVEST_BASE_URL"
SANDBOX = "sandbox"
URL_ALLOWED = "an http(s) URL without credentials or query string (scheme://host[:port][/path]), or `sandbox`"
_SECRET_WORDS = re.compile(r"key|token|secret|pass|pwd|auth|sig|credential|session|bearer", re.IGNORECASE)
"""Query parameter names that carry a credential (api_key, access_token, apikey, signature, ...)."""


def check_base_url(value: str) -> str:
    """An http(s) URL with a host, or the word `sandbox` (the embedded sandbox must be asked for by name).

    A key written into the URL (`http://KEY@host`, `?api_key=...`) would be stored wherever the URL is: the
    manifest, the `runs` table, Prefect. So credentials are refused, and the message never repeats the URL.
    A query string is refused too: the client appends paths to the base URL, which a query string would break.
    """
    value = value.strip()
    if value == SANDBOX:
        return value
    key_hint = (
        "the key belongs in the environment variable named by service.api_key_env (or a Prefect Secret)"
    )
    authority = re.split(r"[/?#]", value.partition("://")[2] if "://" in value else value, maxsplit=1)[0]
    if "@" in authority:
        raise ValueError(
            f"the URL carries a credential before the host (user@ or user:password@, not shown); {key_hint}"
        )
    query = value.partition("?")[2].partition("#")[0]
    secret = [
        name for name, _, _ in (p.partition("=") for p in query.split("&")) if _SECRET_WORDS.search(name)
    ]
    if secret:
        raise ValueError(
            f"the URL carries a credential in its query string ({', '.join(secret)}, not shown); {key_hint}"
        )
    if "?" in value or "#" in value:
        shown = value.partition("?")[0].partition("#")[0]
        raise ValueError(
            f"{shown + '?...'!r} has a query string or fragment; harvest sends its own parameters"
        )
    if not re.match(r"^https?://[^/\s:]+(:\d+)?(/\S*)?$", value):
        raise ValueError(f"{value!r} is not an http(s) URL")
    return value.rstrip("/")


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
