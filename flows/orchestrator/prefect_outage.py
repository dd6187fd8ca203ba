"""Prefect's API not answering (a restart, minutes away, gone): noticed, said in one line each, waited on for a
bounded time only, never the reason a run fails or pays again.

What Prefect 3.8.8 does by itself when its API goes away (read in its source, measured against a killed
`prefect server start`):

- Task runs' states travel as events. The events worker tries each event 11 times over ~8 s
  (`PrefectEventsClient._emit`, `reconnection_attempts=10`, 1 s apart after the third), then logs a warning
  ("Unable to connect to 'ws://.../events/in'...") and an ERROR carrying the whole event (`Service
  'EventsWorker' failed to process item Event(...)`, ~2 KB), and drops the event: a task run then stays
  Running in Prefect. While the API is away that pair comes every ~8 s.
- A client call retries a dropped connection (once the client has connected) and 408/429/502/503 answers
  `PREFECT_CLIENT_MAX_RETRIES` (5) times, 2, 4, 8, 16 and 32 s apart (~62 s, ± 20% jitter), then raises: the
  run's artifact call took ~62 s to fail, then the flow engine's final state call as long again.
- The log sender writes `--- Error logging to API ---` and the error straight to stderr, per failed batch.
- At exit both workers drain their queues without a time limit.

harvest therefore: folds each kind of Prefect client error into one line, said once (`Watch`, the filters of
`install`, in `harvest run`'s and `harvest serve`'s processes and while a run is under way in any other;
`logging.raiseExceptions` off in `harvest run`, the switch Prefect's log sender honours), and counts what Prefect
missed so that the run can tell it later (`flows.orchestrator.prefect_record`); asks the
API itself only through `bounded_client` (a short timeout, one retry); and, once it knows the API is away at
the end, leaves without waiting for Prefect's queues (`flows.commands.run_job`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import os
import ssl
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from typing import Any

CALL_TIMEOUT_SECONDS = 10.0
"""How long one of harvest's own calls to Prefect's API (the end's check and artifacts, telling a run's end
later) may take; with one retry 2 s later, ~22 s at most for an API that accepts connections and never answers,
at once for one that refuses them."""
START_WAIT_ENV = "HARVEST_PREFECT_WAIT_SECONDS"
START_WAIT_SECONDS = 60.0
"""How long `harvest run` waits for a configured Prefect API that does not answer before it starts (a server
restart takes 3-10 s), checking every 2 s; nothing is sent to the service meanwhile."""


class NotStarted(Exception):
    """Prefect's API failed before the flow's body began (creating the flow run): nothing was sent or paid."""


_LOCAL_FILE_ERRORS = (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError)
"""OSErrors only a path raises, never a connection: an output directory removed during a run is not Prefect away."""


def api_trouble(exc: BaseException) -> bool:
    """Whether `exc` says Prefect's API could not be reached or did not answer (as opposed to refusing a call)."""
    import httpx
    from prefect.exceptions import PrefectHTTPStatusError

    from harvest.tasks.output.machine_fault import as_machine_fault

    if isinstance(exc, PrefectHTTPStatusError):
        return exc.response.status_code >= 500 or exc.response.status_code in (408, 429)
    if isinstance(exc, _LOCAL_FILE_ERRORS) or (
        isinstance(exc, OSError) and as_machine_fault(exc) is not None
    ):
        return False  # a file of this machine's (missing, a full disk), not a call to Prefect
    return isinstance(exc, httpx.TransportError | OSError | TimeoutError)


def caused_by_api(exc: BaseException) -> bool:
    """Whether `exc`, or an error it was raised from, says Prefect's API was away (Prefect wraps its client's
    errors: a task run's concurrency slots refused as `ConcurrencySlotAcquisitionError` from a ConnectError)."""
    from harvest.connectors.error_chain import error_chain
    from harvest.flows.spec import UsageError

    for link in error_chain(exc):
        if isinstance(link, UsageError):  # a refusal harvest decided and says (the job's lock held by another
            return False  # run, found by a BlockingIOError: an OSError, but no outage)
        if api_trouble(link):
            return True
    return False


