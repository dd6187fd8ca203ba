"""Synthetic records, one function per record kind, one module per platform, with the field names of
docs/service-shapes.md.

Each record is a pure function of (query scope, kind, position): ids are built from the query and the position
(so they are unique within a query), other fields come from a `Draw` on the same inputs, timestamps count back
from the query's anchor (newest first). Kept cheap: one digest per record, no per-record objects beyond the
dicts themselves.
"""

from typing import Any

Record = dict[str, Any]
