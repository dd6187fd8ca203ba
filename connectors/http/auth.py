"""Where the API key comes from, and how it is kept out of every message.

The key is real money: whoever holds it can spend the account. It is therefore wrapped in `ApiKey`, whose
str and repr never show it, and unwrapped (`reveal()`) only where the request header is built. Anything that
may echo it back (service error messages, exception texts) goes through `redact` first.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

from harvest.connectors.errors import MissingApiKey

__all__ = [
    "DEFAULT_ENV_VAR",
    "KEY_SPOTTED",
    "MIN_REDACTED_KEY",
    "REDACTED",
    "UNNAMED",
    "ApiKey",
    "KeyPlaces",
    "aload_api_key",
    "environment_keys",
    "key_from_env",
    "key_from_prefect_secret",
    "load_api_key",
    "redact",
]

DEFAULT_ENV_VAR = "HARVEST_API_KEY"
REDACTED = "***"
MIN_REDACTED_KEY = 16
"""Keys at least this long are cut out of answers (messages are always redacted)."""
KEY_SPOTTED = 8
"""A key at least this long found in a spec or a message is the key, not a word that happens to match it."""


class ApiKey:
    """The API key, opaque to str/repr/format so it cannot leak through logging or tracebacks."""

    __slots__ = ("_bytes", "_forms", "_value", "source")

    def __init__(self, value: str, *, source: str = "the key given to harvest") -> None:
        self.source = source
        """Where the key was read (`the environment variable HARVEST_API_KEY`), for a message about it."""
        cleaned = value.strip()
        if not cleaned:
            raise MissingApiKey(f"{source} is empty; set it to the service's API key")
        if not cleaned.isascii() or any(ord(ch) < 0x21 or ord(ch) == 0x7F for ch in cleaned):
            # An illegal header value makes httpx raise an error that quotes the value: refuse it here.
            raise MissingApiKey(
                f"{source} contains spaces, control or non-ASCII characters; it cannot be a valid API key"
            )
        self._value = cleaned
        self._bytes = cleaned.encode()
        self._forms = _forms(cleaned)
        """Every form of the key `redact` cuts, worked out once: answers and messages are scrubbed often."""

    def reveal(self) -> str:
        """The key itself, for the request header only."""
        return self._value

    def scrub(self, text: str) -> str:
        """`text` with the key cut out (`redact`): for anything copied out of an answer or an exception."""
        return redact(text, self)

    def scrub_answer(self, raw: bytes, status: int = 200) -> bytes:
        """An answer body with the key cut out, should the service echo it: every form `redact` cuts (plain,
        URL-quoted). A key shorter than `MIN_REDACTED_KEY` is left alone in a success's body: it would match
        ordinary data (a cursor, an id) and corrupt it; real keys are long random strings. An error's body (a
        status of 300 or more) holds no records, so it is cut at any length."""
        if len(self._bytes) < MIN_REDACTED_KEY and status < 300:
            return raw
        for form in self._forms:
            if form.encode() in raw:
                raw = raw.replace(form.encode(), REDACTED.encode())
        return raw

    def describe(self, exc: BaseException) -> str:
        """An exception as one short line for logs and the attempt log, the key cut out."""
        text = str(exc).strip() or "no detail"
        return self.scrub(f"{type(exc).__name__}: {text}")[:300]

    def __repr__(self) -> str:
        return f"ApiKey({REDACTED})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ApiKey) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("ApiKey", self._value))

    def __reduce__(self) -> tuple[object, ...]:
        # Pickling is needed to ship a client config to workers; the value travels, the repr still hides it.
        return (_unpickled_key, (self._value, self.source))


def _unpickled_key(value: str, source: str) -> ApiKey:
    return ApiKey(value, source=source)


HTTP_LOGGERS = ("httpcore.connection", "httpcore.http11", "httpcore.http2", "httpcore.proxy", "httpx")
"""The loggers of the HTTP stack: at DEBUG, httpcore's trace repeats an exception as its parser raised it, so a
key the service echoed in a malformed status or header line would be printed as sent."""


class KeyRedactingFilter(logging.Filter):
    """Cuts the keys of the clients alive in this process out of the HTTP stack's log records (harvest never
    turns their DEBUG on; a user debugging a connection might)."""

    def __init__(self) -> None:
        super().__init__("harvest-redact-keys")
        self.keys: set[ApiKey] = set()
        """Every key a client used in this process (a handful): equal keys are one entry."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.keys:
            return True
        text = record.getMessage()
        scrubbed = text
        for key in list(self.keys):
            scrubbed = key.scrub(scrubbed)
        if scrubbed != text:
            record.msg, record.args = scrubbed, None
        return True


