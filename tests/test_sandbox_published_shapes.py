"""The sandbox answers as the service does: for every published sample answer of an endpoint both know
(`../shared/spec/published-examples/`, read in place), the sandbox's answer to the same request puts each value harvest reads under
the same name, and its records where the service puts them (wrapped or not).

Derived from the catalog: a column's paths list the service's name first and the interface's after it
(`viewCountInt|views`). Whichever of them the published answer fills, the sandbox's answer must fill the same one,
so the demo, the tests and a user's offline trials read what the service sends; `harvest sandbox --drift
interface-names` serves the interface's names, and harvest reads those too.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from harvest.connectors.catalog import endpoints as catalog
from harvest.connectors.catalog.child_kinds import ChildKind
from harvest.connectors.catalog.record_paths import MISSING, compile_path
from harvest.connectors.catalog.records import RecordKind
from harvest.sandbox.config import Drift, SandboxConfig
from harvest.sandbox.emulation.endpoint_table import BY_PATH
from harvest.sandbox.wire.serving import running
from tests.endpoints import ADVERTISERS, VIDEO_SEARCH
from tests.published_helpers import PUBLISHED, published_index, skip_without

skip_without(PUBLISHED)
EXAMPLES_DIR = PUBLISHED
INDEX = published_index()
KNOWN = [e for e in INDEX if e["endpoint"] in BY_PATH or e["endpoint"] == ADVERTISERS]
"""The examples of endpoints the sandbox emulates with code of its own, and of those it served so before it
served them from their declarations (it serves the catalog's others from their declarations too:
tests/test_sandbox_declared.py)."""
SCALE = {"page_size": 30, "pages": (2, 2)}
"""Pages large enough that the sandbox's optional values (a shop link on one video in five) show up."""


def filled_name(kind: RecordKind, column: str, records: list[Any]) -> int | None:
    """Which of the column's paths (0: the first) fills it in some record, the first one that does; None when
    none does in any record."""
    fld = kind.field(column)
    assert fld is not None
    paths = fld.path.split("|")
    for n, path in enumerate(paths):
        get = compile_path(path)
        if any(get(record) not in (MISSING, None) for record in records):
            return n
    return None


def records(kind: RecordKind, body: Any) -> tuple[list[Any], bool]:
    """The kind's records in an answer (unwrapped) and whether they came wrapped."""
    items = kind.extract(body)
    wrapped = kind.unwrap is not None and any(kind.unwrap.is_wrapped(i) for i in items)
    return ([kind.unwrap.inner(i) for i in items] if kind.unwrap else items), wrapped


@pytest.fixture(scope="module")
def client() -> Any:
    config = SandboxConfig(**SCALE)  # type: ignore[arg-type]
    with running(config) as sb, sb.client() as c:
        yield c


def sandbox_answer(client: httpx.Client, path: str, params: dict[str, Any]) -> Any:
    sent = {k: str(v).lower() if isinstance(v, bool) else v for k, v in params.items()}
    response = client.get(path, params=sent)
    assert response.status_code == 200, response.text[:300]
    return response.json()


@pytest.mark.parametrize("example", KNOWN, ids=[e["file"] for e in KNOWN])
def test_the_sandbox_names_what_harvest_reads_as_the_service_does(
    client: httpx.Client, example: dict[str, Any]
) -> None:
    endpoint = catalog.endpoints()[example["endpoint"]]
    published = orjson.loads((EXAMPLES_DIR / example["file"]).read_bytes())
    served = sandbox_answer(client, endpoint.path, example["example_request"])
    for kind in endpoint.kinds:
        theirs, their_wrapping = records(kind, published)
        ours, our_wrapping = records(kind, served)
        if not theirs:
            continue
        assert ours, f"{kind.table}: the sandbox sent no records"
        assert our_wrapping == their_wrapping, f"{kind.table}: wrapped {their_wrapping} by the service"
        for fld in kind.fields:
            name = filled_name(kind, fld.name, theirs)
            if name is not None:
                path = fld.path.split("|")[name]
                assert filled_name(kind, fld.name, ours) == name, (
                    f"{kind.table}.{fld.name}: the service sends `{path}`, the sandbox does not"
                )
        for child in kind.children:  # the lists child tables read: where they are, what their items name
            their_items, at = child_items(child, theirs)
            if not their_items:
                continue
            our_items, our_at = child_items(child, ours)
            assert our_items and our_at == at, (
                f"{child.table}: the service sends `{at}`, the sandbox `{our_at}`"
            )
            for fld in child.fields:
                name = filled_name(child.item, fld.name, their_items)
                if name is not None:
                    assert filled_name(child.item, fld.name, our_items) == name, (
                        f"{child.table}.{fld.name}: the service sends `{fld.path.split('|')[name]}`"
                    )


def child_items(child: ChildKind, records: list[Any]) -> tuple[list[Any], str | None]:
    """The items of the records' child lists, at the first of the child's places some record fills."""
    for where in child.at:
        get = compile_path(where)
        found = [get(r) for r in records]
        lists = [f for f in found if isinstance(f, list | dict) and f]
        if lists:
            return [i for f in lists for i in (f if isinstance(f, list) else [f])], where
    return [], None


def test_the_interface_names_are_served_on_request_and_differ() -> None:
    """The drift that serves the interface's own names fills the catalog's other paths: a video's `views`."""
    config = SandboxConfig(drift=Drift(interface_names=True))
    videos = catalog.endpoints()[VIDEO_SEARCH].kinds[0]
    with running(config) as sb, sb.client() as c:
        search = sandbox_answer(c, VIDEO_SEARCH, {"query": "running"})
    assert filled_name(videos, "view_count", records(videos, search)[0]) == 1  # `views`
