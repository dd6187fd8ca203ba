"""A run killed in the moment after a damaged answer was kept and before its query's end was recorded, then the
same command: a real `harvest run` process against the sandbox over HTTP, killed (SIGKILL) at that exact point by
a `sitecustomize` the process runs first, then resumed. The damaged answer is billed and kept, and is no page of
the query: the resume asks for its page again and collects the pages `max_pages` allows. An answer the service
itself sent unreadable, kept at the same point, is not asked for again: the resume ends its query as `drift`, as
the live run did.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.expected import crawl
from harvest.sandbox.wire.serving import running
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import all_manifests
from tests.crawl_helpers import data_entries
from tests.endpoints import PINS
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, job_spec, rows, write_spec
from tests.process_helpers import finish, start_run

PARAMS = {"query": "oak desk"}
CONFIG = SandboxConfig(
    api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (6, 6)}, page_size=4,
    fault_plan_by_path={PINS: ["truncated", "truncated"]},
)  # fmt: skip

KILLED_AFTER_A_DAMAGED_ANSWER_IS_KEPT = """
import os, signal
import orjson
from harvest.tasks.output.raw_store import RawPageWriter

_append = RawPageWriter.append


def append(self, **page):
    \"\"\"SIGKILL to this process once a 2xx that cannot be read is in the raw store: its query's end is not
    recorded yet (the journal's `end` line, the manifest).\"\"\"
    _append(self, **page)
    if 200 <= page["status_code"] < 300:
        try:
            orjson.loads(page["body"])
        except orjson.JSONDecodeError:
            os.kill(os.getpid(), signal.SIGKILL)


RawPageWriter.append = append
"""


def killed_after_a_damaged_answer(tmp_path: Path) -> dict[str, str]:
    """The environment of a process that kills itself right after keeping a damaged answer."""
    folder = tmp_path / "hook"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(KILLED_AFTER_A_DAMAGED_ANSWER_IS_KEPT)
    return {"PYTHONPATH": str(folder)}


def killed_then_resumed(spec: Path, tmp_path: Path, prefect_api_url: str) -> tuple[str, str]:
    """`harvest run` killed right after it kept a damaged answer, then run again to its end: (stdout, stderr)."""
    hook = killed_after_a_damaged_answer(tmp_path)
    assert finish(start_run(spec, tmp_path, prefect_api_url, env=hook))[0] < 0  # SIGKILLed
    code, out, err = finish(start_run(spec, tmp_path, prefect_api_url))
    assert code == 0, out + err
    return out, err


def test_a_damaged_answer_kept_just_before_a_kill_is_no_page_of_the_resumed_query(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """The pins of one topic, `max_pages: 2`, their first answer cut short twice (both billed). Killed once the
    second damaged answer was kept, the resume counted it as a collected page: it asked for the first page again,
    then stopped at `max_pages` with one page of pins landed (four records missing until a later night, and
    none at all under `max_pages: 1`). Now the resume collects two pages, as a run not killed would."""
    output = tmp_path / "out"
    query = {"id": "pins", "endpoint": PINS, "params": PARAMS, "max_pages": 2}
    two_pages = [pin["id"] for page in list(crawl(PINS, PARAMS, CONFIG))[:2] for pin in page.records["pins"]]
    with running(CONFIG) as sb:
        spec = write_spec(tmp_path, job_spec(sb.base_url, output, [query], name="damaged", credits=1000))
        hook = killed_after_a_damaged_answer(tmp_path)
        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url, env=hook))
        assert code == -signal.SIGKILL, (code, out, err)
        assert [e.fault for e in data_entries(sb)] == ["truncated", "truncated"]
        (killed,) = all_manifests(OutputLayout(output))
        assert killed.status == "running"  # killed before the query's end was recorded

        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url))
        paid = data_entries(sb)
    assert code == 0, out + err
    assert [e.fault for e in paid] == ["truncated", "truncated", None, None]  # page 1 again, page 2
    (run,) = all_manifests(OutputLayout(output))
    assert run.run_id == killed.run_id and run.status == "complete" and run.resumes == 1
    (pins,) = run.queries
    assert (pins["status"], pins["pages"], pins["records"]) == ("max_pages", 2, len(two_pages)), pins
    assert pins["credits"] == 4 and run.credits_spent == 4  # the two damaged answers were billed
    db = output / "harvest.duckdb"
    assert {pin for (pin,) in rows(db, "SELECT id FROM pinboard_pins")} == set(two_pages)


UNREADABLE = SandboxConfig(
    api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (6, 6)}, page_size=4,
    fault_plan_by_path={PINS: [None, "malformed"]},
)  # fmt: skip
"""The second page answered whole and unreadable (JSON followed by a proxy's HTML page): the service's own."""


@pytest.mark.scenario
def test_an_answer_the_service_sent_unreadable_kept_just_before_a_kill_is_not_paid_again(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """The pins of one topic, `max_pages: 4`, their second answer unreadable as the service sent it: the live run
    pays it once, keeps it and ends the query as `drift`. Killed once it was kept, the resume could not tell it
    from an answer damaged on the wire: it asked for page 2 again (paid twice) and paged on to page 4. Now the
    resume reads the verdict kept with the answer and ends the query as the live run did, asking for nothing."""
    output = tmp_path / "out"
    query = {"id": "pins", "endpoint": PINS, "params": PARAMS, "max_pages": 4}
    first_page = [pin["id"] for pin in next(iter(crawl(PINS, PARAMS, UNREADABLE))).records["pins"]]
    with running(UNREADABLE) as sb:
        spec = write_spec(tmp_path, job_spec(sb.base_url, output, [query], name="unreadable", credits=1000))
        hook = killed_after_a_damaged_answer(tmp_path)
        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url, env=hook))
        assert code == -signal.SIGKILL, (code, out, err)
        assert [e.fault for e in data_entries(sb)] == [None, "malformed"]
        (killed,) = all_manifests(OutputLayout(output))
        assert killed.status == "running"  # killed before the query's end was recorded

        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url))
        paid = data_entries(sb)
    assert [e.fault for e in paid] == [None, "malformed"], out + err  # nothing asked for again
    (run,) = all_manifests(OutputLayout(output))
    assert run.run_id == killed.run_id and run.resumes == 1
    (pins,) = run.queries
    assert (pins["status"], pins["pages"], pins["records"]) == ("drift", 2, len(first_page)), pins
    assert "could not be read" in pins["error"] and "not asked for again" in pins["error"], pins
    assert pins["credits"] == run.credits_spent == sum(e.credits for e in paid) == 2  # each answer paid once
    db = output / "harvest.duckdb"
    assert {pin for (pin,) in rows(db, "SELECT id FROM pinboard_pins")} == set(first_page)
