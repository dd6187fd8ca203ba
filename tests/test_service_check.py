"""`harvest run` against an address that is not the service, or with a key it refuses: refused before Prefect
starts or a credit is spent, exit 2, one line naming the URL and what answered.

Real `harvest run` processes against real servers on 127.0.0.1: the sandbox with `/v1` appended (its 404s were
taken for "not found": a green night with nothing collected), a server answering HTML or other JSON, a port
nothing listens on, an https:// URL to the sandbox's plain-HTTP port, and the sandbox with another key.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from harvest.connectors.errors import NotTheService
from harvest.connectors.http.auth import ApiKey
from harvest.connectors.http.balance import read_before_run, unreachable
from harvest.connectors.http.retry import Timeouts
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.answering import OUT_OF_CREDITS
from harvest.sandbox.wire.serving import RunningSandbox
from tests.endpoints import BALANCE, OLD_BALANCE, PINS
from tests.flow_helpers import SECRET_KEY, job_spec, write_spec
from tests.net_helpers import LOOPBACK, LoopbackServer, free_port
from tests.process_helpers import finish, imported_packages, messages, signal_group, start_run
from tests.sandbox_gate import gated
from tests.scripted_server import Hang, ScriptedServer, text_reply


class _Fixed(BaseHTTPRequestHandler):
    """Answers every GET with the server's one answer, as a web server or another API at a wrong address does."""

    def do_GET(self) -> None:
        # noted before answering: a client that has its answer may be gone (and the test asserting) before a
        # line after the write runs (a `make test` run on 2026-12-03 saw no request)
        self.server.seen.append(self.path)  # type: ignore[attr-defined]
        status, kind, body = self.server.answer  # type: ignore[attr-defined]
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def other_server() -> Iterator[Callable[[int, str, bytes], tuple[str, list[str]]]]:
    """`other_server(status, content_type, body)`: its URL and the paths it was asked for."""
    servers: list[LoopbackServer] = []

    def make(status: int, kind: str, body: bytes) -> tuple[str, list[str]]:
        server = LoopbackServer((LOOPBACK, 0), _Fixed)
        server.answer, server.seen = (status, kind, body), []  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://{LOOPBACK}:{server.server_port}", server.seen  # type: ignore[attr-defined]

    yield make
    for server in servers:
        server.shutdown()
        server.server_close()


def spec_for(tmp_path: Path, base_url: str) -> Path:
    return write_spec(
        tmp_path,
        job_spec(
            base_url,
            tmp_path / "out",
            [{"id": "pins", "endpoint": PINS, "params": {"query": "oak"}}],
            name="wrong-address",
            credits=50,
        ),
    )


def refused(tmp_path: Path, base_url: str) -> str:
    """Run `harvest run` (no Prefect API configured: it would start its temporary server) and return its one
    line of error, after checking it exited 2 without importing Prefect, printing the key or landing a file."""
    code, out, err = finish(start_run(spec_for(tmp_path, base_url), tmp_path, None, trace_imports=True))
    said = messages(err)
    assert code == 2, out + "\n".join(said)
    assert "prefect" not in imported_packages(err), "refused before Prefect was even imported"
    assert len(said) == 1 and said[0].startswith("error: service: "), said
    assert SECRET_KEY not in out + err
    landed = [p.name for p in (tmp_path / "out").glob("*")] if (tmp_path / "out").exists() else []
    assert landed in ([], [".harvest-wrong-address.lock"]), "nothing but the job's lock file"
    return said[0]


def test_the_sandbox_with_v1_appended_is_refused_naming_the_url_and_its_404(
    sandbox_factory: Callable[..., RunningSandbox], tmp_path: Path
) -> None:
    sb = sandbox_factory(SandboxConfig(api_keys={SECRET_KEY: 100}))
    line = refused(tmp_path, sb.base_url + "/v1")
    assert f"{sb.base_url}/v1/v1/account/credit-balance does not answer as the service does: HTTP 404" in line
    assert "service.base_url" in line and "nothing was sent" in line
    assert sb.billed_total() == 0 and not [e for e in sb.ledger if e.path == PINS]


