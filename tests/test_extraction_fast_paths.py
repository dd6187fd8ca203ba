"""The one-call Arrow paths of `connectors.reading.extraction` give exactly what the per-value rules give: a faster page
conversion must not change a single value, nor which records count as having no key."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from harvest.connectors.catalog.fields import TIMESTAMP, Field
from harvest.connectors.reading.extraction import (
    TableReport,
    _blank_as_null,
    _converted,
    _fast_array,
    _never_blank,
)

EPOCH_EDGES = [0, 1, -1, 10**11 - 1, 10**11, 1_700_000_000, 1_700_000_000_000, 2**63 - 1, 2**63, 2**70]
TEXT = st.text(alphabet=st.sampled_from(["a", "Z", "0", " ", "\t", "\u3000", "\u00a0", "\u2028", "-", "é"]))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.sampled_from(EPOCH_EDGES), st.integers(-(2**40), 2**40)), max_size=30)
)
def test_epoch_seconds_in_one_call_equal_the_per_value_rule(values: list[Any]) -> None:
    fld = Field("at", "at", TIMESTAMP)
    fast = _fast_array(fld, values)
    slow = _converted(fld, values, TableReport())
    if fast is not None:
        assert fast.equals(slow)
    else:  # left to the per-value rules: only when something is out of the epoch-seconds range
        assert any(v is not None and not 0 <= v < 10**11 for v in values)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), TEXT, st.integers()), max_size=30))
def test_keys_that_skip_the_blank_check_have_no_blank_text(values: list[Any]) -> None:
    column = pa.array([None if v is None else str(v) for v in values], type=pa.string())
    blank = pc.fill_null(pc.equal(pc.utf8_trim_whitespace(column), ""), False)
    if _never_blank(values):
        assert not pc.any(blank).as_py()
        assert _blank_as_null(column).equals(column)
