"""What a declaration says of its requests: how they are sent (`method`), how a page names the next ones
(`paging`: a cursor, a page number the client counts, follow-up cursors per item), what one costs (`price`: by
parameter value and by outcome) and which parameters go together (`exactly_one_of`, `requires`, `excludes`).

The models of these keys (the record kinds' are `connectors.catalog.declarations`'), and their plain form: every
default filled where the key is used, nothing added where it is not, so a declaration written before these keys
reads, hashes and records as it did.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from harvest.connectors.catalog.paging_styles import STYLE_DEFAULTS, PagingStyle

Scalar = str | int | float | bool
Method = Literal["GET", "POST"]
METHODS: tuple[Method, ...] = ("GET", "POST")
PAGE_NUMBER = "page_number"
PAGE_DEFAULTS: dict[str, Any] = {"param": "page", "first": 1, "step": 1, "last": None, "pages": None}
"""A page-number style's keys when a declaration leaves them out."""
MAX_PRICE = 1_000_000
"""The most credits a declared request may cost: the service's dearest costs 25. A price past 64 bits validated,
and the run crashed counting it (DuckDB's BIGINT, Prefect's state); a million a request keeps every count of
credits (price x pages) far inside them."""


class Decl(BaseModel):
    """Every model of a declaration: unknown keys refused, values frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _listed(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


Paths = Annotated[
    list[str],
    BeforeValidator(_listed, json_schema_input_type=str | list[str]),
]
"""One record path, or several tried in order."""


class FollowDecl(Decl):
    """Follow-up cursors per item: more requests of the same query, one per cursor an item carries (a comment
    thread's `replies.more.cursor`), answered with the same declaration."""

    param: str = Field(description="The request parameter the item's cursor is sent in.")
    from_: str = Field(
        alias="from", description="A record path inside each record of `kind`: the item's follow-up cursor."
    )
    kind: str = Field(
        description="The record kind (table) whose records carry it, at every nesting level of that kind."
    )


class PagingDecl(Decl):
    """How a page names the next one, and when there is none."""

    style: PagingStyle = Field("single", description=", ".join(get_args(PagingStyle)[:-1]) + " or "
                               + get_args(PagingStyle)[-1] + ".")  # fmt: skip
    next: dict[str, Paths] | None = Field(
        None, description="Request parameter -> the response path(s) its next value is read from. Default: "
        "the style's."
    )  # fmt: skip
    more: Paths | None = Field(
        None, description="A flag whose falsy value ends paging. Default: the style's."
    )
    end_values: list[str] | None = Field(
        None, description='Cursor values that mean no more pages. Default: ["-end-"].'
    )
    param: str | None = Field(None, description="page_number: the request parameter. Default: page.")
    first: int | None = Field(
        None, strict=True, description="page_number: the first page's number. Default: 1."
    )
    step: int | None = Field(
        None, strict=True, ge=1, description="page_number: how much the number grows a page. Default: 1."
    )
    last: int | None = Field(
        None, strict=True, description="page_number: the last page number the service answers (past it: 400)."
    )
    pages: str | None = Field(
        None, description="page_number: the response path of the answer's count of pages."
    )
    follow: FollowDecl | None = Field(None, description="Follow-up cursors per item: {param, from, kind}.")


class PriceRuleDecl(Decl):
    """A rule of the price: a request whose `param` has `value` (or is set at all, without `value`) costs at most
    `credits` and bills at least `least`."""

    param: str
    value: Scalar | None = Field(None, description="The parameter's value; absent: whenever it is set.")
    credits: int | None = Field(
        None, strict=True, ge=0, le=MAX_PRICE, description="The most such a request costs."
    )
    least: int | None = Field(
        None,
        strict=True,
        ge=0,
        le=MAX_PRICE,
        description="The least its answer may bill (a cached answer: 0).",
    )


class PriceDecl(Decl):
    """Credits per request: the most a plain request costs (reserved before it is sent), the least its answer
    may bill, and rules by parameter; every matching rule applies (the highest most, the lowest least)."""

    credits: int = Field(1, strict=True, ge=0, le=MAX_PRICE)
    least: int | None = Field(None, strict=True, ge=0, le=MAX_PRICE, description="Default: credits.")
    when: list[PriceRuleDecl] = Field(default_factory=list)


def price_shorthand(value: Any) -> Any:
    return {"credits": value} if isinstance(value, int) and not isinstance(value, bool) else value


class RequiresDecl(Decl):
    """A parameter (with a value, or whenever it is set) that needs others set too."""

    param: str
    value: Scalar | None = Field(None, description="The value that needs them; absent: any value.")
    needs: list[str] = Field(min_length=1, description="The parameters it needs.")


class ExcludesDecl(Decl):
    """A parameter that, when set, rules others out."""

    param: str
    excludes: list[str] = Field(min_length=1, description="The parameters it rules out.")


# ---------------------------------------------------------------------------------------------- plain data
def effective_next(paging: PagingDecl) -> dict[str, list[str]]:
    """The request parameters that carry the next page, and where each is read: the style's unless given; a
    page number's parameter is read from nowhere (harvest counts it)."""
    if paging.style == PAGE_NUMBER:
        return {paging.param or PAGE_DEFAULTS["param"]: []}
    if paging.next is not None:
        return dict(paging.next)
    return {k: list(v) for k, v in STYLE_DEFAULTS[paging.style][0].items()}


def plain_paging(paging: dict[str, Any]) -> None:
    """A plain paging's page-number keys (for that style only) and its follow-ups (when declared)."""
    page_keys = tuple(PAGE_DEFAULTS)
    if paging["style"] == PAGE_NUMBER:
        for key, default in PAGE_DEFAULTS.items():
            if paging[key] is None:
                paging[key] = default
    else:
        for key in page_keys:
            del paging[key]
    if paging["follow"] is None:
        del paging["follow"]


def plain_requests(data: dict[str, Any]) -> None:
    """An endpoint's plain request keys: `method` a list (the first the default) where it is not plain GET, the
    price's `least` and each rule's keys where given, the parameter rules where declared."""
    method = data.pop("method")
    methods = [method] if isinstance(method, str) else list(dict.fromkeys(method))
    if methods != ["GET"]:
        data["method"] = methods
    price = data["price"]
    if price["least"] is None:
        del price["least"]
    price["when"] = [{k: v for k, v in rule.items() if v is not None} for rule in price["when"]]
    for key in ("exactly_one_of", "requires", "excludes"):
        if not data[key]:
            del data[key]
    for rule in data.get("requires", ()):
        if rule["value"] is None:
            del rule["value"]