@pytest.mark.parametrize(
    ("status", "kind", "body", "shown"),
    [
        (
            404,
            "text/html",
            b"<!DOCTYPE html><h1>Not Found</h1>",
            "HTTP 404 (text/html): '<!DOCTYPE html><h1>Not",
        ),
        (
            200,
            "text/html",
            b"<html><title>Sign in</title></html>",
            "HTTP 200 (text/html): '<html><title>Sign",
        ),
        (200, "application/json", b'{"status": "ok"}', 'HTTP 200 (application/json): \'{"status": "ok"}\''),
    ],
    ids=["404-page", "html", "other-json"],
)
def test_a_server_that_is_not_the_service_is_refused(
    other_server: Callable[[int, str, bytes], tuple[str, list[str]]],
    tmp_path: Path,
    status: int,
    kind: str,
    body: bytes,
    shown: str,
) -> None:
    url, seen = other_server(status, kind, body)
    line = refused(tmp_path, url)
    assert f"{url}/v1/account/credit-balance does not answer as the service does: {shown}" in line
    older = [OLD_BALANCE] if status == 404 else []  # where the balance was before the service moved it
    assert seen == [BALANCE, *older], "the free balance, and no data request"


def test_nothing_listening_is_refused_at_once(tmp_path: Path) -> None:
    """A refused connection is final at the check: no ~10 s of retries before a failed run."""
    url = f"http://{LOOPBACK}:{free_port()}"
    line = refused(tmp_path, url)
    assert (
        f"{url}/v1/account/credit-balance does not answer as the service does: nothing is listening there"
        in line
    )


def test_tls_refused_is_refused(sandbox_factory: Callable[..., RunningSandbox], tmp_path: Path) -> None:
    sb = sandbox_factory(SandboxConfig(api_keys={SECRET_KEY: 100}))
    url = sb.base_url.replace("http://", "https://")
    line = refused(tmp_path, url)
    assert (
        f"{url}/v1/account/credit-balance does not answer as the service does: the TLS handshake failed"
        in line
    )
    assert sb.billed_total() == 0 and not [e for e in sb.ledger if e.path == PINS]


def test_a_refused_key_says_to_fix_the_key(
    sandbox_factory: Callable[..., RunningSandbox], tmp_path: Path
) -> None:
    sb = sandbox_factory(SandboxConfig(api_keys={"another-accounts-key-0123456789": 100}))
    line = refused(tmp_path, sb.base_url)
    assert "the service refused the API key, or the account is out of credits (HTTP 402" in line
    assert "fix the key in the environment variable HARVEST_API_KEY" in line and "--continue" not in line
    assert sb.base_url not in line and "base_url" not in line
    assert [e.path for e in sb.ledger] == [BALANCE] and sb.billed_total() == 0


def test_a_402_with_the_services_message_and_no_envelope_names_the_key_not_the_url(
    other_server: Callable[[int, str, bytes], tuple[str, list[str]]], tmp_path: Path
) -> None:
    """The service answers a wrong key with 402 and its out-of-credits message, as it answers an empty account;
    without `success` in the body it is still the service's refusal, not another server at a wrong URL."""
    body = json.dumps({"error": "payment_required", "message": OUT_OF_CREDITS}).encode()
    url, seen = other_server(402, "application/json", body)
    line = refused(tmp_path, url)
    assert "the service refused the API key, or the account is out of credits (HTTP 402" in line
    assert "fix the key in the environment variable HARVEST_API_KEY, or top up the account" in line
    assert url not in line and "base_url" not in line and "does not answer as the service does" not in line
    assert seen == [BALANCE]


