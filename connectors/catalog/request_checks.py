"""What a declaration's requests get wrong: its paging (a cursor read from the answer, page numbers harvest
counts, follow-up pages), its price rules and its parameter rules (`exactly_one_of`, `requires`, `excludes`).
Split from `connectors.catalog.declaration_checks`, which checks the rest and places each problem.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from typing import Any

from harvest.connectors.catalog.declarations import NAME, NAME_WORDS, EndpointDecl, ParamDecl
from harvest.connectors.catalog.declared_requests import PAGE_DEFAULTS, PAGE_NUMBER, PagingDecl
from harvest.connectors.catalog.record_paths import PATH_WORDS, path_problem
from harvest.connectors.plurals import a

Problem = tuple[tuple[str | int, ...], str, str]
"""(location inside the declaration, what is wrong, what is allowed)."""


def paging_problems(paging: PagingDecl, tables: list[str]) -> Iterator[Problem]:
    yield from _follow_problems(paging, tables)
    if paging.style == PAGE_NUMBER:
        yield from _page_number_problems(paging)
        return
    for key in PAGE_DEFAULTS:
        if getattr(paging, key) is not None:
            yield ("paging", key), f"`{key}` is a key of page numbers", "style: page_number, or leave it out"
    if paging.style == "single":
        if paging.next:
            yield ("paging", "next"), "a single page has no next page", "no `next` with style: single"
        return
    if paging.next is not None and not paging.next:
        yield ("paging", "next"), "no request parameter carries the next page", "{parameter: response path}"
    for param, paths in (paging.next or {}).items():
        if not NAME.fullmatch(param):
            yield ("paging", "next", param), f"{param!r} cannot be a parameter name", NAME_WORDS
        for n, where in enumerate(paths):
            yield from path_problems(("paging", "next", param, n), where)
    for n, where in enumerate(paging.more or ()):
        yield from path_problems(("paging", "more", n), where)


def _page_number_problems(paging: PagingDecl) -> Iterator[Problem]:
    """A page number harvest counts: a parameter, a first number, a step; `last` not before `first`."""
    if paging.next is not None:
        yield (
            ("paging", "next"),
            "a page number is counted by harvest, not read from the answer",
            "param, first, step (and last, more or pages to say where the pages end)",
        )
    if paging.param is not None and not NAME.fullmatch(paging.param):
        yield ("paging", "param"), f"{paging.param!r} cannot be a parameter name", NAME_WORDS
    first = PAGE_DEFAULTS["first"] if paging.first is None else paging.first
    if paging.last is not None and paging.last < first:
        yield (
            ("paging", "last"),
            f"page {paging.last} comes before the first, {first}",
            f"a number >= {first}",
        )
    if paging.pages is not None:
        yield from path_problems(("paging", "pages"), paging.pages)
    for n, where in enumerate(paging.more or ()):
        yield from path_problems(("paging", "more", n), where)


def page_bounds(decl: EndpointDecl) -> Iterator[Problem]:
    """The first and last page numbers within what the page parameter's declaration allows."""
    paging = decl.paging
    param = decl.params.get(paging.param or PAGE_DEFAULTS["param"]) if paging.style == PAGE_NUMBER else None
    if param is None:
        return
    for key, number in (
        ("first", PAGE_DEFAULTS["first"] if paging.first is None else paging.first),
        ("last", paging.last),
    ):
        low, high = param.min, param.max
        if number is not None and (
            (low is not None and number < low) or (high is not None and number > high)
        ):
            bounds = f"{'' if low is None else f'{low:g}'}..{'' if high is None else f'{high:g}'}"
            yield (
                ("paging", key),
                f"page {number} is outside the page parameter's {bounds}",
                f"a number in {bounds}",
            )


def _follow_problems(paging: PagingDecl, tables: list[str]) -> Iterator[Problem]:
    follow = paging.follow
    if follow is None:
        return
    if not NAME.fullmatch(follow.param):
        yield ("paging", "follow", "param"), f"{follow.param!r} cannot be a parameter name", NAME_WORDS
    yield from path_problems(("paging", "follow", "from"), follow.from_)
    if follow.kind not in tables:
        yield ("paging", "follow", "kind"), f"{follow.kind!r} is not a record kind here", ", ".join(tables)


def price_problems(decl: EndpointDecl, names: list[str]) -> Iterator[Problem]:
    price = decl.price
    if price.least is not None and price.least > price.credits:
        yield (
            ("price", "least"),
            f"{price.least} is more than the most, {price.credits}",
            f"0 to {price.credits}",
        )
    for n, rule in enumerate(price.when):
        at: tuple[str | int, ...] = ("price", "when", n)
        param = decl.params.get(rule.param)
        if rule.param not in names:
            yield (*at, "param"), f"{rule.param!r} is not a parameter", ", ".join(names)
        elif param is not None and rule.value is not None and (wrong := value_problem(param, rule.value)):
            yield (*at, "value"), *wrong
        if rule.credits is None and rule.least is None:
            yield at, "the rule changes no price", "credits (the most), least (the least billed), or both"
        if rule.credits is not None and rule.least is not None and rule.least > rule.credits:
            yield (
                (*at, "least"),
                f"{rule.least} is more than the most, {rule.credits}",
                f"0 to {rule.credits}",
            )


