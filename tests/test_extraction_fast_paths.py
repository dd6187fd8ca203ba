"""A page's conversion (`connectors.reading.extraction.to_arrow`) gives exactly what the field's per-value rule
(`connectors.catalog.fields.coercer`) gives, whichever path it takes: its one-call Arrow paths for columns of
plain values must not change a single value, nor which records count as having no key (a blank key is none)."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from harvest.connectors.catalog.fields import TIMESTAMP, Field, coercer
from harvest.connectors.catalog.records import RecordKind
from harvest.connectors.reading.extraction import TableReport, to_arrow
from harvest.connectors.reading.json_body import read_body

EPOCH_EDGES = [0, 1, -1, 10**11 - 1, 10**11, 1_700_000_000, 1_700_000_000_000, 2**63 - 1, 2**63, 2**70]
TEXT = st.text(alphabet=st.sampled_from(["a", "Z", "0", " ", "\t", "\u3000", "\u00a0", "\u2028", "-", "é"]))
ID, AT = Field("id", "id", pa.string()), Field("at", "at", TIMESTAMP)
KIND = RecordKind(table="things", locations=("items",), primary_key=("id",), fields=(ID, AT))


def page(ids: list[Any], times: list[Any]) -> tuple[list[dict[str, Any]], pa.Table, TableReport]:
    """The items as harvest reads them from an answer's text (a number beyond 64 bits is a float then), and
    the page they make."""
    text = json.dumps({"items": [{"id": i, "at": t} for i, t in zip(ids, times, strict=True)]})
    body = read_body(text.encode())
    assert isinstance(body.value, dict)
    items = body.value["items"]
    report = TableReport()
    return items, to_arrow(KIND, items, {}, report), report


def per_value(fld: Field, values: list[Any]) -> pa.Array:
    coerce = coercer(fld)
    return pa.array([None if v is None else coerce(v) for v in values], type=fld.type)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.sampled_from(EPOCH_EDGES), st.integers(-(2**40), 2**40)), max_size=30)
)
def test_epoch_times_in_a_page_equal_the_per_value_rule(values: list[Any]) -> None:
    items, table, report = page([f"k{n}" for n in range(len(values))], values)
    read = [item["at"] for item in items]
    assert table.column("at").combine_chunks().equals(per_value(AT, read))
    misfits = sum(1 for v in read if v is not None and coercer(AT)(v) is None)
    assert report.misfits.get("at", 0) == misfits


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), TEXT, st.integers()), max_size=30))
def test_a_blank_key_is_no_key_however_the_page_is_read(values: list[Any]) -> None:
    items, table, report = page(values, [None] * len(values))
    read = per_value(ID, [item["id"] for item in items])
    blank = pc.fill_null(pc.equal(pc.utf8_trim_whitespace(read), ""), True)  # missing or all whitespace
    want = pc.if_else(blank, pa.scalar(None, pa.string()), read)
    assert table.column("id").combine_chunks().equals(want)
    assert report.no_key == sum(blank.to_pylist()) and report.kept == len(values) - report.no_key