_FILTER = KeyRedactingFilter()


def redact_in_http_logs(key: ApiKey) -> None:
    """Keep `key` out of the HTTP stack's logs from now on."""
    _FILTER.keys.add(key)
    for name in HTTP_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


def redact(text: str, key: str | ApiKey | None) -> str:
    """`text` with every occurrence of the key (plain or URL-quoted) replaced by ***."""
    if key is None:
        return text
    value = key.reveal() if isinstance(key, ApiKey) else key
    if not value:
        return text
    for form in key._forms if isinstance(key, ApiKey) else _forms(value):
        text = text.replace(form, REDACTED)
    return text


def _forms(value: str) -> list[str]:
    """The key as text may carry it: plain, URL-quoted (upper- and lower-case escapes), JSON-escaped."""
    quoted = {quote(value, safe=""), quote(value)}
    lowered = {re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), q) for q in quoted}
    escaped = {json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1], *_html_escaped(value)}
    forms = {value, *quoted, *lowered, *escaped, *(e.replace("/", "\\/") for e in {value, *escaped})}
    return sorted(forms, key=len, reverse=True)


def _html_escaped(value: str) -> set[str]:
    """The key as a JSON encoder that escapes HTML's characters writes it (Go's: `&` as `\\u0026`), either case."""
    forms = set()
    for hexes in (str.lower, str.upper):
        table = {ord(c): "\\u" + hexes(f"{ord(c):04x}") for c in "<>&"}
        forms.add(value.translate(table))
    return forms


UNNAMED = "the name is not repeated here: a value there is often the key itself"
"""Why a key's place a spec wrote is said by its file, line and field, not by the name written there."""


def key_from_env(
    var: str = DEFAULT_ENV_VAR, environ: Mapping[str, str] | None = None, written_at: str | None = None
) -> ApiKey:
    """Read the key from an environment variable; a missing one names the variable to set, or, when a spec
    wrote its name (`written_at`: `file:line: service.api_key_env`) and it is not HARVEST_API_KEY, that place:
    a name no variable has is most often the key pasted where the name belongs."""
    env = os.environ if environ is None else environ
    value = env.get(var)
    if value is None or not value.strip():
        if written_at is not None and var != DEFAULT_ENV_VAR:
            raise MissingApiKey(
                f"no API key: {written_at}: no environment variable of the name written there is set (or it is "
                f"empty); {UNNAMED}. The field holds the name of the variable holding the key (such as "
                f"{DEFAULT_ENV_VAR}), never the key itself; or name a Prefect Secret block in "
                "service.api_key_secret"
            )
        raise MissingApiKey(
            f"no API key: the environment variable {var} is not set (or empty). "
            f"Export {var}=<your key>, or configure a Prefect Secret block for the key"
        )
    return ApiKey(value, source=f"the environment variable {var}")


def _secret_to_key(value: object, block_name: str) -> ApiKey:
    if not isinstance(value, str):
        raise MissingApiKey(f"the Prefect Secret block {block_name!r} does not hold a plain string key")
    return ApiKey(value, source=f"the Prefect Secret block {block_name!r}")


