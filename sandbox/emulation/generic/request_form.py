"""How a declared endpoint is asked, as the sandbox reads it from the declaration: the methods it answers (POST:
the parameters in a JSON body), page numbers the client counts, follow-up cursors its records carry, and the
service's rules between parameters (a request breaking one is answered 400, naming the parameter, unbilled).

Read from the plain mapping as `declared_form` reads the rest (each problem a `ValueError` through `fail`), and
standing alone: the sandbox imports nothing of harvest.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harvest.sandbox.wire.validation import InvalidRequest, RequestParams

Fail = Callable[[str, str], ValueError]
"""(where in the declaration, what is wrong) -> the error to raise."""

METHODS = ("GET", "POST")
CACHE_PARAM = "cache_max_age"
"""The service's parameter asking for a cached answer: one no older than its value (`7d`) costs 0 credits."""


@dataclass(frozen=True)
class DeclaredPageNumbers:
    """`style: page_number`: the request's page number (`param`) counts from `first` by `step`; past `last` the
    service answers 400; `pages` is where the answer says how many pages there are."""

    param: str = "page"
    first: int = 1
    step: int = 1
    last: int | None = None
    pages: str | None = None


@dataclass(frozen=True)
class FollowCursor:
    """`paging.follow`: records of `kind` may carry a cursor at `path` (a thread with more replies behind it),
    asked for in `param` with the query's other parameters."""

    param: str
    path: str
    kind: str


@dataclass(frozen=True)
class NeedsRule:
    param: str
    value: str | None
    needs: tuple[str, ...]


@dataclass(frozen=True)
class ExcludesRule:
    param: str
    excludes: tuple[str, ...]


@dataclass(frozen=True)
class ParamRuleSet:
    """`exactly_one_of`, `requires`, `excludes`: checked after each parameter's own checks."""

    exactly_one_of: tuple[tuple[str, ...], ...] = ()
    requires: tuple[NeedsRule, ...] = ()
    excludes: tuple[ExcludesRule, ...] = ()

    def check(self, params: RequestParams) -> None:
        """`InvalidRequest` (400) for the first rule the request breaks, in declaration order."""
        given = {name for name, _ in params.as_items()}
        for group in self.exactly_one_of:
            sent = [name for name in group if name in given]
            if len(sent) != 1:
                blamed = sent[1] if sent else group[0]
                raise InvalidRequest(blamed, f"exactly one of {', '.join(group)} is required")
        for rule in self.requires:
            if rule.param in given and rule.value in (None, params.get(rule.param)):
                missing = [name for name in rule.needs if name not in given]
                if missing:
                    raise InvalidRequest(rule.param, f"'{rule.param}' needs '{missing[0]}' as well")
        for ex in self.excludes:
            clash = [name for name in ex.excludes if name in given]
            if ex.param in given and clash:
                raise InvalidRequest(clash[0], f"'{clash[0]}' cannot be combined with '{ex.param}'")


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _names(value: Any, where: str, fail: Fail) -> tuple[str, ...]:
    if isinstance(value, Sequence) and not isinstance(value, str) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise fail(where, "must be a list of parameter names")


def read_methods(spec: Mapping[str, Any], fail: Fail) -> tuple[str, ...]:
    raw = spec.get("method", "GET")
    methods = (raw,) if isinstance(raw, str) else tuple(raw) if isinstance(raw, Sequence) else ()
    if not methods or any(m not in METHODS for m in methods):
        raise fail("method", f"must be GET, POST or a list of them, got {raw!r}")
    return methods


def read_page_numbers(spec: Mapping[str, Any], fail: Fail) -> DeclaredPageNumbers:
    got = {k: spec.get(k) for k in ("param", "first", "step", "last", "pages")}
    for key in ("first", "step", "last"):
        if got[key] is not None and (isinstance(got[key], bool) or not isinstance(got[key], int)):
            raise fail(f"paging.{key}", "must be a whole number")
    return DeclaredPageNumbers(**{k: v for k, v in got.items() if v is not None})


def read_follow(spec: Mapping[str, Any], tables: Sequence[str], fail: Fail) -> FollowCursor | None:
    raw = spec.get("follow")
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or not all(
        isinstance(raw.get(k), str) for k in ("param", "from", "kind")
    ):
        raise fail("paging.follow", "must be {param, from, kind}")
    if raw["kind"] not in tables:
        raise fail("paging.follow.kind", f"{raw['kind']!r} is not one of its record kinds")
    return FollowCursor(raw["param"], raw["from"], raw["kind"])


