"""Every endpoint of the service, checked against the answer it publishes: served over HTTP on 127.0.0.1 and
landed by harvest's own engine (client, ledger, pager, extraction, raw store, Parquet, the DuckDB merge), as a
run lands a query, without a Prefect flow per endpoint.

The service publishes its whole surface (`../shared/spec/service-surface.json`: each endpoint's parameters,
paging, where its records are, its price) and a sample answer per endpoint, some with variants (trimmed,
private, an error): `../shared/spec/service-samples/`, read in place. One case per sample: one HTTP server
answers every case under a path of its own (the case's base URL), and each case pages its endpoint once. A
case then holds when, for every record kind the declaration reads:

- every record the sample holds lands once (as many rows as distinct keys, and as many as the surface's own
  record place holds), with its key never NULL;
- every value a column's path finds lands non-NULL (nothing misfit its type); no column is NULL in every row
  while the records carry its value under another name (harvest's own check, `columns_empty`), and the
  declaration knows every field the sample sends (read, or left in `raw` on purpose: no "new fields");
- every list of objects in a record is a child table or inside a `json` column (whose description says so);
- a column read from the request (`$params.NAME`) holds the value asked with;
- `raw` holds the record, without the envelope the service wraps every answer in (`credits_remaining`, ...).

Declarations that need a key harvest does not take yet wait in `connectors/catalog/pending/`: their cases are
listed in `NEEDS` with the key, and skipped.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pytest

from harvest.connectors.catalog.child_kinds import ChildKind
from harvest.connectors.catalog.endpoints import Endpoint
from harvest.connectors.catalog.fields import coercer, first_given
from harvest.connectors.catalog.job_catalog import builtin
from harvest.connectors.catalog.record_paths import MISSING, compile_path
from harvest.connectors.catalog.records import ENVELOPE_KEYS, RecordKind, keys_of
from harvest.connectors.credits.ledger import CreditLedger
from harvest.connectors.http.auth import ApiKey
from harvest.connectors.paging.pager import OK_STATUSES, QuerySpec
from harvest.connectors.reading.extraction import ExtractionReport
from harvest.tasks.database.connection import write_connection
from harvest.tasks.database.record_tables import merge_batches
from harvest.tasks.landing import page_query
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.run_context import AttemptLogs, ClientSettings, RunContext, service_client
from tests.declaring_helpers import request_of
from tests.flow_helpers import ROOT, SECRET_KEY
from tests.net_helpers import LoopbackServer
from tests.published_helpers import SAMPLES, SURFACE, skip_without

skip_without(SURFACE)

NEEDS: dict[str, str] = {}
"""`METHOD path` -> the declaration key its declaration waits for (in `connectors/catalog/pending/`, with no
declaration in the catalog until harvest takes the key)."""
PENDING = ROOT / "connectors" / "catalog" / "pending"
ACCOUNT = "/v1/account/"
"""The account's own endpoints: no data a job collects (the balance is harvest's, `connectors.http.balance`)."""
ERROR_STATUS = re.compile(r"^error (\d{3})$")


@dataclass(frozen=True)
class Case:
    number: int
    method: str
    path: str
    variant: str
    file: str
    surface: Mapping[str, Any]

    @property
    def id(self) -> str:
        return f"{self.method} {self.path} [{self.variant}]"

    @property
    def query_id(self) -> str:
        return f"case{self.number}"

    @property
    def status(self) -> int:
        error = ERROR_STATUS.search(self.variant)
        return int(error.group(1)) if error else 200

    @property
    def body(self) -> Any:
        return orjson.loads((SAMPLES / self.file).read_bytes())


def _cases() -> list[Case]:
    surface = json.loads(SURFACE.read_text(encoding="utf-8"))["endpoints"]
    cases = []
    for entry in surface:
        if entry["path"].startswith(ACCOUNT):
            continue
        for sample in entry["samples"]:
            variant = sample["variant"].replace("errorResponseExamples.", "error ").removesuffix("Response")
            cases.append(Case(len(cases), entry["method"], entry["path"], variant, sample["file"], entry))
    return cases


CASES = _cases()


# ------------------------------------------------------------------------------------------ the server
class _Samples(BaseHTTPRequestHandler):
    """`/case<N><path>` answers case N's sample, with its status; anything else 404."""

    protocol_version = "HTTP/1.1"
    answers: dict[str, tuple[int, bytes]] = {}

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        found = re.match(r"/(case\d+)(/[^?]*)", self.path)
        status, body = self.answers.get(found.group(1), (404, b"{}")) if found else (404, b"{}")
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """One HTTP server on 127.0.0.1 for every case; its base URL."""
    _Samples.answers = {case.query_id: (case.status, (SAMPLES / case.file).read_bytes()) for case in CASES}
    httpd = LoopbackServer(("127.0.0.1", 0), _Samples)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


