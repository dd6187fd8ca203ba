"""The job's DuckDB file stays the analysts' while a run pages: harvest takes its write lock only for the load.

A real `harvest run` against the sandbox over HTTP, held mid-crawl at the sandbox's gate; meanwhile another
process opens `harvest.duckdb` read-write (a notebook) and writes a table of its own. A run that merged into the
file while paging (and held its lock all the while) fails this: the other process could not open the file.
"""

from __future__ import annotations

from pathlib import Path

from harvest.sandbox.config import SandboxConfig
from harvest.tasks.database.connection import write_connection
from tests.endpoints import PINS
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, expected_keys, held_duckdb, key_set, rows, write_spec
from tests.process_helpers import finish, start_run
from tests.sandbox_gate import gated

TOPICS = ["oak desk", "elm chair"]
CONFIG = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (6, 6)}, page_size=4)


def test_another_process_opens_the_database_read_write_while_a_run_pages(
    prefect_api_url: str, tmp_path: Path
) -> None:
    output = tmp_path / "out"
    db = output / "harvest.duckdb"
    with write_connection(db):  # the file of an earlier night: it exists before the run starts
        pass
    with gated(CONFIG) as sb:
        spec = {
            "name": "nightly",
            "service": {"base_url": sb.base_url},
            "budget": {"credits": 1_000},
            "concurrency": 2,
            "output": str(output),
            "queries": [{"id": "pins", "endpoint": PINS, "for_each": {"query": TOPICS}}],
        }
        sb.gate.close_after(5)  # paging stands still after 5 pages, with pages landed and more to come
        proc = start_run(write_spec(tmp_path, spec), tmp_path, prefect_api_url)
        sb.gate.wait_frozen(proc)
        with held_duckdb(db) as notebook:  # opens read-write and writes `held_by_a_notebook`, or fails here
            assert notebook.poll() is None
        assert proc.poll() is None and sb.gate.passed == 5, "the run was still paging"
        sb.gate.open()
        code, out, err = finish(proc)
    assert code == 0, out + err
    want = expected_keys([(PINS, {"query": t}) for t in TOPICS], CONFIG)
    for table, keys in want.items():
        assert key_set(db, table) == set(keys), table
    assert rows(db, "SELECT count(*) FROM held_by_a_notebook") == [(0,)]  # the notebook's work is kept
    assert rows(db, "SELECT status FROM runs") == [("complete",)]
