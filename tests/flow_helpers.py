"""Helpers of the end-to-end tests: specs written as YAML, the flow run in-process, DuckDB read back, and what
the sandbox says a full crawl holds, keyed the way harvest's tables are."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pyarrow.parquet as pq
import yaml

from harvest.connectors.catalog import endpoints as catalog
from harvest.connectors.catalog.declarations import BOOKKEEPING_TABLES
from harvest.connectors.catalog.records import keys_of
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.emulation import endpoint_table as sandbox_endpoints
from harvest.sandbox.expected import full_crawl
from tests.endpoints import CREATIVE_DETAIL
from tests.session_dirs import session_dir

ROOT = Path(__file__).resolve().parent.parent
HARVEST = ROOT / ".venv" / "bin" / "harvest"
PYTHON = sys.executable

SECRET_KEY = "hvK3y-e2e-7Qm9ZxW4pL2sN8vR5tY1uC6"
"""A distinctive API key: any occurrence of it in an output is a leak."""

BIG_BALANCE = 10**7


def write_spec(tmp_path: Path, spec: Mapping[str, Any], name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(dict(spec), sort_keys=False))
    return path


def job_spec(
    base_url: str,
    output: Path | str,
    queries: Sequence[Mapping[str, Any]],
    *,
    name: str = "job",
    credits: int = 100,
    service: Mapping[str, Any] | None = None,
    budget: Mapping[str, Any] | None = None,
    **more: Any,
) -> dict[str, Any]:
    """A job spec as its YAML holds it: the service at `base_url` (with `service`'s other keys), a budget of
    `credits` (with `budget`'s other keys), `more` top-level keys (`concurrency`, `endpoints`, `runner`, ...),
    the output and the queries. The one factory of the tests' specs: a test writes only what it changes."""
    return {
        "name": name,
        "service": {"base_url": base_url, **(service or {})},
        "budget": {"credits": credits, **(budget or {})},
        **more,
        "output": str(output),
        "queries": [dict(query) for query in queries],
    }


def one_query(
    tmp_path: Path,
    base_url: str,
    endpoint: str,
    params: Mapping[str, Any],
    *more: dict[str, Any],
    name: str = "drift",
) -> Path:
    """A spec of query `q` (plus `more` query entries) against `base_url`, output in `tmp_path / "out"`."""
    queries = [{"id": "q", "endpoint": endpoint, "params": dict(params)}, *more]
    return write_spec(tmp_path, job_spec(base_url, tmp_path / "out", queries, name=name))


def run_flow(
    spec_path: Path, *, budget: int | None = None, output: Path | None = None, **options: Any
) -> Any:
    """One real Prefect flow run in this process (needs the `prefect_harness` fixture); the run summary
    (`RunSummary`, or `NoRun` when the flow made no run)."""
    from harvest.flows.collect import run_collect

    coro = run_collect(
        spec_path=str(spec_path), budget=budget, output=str(output) if output else None, **options
    )
    return asyncio.run(coro)


def run_flow_retried(spec_path: Path) -> Any:
    """As `run_flow`, with the flow as a deployment that Prefect retries once when it fails (`retries=1`)."""
    import harvest.flows.collect
    from harvest.flows.collect import collect_job, run_collect

    original = harvest.flows.collect.collect_job
    harvest.flows.collect.collect_job = collect_job.with_options(retries=1, retry_delay_seconds=0)  # type: ignore[assignment]
    try:
        return asyncio.run(run_collect(spec_path=str(spec_path)))
    finally:
        harvest.flows.collect.collect_job = original  # type: ignore[assignment]


def rows(db: Path, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def scalar(db: Path, sql: str, params: Sequence[Any] | None = None) -> Any:
    return rows(db, sql, params)[0][0]


MAIN_TABLES = "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'"
"""The tables an analyst queries by name; harvest's own memory (`harvest_state`) left out."""


def table_counts(db: Path) -> dict[str, int]:
    """Rows per record table (the bookkeeping tables left out)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        names = [r[0] for r in con.execute(MAIN_TABLES).fetchall()]
        return {
            n: con.execute(f'SELECT count(*) FROM "{n}"').fetchall()[0][0]
            for n in names
            if n not in BOOKKEEPING_TABLES
        }
    finally:
        con.close()


def key_set(db: Path, table: str) -> set[tuple[Any, ...]]:
    from tests.declaring_helpers import declared_kinds

    pk = (catalog.all_kinds() | declared_kinds())[table].primary_key
    cols = ", ".join(f'"{c}"' for c in pk)
    return set(rows(db, f'SELECT {cols} FROM "{table}"'))


def table_of(path: str) -> dict[str, str]:
    """Sandbox record kind -> harvest table, for one documented path (both list the kinds in the same order; an
    endpoint served from its declaration names its kinds by their tables)."""
    tables = [k.table for k in catalog.get(path).kinds]
    coded = sandbox_endpoints.match(path)
    sandbox_kinds = tables if coded is None else list(coded.kinds)
    assert len(sandbox_kinds) == len(tables), (path, sandbox_kinds, tables)
    return dict(zip(sandbox_kinds, tables, strict=True))


def child_tables() -> set[str]:
    """The built-in child tables (a list inside each record): the sandbox's full crawl knows its records'
    tables, not these; `tests/test_child_tables.py` checks them against the parents' lists."""
    from harvest.connectors.catalog.child_kinds import ChildKind

    return {name for name, kind in catalog.all_kinds().items() if isinstance(kind, ChildKind)}


def expected_keys(
    queries: Sequence[tuple[str, Mapping[str, Any]]], config: SandboxConfig, concrete: Sequence[str] = ()
) -> dict[str, dict[tuple[Any, ...], dict[str, Any]]]:
    """Table -> primary key -> record, over the full crawls of (documented path, params) queries, plus the
    concrete (path-parameter filled in) paths of single-page queries such as a material's detail."""
    out: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {}

    def add(documented: str, crawled: dict[str, list[dict[str, Any]]], params: Mapping[str, Any]) -> None:
        for kind, table in table_of(documented).items():
            records = crawled[kind]
            keys = keys_of(catalog.all_kinds()[table], records, params)  # as harvest reads them
            bucket = out.setdefault(table, {})
            for key, record in zip(keys, records, strict=True):
                bucket.setdefault(key, record)

    for path, params in queries:
        add(path, full_crawl(path, dict(params), config), params)
    for path in concrete:
        add(CREATIVE_DETAIL, full_crawl(path, {}, config), {})
    return out


def files_under(root: Path) -> Iterator[Path]:
    return (p for p in sorted(root.rglob("*")) if p.is_file())


def assert_no_secret_in_outputs(output: Path, secret: str = SECRET_KEY) -> None:
    """The key is in no file's bytes, no decompressed raw page (meta or body), no Parquet value, no DuckDB
    value and no `requests.params` value."""
    from harvest.tasks.output.raw_store import RawPageReader

    needle = secret.encode()
    files = list(files_under(output))
    assert files, f"nothing landed under {output}"
    for path in files:
        assert needle not in path.read_bytes(), f"API key found in the bytes of {path}"
        assert secret not in str(path)
    for path in output.rglob("*.pages"):
        for page in RawPageReader(path):
            assert needle not in page.body, f"API key in a raw page body of {path}"
            assert needle not in orjson.dumps(page.meta()), f"API key in a raw page envelope of {path}"
    for path in output.rglob("*.parquet"):
        text = orjson.dumps(pq.read_table(path).to_pylist(), default=str)
        assert needle not in text, f"API key in the values of {path}"
    db = output / "harvest.duckdb"
    if db.exists():
        con = duckdb.connect(str(db), read_only=True)
        try:
            for schema, name in con.execute("SELECT schema_name, table_name FROM duckdb_tables()").fetchall():
                dump = orjson.dumps(con.execute(f'SELECT * FROM "{schema}"."{name}"').fetchall(), default=str)
                assert needle not in dump, f"API key in DuckDB table {name}"
            params = con.execute("SELECT params FROM requests").fetchall()
            assert params and all(secret not in (p or "") for (p,) in params)
        finally:
            con.close()


_SUBPROCESS_PREFECT_HOME = session_dir("harvest-subprocess-prefect-")
"""One Prefect home for the session's `harvest` processes: its database is migrated once (10-30 s here)."""


def subprocess_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a real `harvest` process: the session's subprocess Prefect home, no analytics, no
    inherited API URL (pass PREFECT_API_URL to use the test harness's server instead of a temporary one), a load
    that does not wait for a held DuckDB file (`tests/conftest.py`; pass HARVEST_DUCKDB_LOCK_WAIT_SECONDS)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "HARVEST_"))}
    env.update(PREFECT_HOME=_SUBPROCESS_PREFECT_HOME, PREFECT_SERVER_ANALYTICS_ENABLED="false", COLUMNS="200")
    env.update(HARVEST_DUCKDB_LOCK_WAIT_SECONDS=os.environ.get("HARVEST_DUCKDB_LOCK_WAIT_SECONDS", "0"))
    env.update(extra)  # a test may set its own width
    return env


HOLDER = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])
if sys.argv[2:] == ["mark"]:
    con.execute("CREATE TABLE IF NOT EXISTS held_by_a_notebook (x INTEGER)")