# ------------------------------------------------------------------------------------------ landing
@dataclass
class Landed:
    db: Path
    summary: dict[str, Any]
    params: dict[str, Any]


def _groups(cases: list[Case]) -> list[list[Case]]:
    """Cases in groups where no two share a table (each group lands into a database of its own, so a key two
    samples share lands once per case): a handful of databases instead of one per case."""
    groups: list[tuple[set[str], list[Case]]] = []
    for case in cases:
        tables = {k.table for k in builtin().get(case.path).landed_kinds}
        group = next((g for g in groups if not g[0] & tables), None)
        if group is None:
            groups.append((set(), []))
            group = groups[-1]
        group[0].update(tables)
        group[1].append(case)
    return [members for _, members in groups]


async def _page(case: Case, base_url: str, layout: OutputLayout, ledger: CreditLedger) -> Landed:
    """One case's query, paged by the engine a run uses (one page: the server answers the sample to any cursor)."""
    endpoint = builtin().get(case.path)
    params = request_of(case.path)
    # a minute: a loaded machine (three workers on two cores) stalled the served samples past 10 s in a full run
    settings = ClientSettings(timeout_seconds=60, attempts=1, concurrency=2, max_answer_bytes=2**24)
    attempts = AttemptLogs()
    key = ApiKey(SECRET_KEY)
    async with service_client(f"{base_url}/{case.query_id}", key, ledger, attempts, settings) as client:
        ctx = RunContext(
            "samples", datetime.now(UTC), layout, {case.path: endpoint}, client, ledger, attempts
        )
        paged = await page_query(ctx, QuerySpec(case.query_id, case.path, params, max_pages=1))
    return Landed(layout.db, paged.summary.as_dict(), params)


def _load(layout: OutputLayout, landed: list[Landed]) -> None:
    """The cases' Parquet into their database, as the load step merges a run's files."""
    kinds = builtin().kinds()
    files: dict[str, list[Path]] = {}
    for one in landed:
        for table, path, _rows in one.summary["files"]:
            files.setdefault(table, []).append(layout.resolve(path))
    with write_connection(layout.db, data_dir=layout.parquet_root) as con:
        merge_batches(con, [(kinds[table], paths) for table, paths in sorted(files.items())])


