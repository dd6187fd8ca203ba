"""Request validation: the 400 answers of the service, each naming the offending parameter.

A 400 is never billed (see `sandbox.wire.asgi_app`): the service rejected the request before doing any work. Unknown
parameters are ignored while the `ignore_unknown_params` quirk is on, as on the real service.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from harvest.sandbox.config import Quirks
from harvest.sandbox.emulation.emulated import EmulatedEndpoint, QueryParam

_TRUE = frozenset({"true", "1"})
_FALSE = frozenset({"false", "0"})
_FLAG_OFF = frozenset({"", "false", "0", "no", "off"})
_SUBREDDIT_RE = re.compile(r"^[A-Za-z0-9_]{2,21}$")
_REGION2_RE = re.compile(r"^[A-Za-z]{2}$")
_NONNEG_RE = re.compile(r"^[0-9]{1,19}$")
_NUMBERS = frozenset({"integer", "number", "limit", "nonneg_int"})
_INTEGER_RE = re.compile(r"^[+-]?[0-9]{1,19}$")


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
        values[param.name] = _check_bounds(param, _check_one(param.name, param.check, param.enum, given[-1]))

    for group in (endpoint.one_of, *endpoint.also_one_of):
        if group and not any(name in values or name in lists for name in group):
            names = " or ".join(group)
            raise InvalidRequest(group[0], f"one of {names} is required")
    checked = RequestParams(values, lists)
    if endpoint.param_check is not None:
        endpoint.param_check(checked)
    return checked


def _check_bounds(param: QueryParam, value: str) -> str:
    """A declared endpoint's bounds: `min`/`max` of a number, the length and `pattern` of a text."""
    name = param.name
    if param.check in _NUMBERS and (param.minimum is not None or param.maximum is not None):
        number = float(value)
        low = "" if param.minimum is None else f" at least {param.minimum:g}"
        high = "" if param.maximum is None else f" at most {param.maximum:g}"
        if (param.minimum is not None and number < param.minimum) or (
            param.maximum is not None and number > param.maximum
        ):
            raise InvalidRequest(name, f"'{name}' must be{low}{' and' if low and high else ''}{high}")
    if param.min_length is not None and len(value) < param.min_length:
        raise InvalidRequest(name, f"'{name}' must be at least {param.min_length} characters long")
    if param.max_length is not None and len(value) > param.max_length:
        raise InvalidRequest(name, f"'{name}' must be at most {param.max_length} characters long")
    if param.pattern is not None and re.search(param.pattern, value) is None:
        raise InvalidRequest(name, f"invalid value for '{name}': {value!r} does not match {param.pattern}")
    return value


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
    if check == "integer":
        if not _INTEGER_RE.match(value):
            raise InvalidRequest(name, f"'{name}' must be an integer")
        return str(int(value))
    if check == "number":
        try:
            real = float(value)
        except ValueError:
            raise InvalidRequest(name, f"'{name}' must be a number") from None
        if not math.isfinite(real):
            raise InvalidRequest(name, f"'{name}' must be a number")
        return value
    return value
