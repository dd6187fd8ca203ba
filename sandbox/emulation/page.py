"""The two types every page builder shares: the request it answers (`Ctx`) and the answer it builds
(`ServedPage`).

A builder is a pure function Ctx -> ServedPage. The HTTP layer wraps the page in the billing envelope; the
crawl helpers of `sandbox.expected` follow `ServedPage.next` exactly as a client following the end-of-pages
signals would.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.emulation.emulated import EmulatedEndpoint
from harvest.sandbox.emulation.platforms import Record
from harvest.sandbox.emulation.scope import PagePlan, Scope, make_page_plan, make_scope
from harvest.sandbox.wire.validation import RequestParams


@dataclass(frozen=True)
class Ctx:
    """A validated request, ready to be answered."""

    endpoint: EmulatedEndpoint
    params: RequestParams
    config: SandboxConfig
    path_values: Mapping[str, str] = field(default_factory=dict)
    """The values of the path's parameters (the material id of the detail endpoint)."""
    """The material id of the detail endpoint's path."""

    @property
    def size(self) -> int:
        return self.config.page_size_for(self.endpoint.path)

    @property
    def repeat(self) -> bool:
        """Whether the repeat-items quirk applies to this answer."""
        return self.endpoint.search and self.config.quirks.repeat_items

    @property
    def dangling(self) -> bool:
        return self.config.quirks.dangling_last_cursor

    @property
    def new_items(self) -> int:
        """Newer items at the front of this listing (0 unless it is a newest-first one)."""
        rule = self.endpoint.new_items
        if rule is None or not self.config.new_items:
            return 0
        return self.config.new_items if rule.apply(self.params) else 0

    def scope(self, identity: str | None = None) -> Scope:
        return make_scope(self.endpoint, self.params, self.config.seed, identity, self.config.clock)

    def page_plan(self, scope: Scope, per_page: Mapping[str, int], primary: str) -> PagePlan:
        return make_page_plan(scope, self.config.pages_for(self.endpoint.path), per_page, primary)


@dataclass
class ServedPage:
    """One answer, before the envelope.

    `next`: the parameters of the next request for a client that reads the documented end-of-pages signal
    (None: no more pages). `dangling`: a cursor the page still carries although its signal says it is the last
    one (following it costs a request and answers an empty page)."""

    body: Any
    records: dict[str, list[Record]] = field(default_factory=dict)
    next: dict[str, str] | None = None
    dangling: dict[str, str] | None = None
    status: int = 200
    success: bool = True
    envelope: bool = True
    """False for the bare JSON array of the streaming clip endpoint."""
    follow: list[dict[str, str]] = field(default_factory=list)
    """The follow-up requests its records hand out (a declared `paging.follow`: threads behind a cursor)."""


def window(start: int, size: int, total: int) -> tuple[int, int]:
    """The positions [lo, hi) a page starting at `start` holds."""
    lo = min(max(start, 0), total)
    return lo, min(lo + size, total)


def with_repeat(ctx: Ctx, lo: int, hi: int, total: int) -> range:
    """Positions to render: [lo, hi), preceded by lo - 1 when the repeat-items quirk applies to a page past
    the first that has records of its own."""
    if ctx.repeat and 0 < lo < hi <= total:
        return range(lo - 1, hi)
    return range(lo, hi)
