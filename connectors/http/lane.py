"""One request on one connection: the address, the request target, the answer, and httpcore underneath.

httpx's client layer (merging base URL, params, headers and cookies into a `Request`, the auth and redirect
loops, the response stream wrapper) cost about as much CPU as the HTTP exchange itself: 2,000 pages from the
sandbox took 1.97 s of CPU through `AsyncClient.get`, 1.55 s through httpx's transport and 1.05 s through
httpcore's pool. So a `CoreLane` is an httpcore pool of one connection (httpcore is httpx's own engine, installed
with it), its errors mapped to httpx's classes so the retry rules (`connectors.http.retry`) stay written once. It asks
for and decodes gzip/deflate bodies, encodes paths and params, and writes the Host header as httpx would. It
keeps no cookies and sends no credentials from the URL (the spec refuses those; the service uses neither). An
`HttpxLane` goes through httpx's client instead, behind a proxy (`connectors.http.lane_pool.behind_proxy`).
"""

from __future__ import annotations

import functools
import io
import ssl
import zlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import quote, urlencode

import httpcore
import httpx

from harvest.connectors.http.retry import Timeouts

DEFAULT_HEADERS = {
    "user-agent": "harvest/0.1",
    "accept": "application/json",
    "accept-encoding": "gzip, deflate",
}
KEEPALIVE_SECONDS = 4.0
"""How long an idle connection is kept: a second under the 5 s that uvicorn and many servers keep one. At the
same 5 s (httpx's default) both ends let go at once, and a request sent on the connection as the server closes it
fails unread: kept as maybe paid, asked again (reproduced against the sandbox at 4.96-4.97 s of idling, 1-2 of 8
requests). A service that closes sooner is still met: the lane opens a new connection for the next request."""


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context per process (httpx builds one per client, ~40 ms of loading CA certificates; a Dask
    worker opens a client per round). Built as httpx would (certifi, `SSL_CERT_FILE`/`SSL_CERT_DIR`)."""
    return httpx.create_ssl_context()


@dataclass(frozen=True, slots=True)
class ReceivedAnswer:
    """What harvest reads of an HTTP answer: the status, the (decoded) body and the headers."""

    status_code: int
    content: bytes
    headers: Sequence[tuple[bytes, bytes]]

    def header(self, name: str) -> str | None:
        wanted = name.lower().encode("ascii")
        for key, value in self.headers:
            if key.lower() == wanted:
                return value.decode("latin-1")
        return None


PATH_SAFE = "".join(chr(i) for i in range(0x21, 0x7F) if chr(i) not in '"#<>?`{}')
"""What a path keeps unencoded: httpx's path set (RFC 3986 path characters, `%` escapes kept as they are)."""


@dataclass(frozen=True, slots=True)
class Origin:
    """The service's address, parsed once from the base URL as httpx parses it (IDNA host, default port)."""

    scheme: bytes
    host: bytes
    port: int
    netloc: bytes
    """The Host header: an IPv6 address in brackets, the port only when it is not the scheme's default."""
    path: bytes
    """The base URL's own path, percent-encoded, without a trailing slash: request paths go under it."""

    @classmethod
    def of(cls, base_url: str) -> Origin:
        url = httpx.URL(base_url)
        port = url.port or (443 if url.scheme == "https" else 80)
        return cls(url.raw_scheme, url.raw_host, port, url.netloc, url.raw_path.rstrip(b"/"))

    def target(self, path: str, params: Sequence[tuple[str, str]]) -> bytes:
        """The request target: the path percent-encoded as httpx would, then the params as httpx encodes
        them. Nothing parses it again, so a `;` in a path is sent, not cut off as URL parameters."""
        target = self.path + quote(path, safe=PATH_SAFE).encode("ascii")
        return target + b"?" + urlencode(params).encode("ascii") if params else target

    def url(self, target: bytes) -> str:
        return (self.scheme + b"://" + self.netloc + target).decode("ascii")


class Lane(Protocol):
    """One connection's worth of HTTP: a GET of a target at the service's origin, or a POST of a body to it."""

    async def send(
        self,
        origin: Origin,
        target: bytes,
        headers: Mapping[str, str],
        max_bytes: int | None = None,
        method: str = "GET",
        content: bytes | None = None,
    ) -> ReceivedAnswer: ...

    async def aclose(self) -> None: ...


def http_client(base_url: str, timeouts: Timeouts) -> httpx.AsyncClient:
    """A client with one kept-alive connection that never follows a redirect (the key header would follow it):
    the balance probe's, and a lane's behind a proxy."""
    return httpx.AsyncClient(
        base_url=base_url,
        timeout=timeouts.to_httpx(),
        limits=httpx.Limits(
            max_connections=1, max_keepalive_connections=1, keepalive_expiry=KEEPALIVE_SECONDS
        ),
        follow_redirects=False,
        verify=_tls(),
        headers=DEFAULT_HEADERS,
    )


class HttpxLane:
    """A lane through httpx's client: behind a proxy, which needs what that layer does."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def send(
        self,
        origin: Origin,
        target: bytes,
        headers: Mapping[str, str],
        max_bytes: int | None = None,
        method: str = "GET",
        content: bytes | None = None,
    ) -> ReceivedAnswer:
        stream = self.client.stream(method, origin.url(target), headers=headers, content=content)
        async with stream as response:
            raw = response.headers.raw
            body = await read_capped(response.status_code, raw, response.aiter_raw(), max_bytes)
        return ReceivedAnswer(response.status_code, body, raw)

    async def aclose(self) -> None:
        await self.client.aclose()

    @property
    def is_closed(self) -> bool:
        return self.client.is_closed


_ERRORS: tuple[tuple[type[Exception], type[httpx.HTTPError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)
"""httpcore's errors as the httpx errors they stand for, most specific first (httpx maps them the same way)."""