def read_rules(spec: Mapping[str, Any], fail: Fail) -> ParamRuleSet:
    groups = tuple(
        _names(g, f"exactly_one_of[{n}]", fail) for n, g in enumerate(spec.get("exactly_one_of") or ())
    )
    needs = []
    for n, rule in enumerate(spec.get("requires") or ()):
        if not isinstance(rule, Mapping) or not isinstance(rule.get("param"), str):
            raise fail(f"requires[{n}]", "must be {param, value, needs}")
        value = rule.get("value")
        needs.append(
            NeedsRule(
                rule["param"],
                None if value is None else _text(value),
                _names(rule.get("needs"), f"requires[{n}].needs", fail),
            )
        )
    excludes = []
    for n, rule in enumerate(spec.get("excludes") or ()):
        if not isinstance(rule, Mapping) or not isinstance(rule.get("param"), str):
            raise fail(f"excludes[{n}]", "must be {param, excludes}")
        excludes.append(
            ExcludesRule(rule["param"], _names(rule.get("excludes"), f"excludes[{n}].excludes", fail))
        )
    return ParamRuleSet(groups, tuple(needs), tuple(excludes))


_TYPED = {"integer": (int,), "number": (int, float), "nonneg_int": (int,), "limit": (int,), "bool": (bool,)}
"""Checks of `sandbox.wire.validation` whose values a JSON body must send as JSON numbers or booleans."""


def json_items(
    body: bytes, decode: Callable[[bytes], Any], checks: Mapping[str, str] | None = None
) -> list[tuple[str, str]]:
    """A POST's JSON body as the query string's (name, value) pairs the rest of the sandbox reads: booleans as
    `true`/`false`, numbers as their text, a list as the name repeated; `InvalidRequest` for a body that is
    not a JSON object of values, or a value not of its parameter's JSON type (`checks`: parameter -> its check:
    a number or a boolean sent as text is refused, as a typed JSON interface refuses it)."""
    try:
        doc = decode(body) if body else {}
    except ValueError:
        raise InvalidRequest("body", "the request body is not JSON") from None
    if not isinstance(doc, dict):
        raise InvalidRequest("body", "the request body must be a JSON object of parameters")
    items: list[tuple[str, str]] = []
    for name, value in doc.items():
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, dict | list) for v in values):
            raise InvalidRequest(name, f"'{name}' must be a value or a list of values")
        typed = _TYPED.get((checks or {}).get(name, ""))
        wrong = [v for v in values if v is not None and (isinstance(v, bool) != (bool in (typed or ())))]
        if typed and (wrong or not all(v is None or isinstance(v, typed) for v in values)):
            kind = "a boolean" if bool in typed else "a number"
            raise InvalidRequest(name, f"'{name}' must be {kind} in a JSON body, got {values[0]!r}")
        items.extend((name, _text(v)) for v in values if v is not None)
    return items


def cache_age_seconds(value: str | None) -> float | None:
    """`cache_max_age` (`1d`, `7d`, `12h`) in seconds; None when absent or not a duration."""
    if not value or value[-1] not in "dhm" or not value[:-1].isdigit():
        return None
    return int(value[:-1]) * {"d": 86400, "h": 3600, "m": 60}[value[-1]]


def wire_text(value: Any) -> str:
    """A declared value as it travels in a query string: booleans as `true`/`false`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class DeclaredPriceRule:
    param: str
    values: tuple[str, ...]
    """The values it prices; empty: any value (the parameter set at all)."""
    credits: int | None
    """The most such a request costs; None: the rule leaves the most alone (it only lowers the least)."""


def read_price(raw: Any, fail: Fail) -> tuple[int, tuple[DeclaredPriceRule, ...]]:
    """`price`: credits, or {credits, when: [{param, value(s), credits}]}."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw, ()
    if raw is not None and not isinstance(raw, Mapping):
        raise fail("price", f"must be a mapping, got {type(raw).__name__}")
    spec = raw or {}
    rules = []
    for n, rule in enumerate(spec.get("when") or ()):
        if not isinstance(rule, Mapping):
            raise fail(f"price.when[{n}]", f"must be a mapping, got {type(rule).__name__}")
        values = (
            rule["values"] if "values" in rule else [rule["value"]] if rule.get("value") is not None else []
        )
        credits = rule.get("credits")
        rules.append(
            DeclaredPriceRule(
                str(rule.get("param")),
                tuple(wire_text(v) for v in values),
                None if credits is None else int(credits),
            )
        )
    return int(spec.get("credits", 1)), tuple(rules)