def said(exc: BaseException) -> str:
    """An error in one line: its type and its first line."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class Watch:
    """What this process saw of Prefect's API failing: each kind of failure said once, what it cost counted."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.troubles: list[str] = []
        """Every failure noticed, one line each, in order (a run reads those since its start: `since`)."""
        self.events_lost = 0
        self._said: set[str] = set()

    def notice(self, kind: str, text: str, lost_event: bool = False) -> None:
        """Count a failure; the first of its kind is said on stderr, as one line."""
        with self._lock:
            self.troubles.append(text)
            self.events_lost += lost_event
            first = kind not in self._said
            self._said.add(kind)
        if first:
            from harvest.flows import console

            console.warning(f"Prefect's API did not answer ({text}); {_CONSEQUENCE[kind]}")

    def mark(self) -> int:
        return len(self.troubles)

    def since(self, mark: int) -> list[str]:
        with self._lock:
            return self.troubles[mark:]


_CONSEQUENCE = {
    "events": "Prefect misses this run's events (task run states) meanwhile; harvest tells it how the run ended "
    "once it answers",
    "calls": "harvest goes on without it and tells Prefect how the run ended once it answers",
    "task runs": "the query lines run without their Prefect task runs; harvest tells Prefect how they ended once "
    "it answers",
}

WATCH = Watch()


class _Scope:
    """Where Prefect's lines are harvest's to condense: a whole `harvest run` process (`install(cli=True)`), else
    only while a harvest run is under way (`condensing`): a project's own flows in the same process (harvest
    imported as a library, `collect_job` in a flow of theirs) keep Prefect's lines as Prefect prints them."""

    def __init__(self) -> None:
        self.everywhere = False
        self.runs = 0
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return self.everywhere or self.runs > 0

    @contextmanager
    def run(self) -> Iterator[None]:
        with self._lock:
            self.runs += 1
        try:
            yield
        finally:
            with self._lock:
                self.runs -= 1


SCOPE = _Scope()


def condensing() -> AbstractContextManager[None]:
    """While a harvest run is under way in this process: Prefect's lines about its API are folded into `WATCH`."""
    install()
    return SCOPE.run()


