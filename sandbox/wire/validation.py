"""Request validation: the 400 answers of the service, each naming the offending parameter.

A 400 is never billed (see `sandbox.wire.asgi_app`): the service rejected the request before doing any work. Unknown
parameters are ignored while the `ignore_unknown_params` quirk is on, as on the real service.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sandbox.config import Quirks
from sandbox.emulation.emulated import EmulatedEndpoint

_TRUE = frozenset({"true", "1"})
_FALSE = frozenset({"false", "0"})
_FLAG_OFF = frozenset({"", "false", "0", "no", "off"})
_SUBREDDIT_RE = re.compile(r"^[A-Za-z0-9_]{2,21}$")
_REGION2_RE = re.compile(r"^[A-Za-z]{2}$")
_NONNEG_RE = re.compile(r"^[0-9]{1,19}$")


class InvalidRequest(Exception):
    """A 400 answer: `parameter` names what is wrong."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter
        self.message = message


@dataclass(frozen=True)
class RequestParams:
    """Validated parameters: single values (last one wins when repeated) and repeatable lists."""

    values: Mapping[str, str] = field(default_factory=dict)
    lists: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def flag(self, name: str) -> bool:
        """`trim` (validated to "true"/"false") and `includeExtras` (any value but a false-ish one)."""
        value = self.values.get(name)
        return value is not None and value.lower() not in _FLAG_OFF

    def many(self, name: str) -> tuple[str, ...]:
        return self.lists.get(name, ())

    def with_values(self, **changes: str | None) -> RequestParams:
        """A copy with single values set (None removes one): how a crawl asks for the next page."""
        values = dict(self.values)
        for name, value in changes.items():
            if value is None:
                values.pop(name, None)
            else:
                values[name] = value
        return RequestParams(values, self.lists)

    def as_items(self) -> list[tuple[str, str]]:
        items = list(self.values.items())
        for name, vals in self.lists.items():
            items.extend((name, v) for v in vals)
        return items


def validate(endpoint: EmulatedEndpoint, items: Sequence[tuple[str, str]], quirks: Quirks) -> RequestParams:
    """Check a request's query parameters against the endpoint's declaration; raise `InvalidRequest` on the first
    problem found, in declaration order (so the answer is deterministic)."""
    known = endpoint.names
    raw: dict[str, list[str]] = {}
    for name, value in items:
        if name not in known:
            if quirks.ignore_unknown_params:
                continue
            raise InvalidRequest(name, f"unknown parameter '{name}'")
        raw.setdefault(name, []).append(value)

    values: dict[str, str] = {}
    lists: dict[str, tuple[str, ...]] = {}
    for param in endpoint.params:
        given = [v for v in raw.get(param.name, []) if v != ""]
        if param.check == "multi":
            if given:
                lists[param.name] = tuple(given)
            continue
        if not given:
            if param.required:
                raise InvalidRequest(param.name, f"missing required parameter '{param.name}'")
            if param.default is not None:
                values[param.name] = param.default
            continue
        values[param.name] = _check_one(param.name, param.check, param.enum, given[-1])

    if endpoint.one_of and not any(name in values for name in endpoint.one_of):
        names = " or ".join(endpoint.one_of)
        raise InvalidRequest(endpoint.one_of[0], f"one of {names} is required")
    return RequestParams(values, lists)


def _check_one(name: str, check: str, enum: tuple[str, ...], value: str) -> str:
    if enum and value not in enum:
        raise InvalidRequest(name, f"invalid value for '{name}': {value!r}; allowed: {', '.join(enum)}")
    if check == "limit":
        try:
            number = int(value)
        except ValueError:
            raise InvalidRequest(name, f"'{name}' must be an integer from 1 to 100") from None
        if not 1 <= number <= 100:
            raise InvalidRequest(name, f"'{name}' must be an integer from 1 to 100")
        return str(number)
    if check == "bool":
        lowered = value.lower()
        if lowered in _TRUE:
            return "true"
        if lowered in _FALSE:
            return "false"
        raise InvalidRequest(name, f"'{name}' must be a boolean (true or false)")
    if check == "subreddit":
        if "://" in value or "reddit." in value.lower():
            raise InvalidRequest(name, "'subreddit' must be a bare subreddit name, not a URL")
        if value.lower().startswith(("r/", "/r/")):
            raise InvalidRequest(name, "'subreddit' must be a bare subreddit name, without the 'r/' prefix")
        if not _SUBREDDIT_RE.match(value):
            raise InvalidRequest(name, f"'subreddit' is not a valid subreddit name: {value!r}")
        return value
    if check == "region2":
        if not _REGION2_RE.match(value):
            raise InvalidRequest(name, f"'{name}' must be a 2-letter country code")
        return value.upper()
    if check == "nonneg_int":
        if not _NONNEG_RE.match(value):
            raise InvalidRequest(name, f"'{name}' must be a non-negative integer")
        return value
    return value
