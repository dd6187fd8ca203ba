"""What one sandbox instance emulates: keys and balances, data scale, costs, quirks and faults.

Everything a test may want to vary lives in one frozen `SandboxConfig`, so that `sandbox.expected` can compute
what a full crawl holds from the same object the server answers from. Defaults emulate the real service as it
is known (every quirk on, 1 credit a request, no faults).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from harvest.sandbox.emulation.generic.service_catalog import service_catalog


class FaultKind(StrEnum):
    """Injected failures. See `sandbox.wire.faults` for what each one looks like on the wire."""

    RATE_LIMIT = "rate_limit"  # 429 with Retry-After
    SERVER_ERROR = "server_error"  # 500 JSON
    UNAVAILABLE = "unavailable"  # 503 text/plain
    SLOW = "slow"  # the normal answer after `slow_seconds`
    DROP = "drop"  # connection closed without any response
    TRUNCATED = "truncated"  # 200, the JSON body cut in the middle (whole against its Content-Length)
    MALFORMED = "malformed"  # 200, the JSON followed by a proxy's HTML error page: no reading takes it
    CUT = "cut"  # 200 with the whole answer's Content-Length, the connection closed half-way through the body


ALL_FAULTS: tuple[FaultKind, ...] = tuple(FaultKind)

BILLED_FAULTS_DEFAULT: frozenset[FaultKind] = frozenset(
    {FaultKind.SLOW, FaultKind.TRUNCATED, FaultKind.MALFORMED, FaultKind.CUT}
)
"""Faults after which the service did the work and charged: a 200 whose body got damaged, or a slow answer
(the client's timeout does not undo the charge). A client must count such calls as spent."""

DEFAULT_KEY = "sandbox-key"


@dataclass(frozen=True)
class Quirks:
    """The real service's surprising behaviours, each switchable; all on by default, as on the real one."""

    ignore_unknown_params: bool = True
    """On: an unknown (e.g. misspelled) parameter is silently ignored, so a wrong cursor name restarts at page
    1. Off: 400 naming the unknown parameter."""

    dangling_last_cursor: bool = True
    """On: the last page still carries a cursor where the real one does (short-video profile `has_more: 0`
    with a non-zero `max_cursor`; reels `more_available: false` with a `max_id`; shop `has_more: false` with a
    `cursor`; page photos `cursor` without `next_page_id`). Requesting it answers an empty page, billed."""

    repeat_items: bool = True
    """On: on search endpoints (creative, forum, pinboard, video search) the last record of page k is also the
    first record of page k+1."""

    real_not_found: bool = True
    """On: "not found" is answered the real ways (200 `success: true` with `account_deactivated` or empty
    lists; 404 `{"success": true, "error": "not_found"}` on the microblog-b user feed). Off: one uniform 404
    `{"success": false, "error": "not_found"}`. Billed either way."""

    @classmethod
    def none(cls) -> Quirks:
        """An idealised service: every quirk off."""
        return cls(
            ignore_unknown_params=False, dangling_last_cursor=False, repeat_items=False, real_not_found=False
        )


@dataclass(frozen=True)
class Drift:
    """Answers that drifted from the documented shapes, as a service change would send them (all off by
    default). Shares pick records deterministically from the seed."""

    wrapped_feed: float = 0.0
    """Share of microblog-b feed items wrapped the native upstream way: `{"post": {...}, "reason", "reply"}`."""
    renamed_lists: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    """Path -> (documented list key, the key it is sent under), e.g. feed -> items."""
    bad_values: float = 0.0
    """Share of records whose counters and timestamps come as text: "1.2K", "1,234", "42", "twelve", "yesterday"."""
    new_fields: bool = False
    """Every record carries fields the interface does not name."""
    missing_keys: float = 0.0
    """Share of list records sent without their primary key field."""
    stuck_cursor: frozenset[str] = frozenset()
    """Paths (with a `cursor` parameter) whose pages after the first hand back the cursor they were asked
    with: a client that does not notice pays for the same page forever."""
    nulled_lists: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    """Path -> (documented list key, new key): the documented key is sent as null, the records under the new
    one, e.g. `{"feed": null, "items": [...]}`."""
    keyed_lists: Mapping[str, str] = field(default_factory=dict)
    """Path -> documented list key sent as an object keyed by position (`{"item0": {...}, "item1": ...}`)."""
    omit_empty_lists: bool = False
    """Lists with no records on a page are left out of the answer, as the real service may (a search with no
    lives): nothing is lost."""
    empty_keys: float = 0.0
    """Share of list records whose primary key is sent as an empty string."""
    odd_values: float = 0.0
    """Share of records whose timestamps are "²" (a digit to `str.isdigit`, not to `int`) or an integer beyond
    64 bits, and whose counters are 5000 digits long (beyond what Python converts)."""
    cut_emoji: frozenset[str] = frozenset()
    """Paths whose first record's text ends cut in the middle of an emoji, as platforms truncate text: a lone
    high surrogate, which only an answer written ASCII-only can carry (as the escape `\\ud83d`)."""
    nan_counts: frozenset[str] = frozenset()
    """Paths whose first record's counters are sent as `NaN`, a token strict JSON does not have."""
    latin1: frozenset[str] = frozenset()
    """Paths whose answers are encoded in Latin-1 instead of UTF-8: accented text comes as bytes that are not
    UTF-8 (characters Latin-1 lacks as `?`)."""
    byte_order_mark: frozenset[str] = frozenset()
    """Paths whose answers start with a UTF-8 byte order mark."""
    unreadable: frozenset[str] = frozenset()
    """Paths answered 200 (and billed) with an HTML maintenance page: the same bytes every time, no JSON."""
    sentinel_with_records: bool = False
    """Pin search's last page of pins itself carries the end-of-pages sentinel (`"cursor": "-end-"`) instead
    of a cursor to a page that has none."""
    renamed_fields: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Path -> {a record field: the name it is sent under} for every record of the path's answers
    (`viewCountInt` sent as `viewCount`): every record still lands, a column comes empty."""
    wrapped_records: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    """Path -> (a list of the answer, the key each of its records comes wrapped under): `{"tweet": {...}}`
    items, records without their primary key at the top: drift."""
    interface_names: bool = False
    """Records named as the service's interface (`docs/service-shapes.md`, before the published answers) names
    them: `views`, a flat tweet author, unwrapped replies with `parent_uri`, `price.amount`, ..."""

    @property
    def active(self) -> bool:
        return any(getattr(self, f.name) for f in dataclasses.fields(self))


def _default_keys() -> dict[str, int]:
    return {DEFAULT_KEY: 1000}


CLOCK_ENV = "HARVEST_SANDBOX_CLOCK"


def today_clock() -> int:
    """The default `SandboxConfig.clock`: `HARVEST_SANDBOX_CLOCK` when set, else the start of today (UTC)."""
    fixed = os.environ.get(CLOCK_ENV, "").strip()
    if fixed:
        try:
            return int(fixed)
        except ValueError:
            raise ValueError(f"{CLOCK_ENV}={fixed!r}: allowed: epoch seconds (an integer)") from None
    return int(time.time()) // 86400 * 86400


@dataclass(frozen=True)
class SandboxConfig:
    """One sandbox instance. Paths in the per-path maps are the documented ones, as `sandbox/served_paths.py`
    names them."""

    api_keys: Mapping[str, int] = field(default_factory=_default_keys)
    """Accepted keys and their starting balances."""
    seed: int = 0
    """Seeds the synthetic data and the fault schedule."""
    clock: int = field(default_factory=lambda: today_clock())
    """Epoch seconds the records' times count back from: by default the start of the day (UTC) the config is
    made on, so that a run's rows are recent ("the last 7 days" finds them) and one config's answers never
    change (`scope.make_scope`); `HARVEST_SANDBOX_CLOCK` (epoch seconds) fixes it for every process that
    inherits it (a test session that runs past midnight, a killed run resumed against a new sandbox)."""

    pages: tuple[int, int] = (1, 4)
    """Inclusive bounds of the number of pages of a paged query (derived per query from a stable hash)."""
    page_size: int = 10
    """Records per full page (group posts are capped at 3)."""
    pages_by_path: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    page_size_by_path: Mapping[str, int] = field(default_factory=dict)
    creative_default_limit: int = 20
    """Creative search page size when `limit` is omitted (the interface leaves it unstated)."""

    default_cost: int = 1
    costs: Mapping[str, int] = field(default_factory=dict)
    """Credits per answer by path; paths not listed cost `default_cost`."""

    quirks: Quirks = field(default_factory=Quirks)

    fault_rate: float = 0.0
    """Share of data requests answered with a random injected fault (0..1)."""
    fault_kinds: Sequence[FaultKind | str] = ALL_FAULTS
    """Kinds the random schedule picks from (a forced plan may use any kind)."""
    fault_plan: Mapping[int, FaultKind | str] = field(default_factory=dict)
    """Forced faults by request number (1-based, counting requests to the data endpoints)."""
    fault_plan_by_path: Mapping[str, Sequence[FaultKind | str | None]] = field(default_factory=dict)
    """Forced faults by path: the i-th request (0-based) to that path gets entry i (None: no fault)."""
    billed_faults: frozenset[FaultKind] = BILLED_FAULTS_DEFAULT
    retry_after: str = "1"
    """The 429 `Retry-After` header value, in seconds."""
    slow_seconds: float = 2.0
    """Delay of a `slow` fault."""
    latency: float = 0.0
    """Seconds added to every data answer (not the balance): a crawl that takes long enough to be killed."""
    rate: float = 0.0
    """Data requests a second the service accepts (0: no limit), as a token bucket of `rate_burst` tokens:
    past it, 429 with `Retry-After: <retry_after>`, not billed (the real service's limits are undocumented;
    its notes say a 429 may come)."""
    rate_burst: int = 0
    """Requests the bucket holds when full (0: one second's worth, at least 1)."""
    new_items: int = 0
    """Newest-first listings (`EmulatedEndpoint.new_items`) show this many newer items at their front, as if
    published since: existing items keep their ids and move back."""
    observation: int = 0
    """Which night it is: engagement counters (plays, likes, views, ...) grow with it, ids and texts stay."""
    drift: Drift = field(default_factory=Drift)
    replay: Mapping[str, bytes] = field(default_factory=dict)
    """Path -> an answer's bytes, served exactly as they are (with their own envelope, or none) to every valid
    request of that path, and billed as usual: the service's published sample answers, or an answer recorded
    from it, replayed (`harvest sandbox --replay PATH=FILE`)."""
    declared: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Path -> an endpoint's declaration, the plain data of harvest's declaration format (`endpoints:` of a spec
    or a catalog file): served beside the built-in endpoints with no code of its own
    (`sandbox.emulation.generic`). A declaration the sandbox cannot serve is a ValueError naming it."""
    catalog: Mapping[str, Mapping[str, Any]] = field(default_factory=service_catalog)
    """Path -> declaration of the service's endpoints as harvest's catalog declares them (the same plain data as
    `declared`): each one the sandbox has no emulation of its own is served from its declaration
    (`sandbox.emulation.generic`), the others as emulated. harvest hands its checked catalog to the sandboxes it
    starts; by default, harvest's catalog files as the sandbox reads them (`service_catalog`)."""
    cache_pages: bool = False
    """Build each distinct page once and serve it again from memory (benchmarks: the sandbox must not be the
    bottleneck of what it measures). Answers are the same bytes either way."""

    def __post_init__(self) -> None:
        lo, hi = self.pages
        if lo < 1 or hi < lo:
            raise ValueError(f"pages must be (min, max) with 1 <= min <= max, got {self.pages}")
        for path, (plo, phi) in self.pages_by_path.items():
            if plo < 1 or phi < plo:
                raise ValueError(f"pages_by_path[{path!r}] must be (min, max) with 1 <= min <= max")
        if self.page_size < 1 or any(v < 1 for v in self.page_size_by_path.values()):
            raise ValueError("page sizes must be >= 1")
        if not 1 <= self.creative_default_limit <= 100:
            raise ValueError("creative_default_limit must be in 1..100")
        if self.default_cost < 0 or any(v < 0 for v in self.costs.values()):
            raise ValueError("costs must be >= 0")
        if not 0.0 <= self.fault_rate <= 1.0:
            raise ValueError("fault_rate must be in 0..1")
        # Accept plain strings for fault kinds (handy from a CLI or a test), store enums.
        object.__setattr__(self, "fault_kinds", tuple(FaultKind(k) for k in self.fault_kinds))
        object.__setattr__(self, "fault_plan", {int(n): FaultKind(k) for n, k in self.fault_plan.items()})
        object.__setattr__(
            self,
            "fault_plan_by_path",
            {
                p: tuple(None if k is None else FaultKind(k) for k in ks)
                for p, ks in self.fault_plan_by_path.items()
            },
        )
        object.__setattr__(self, "billed_faults", frozenset(FaultKind(k) for k in self.billed_faults))
        if self.rate < 0 or self.rate_burst < 0:
            raise ValueError("rate and rate_burst must be >= 0")
        if self.fault_rate > 0 and not self.fault_kinds:
            raise ValueError("fault_rate > 0 needs at least one fault kind")
        from harvest.sandbox.emulation.generic.declared_endpoints import served

        served(self)  # refused here, naming the declaration, rather than at its first request

    def pages_for(self, path: str) -> tuple[int, int]:
        return self.pages_by_path.get(path, self.pages)

    def page_size_for(self, path: str) -> int:
        return self.page_size_by_path.get(path, self.page_size)

    def cost_for(self, path: str) -> int:
        return self.costs.get(path, self.default_cost)

    def replace(self, **overrides: Any) -> SandboxConfig:
        """A copy with some fields changed; `quirks` may be given as a dict of quirk fields to change."""
        return dataclasses.replace(self, **_quirks_given(self.quirks, overrides))


def configured(config: SandboxConfig | None, **overrides: Any) -> SandboxConfig:
    """`config` with `overrides`, or a config of the overrides alone. Not `SandboxConfig().replace(...)`: a default
    config reads the catalog files and builds every endpoint (~0.75 s) before the overrides (the embedded
    sandbox's own catalog) replace them."""
    if config is not None:
        return config.replace(**overrides)
    return SandboxConfig(**_quirks_given(Quirks(), overrides))


def _quirks_given(base: Quirks, overrides: dict[str, Any]) -> dict[str, Any]:
    """`overrides` with `quirks` given as a dict of quirk fields turned into `base` with those changed."""
    quirks = overrides.get("quirks")
    if isinstance(quirks, Mapping):
        return {**overrides, "quirks": dataclasses.replace(base, **quirks)}
    return overrides