class _Condense(logging.Filter):
    """Prefect's own lines about its API being away, each turned into a notice of `WATCH` (one line, said once)
    instead of a warning, a ~2 KB event dump or a traceback every few seconds; within `SCOPE` only."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not SCOPE:
            return True
        message = str(record.msg)
        if record.name == "prefect.events.clients" and message.startswith("Unable to connect"):
            reason = str(record.args[1]) if isinstance(record.args, tuple) and len(record.args) > 1 else ""
            WATCH.notice("events", f"events: {reason or 'cannot connect'}")
            return False
        if record.name == "prefect._internal.concurrency" and message.startswith("Service %r failed"):
            worker = record.args[0] if isinstance(record.args, tuple) and record.args else "a worker"
            WATCH.notice(
                "events", f"{worker} gave up", lost_event=worker == "EventsWorker" and "item" in message
            )
            return False
        if record.name in ("EventsWorker", "APILogWorker") and message.startswith("Still processing"):
            return False  # the drain at exit: harvest does not wait for it once it knows the API is away
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and record.name.startswith("prefect") and caused_by_api(exc):
            WATCH.notice("calls", said(exc))
            return False
        return True


_CONDENSED = ("prefect.events.clients", "prefect._internal.concurrency", "EventsWorker", "APILogWorker")


def install(cli: bool = False, whole_process: bool = False) -> None:
    """Fold Prefect's API errors into `WATCH` (idempotent): while a run is under way (`condensing`), or from now on
    with `whole_process` (a process of harvest's own: `harvest serve`). `cli`: the whole process, and also silence
    the log sender's raw writes to stderr (`harvest run`'s own process only: it says the outage itself, once)."""
    from prefect.logging.handlers import PrefectConsoleHandler

    for name in _CONDENSED:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Condense) for f in logger.filters):
            logger.addFilter(_Condense())
    for handler in logging.getLogger().handlers:  # the flow engine's "Encountered exception" with a traceback
        if isinstance(handler, PrefectConsoleHandler) and not any(
            isinstance(f, _Condense) for f in handler.filters
        ):
            handler.addFilter(_Condense())
    SCOPE.everywhere = SCOPE.everywhere or whole_process or cli
    if cli:
        logging.raiseExceptions = False


@asynccontextmanager
async def bounded_client() -> AsyncIterator[Any]:
    """A Prefect client of its own (not the flow engine's) whose calls give up after `CALL_TIMEOUT_SECONDS` and
    one retry, so that what harvest tells Prefect never holds a run for Prefect's ~62 s of retries."""
    from prefect.client.orchestration import get_client
    from prefect.context import SettingsContext, get_settings_context

    current = get_settings_context()
    settings = {"timeout": CALL_TIMEOUT_SECONDS, "verify": _prefect_tls()}
    with SettingsContext(profile=current.profile, settings=_one_retry(current.settings)):
        async with get_client(httpx_settings=settings) as client:
            yield client


_ONE_RETRY: list[tuple[Any, Any]] = []
"""The last (Prefect's settings, the same with one retry): Prefect's `temporary_settings` builds the copy anew
each time (~0.1 s), for each of a run's own calls, from settings that do not change within a run."""


def _one_retry(settings: Any) -> Any:
    from prefect.settings import PREFECT_CLIENT_MAX_RETRIES

    if not _ONE_RETRY or _ONE_RETRY[0][0] is not settings:
        _ONE_RETRY[:] = [(settings, settings.copy_with_update(updates={PREFECT_CLIENT_MAX_RETRIES: 1}))]
    return _ONE_RETRY[0][1]


def _prefect_tls() -> ssl.SSLContext:
    """The TLS context Prefect's client would build from its settings, built once per process for those
    settings: Prefect builds one per client (~40 ms of loading CA certificates), and a run asks the API through
    a client of its own at its start, its end and for each record it tells later."""
    from prefect.settings import PREFECT_API_SSL_CERT_FILE, PREFECT_API_TLS_INSECURE_SKIP_VERIFY

    return _tls_context(bool(PREFECT_API_TLS_INSECURE_SKIP_VERIFY.value()), PREFECT_API_SSL_CERT_FILE.value())


@functools.cache
def _tls_context(insecure: bool, cert_file: str | None) -> ssl.SSLContext:
    """As `prefect.client.orchestration.PrefectClient` builds it (Prefect 3.8.8)."""
    if insecure:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    import certifi

    return ssl.create_default_context(cafile=cert_file or certifi.where())


async def api_away() -> str | None:
    """Why Prefect's API does not answer its health check now (one line); None when it answers, or refuses for
    another reason than being away (a wrong Prefect key: Prefect's own calls then say so)."""
    try:
        async with bounded_client() as client:
            failed = await client.api_healthcheck()
    except Exception as exc:
        failed = exc
    return None if failed is None or not caused_by_api(failed) else said(failed)


def start_wait_seconds() -> float:
    """HARVEST_PREFECT_WAIT_SECONDS, or the default when unset. A value that is no number of seconds is refused
    (UsageError, exit 2), as the other HARVEST_* settings are, by `harvest run`'s checks before anything is
    started or paid (`flows.commands.run_job.preflight`): the default stood in for it without a word."""
    from harvest.flows.spec.problems import UsageError

    text = os.environ.get(START_WAIT_ENV, "")
    if not text.strip():
        return START_WAIT_SECONDS
    try:
        seconds = float(text)
        problem = "" if math.isfinite(seconds) and seconds >= 0 else "negative, or not finite"
    except ValueError:
        seconds, problem = START_WAIT_SECONDS, "not a number"
    if problem:
        raise UsageError(
            f"{START_WAIT_ENV}={text!r}: {problem}; allowed: a number of seconds, 0 or more (how long `harvest "
            f"run` waits for a Prefect API that does not answer before it starts; default {START_WAIT_SECONDS:g})"
        )
    return seconds


async def wait_for_api(seconds: float) -> str | None:
    """Before a run starts: None once Prefect's API answers, else (after `seconds`) why it did not."""
    deadline = time.monotonic() + seconds
    while (why := await api_away()) is not None:
        if time.monotonic() >= deadline:
            return why
        await asyncio.sleep(min(2.0, max(0.0, deadline - time.monotonic())))
    return None
