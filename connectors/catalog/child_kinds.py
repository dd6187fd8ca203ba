"""Child kinds: a list of objects inside each record of a kind, landing in a table of its own.

An analyst reads a clip's qualities or a post's top comments as rows, with no JSON function: one row per item,
with the parent's key (`parent_<key>`, typed as the parent's), the item's `position` in its list (0 for the
first, as in the JSON of the parent's `raw`), the item's typed columns, and the run's columns of the parent's
page (`_endpoint`, `_query_id`, `_run_id`, `_fetched_at`). No `raw`: the parent's holds the list as it came.

A child's rows belong to one fetch of their parent (the same `_fetched_at`): the load keeps exactly the rows of
the fetch the parent's row holds (`tasks.database.record_tables.merge_children`), so a list that shrank or
emptied leaves no rows behind, and a child table is never newer or older than its parent table.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from harvest.connectors.catalog.declarations import PARENT_PREFIX, POSITION
from harvest.connectors.catalog.fields import DESCRIPTION, SOURCE, Field
from harvest.connectors.catalog.records import META_COLUMNS, RecordKind

CHILD_WORDS = {
    "_endpoint": "The endpoint whose answer held the parent record (its documented path).",
    "_fetched_at": "When the parent's page was fetched (UTC): the parent row's `_fetched_at`. The table holds the "
    "items of the fetch the parent row holds; a newer fetch of the parent replaces them all.",
}
"""A child's words for the run's columns it shares with its parent's table (its rows are the parent's page's)."""
CHILD_META: tuple[pa.Field, ...] = tuple(
    f.with_metadata({**(f.metadata or {}), DESCRIPTION: CHILD_WORDS[f.name]}) if f.name in CHILD_WORDS else f
    for f in META_COLUMNS
    if f.name != "raw"
)
"""The run's columns of a child table: its parent's page's."""
POSITION_FIELD = Field(POSITION, POSITION, pa.int64())


@dataclass(frozen=True)
class ChildKind:
    """One list of objects inside a record kind's records, landing in `table`; identity (parent key, position)."""

    table: str
    parent: str
    """The parent's table."""
    parent_key: tuple[Field, ...]
    """The parent's key columns, as the parent names and types them."""
    item: RecordKind
    """The list's items as a record kind without a key: `locations` are where in a parent record the list is
    (tried in order), `fields` the item's columns, `ignore` item paths left in the parent's `raw`."""
    replaces: str | None = None
    """The parent's JSON column holding the same list (kept one release, deprecated in its description)."""
    entries: bool = False
    """The place holds an object, each of its fields an item `{name, value}` (fields not known in advance)."""
    schema: pa.Schema = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        names = [f.name for f in self.columns]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.table}: duplicate column names {names}")
        schema = pa.schema([*self._described_key(), *(f.arrow_field() for f in self.fields), *CHILD_META])
        object.__setattr__(self, "schema", schema)

    def _described_key(self) -> list[pa.Field]:
        """The parent's key and the position, described (comments in DuckDB, Parquet metadata, the table docs)."""
        parents = [
            pa.field(name, f.type, metadata={
                DESCRIPTION: f"The `{f.name}` of the `{self.parent}` row whose list holds the item: join on it "
                f"(`{name} = {self.parent}.{f.name}`).",
                SOURCE: f"{self.parent}.{f.name}",
            })
            for name, f in zip(self.parent_columns, self.parent_key, strict=True)
        ]  # fmt: skip
        where = " or ".join(f"`{at}`" for at in self.at)
        what = f"The field's place among the fields of the object {where}" if self.entries else (
            f"The item's place in the list {where}"
        )  # fmt: skip
        position = pa.field(POSITION, pa.int64(), metadata={
            DESCRIPTION: f"{what} of the parent record: 0 for the first, as in the JSON of the parent's `raw`.",
            SOURCE: "the item's place in its list",
        })  # fmt: skip
        return [*parents, position]

    @property
    def parent_columns(self) -> tuple[str, ...]:
        """This table's columns holding the parent's key, in the key's order."""
        return tuple(PARENT_PREFIX + f.name for f in self.parent_key)

    @property
    def primary_key(self) -> tuple[str, ...]:
        return (*self.parent_columns, POSITION)

    @property
    def fields(self) -> tuple[Field, ...]:
        """The item's own columns."""
        return self.item.fields

    @property
    def columns(self) -> tuple[Field, ...]:
        """Every typed column: the parent's key, the position, the item's."""
        parents = tuple(
            Field(name, f.name, f.type, f.json)
            for name, f in zip(self.parent_columns, self.parent_key, strict=True)
        )
        return (*parents, POSITION_FIELD, *self.item.fields)

    @property
    def at(self) -> tuple[str, ...]:
        return self.item.locations

    def field(self, name: str) -> Field | None:
        return next((f for f in self.columns if f.name == name), None)


TableKind = RecordKind | ChildKind
"""What lands in one table: a record kind, or a child kind inside one."""