def as_httpx_error(exc: Exception) -> Exception:
    for core, mapped in _ERRORS:
        if isinstance(exc, core):
            return mapped(str(exc))
    return exc


class BodyOverCap(Exception):
    """The answer is larger than the client reads (`max_bytes`): its body was not read whole, and its connection
    is closed. `size` is what the answer announced (Content-Length) or what had arrived when it passed the cap."""

    def __init__(self, status: int, size: int, max_bytes: int, announced: bool) -> None:
        super().__init__(f"{'announced' if announced else 'more than'} {size:,} bytes, over {max_bytes:,}")
        self.status, self.size, self.max_bytes, self.announced = status, size, max_bytes, announced


class BodyCut(Exception):
    """The service answered (status and headers came) but the body did not arrive whole: the connection broke
    or closed before its Content-Length, or its compressed stream ends early. Damaged on the wire, not the
    service's answer: worth one more try (`connectors.http.client`), and it may have been billed."""

    def __init__(self, status: int, received: bytes, cause: str) -> None:
        super().__init__(cause)
        self.status, self.received, self.cause = status, received, cause


def decoded(body: bytes, encoding: str | None, status: int = 200, max_bytes: int | None = None) -> bytes:
    """The body without its content codings (gzip, deflate), at most `max_bytes` decoded (a small compressed
    answer can hold a huge one). A stream that ends early was cut on the wire (`BodyCut`); one that does not
    decode is passed on as it came: it then reads as a body that is not JSON, the service's own (kept, paid)."""
    if not encoding:
        return body
    for coding in reversed([c.strip().lower() for c in encoding.split(",")]):
        if coding in ("gzip", "x-gzip"):
            wbits = [16 + zlib.MAX_WBITS]
        elif coding == "deflate":
            wbits = [zlib.MAX_WBITS, -zlib.MAX_WBITS]  # zlib-wrapped, or raw deflate as some servers send it
        else:
            continue
        for n, bits in enumerate(wbits):
            inflater = zlib.decompressobj(bits)
            try:
                out = inflater.decompress(body, max_bytes + 1 if max_bytes is not None else 0)
            except zlib.error:
                if n + 1 < len(wbits):
                    continue
                return body
            if max_bytes is not None and (len(out) > max_bytes or inflater.unconsumed_tail):
                raise BodyOverCap(status, len(out), max_bytes, announced=False)
            if not inflater.eof:
                raise BodyCut(status, body, f"its {coding} stream ends early ({len(body):,} bytes came)")
            body = out
            break
    return body


async def read_capped(
    status: int, headers: Sequence[tuple[bytes, bytes]], chunks: AsyncIterator[bytes], max_bytes: int | None
) -> bytes:
    """An answer's body, refused past `max_bytes` (announced or arriving) before more of it is held."""
    announced = _header(headers, "content-length")
    if max_bytes is not None and announced is not None and announced.isdigit() and int(announced) > max_bytes:
        raise BodyOverCap(status, int(announced), max_bytes, announced=True)
    parts = io.BytesIO()  # grows in place, handed out uncopied: chunks joined would hold the answer twice
    size = 0
    try:
        async for chunk in chunks:
            size += len(chunk)
            if max_bytes is not None and size > max_bytes:
                raise BodyOverCap(status, size, max_bytes, announced=False)
            parts.write(chunk)
    except (
        httpcore.ReadError,
        httpcore.RemoteProtocolError,
        httpx.ReadError,
        httpx.RemoteProtocolError,
    ) as exc:
        raise BodyCut(status, parts.getvalue(), f"{type(exc).__name__}: {exc}") from None
    body = parts.getvalue()
    del parts
    encoding = _header(headers, "content-encoding")
    return decoded(body, encoding, status, max_bytes) if encoding else body


def _header(headers: Sequence[tuple[bytes, bytes]], name: str) -> str | None:
    wanted = name.encode("ascii")
    for key, value in headers:
        if key.lower() == wanted:
            return value.decode("latin-1")
    return None


class CoreLane:
    """A lane through httpcore: one pool of one connection, kept alive between requests."""

    def __init__(self, timeouts: Timeouts) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=_tls(),
            max_connections=1,
            max_keepalive_connections=1,
            keepalive_expiry=KEEPALIVE_SECONDS,
        )
        self._extensions = {"timeout": timeouts.to_httpx().as_dict()}
        self.is_closed = False

    async def send(
        self,
        origin: Origin,
        target: bytes,
        headers: Mapping[str, str],
        max_bytes: int | None = None,
        method: str = "GET",
        content: bytes | None = None,
    ) -> ReceivedAnswer:
        """`content`: a POST's body, sent with its Content-Length (as httpx sends a body of bytes)."""
        url = httpcore.URL(scheme=origin.scheme, host=origin.host, port=origin.port, target=target)
        sent: list[tuple[bytes | str, bytes | str]] = [(b"host", origin.netloc), *headers.items()]
        if content is not None:
            sent.append((b"content-length", str(len(content)).encode("ascii")))
        try:
            stream = self._pool.stream(
                method, url, headers=sent, content=content, extensions=self._extensions
            )
            async with stream as response:
                chunks = response.aiter_stream()
                assert isinstance(chunks, AsyncIterator)
                body = await read_capped(response.status, response.headers, chunks, max_bytes)
        except (BodyOverCap, BodyCut):
            raise
        except Exception as exc:
            mapped = as_httpx_error(exc)
            if mapped is exc:
                raise
            raise mapped from exc
        return ReceivedAnswer(response.status, body, response.headers)

    async def aclose(self) -> None:
        self.is_closed = True
        await self._pool.aclose()
