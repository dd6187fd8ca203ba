"""Stand-ins for record kinds in the landing tests: a table name, a key and a schema are all landing needs."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from connectors.fields import TIMESTAMP
from connectors.records import META_COLUMNS

TS = TIMESTAMP
META = list(META_COLUMNS)
"""The columns every record table ends with, exactly as the connectors produce them."""


@dataclass(frozen=True)
class Kind:
    table: str
    primary_key: tuple[str, ...]
    schema: pa.Schema