def order_problems(decl: EndpointDecl, names: list[str]) -> Iterator[Problem]:
    """`newest_first: {param, values}`: a parameter, and values it allows (a typo would order nothing)."""
    order = decl.newest_first
    if order is None:
        return
    if order.param is not None and order.param not in names:
        yield ("newest_first", "param"), f"{order.param!r} is not a parameter", ", ".join(names)
    if (order.param is None) != (not order.values):
        yield ("newest_first",), "`param` and `values` go together", "true, or {param: NAME, values: [...]}"
    param = decl.params.get(order.param or "")
    for n, value in enumerate(order.values):
        if param is not None and (wrong := value_problem(param, value)) is not None:
            yield ("newest_first", "values", n), *wrong


def rule_problems(decl: EndpointDecl, names: list[str]) -> Iterator[Problem]:
    """`exactly_one_of`, `requires`, `excludes`: parameters that exist; none that is always sent (a default)
    where being set rules something out."""
    listed = ", ".join(names) or "none declared"
    defaulted = {n for n, p in decl.params.items() if p.default is not None}
    for n, group in enumerate(decl.exactly_one_of):
        if len(group) < 2:
            yield ("exactly_one_of", n), "a group of one parameter", "two or more (one alone: required: true)"
        for m, name in enumerate(group):
            yield from _rule_name(("exactly_one_of", n, m), name, names, listed, defaulted)
    for n, need in enumerate(decl.requires):
        yield from _rule_name(("requires", n, "param"), need.param, names, listed)
        param = decl.params.get(need.param)
        if param is not None and need.value is not None and (wrong := value_problem(param, need.value)):
            yield ("requires", n, "value"), *wrong
        for m, name in enumerate(need.needs):
            yield from _rule_name(("requires", n, "needs", m), name, names, listed)
    for n, rule in enumerate(decl.excludes):
        yield from _rule_name(("excludes", n, "param"), rule.param, names, listed, defaulted)
        for m, name in enumerate(rule.excludes):
            yield from _rule_name(("excludes", n, "excludes", m), name, names, listed, defaulted)


def _rule_name(
    at: tuple[str | int, ...], name: str, names: list[str], listed: str, defaulted: Collection[str] = ()
) -> Iterator[Problem]:
    if name not in names:
        yield at, f"{name!r} is not a parameter", listed
    elif name in defaulted:
        yield at, f"{name!r} has a default, so it is always sent", "a parameter without a default"


def value_problem(p: ParamDecl, value: Any, whose: str = "the parameter's") -> tuple[str, str] | None:
    """(problem, allowed) of a value a declaration writes for a parameter (its default; a price rule's, a
    `requires` rule's or a newest-first value) that the parameter refuses: its type, enum, bounds, length or
    pattern. Such a value validated, and a typo then priced, required or ordered nothing a query can send (a
    request priced at 1 that the service bills 25), or every query using a default was refused at run time."""
    if not fits(p.type, value) or (p.enum is not None and value not in p.enum):
        return f"{value!r} is not an allowed value", ", ".join(map(str, p.enum)) if p.enum else a(p.type)
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float) and not _within(value, p.min, p.max):
        return f"{value!r} is outside {whose} bounds", _range(p.min, p.max)
    if isinstance(value, str) and not _within(len(value), p.min_length, p.max_length):
        return f"{value!r} is not of {whose} length", _range(p.min_length, p.max_length) + " characters"
    if isinstance(value, str) and p.pattern is not None and not _matches(p.pattern, value):
        return f"{value!r} does not match {whose} pattern", f"a text matching {p.pattern}"
    return None


def _range(low: Any, high: Any) -> str:
    return f"{low} to {high}" if low is not None and high is not None else (
        f"at least {low}" if low is not None else f"at most {high}"
    )  # fmt: skip


def _within(value: float, low: float | None, high: float | None) -> bool:
    return (low is None or value >= low) and (high is None or value <= high)


def _matches(pattern: str, value: str) -> bool:
    """As the parameter model reads `pattern` (a match anywhere, as pydantic's); a pattern that does not compile
    is said on its own."""
    try:
        return re.search(pattern, value) is not None
    except re.error:
        return True


def fits(kind: str, value: Any) -> bool:
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "list":
        return isinstance(value, list | str)
    return isinstance(value, str)


def path_problems(at: tuple[str | int, ...], where: str) -> Iterator[Problem]:
    problem = path_problem(where)
    if problem:
        yield at, problem, PATH_WORDS
