"""What a page held vs what was kept, per table and per page: the account `connectors.reading.extraction` keeps,
added up per query and per run, stored in `query_state.extraction` and said by the run summary."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harvest.connectors.plurals import counted

NEW_FIELDS_CAP = 50


@dataclass
class TableReport:
    seen: int = 0
    """Items at the kind's location (wrapped or not)."""
    kept: int = 0
    """Records with a primary key: the rows the table gets."""
    no_key: int = 0
    no_key_example: str | None = None
    misfits: dict[str, int] = field(default_factory=dict)
    """Column -> values that did not fit its type (null in the column, kept in `raw`)."""
    misfit_examples: dict[str, str] = field(default_factory=dict)
    """Column -> `<field path> = <first value that did not fit>`."""
    new_fields: set[str] = field(default_factory=set)
    """Record fields no column reads (capped): the service added something the catalog does not know."""
    not_found: int = 0
    """Single-object answers without a key, on a page that kept no other record: the service's "not found" (a
    mostly empty object). Beside other records they are `no_key` (`ExtractionReport.found_after_all`)."""
    failed: int = 0
    """Items lost because converting them broke (at least 1 when it did): a case no rule foresaw."""
    failure: str | None = None
    """The first such error, as `<type>: <message>`."""
    no_key_override: dict[str, Any] | None = None
    """The `shapes` entry of the kind that would read the records that came without their key: `{"records":
    path}` when they came wrapped, `{"fields": {column: path}}` when the key came under another name."""
    empty: dict[str, int] = field(default_factory=dict)
    """Column -> records of the pages where it came empty: NULL in every record while the records carry unread
    fields that may hold it (`connectors.reading.empty_columns`)."""
    empty_hints: dict[str, list[str]] = field(default_factory=dict)
    """Column -> those unread fields, the likeliest first (from the first such page)."""
    dropped: int = 0
    """Items at the kind's place that its `where` left out: not records of the kind (not in `seen`)."""
    dropped_example: str | None = None

    def add(self, other: TableReport) -> None:
        self.seen += other.seen
        self.kept += other.kept
        self.no_key += other.no_key
        self.no_key_example = self.no_key_example or other.no_key_example
        for col, n in other.misfits.items():
            self.misfits[col] = self.misfits.get(col, 0) + n
        for col, ex in other.misfit_examples.items():
            self.misfit_examples.setdefault(col, ex)
        self.new_fields |= set(sorted(other.new_fields)[: max(0, NEW_FIELDS_CAP - len(self.new_fields))])
        self.not_found += other.not_found
        self.failed += other.failed
        self.failure = self.failure or other.failure
        self.no_key_override = self.no_key_override or other.no_key_override
        for col, n in other.empty.items():
            self.empty[col] = self.empty.get(col, 0) + n
        for col, hints in other.empty_hints.items():
            self.empty_hints.setdefault(col, hints)
        self.dropped += other.dropped
        self.dropped_example = self.dropped_example or other.dropped_example

    def as_dict(self) -> dict[str, Any]:
        return {
            "seen": self.seen, "kept": self.kept, "no_key": self.no_key, "no_key_example": self.no_key_example,
            "misfits": self.misfits, "misfit_examples": self.misfit_examples,
            "new_fields": sorted(self.new_fields), "not_found": self.not_found, "failed": self.failed,
            "failure": self.failure, "no_key_override": self.no_key_override, "empty": self.empty,
            "empty_hints": self.empty_hints, "dropped": self.dropped, "dropped_example": self.dropped_example,
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TableReport:
        return cls(
            seen=data.get("seen", 0), kept=data.get("kept", 0), no_key=data.get("no_key", 0),
            no_key_example=data.get("no_key_example"), misfits=dict(data.get("misfits", {})),
            misfit_examples=dict(data.get("misfit_examples", {})), new_fields=set(data.get("new_fields", [])),
            not_found=data.get("not_found", 0), failed=data.get("failed", 0), failure=data.get("failure"),
            no_key_override=data.get("no_key_override"), empty=dict(data.get("empty", {})),
            empty_hints={c: list(h) for c, h in data.get("empty_hints", {}).items()},
            dropped=data.get("dropped", 0), dropped_example=data.get("dropped_example"),
        )  # fmt: skip


@dataclass
class ExtractionReport:
    tables: dict[str, TableReport] = field(default_factory=dict)
    missing_lists: dict[str, int] = field(default_factory=dict)
    """`table: location` -> pages where the list was missing although the page had content."""
    missing_why: dict[str, str] = field(default_factory=dict)
    """`table: location` -> how it was missing on the first such page (absent, null, an object, not a list)
    and the unread list of objects its records may have moved to, with an example."""
    top_keys: list[str] = field(default_factory=list)
    """The top-level keys of the first page that missed its lists (what the service sent instead)."""
    repairs: dict[str, int] = field(default_factory=dict)
    """Kind of repair -> values the pages' bodies needed repaired to be read (`connectors.reading.json_body`): a lone
    surrogate, NaN, bytes that are not UTF-8, ..."""
    read_at: dict[str, str] = field(default_factory=dict)
    """Table -> the one record path where the answer holds a list of objects nothing reads, when its own list
    went missing: the spec's `shapes` override that would read it."""
    found: set[str] = field(default_factory=set)
    """The tables whose place the pages held: one a later page leaves out is no drift
    (`connectors.reading.missing_lists`)."""
    unread_cursor: dict[str, str] | None = None
    """Paging ended at a page without the declared next cursor while it held a field that looks like one:
    `{"field": its path, "param": the request parameter}`, the `next` to declare
    (`connectors.reading.unread_cursors`)."""

    def table(self, name: str) -> TableReport:
        return self.tables.setdefault(name, TableReport())

    def add(self, other: ExtractionReport) -> None:
        for name, rep in other.tables.items():
            self.table(name).add(rep)
        for where, n in other.missing_lists.items():
            self.missing_lists[where] = self.missing_lists.get(where, 0) + n
        for where, why in other.missing_why.items():
            self.missing_why.setdefault(where, why)
        for kind, n in other.repairs.items():
            self.repairs[kind] = self.repairs.get(kind, 0) + n
        for table, path in other.read_at.items():
            self.read_at.setdefault(table, path)
        self.top_keys = self.top_keys or other.top_keys
        self.found |= other.found
        self.unread_cursor = self.unread_cursor or other.unread_cursor

    @property
    def lost(self) -> int:
        """Records that could not be kept (no key, or their conversion broke) plus pages whose list was
        missing: each ends the query as drift."""
        return sum(t.no_key + t.failed for t in self.tables.values()) + sum(self.missing_lists.values())

    @property
    def kept(self) -> int:
        return sum(t.kept for t in self.tables.values())

    @property
    def dropped(self) -> int:
        """Items the kinds' `where` left out (`TableReport.dropped`)."""
        return sum(t.dropped for t in self.tables.values())

    @property
    def seen(self) -> int:
        return sum(t.seen for t in self.tables.values())

    @property
    def misfits(self) -> int:
        return sum(sum(t.misfits.values()) for t in self.tables.values())

    @property
    def new_fields(self) -> list[str]:
        return sorted(f"{name}.{f}" for name, t in self.tables.items() for f in t.new_fields)

    @property
    def empty_columns(self) -> list[str]:
        """`table.column` of every column that came empty on some page (see `TableReport.empty`)."""
        return sorted(f"{name}.{c}" for name, t in self.tables.items() for c in t.empty)

    @property
    def not_found(self) -> bool:
        return any(t.not_found for t in self.tables.values()) and self.kept == 0

    def found_after_all(self) -> None:
        """One page's single objects without their key, when the same answer kept records of other kinds, are
        records without their key (lost: drift), not the service's "not found": a profile whose videos and
        broadcasts came was found, and it is its own key that went missing (renamed, or left out). Counted as
        "not found" they ended the query `complete`, exit 0, with nothing said. Call once per page."""
        if self.kept == 0:
            return
        for table in self.tables.values():
            table.no_key, table.not_found = table.no_key + table.not_found, 0

    def totals(self) -> dict[str, Any]:
        """The counts a run's bookkeeping tables keep (`query_state`, `runs`)."""
        return {
            "items_seen": self.seen,
            "records_without_key": sum(t.no_key for t in self.tables.values()),
            "values_misfit": self.misfits,
            "values_repaired": sum(self.repairs.values()),
            "lists_missing": sum(self.missing_lists.values()),
            "new_fields": self.new_fields,
            "columns_empty": len(self.empty_columns),
            "items_dropped": self.dropped,
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "tables": {n: t.as_dict() for n, t in sorted(self.tables.items())},
            "missing_lists": self.missing_lists,
            "missing_why": self.missing_why,
            "top_keys": self.top_keys,
            "repairs": self.repairs,
            "read_at": self.read_at,
            "found": sorted(self.found),
            "unread_cursor": self.unread_cursor,
        }

    @staticmethod
    def notes_of(data: Mapping[str, Any] | None) -> list[str]:
        """What a query's line says beside its status, from its stored account (`as_dict`): items a kind's
        `where` left out, a cursor paging did not read (the run summary says more)."""
        data = data or {}
        dropped = sum(t.get("dropped", 0) for t in data.get("tables", {}).values())
        notes = [f"{counted(dropped, 'item')} left out"] if dropped else []
        unread = data.get("unread_cursor")
        if unread:
            notes.append(f"`{unread['field']}` unread")
        return notes

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> ExtractionReport:
        data = data or {}
        return cls(
            {n: TableReport.from_dict(t) for n, t in data.get("tables", {}).items()},
            dict(data.get("missing_lists", {})),
            dict(data.get("missing_why", {})),
            list(data.get("top_keys", [])),
            dict(data.get("repairs", {})),
            dict(data.get("read_at", {})),
            set(data.get("found", [])),
            data.get("unread_cursor"),
        )