@pytest.fixture(scope="module")
def landed(
    server: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> dict[str, Landed]:
    """Case id -> what landed: each selected case of a declared endpoint (each group into its own database)."""
    selected = {
        item.callspec.params["case"].id
        for item in request.session.items
        if hasattr(item, "callspec") and isinstance(item.callspec.params.get("case"), Case)
    }
    cases = [
        c
        for c in CASES
        if c.id in selected and c.path in builtin().endpoints and f"{c.method} {c.path}" not in NEEDS
    ]

    async def land_all() -> dict[str, Landed]:
        out: dict[str, Landed] = {}
        ledger = CreditLedger(10**6)
        for n, group in enumerate(_groups(cases)):
            layout = OutputLayout(tmp_path_factory.mktemp(f"samples{n}"))
            results = await asyncio.gather(*(_page(case, server, layout, ledger) for case in group))
            _load(layout, results)
            out.update({case.id: result for case, result in zip(group, results, strict=True)})
        return out

    return asyncio.run(land_all())


# ------------------------------------------------------------------------------------------ checks
_READERS: dict[Path, duckdb.DuckDBPyConnection] = {}
"""One read-only connection per landed database, for every check of the module: nothing writes to it once
landed, and opening it reads the catalog of every table its group landed (most of a check's time, opened per
query)."""


@pytest.fixture(scope="module", autouse=True)
def _close_readers() -> Iterator[None]:
    yield
    for con in _READERS.values():
        con.close()
    _READERS.clear()


def _rows(db: Path, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    if db not in _READERS:
        _READERS[db] = duckdb.connect(str(db), read_only=True)
    return _READERS[db].execute(sql, params).fetchall()


def _table_rows(db: Path, table: str, names: list[str], query_id: str) -> list[dict[str, Any]]:
    there = _rows(db, "SELECT 1 FROM information_schema.tables WHERE table_name = ?", [table])
    if not there:
        return []
    got = _rows(db, f"SELECT {', '.join(names)} FROM {table} WHERE _query_id = ?", [query_id])
    return [dict(zip(names, row, strict=True)) for row in got]


def _places(at: str) -> list[str]:
    """The record places the surface names for one kind (`a`, or `a (full answer)` and `b (trimmed answer)`)."""
    return [at.split(" ")[0]]


def _covered(path: str, kind: RecordKind | ChildKind, siblings: tuple[str, ...] = ()) -> bool:
    """Whether a list of objects at `path` inside a record is read: a child table's list, or inside a `json`
    column, a list the kind nests its own records in, or (in an answer that is itself a record) the place of
    another record kind of the endpoint (`siblings`)."""
    if any(path == where or where.startswith(path + "[]") for where in siblings):
        return True
    for fld in kind.columns:
        if fld.json and any(path == p or path.startswith(p + ".") for p in fld.path.split("|")):
            return True
    if isinstance(kind, RecordKind):
        if kind.nested and (path == kind.nested or path.startswith(kind.nested + ".")):
            return True
        return any(path == where for child in kind.children for where in child.at)
    return False


def _object_lists(doc: Any, at: str = "") -> Iterator[str]:
    """The paths of every list of objects inside `doc` (not inside another such list)."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _object_lists(value, f"{at}.{key}" if at else key)
    elif isinstance(doc, list) and doc and any(isinstance(item, dict) for item in doc):
        yield at


def _check_lists(
    case: Case, kind: RecordKind | ChildKind, items: list[Any], siblings: tuple[str, ...] = ()
) -> None:
    inner = kind.unwrap.inner if isinstance(kind, RecordKind) and kind.unwrap else (lambda item: item)
    bare = {p for item in items for p in _object_lists(inner(item)) if not _covered(p, kind, siblings)}
    assert not bare, f"{case.id}: {kind.table}: lists of objects in no child table and no json column: {bare}"


def _check_values(
    case: Case,
    kind: RecordKind | ChildKind,
    reader: Any,
    items: list[Any],
    landed: list[dict[str, Any]],
    params: Mapping[str, Any],
    columns: Any = None,
) -> None:
    """Each value a column's path finds landed non-NULL; a `$params` column holds the request's value."""
    for fld in columns or kind.columns:
        read = reader(fld.name, params)
        assert read is not None, fld.name
        if fld.request_params and items:
            asked = first_given(params, fld.request_params)
            assert {row[fld.name] for row in landed} == {None if asked is None else str(asked)}, fld.name
        for n, (item, row) in enumerate(zip(items, landed, strict=True)):
            if read(item) is not None:
                assert row[fld.name] is not None, (
                    f"{case.id}: {kind.table}.{fld.name} is NULL in record {n}, the sample has {read(item)!r}"
                )


def _key_text(key: Any) -> tuple[str, ...]:
    """A key as comparable text: a time as its epoch seconds (DuckDB gives a datetime, the wire a number)."""
    return tuple(str(v.timestamp()) if isinstance(v, datetime) else str(v) for v in key)


def _typed(kind: RecordKind, keys: list[Any]) -> list[tuple[Any, ...]]:
    """Wire key values as their columns type them."""
    coercers = [coercer(kind.field(name)) for name in kind.primary_key]  # type: ignore[arg-type]
    return [tuple(c(v) for c, v in zip(coercers, key, strict=True)) for key in keys]


def _check_kind(case: Case, kind: RecordKind, body: Any, one: Landed) -> tuple[str, int]:
    """The kind's records, landed once each, whole, and their child lists; returns where it found them and how
    many are there (nested ones aside)."""
    located = kind.locate(body)
    keyed = keys_of(kind, located.items, one.params)
    items = [
        item for item, key in zip(located.items, keyed, strict=True) if not (located.single and None in key)
    ]
    keys = keys_of(kind, items, one.params)
    assert all(None not in key for key in keys), f"{case.id}: {kind.table}: records without their key"
    assert len(set(keys)) == len(keys), f"{case.id}: {kind.table}: the sample repeats a key"
    rows = _table_rows(one.db, kind.table, [f.name for f in kind.columns], case.query_id)
    assert len(rows) == len(keys), f"{case.id}: {kind.table}: {len(rows)} rows for {len(keys)} records"
    by_key = {_key_text(row[k] for k in kind.primary_key): row for row in rows}
    typed = _typed(kind, keys)
    assert sorted(by_key) == sorted(_key_text(key) for key in typed), f"{case.id}: {kind.table}: keys"
    _check_values(case, kind, kind.reader, items, [by_key[_key_text(key)] for key in typed], one.params)
    enveloped = [  # the answer's own billing fields in a record that is the answer itself
        sorted(ENVELOPE_KEYS & record.keys())
        for row in _table_rows(one.db, kind.table, ["raw"], case.query_id)
        if isinstance(record := orjson.loads(row["raw"]), dict)
    ]
    assert not any(enveloped), f"{case.id}: {kind.table}: `raw` holds the envelope: {enveloped}"
    siblings = tuple(  # the places of the endpoint's other kinds inside this kind's records
        where.removeprefix(at + ".") if at else where
        for at in kind.locations
        for other in builtin().get(case.path).kinds
        if other is not kind
        for where in other.locations
        if not at or where.startswith(at + ".")
    )
    _check_lists(case, kind, items, siblings)
    inner = kind.unwrap.inner if kind.unwrap else (lambda item: item)
    for child in kind.children:
        listed = {
            (*_key_text(key), str(n)): sub
            for item, key in zip(items, typed, strict=True)
            for n, sub in enumerate(_child_items(child, inner(item)))
        }
        names = [f.name for f in child.columns]
        child_rows = {
            _key_text(row[k] for k in child.primary_key): row
            for row in _table_rows(one.db, child.table, names, case.query_id)
        }
        assert sorted(child_rows) == sorted(listed), (
            f"{case.id}: {child.table}: rows against the list's items"
        )
        subs = list(listed)
        _check_values(case, child, child.item.reader, [listed[k] for k in subs], [child_rows[k] for k in subs],
                      one.params, child.fields)  # fmt: skip
        _check_lists(case, child, list(listed.values()))
    if kind.nested:  # the surface counts the items at the place, not those nested in them
        at_place = compile_path(located.where)(body) if located.where else body
        return located.where, len(at_place) if isinstance(at_place, list) else 1
    return located.where, len(items)


def _child_items(child: ChildKind, record: Any) -> list[Any]:
    for where in child.at:
        found = compile_path(where)(record)
        if found is MISSING or found is None:
            continue
        if child.entries:
            return [{"name": k, "value": v} for k, v in found.items()]
        return [item for item in found if isinstance(item, dict)]
    return []


def _surface_counts(case: Case, body: Any) -> dict[str, int]:
    """Record place -> how many records the surface says the sample holds there (its own reading, not harvest's);
    of the places of one kind's full and trimmed answers, the one this answer fills."""
    counts = {}
    alternatives = [p for p in case.surface["records"] if p["holds"].endswith("answer)")]
    for place in case.surface["records"]:
        if "child" in place["holds"]:
            continue
        if place in alternatives and place is not next(
            (p for p in alternatives if compile_path(p["at"].split(" ")[0])(body) not in (MISSING, None)),
            place,
        ):
            continue
        for at in _places(place["at"]):
            found = compile_path(at)(body) if at else body
            if found is MISSING or found is None:
                continue
            counts[at] = len(found) if isinstance(found, list) else 1
    return counts


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_published_sample_lands_whole(case: Case, landed: dict[str, Landed]) -> None:
    if f"{case.method} {case.path}" in NEEDS:
        pytest.skip(f"waits for `{NEEDS[f'{case.method} {case.path}']}`: connectors/catalog/pending/")
    assert case.path in builtin().endpoints, f"{case.path} is in no catalog file"
    one = landed[case.id]
    summary = one.summary
    report = ExtractionReport.from_dict(summary["extraction"])
    body = case.body
    words = (
        [h.get("message") for h in (body, body.get("data")) if isinstance(h, dict)]
        if isinstance(body, dict)
        else []
    )
    if summary["status"] == "not_found" and any(words):  # private, age-restricted, none such: told apart
        assert f"message: {next(w for w in words if w)}" in summary["error"], summary
        assert not any(rows for _, _, rows in summary["files"]), summary  # and no row without its key
    if case.status != 200:
        assert summary["status"] not in OK_STATUSES or summary["records"] == 0, summary
        return
    assert summary["status"] in OK_STATUSES, summary["error"]
    assert summary["pages"] == 1
    assert not report.empty_columns, f"{case.id}: columns empty: {report.as_dict()}"
    assert not report.new_fields, (
        f"{case.id}: fields the declaration does not know: {sorted(report.new_fields)}"
    )
    assert report.misfits == 0, f"{case.id}: misfits: {report.as_dict()}"
    endpoint: Endpoint = builtin().get(case.path)
    found = [_check_kind(case, kind, body, one) for kind in endpoint.kinds]
    assert summary["records"] >= sum(n for _, n in found)
    for at, count in _surface_counts(case, body).items():
        landed_there = [n for where, n in found if where == at]
        if landed_there and landed_there[0] == 0 and count == 1 and report.not_found:
            continue  # one object without its key: the service's "not found" (a private page), said and counted
        if landed_there:
            assert landed_there[0] == count, f"{case.id}: {count} records at {at!r}, {landed_there[0]} landed"
            continue
        readers = [
            k
            for k in endpoint.kinds
            if "" in k.locations and any(f.path.startswith(at + ".") for f in k.fields)
        ]
        assert readers, f"{case.id}: the records at {at!r} land in no table"


def test_the_catalog_files_pass_the_checks_a_job_catalog_passes() -> None:
    """harvest's own declarations are read without the checks a job's get (every run would pay for them): each
    one passes them here, every column it `joins` is a column of the catalog, and a table two endpoints share
    has one key and one set of columns."""
    import yaml

    from harvest.connectors.catalog.declaration_checks import declaration_problems
    from harvest.connectors.catalog.declarations import CatalogFile
    from harvest.connectors.catalog.job_catalog import (
        builtin_declarations,
        builtin_files,
        declared_tables,
        join_problems,
        kind_signature,
    )

    problems = []
    for file in builtin_files():
        for path, decl in CatalogFile.model_validate(
            yaml.safe_load(file.read_text(encoding="utf-8"))
        ).endpoints.items():
            problems += [(file.name, path, *problem) for problem in declaration_problems(path, decl)]
    assert problems == []
    declared = builtin_declarations()
    assert list(join_problems(declared, declared_tables(declared))) == []  # every `joins` names a column
    signatures: dict[str, set[Any]] = {}
    for endpoint in builtin().endpoints.values():
        for kind in endpoint.landed_kinds:
            signatures.setdefault(kind.table, set()).add(kind_signature(kind))
    assert {table: s for table, s in signatures.items() if len(s) > 1} == {}


def _without_waiting_keys(declaration: dict[str, Any]) -> dict[str, Any]:
    """A pending declaration as harvest takes it today: without the keys of the declaration contract it waits
    for (`method`, `exactly_one_of` as `one_of`, `requires`, `excludes`, price `least` and rules without a
    value, a kind's `where` and `first_page_only`, `paging.follow`)."""
    decl = json.loads(json.dumps(declaration))
    decl.pop("method", None)
    decl.pop("requires", None)
    decl.pop("excludes", None)
    if "exactly_one_of" in decl:
        decl["one_of"] = decl.get("one_of", []) + decl.pop("exactly_one_of")
    decl.get("paging", {}).pop("follow", None)
    price = decl.get("price")
    if isinstance(price, dict):
        price.pop("least", None)
        rules = [{k: v for k, v in rule.items() if k != "least"} for rule in price.get("when", [])]
        price["when"] = [rule for rule in rules if "value" in rule and "credits" in rule]
        if not price["when"]:
            del price["when"]
        if set(price) == {"credits"}:
            decl["price"] = price["credits"]
    for kind in decl.get("records", {}).values():
        kind.pop("where", None)
        kind.pop("first_page_only", None)
    return decl


def test_each_pending_declaration_waits_for_a_key_and_is_otherwise_the_live_one() -> None:
    """A declaration in `connectors/catalog/pending/` either waits whole (its cases in `NEEDS`, no declaration in
    the catalog) or adds a key to the catalog's declaration of the same path and is that one otherwise: the
    two cannot drift apart before the lead moves it in."""
    import yaml

    from harvest.connectors.catalog.job_catalog import builtin_files

    live = {
        path: decl
        for file in builtin_files()
        for path, decl in yaml.safe_load(file.read_text(encoding="utf-8"))["endpoints"].items()
    }
    waiting = {key.split(" ", 1)[1] for key in NEEDS}
    pending: set[str] = set()
    for file in sorted(PENDING.glob("*.yaml")):
        for path, decl in yaml.safe_load(file.read_text(encoding="utf-8"))["endpoints"].items():
            pending.add(path)
            if path in live:
                assert _without_waiting_keys(decl) == live[path] != decl, f"{file.name}: {path}"
            else:
                cases = {f"{c.method} {c.path}" for c in CASES if c.path == path}
                assert cases <= set(NEEDS), f"{file.name}: {path} is neither live nor listed in NEEDS"
    assert waiting <= pending, "NEEDS lists a path with no pending declaration"
