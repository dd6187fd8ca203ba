"""A scripted HTTP/1.1 server on 127.0.0.1 for the client's tests: real sockets, so every request goes through the
lanes a run uses (`connectors.http.lane_pool`, httpcore underneath), not through a transport swapped in for tests.

The server plays one step per request, in the order the requests arrive, and records each request it read:

    async with ScriptedServer(json_reply(429, {...}, retry_after="0"), ok()) as server:
        ... ServiceClient(server.url, ...) ...
    assert [r.path for r in server.requests] == [...]

Steps: `Reply` (a status, headers and a body; compressed, delayed, held until an `asyncio.Event`, or shorter than
its Content-Length), `Hang` (no answer until the client gives up or the server stops), `Drop` (send some bytes,
perhaps slowly, then close or reset the connection), `Stall` (stop reading the request, so the client's write
blocks), or an async callable that is given the request and returns the step to play.

Connections can also fail before any request is read: a server made with `accepting="refuse"` has its port bound
but is not listening (connecting is refused at once); with `accepting="unresponsive"` it listens, but its accept
queue is kept full and nothing is accepted (connecting hangs until the client's connect timeout). `accept()` turns
either into a listening server, synchronously, so it can be called from an `on_attempt` callback between two
attempts of one request.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import http
import socket
import struct
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any, Literal, Self
from urllib.parse import parse_qsl

import orjson

HOST = "127.0.0.1"
REQUEST_LIMIT = 64 * 1024 * 1024
"""The largest request head the server reads (the write-timeout tests send requests of several MB)."""
RECEIVE_BUFFER = 64 * 1024
"""The server's socket receive buffer: small and fixed (no autotuning), so a `Stall` fills it and the client's
send buffer after a few MB whatever the machine's TCP settings."""


@dataclass
class Received:
    """One request as the server read it."""

    method: str
    target: str
    """The request target as sent: path and query, percent-encoded (absolute form through a proxy)."""
    headers: dict[str, str]
    """Header names lower-cased; a repeated header keeps its last value."""
    head: bytes
    """The request line and the headers, as they came."""
    closed: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    """Set once the connection that carried the request is closed (by either side)."""

    @property
    def path(self) -> str:
        return self.target.partition("?")[0]

    @property
    def query(self) -> list[tuple[str, str]]:
        """The params, decoded, in the order sent."""
        return parse_qsl(self.target.partition("?")[2], keep_blank_values=True)

    @classmethod
    def parse(cls, head: bytes) -> Received:
        request_line, *lines = head.decode("latin-1").split("\r\n")
        method, target, _version = request_line.split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        return cls(method, target, headers, head)