print("holding", flush=True)
sys.stdin.read()
con.close()
"""


HoldDuckDB = Callable[..., AbstractContextManager[subprocess.Popen[str]]]
"""`held_duckdb`, as the `duckdb_holder` fixture gives it."""


@contextmanager
def held_duckdb(db: Path, mark: bool = True) -> Iterator[subprocess.Popen[str]]:
    """Another process (a notebook, say) holds `db` open for writing until the block ends. With `mark`, it
    creates the table `held_by_a_notebook`, whose survival shows its work was not lost; without, the file is
    left as it was (an output directory's check must find harvest's tables only). Also the `duckdb_holder`
    fixture."""
    args = [PYTHON, "-c", HOLDER, str(db), *(["mark"] if mark else [])]
    holder = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        yield holder
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=60)
    assert holder.returncode == 0


def query_pages(output: Path, query: Callable[[str], bool] | str, run_id: str | None = None) -> list[Any]:
    """The raw pages of the queries `query` accepts (or of the one query id it is), from the run's (or every
    run's) raw files in the order they were written (a session's file holds every query's pages)."""
    from harvest.tasks.output.layout import OutputLayout
    from harvest.tasks.output.raw_store import RawPageReader

    layout = OutputLayout(output)
    accept = (lambda q: q == query) if isinstance(query, str) else query
    runs = sorted(p.name for p in layout.raw_root.iterdir() if p.is_dir()) if layout.raw_root.is_dir() else []
    runs = [r for r in runs if run_id is None or r == run_id]
    return [p for run in runs for f in layout.raw_files(run) for p in RawPageReader(f) if accept(p.query_id)]
