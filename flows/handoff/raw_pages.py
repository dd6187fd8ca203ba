"""`harvest raw`: the stored raw pages as JSON lines, so the receipt of every paid answer is readable without
harvest's internals (`tasks/output/raw_store.py` frames, compression).

One line per page: run, query, page, endpoint, params, cursors, time, status, credits and the body: the JSON
value when the body parses, its text when it does not (a paid failure can answer HTML), `body_base64` when it is
not text. JSON encoding escapes every control character, so service text cannot act on the terminal.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

from harvest.flows.spec import UsageError
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.raw_store import RawIndex, RawPage, RawPageReader


def _body(page: RawPage) -> dict[str, Any]:
    try:
        return {"body": json.loads(page.body)}
    except ValueError:
        pass
    try:
        return {"body": page.body.decode("utf-8")}
    except UnicodeDecodeError:
        return {"body_base64": base64.b64encode(page.body).decode("ascii")}


def _runs(layout: OutputLayout, run_id: str | None) -> list[str]:
    found = (
        sorted(p.name for p in layout.raw_root.iterdir() if p.is_dir()) if layout.raw_root.is_dir() else []
    )
    if run_id is None:
        return found
    if run_id not in found:
        raise UsageError(
            f"no run {run_id!r} in {layout.raw_root}; allowed: {', '.join(found) or '(no runs)'}"
        )
    return [run_id]


def raw_lines(layout: OutputLayout, run_id: str | None = None, query_id: str | None = None) -> Iterator[str]:
    """Every complete page of the chosen runs and query, oldest run first, pages in the order they were paid."""
    # `harvest raw` refuses such a directory first (`flows.commands.output_arg.landed_output`)
    if not layout.raw_root.is_dir():
        raise UsageError(f"{layout.root}: no raw pages (no raw/)")
    runs = _runs(layout, run_id)
    if query_id is None:
        for run in runs:
            for path in layout.raw_files(run):
                for page in RawPageReader(path):
                    yield _line(run, page)
        return
    indexes = {run: RawIndex(layout.raw_files(run)) for run in runs}
    if not any(index.has(query_id) for index in indexes.values()):
        raise UsageError(f"no raw pages of query {query_id!r} in {', '.join(runs) or layout.raw_root}")
    for run, index in indexes.items():
        for page in index.pages(query_id):
            yield _line(run, page)


def _line(run: str, page: RawPage) -> str:
    return json.dumps({"run_id": run, **page.meta(), **_body(page)}, ensure_ascii=True)