@dataclass(frozen=True)
class Reply:
    """An answer. `content_length` declares a length other than the body's (a longer one: the server closes the
    connection after the body, as a server that died mid-answer). `after`: answer only once the event is set;
    `delay`: seconds to wait first. `close`: close the connection once the answer is sent, without saying so in a
    header (as a server closes an idle kept-alive connection)."""

    status: int = 200
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    content_length: int | None = None
    after: asyncio.Event | None = None
    delay: float = 0.0
    close: bool = False

    def encoded(self, coding: Literal["gzip", "deflate"]) -> Reply:
        """This answer with its body compressed and a Content-Encoding saying how."""
        body = gzip.compress(self.body) if coding == "gzip" else zlib.compress(self.body)
        return replace(self, body=body, headers=(*self.headers, ("content-encoding", coding)))

    def wire(self) -> bytes:
        """The answer as sent: status line, headers, Content-Length, body."""
        try:
            reason = http.HTTPStatus(self.status).phrase
        except ValueError:
            reason = "Unknown"
        length = len(self.body) if self.content_length is None else self.content_length
        lines = [f"HTTP/1.1 {self.status} {reason}", *(f"{k}: {v}" for k, v in self.headers)]
        lines.append(f"content-length: {length}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + self.body


@dataclass(frozen=True)
class Hang:
    """No answer: the request is held until the client closes the connection or the server stops."""


@dataclass(frozen=True)
class Drop:
    """Send `parts` (with `every` seconds between them), then close the connection (`reset`: with a TCP RST
    instead of a FIN). No parts: the connection is closed without a byte of answer."""

    parts: tuple[bytes, ...] = ()
    every: float = 0.0
    reset: bool = False


@dataclass(frozen=True)
class Stall:
    """Stop reading as soon as a request starts: its bytes pile up in the socket buffers until the client's write
    blocks. Not recorded in `requests` (its head is never read); counted in `stalled`."""


Step = Reply | Hang | Drop | Stall | Callable[[Received], Awaitable["Step"]]


def json_reply(status: int, body: Any, **headers: str) -> Reply:
    """A JSON answer; header names given with underscores (`retry_after="1"` is `retry-after: 1`)."""
    named = tuple((k.replace("_", "-"), v) for k, v in headers.items())
    return Reply(status, orjson.dumps(body), (("content-type", "application/json"), *named))


def text_reply(status: int, text: str, **headers: str) -> Reply:
    named = tuple((k.replace("_", "-"), v) for k, v in headers.items())
    return Reply(status, text.encode(), (("content-type", "text/plain"), *named))


class ScriptedServer:
    def __init__(
        self, *steps: Step, accepting: Literal["yes", "refuse", "unresponsive"] = "yes", port: int = 0
    ) -> None:
        """`port`: where to listen (0: a free port); a given one takes over an address a test server left."""
        self.steps: list[Step] = list(steps)
        self.requests: list[Received] = []
        self.unexpected: list[Received] = []
        """Requests that came after the script ran out (each got its connection closed, no answer)."""
        self.errors: list[str] = []
        """What went wrong inside the server itself (a bug in a test's script)."""
        self.connections = 0
        """Connections accepted."""
        self.stalled = 0
        self.in_flight = 0
        """Requests read and not yet answered (or dropped)."""
        self.peak_in_flight = 0
        self._accepting = accepting
        self._arrived = asyncio.Condition()
        self._closing = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._filler: socket.socket | None = None
        self._server: asyncio.Server | None = None
        self._sock: socket.socket | None = None
        self.port = port

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def add(self, *steps: Step) -> None:
        self.steps.extend(steps)

    # ---- lifecycle ------------------------------------------------------------------------------------

    async def start(self) -> Self:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)  # accepted sockets inherit it
        if self.port:  # the closed server's connections may linger in TIME_WAIT on it
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, self.port))
        sock.setblocking(False)
        self._sock, self.port = sock, sock.getsockname()[1]
        self._server = await asyncio.start_server(
            self._handle, sock=sock, start_serving=False, limit=REQUEST_LIMIT
        )
        if self._accepting == "yes":
            sock.listen(128)
            await self._server.start_serving()
        elif self._accepting == "unresponsive":
            sock.listen(0)  # an accept queue of one connection, filled here: later connects get no answer
            self._filler = socket.create_connection((HOST, self.port))
        return self

    def accept(self) -> None:
        """Listen and serve from now on (a no-op when already serving). Synchronous: the port listens when this
        returns, and connections made from then on wait in the accept queue until the server takes them."""
        assert self._sock is not None and self._server is not None
        if self._accepting == "yes":
            return
        if self._filler is not None:
            with contextlib.suppress(BlockingIOError):
                while True:
                    queued, _ = self._sock.accept()
                    queued.close()
            self._filler.close()
            self._filler = None
        self._accepting = "yes"
        self._sock.listen(128)
        task = asyncio.get_running_loop().create_task(self._server.start_serving())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        self._closing.set()
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._filler is not None:
            self._filler.close()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def check(self) -> None:
        """Fail if the server saw a request its script had no step for, or broke."""
        assert not self.unexpected, f"unexpected requests: {[r.target for r in self.unexpected]}"
        assert not self.errors, self.errors

    async def wait_for(self, count: int) -> list[Received]:
        """The first `count` requests, once they have been read."""
        async with self._arrived:
            await self._arrived.wait_for(lambda: len(self.requests) >= count)
        return self.requests[:count]

    # ---- serving --------------------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        self.connections += 1
        carried: list[Received] = []
        try:
            while not self._closing.is_set() and await self._serve_one(reader, writer, carried):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except Exception as exc:
            self.errors.append(repr(exc))
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            for received in carried:
                received.closed.set()
            self._writers.discard(writer)
            self._tasks.discard(task)

    async def _serve_one(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, carried: list[Received]
    ) -> bool:
        """Read one request and play its step; False when the connection is done."""
        first = await reader.read(1)
        if not first:
            return False  # the client closed a kept-alive connection
        if self.steps and isinstance(self.steps[0], Stall):
            self.steps.pop(0)
            self.stalled += 1
            transport = writer.transport
            assert isinstance(transport, asyncio.Transport)
            transport.pause_reading()
            await self._until_closed(reader=None)
            return False
        received = Received.parse(first + await reader.readuntil(b"\r\n\r\n"))
        carried.append(received)
        async with self._arrived:
            self.requests.append(received)
            self._arrived.notify_all()
        if not self.steps:
            self.unexpected.append(received)
            return False
        step = self.steps.pop(0)
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            while callable(step):
                step = await step(received)
            return await self._play(step, reader, writer)
        finally:
            self.in_flight -= 1

    async def _play(
        self, step: Reply | Hang | Drop | Stall, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        if isinstance(step, Hang):
            await self._until_closed(reader)
            return False
        if isinstance(step, Drop):
            for n, part in enumerate(step.parts):
                if n and step.every:
                    await asyncio.sleep(step.every)
                writer.write(part)
                await writer.drain()
            if step.reset:
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()
            return False
        if isinstance(step, Stall):
            raise TypeError("Stall is played before a request is read: it cannot come from a callable step")
        if step.delay:
            await asyncio.sleep(step.delay)
        if step.after is not None and not await self._until(step.after, reader):
            return False  # the client gave up (or the server stops) before the answer was released
        writer.write(step.wire())
        await writer.drain()
        return not step.close and (step.content_length is None or step.content_length == len(step.body))

    async def _until(self, event: asyncio.Event, reader: asyncio.StreamReader) -> bool:
        """Wait for `event`; False if the client closed the connection or the server stops first."""
        released = asyncio.ensure_future(event.wait())
        gone = asyncio.ensure_future(self._until_closed(reader))
        try:
            await asyncio.wait({released, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            released.cancel()
            gone.cancel()
        return event.is_set() and not self._closing.is_set()

    async def _until_closed(self, reader: asyncio.StreamReader | None) -> None:
        """Until the client closes the connection (EOF on `reader`) or the server stops."""
        closing = asyncio.ensure_future(self._closing.wait())
        waits: set[asyncio.Future[Any]] = {closing}
        if reader is not None:
            waits.add(asyncio.ensure_future(reader.read()))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()


def pieces(data: bytes, size: int) -> tuple[bytes, ...]:
    """`data` in pieces of `size` bytes (for a `Drop` that trickles)."""
    return tuple(data[i : i + size] for i in range(0, len(data), size))
