"""Where a job declares one of its own endpoints: the file (a catalog file it names, or the spec itself) and the
line of each place in the declaration.

A page that does not match a job's own declaration is no change of the service: the fix is in the user's file,
and the drift message (`connectors.reading.drift_message`) names it, with the line of the `at` to change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class DeclaredAt:
    file: str
    lines: Mapping[tuple[str, ...], int] = field(default_factory=dict)
    """A place inside the endpoint's declaration (`("records", table, "at")`) -> its line in `file`."""

    def where(self, *place: str) -> str:
        """`FILE:LINE` of the place, or of the nearest enclosing place that has a line; `FILE` without."""
        for end in range(len(place), -1, -1):
            if place[:end] in self.lines:
                return f"{self.file}:{self.lines[place[:end]]}"
        return self.file


def declared_places(
    where: Mapping[str, tuple[str, int | None]],
    lines: Mapping[str, Mapping[tuple[str | int, ...], int] | None],
) -> dict[str, DeclaredAt]:
    """Endpoint path -> where it is declared, from a spec's declarations (path -> (file, line of the endpoint))
    and each file's line map (location in the file -> line)."""
    out = {}
    for path, (file, line) in where.items():
        found: dict[tuple[str, ...], int] = {(): line} if line else {}
        for loc, n in (lines.get(file) or {}).items():
            if loc[:2] == ("endpoints", path):
                found[tuple(str(part) for part in loc[2:])] = n
        out[path] = DeclaredAt(file, found)
    return out