def test_a_name_that_does_not_resolve_is_final() -> None:
    """A real resolver failure, made without a DNS query (this machine's resolver is not on 127.0.0.1, and tests
    send nothing elsewhere): "no such name" is final at the check; "try again" (EAI_AGAIN) is not."""
    with pytest.raises(socket.gaierror) as no_name:
        socket.getaddrinfo("harvest-test.invalid", 443, flags=socket.AI_NUMERICHOST)
    wrapped = OSError("connect failed")
    wrapped.__cause__ = no_name.value
    assert (unreachable(wrapped) or "").startswith("the host name does not resolve")
    assert unreachable(socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")) is None


@pytest.mark.scenario
def test_nothing_listening_where_the_service_answered_this_job_before_is_try_again_later(
    sandbox_factory: Callable[..., RunningSandbox], tmp_path: Path, prefect_api_url: str
) -> None:
    """The service down at 03:15 is not a wrong URL: where it answered an earlier run of the job, nothing
    listening there is exit 75 (try again later, as cron's next night would), naming that run; nothing sent."""
    sb = sandbox_factory(SandboxConfig(api_keys={SECRET_KEY: 100}))
    spec = spec_for(tmp_path, sb.base_url)
    first, _, err = finish(start_run(spec, tmp_path, prefect_api_url))
    assert first == 0, err
    (run_id,) = [p.name for p in (tmp_path / "out" / "raw").iterdir() if p.is_dir()]
    sb.stop()
    assert_away_for_now(spec, tmp_path, prefect_api_url, run_id)


def assert_away_for_now(
    spec: Path,
    tmp_path: Path,
    prefect_api_url: str,
    run_id: str,
    why: str = "nothing is listening there (connection refused)",
) -> None:
    """The same command again, nothing answering (`why`): exit 75 in one line naming the run it answered."""
    code, out, err = finish(start_run(spec, tmp_path, prefect_api_url))
    said = messages(err)
    assert code == 75, out + "\n".join(said)
    assert len(said) == 1 and f"{why}, where it answered run {run_id}" in said[0], said
    assert "the same command runs the job once it answers" in said[0] and SECRET_KEY not in out + err


def test_nothing_listening_the_night_after_a_run_killed_mid_run_is_try_again_later_too(
    tmp_path: Path, prefect_api_url: str
) -> None:
    """A run killed with -9 mid-run (a reboot, the OOM killer) wrote the balance the service answered in its
    journal only, not in its manifest. The next night, with the service down, is still exit 75 naming that run,
    not exit 2 ("check service.base_url") for a URL that answered and billed: it was so before."""
    with gated(SandboxConfig(api_keys={SECRET_KEY: 100}, pages_by_path={PINS: (4, 4)}, page_size=4)) as sb:
        spec = spec_for(tmp_path, sb.base_url)
        sb.gate.close_after(1)  # the second page waits at the door when the machine goes down
        run = start_run(spec, tmp_path, prefect_api_url)
        sb.gate.wait_frozen(run)
        signal_group(run, signal.SIGKILL)
        finish(run)
        sb.gate.open()
    (run_id,) = [p.name for p in (tmp_path / "out" / "raw").iterdir() if p.is_dir()]
    assert_away_for_now(spec, tmp_path, prefect_api_url, run_id)


@pytest.mark.scenario
def test_a_service_answering_503_before_the_run_says_so_in_harvest_s_lines_only(
    other_server: Callable[[int, str, bytes], tuple[str, list[str]]], tmp_path: Path, prefect_api_url: str
) -> None:
    """A gateway answering 503 to everything (the service down behind it): busy is no reason to refuse, so the
    run starts and its queries fail after their attempts (exit 1, the `--continue` to go on printed). What it
    says is harvest's lines: the balance check's retries printed a bare `stamina.retry_scheduled` line first."""
    url, _ = other_server(503, "text/plain", b"Service Unavailable")
    code, out, err = finish(start_run(spec_for(tmp_path, url), tmp_path, prefect_api_url))
    assert code == 1, out + err
    assert "retry_scheduled" not in err and "stamina" not in err, err
    assert "warning: the service's balance could not be read before the run" in err, err
    assert "--continue` picks it up" in " ".join(err.split()), err


QUICK_CHECK = Timeouts(connect=1.0, read=0.5, write=1.0, pool=1.0, total=2.0)
"""The check's timeouts shortened for the in-process cases: what they decide is the same."""


def asked(server: ScriptedServer) -> list[str]:
    """The path of each request the server read, and nothing else of it (its headers hold the key)."""
    return [request.target for request in server.requests]


async def test_a_service_that_takes_the_connection_and_answers_nothing_is_not_busy() -> None:
    """Every try of the free balance timed out: nothing there answers, so the check ends it as it does nothing
    listening (a run would have waited 60 s x 5 attempts on its balance and on each page: tens of minutes)."""
    async with ScriptedServer(Hang(), Hang(), Hang()) as server:
        with pytest.raises(NotTheService) as refused_check:
            await read_before_run(server.url, ApiKey(SECRET_KEY), QUICK_CHECK)
    assert refused_check.value.unreachable
    assert "it took the connection and answered nothing in time, 3 tries in a row" in str(refused_check.value)
    assert asked(server) == [BALANCE] * 3, "the free balance three times, nothing else"


async def test_an_address_where_no_connection_can_be_made_in_time_is_ended_as_nothing_listening() -> None:
    """A black hole (a firewall dropping the packets, a host that is gone): connecting times out each try. Made
    on 127.0.0.1 by a listening socket whose queue is full and nobody accepts: Linux drops the next SYNs."""
    async with ScriptedServer(accepting="unresponsive") as server:
        with pytest.raises(NotTheService) as refused_check:
            await read_before_run(server.url, ApiKey(SECRET_KEY), QUICK_CHECK)
    assert refused_check.value.unreachable
    assert "no connection could be made in time, 3 tries in a row" in str(refused_check.value)


async def test_a_service_that_answers_503_once_then_nothing_is_busy_and_the_run_goes_on() -> None:
    """One answer among the timeouts (a 503: the service is there, and busy) keeps the decision that a busy
    service is no reason to refuse: the check gives up quietly and the run's own retries take over."""
    async with ScriptedServer(text_reply(503, "Service Unavailable"), Hang(), Hang()) as server:
        assert await read_before_run(server.url, ApiKey(SECRET_KEY), QUICK_CHECK) is None
    assert asked(server) == [BALANCE] * 3


@pytest.mark.scenario
async def test_a_service_silent_where_it_answered_this_job_before_is_try_again_later(
    sandbox_factory: Callable[..., RunningSandbox], tmp_path: Path, prefect_api_url: str
) -> None:
    """The night the service hangs (its socket takes connections, nothing answers): `harvest run` ends in about
    half a minute with exit 75 naming the run it answered, as a service that is down does; no data request sent."""
    sb = sandbox_factory(SandboxConfig(api_keys={SECRET_KEY: 100}))
    spec = spec_for(tmp_path, sb.base_url)
    first, _, err = await asyncio.to_thread(finish, start_run(spec, tmp_path, prefect_api_url))
    assert first == 0, err
    (run_id,) = [p.name for p in (tmp_path / "out" / "raw").iterdir() if p.is_dir()]
    sb.stop()
    async with ScriptedServer(Hang(), Hang(), Hang(), port=int(sb.base_url.rsplit(":", 1)[1])) as server:
        why = "it took the connection and answered nothing in time, 3 tries in a row"
        await asyncio.to_thread(assert_away_for_now, spec, tmp_path, prefect_api_url, run_id, why)
    assert asked(server) == [BALANCE] * 3, "the free balance three times, nothing else"


def _manifests(tmp_path: Path) -> list[str]:
    from harvest.tasks.output.layout import OutputLayout
    from harvest.tasks.output.manifest import all_manifests

    return [m.run_id for m in all_manifests(OutputLayout(tmp_path / "out"))]


async def test_a_deployment_s_run_where_nothing_listens_now_ends_crashed_and_makes_no_run(
    sandbox_factory: Callable[..., RunningSandbox], tmp_path: Path, prefect_harness: None, api_key: str
) -> None:
    """`harvest serve`'s night with the service down (the flow itself, no `harvest run` before it): what the
    cron line's exit 75 says, as the flow run's Crashed state, in a second; before, the run began, each query
    tried 5 times, and it ended Failed, a `failed` run of 0 pages left in `harvest runs`."""
    import time

    from harvest.flows.collect import collect_job, run_collect

    sb = sandbox_factory(SandboxConfig(api_keys={SECRET_KEY: 100}))
    spec = spec_for(tmp_path, sb.base_url)
    first = await run_collect(spec_path=str(spec))
    assert first.status != "failed", first
    sb.stop()
    began = time.monotonic()
    state = await collect_job(spec_path=str(spec), return_state=True)
    took = time.monotonic() - began
    message = state.message or ""
    assert state.type.value == "CRASHED", (state.type, message)
    assert f"nothing is listening there (connection refused), where it answered run {first.run_id}" in message
    assert "away for now; nothing was sent, and the job's next run collects it" in message, message
    assert _manifests(tmp_path) == [first.run_id], "no run of 0 pages made"
    assert took < 20 and SECRET_KEY not in message


async def test_a_deployment_s_run_on_a_silent_service_stops_at_once_when_asked(
    sandbox_factory: Callable[..., RunningSandbox], tmp_path: Path, prefect_harness: None, api_key: str
) -> None:
    """The service's socket takes the connection and answers nothing: a stop (`harvest serve`'s, a signal)
    while the run reads the free balance ends it at once, Cancelled, no run made, nothing sent. Before, the read
    went on through its retries past serve's 120 s wait, and serve killed the run (its manifest left running)."""
    import os
    import time

    from harvest.flows.collect import collect_job, run_collect

    sb = sandbox_factory(SandboxConfig(api_keys={SECRET_KEY: 100}))
    spec = spec_for(tmp_path, sb.base_url)
    first = await run_collect(spec_path=str(spec))
    assert first.status != "failed", first
    sb.stop()
    async with ScriptedServer(Hang(), Hang(), Hang(), port=int(sb.base_url.rsplit(":", 1)[1])) as server:

        def stop_once_asked() -> None:  # the flow's handlers are in place once it sends its first request
            deadline = time.monotonic() + 120
            while not server.requests and time.monotonic() < deadline:
                time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=stop_once_asked, daemon=True).start()
        began = time.monotonic()
        state = await collect_job(spec_path=str(spec), return_state=True)
        took = time.monotonic() - began
    assert state.type.value == "CANCELLED", (state.type, state.message)
    assert "stopped while the service was checked; nothing was sent" in (state.message or "")
    assert asked(server) == [BALANCE], "the free balance, once, nothing else"
    assert _manifests(tmp_path) == [first.run_id] and took < 8, took