def _unloaded(block_name: str, exc: ValueError, written_at: str | None) -> MissingApiKey:
    """A Secret block Prefect could not load, named, or said by where a spec wrote its name (`written_at`),
    Prefect's own words then without the name (they repeat it)."""
    if written_at is None:
        return MissingApiKey(
            f"no API key: the Prefect Secret block {block_name!r} could not be loaded ({exc})"
        )
    return MissingApiKey(
        f"no API key: {written_at}: the Prefect Secret block named there could not be loaded "
        f"({redact(str(exc), block_name)}); {UNNAMED}. The field holds the name of the Secret block holding "
        "the key (lower-case letters, digits, -), never the key itself"
    )


def key_from_prefect_secret(block_name: str, written_at: str | None = None) -> ApiKey:
    """Read the key from a Prefect Secret block (sync; blocks while Prefect's API answers)."""
    from prefect.blocks.system import Secret  # lazy: prefect is heavy and only needed for this source

    try:
        # _sync=True: without it Prefect returns a coroutine when an event loop is running in this thread.
        block: Any = Secret.load(block_name, _sync=True)  # type: ignore[call-arg]
    except ValueError as exc:
        raise _unloaded(block_name, exc, written_at) from None
    return _secret_to_key(block.get(), block_name)


async def _aload_secret(block_name: str, written_at: str | None = None) -> ApiKey:
    from prefect.blocks.system import Secret

    try:
        block: Any = await Secret.aload(block_name)
    except ValueError as exc:
        raise _unloaded(block_name, exc, written_at) from None
    return _secret_to_key(block.get(), block_name)


KeyPlaces = Mapping[str, str]
"""`api_key_env` / `api_key_secret` -> where a spec wrote it (`file:line: service.api_key_env`,
`JobSpec.key_places`): a name no variable or block has is said by that place, never repeated."""


def load_api_key(
    *, env_var: str = DEFAULT_ENV_VAR, secret_block: str | None = None, places: KeyPlaces | None = None
) -> ApiKey:
    """The key from the Secret block when one is named, else from the environment variable."""
    places = places or {}
    if secret_block:
        try:
            return key_from_prefect_secret(secret_block, places.get("api_key_secret"))
        except MissingApiKey as exc:
            raise _without_env_keys(exc, env_var) from None
    return key_from_env(env_var, written_at=places.get("api_key_env"))


async def aload_api_key(
    *, env_var: str = DEFAULT_ENV_VAR, secret_block: str | None = None, places: KeyPlaces | None = None
) -> ApiKey:
    """Async twin of `load_api_key`, for flows that already run in an event loop."""
    places = places or {}
    if secret_block:
        try:
            return await _aload_secret(secret_block, places.get("api_key_secret"))
        except MissingApiKey as exc:
            raise _without_env_keys(exc, env_var) from None
    return key_from_env(env_var, written_at=places.get("api_key_env"))


def _without_env_keys(exc: MissingApiKey, env_var: str) -> MissingApiKey:
    """A Secret block's refusal without the keys of the environment: it names the block, and Prefect's own text
    names it again, so the key written by mistake as the block's name (`service.api_key_secret: <key>`) was
    printed and, from a team's flow, kept in Prefect's database."""
    text = str(exc)
    for _, value in environment_keys([env_var]):
        text = redact(text, value)
    return MissingApiKey(text)


def environment_keys(names: Iterable[str] = ()) -> list[tuple[str, str]]:
    """(variable, value) of HARVEST_API_KEY and each of `names` set to a value at least `KEY_SPOTTED` long: the
    keys harvest can see before it loads one (a shorter value would match words that are not it)."""
    found = []
    for name in sorted({DEFAULT_ENV_VAR, *names}):
        value = os.environ.get(name, "").strip()
        if len(value) >= KEY_SPOTTED:
            found.append((name, value))
    return found
