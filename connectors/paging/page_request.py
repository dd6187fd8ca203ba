"""One page request and one HTTP attempt at it: the value objects the pager, the client, the ledger and the
errors pass around, and the single description of the `requests` row.

`Attempt`'s fields, in order and with the Arrow type in their metadata, are that description: the attempt log's
keys, the Arrow schema the load step registers and the DuckDB DDL of `requests` are all derived from them
(`ATTEMPT_SCHEMA`), so a new column is one new field here.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa


@dataclass(frozen=True)
class Tried:
    """What earlier attempts at a page established when the credits ran out among them: a Dask round's grant can
    end there, and the next round's call goes on from it, so a page the service keeps failing is given up after
    the retry policy's attempts (429s are waits, not attempts), and a damaged answer is asked for once more, once,
    as on the local runner; not anew each round until the run's budget is spent on the page."""

    attempts: int = 0
    damaged: tuple[tuple[bytes, bool], ...] = ()
    """The damaged 2xx answers: (digest, cut on the wire), as `PageCall.damaged`."""

    def plain(self) -> dict[str, Any]:
        return {"attempts": self.attempts, "damaged": [[d.hex(), wire] for d, wire in self.damaged]}

    @classmethod
    def from_plain(cls, plain: dict[str, Any] | None) -> Tried:
        if not plain:
            return cls()
        return cls(plain["attempts"], tuple((bytes.fromhex(d), bool(w)) for d, w in plain["damaged"]))


DAMAGED = "damaged"
"""What a kept 2xx no reading takes was (`Page.unread`, and its frame in the raw store): cut on the wire on both
tries. No page of its query's; a later run asks for it again."""
SERVICES_OWN = "service"
"""... or the service's own answer (`errors.UnreadableAnswer` not `damaged`): a page paid once, its query ended
as `drift`, never asked for again; a resume after a kill reads the verdict here, as the bytes cannot say it."""


@dataclass(frozen=True)
class PageRequest:
    """A page a query asks for: what to send, what it may cost, and where it belongs (for messages)."""

    query_id: str
    endpoint: str
    """The documented path: the endpoint's name everywhere in harvest."""
    path: str
    """The path sent, path parameters filled in."""
    params: tuple[tuple[str, str], ...]
    page: int
    cost: int
    query_cap: int | None = None
    """The query's credit cap (`max_credits`), checked by the ledger."""
    price_key: str | None = None
    """What the ledger learns this request's price under (`Endpoint.price_key`: the endpoint, and the priced
    parameter value where its parameters price it); None: the endpoint."""
    method: str = "GET"
    """GET (`params` in the query string) or POST (`body` carries them; `params` still names them for the
    attempt log, the raw store and messages, as for a GET)."""
    body: bytes | None = None
    """A POST's JSON body: every parameter, the cursor too."""
    tried: Tried = Tried()
    """What an earlier Dask round's attempts at this page established before its grant ran out."""


def _column(arrow: pa.DataType, *, nullable: bool = True) -> dict[str, Any]:
    return {"arrow": arrow, "nullable": nullable}


@dataclass(frozen=True, slots=True)
class Attempt:
    """One HTTP attempt, paid or not: a row of the run's `requests` table."""

    query_id: str = field(metadata=_column(pa.string(), nullable=False))
    endpoint: str = field(metadata=_column(pa.string()))
    params: dict[str, Any] = field(metadata=_column(pa.string()))
    """The query string as a JSON object (a repeated key becomes a list), credentials removed."""
    page: int = field(metadata=_column(pa.int32()))
    attempt: int = field(metadata=_column(pa.int32()))
    status_code: int | None = field(metadata=_column(pa.int32()))
    credits: int = field(metadata=_column(pa.int64()))
    """What the ledger counted: the settled amount, the whole reservation when unknown, 0 when released."""
    duration_ms: float = field(metadata=_column(pa.float64()))
    error: str | None = field(metadata=_column(pa.string()))
    started_at: dt.datetime = field(metadata=_column(pa.timestamp("us", tz="UTC")))
    reservation: int | None = None
    """The credit reservation the attempt was sent under, in the attempt log only (not a column): a resume finds
    by it a settled request whose session was killed before it logged the attempt (`record_in_flight`)."""


_COLUMNS = [f for f in dataclasses.fields(Attempt) if "arrow" in f.metadata]
ATTEMPT_FIELDS: tuple[str, ...] = tuple(f.name for f in _COLUMNS)
ATTEMPT_SCHEMA = pa.schema(
    [pa.field(f.name, f.metadata["arrow"], nullable=f.metadata["nullable"]) for f in _COLUMNS]
)


def pairs_to_dict(pairs: Any) -> dict[str, Any]:
    """Query pairs as a JSON object; a repeated key (style_tags=a&style_tags=b) becomes a list."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            out[key] = [*out[key], value] if isinstance(out[key], list) else [out[key], value]
        else:
            out[key] = value
    return out
