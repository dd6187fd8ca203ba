"""The service's published sample answers, read in place, and a small server answering with them over HTTP.

The samples live beside the project (`shared/spec/service-samples/` in a directory above it), never copied in: a
test that needs one skips, saying why, where they are absent. `SampleService` serves a job's paths on 127.0.0.1
(each path a function of the request's query parameters: page 1 a sample, a cursor page another) and the free
balance, so a real `harvest run` or pager reads them through the code path a run takes.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from tests.endpoints import OLD_BALANCE
from tests.net_helpers import LOOPBACK, LoopbackServer

ROOT = Path(__file__).resolve().parent.parent
SAMPLES: Path | None = (
    Path(os.environ["HARVEST_SERVICE_SAMPLES"])
    if os.environ.get("HARVEST_SERVICE_SAMPLES")
    else next(
        (
            found
            for above in ROOT.parents
            if (found := above / "shared" / "spec" / "service-samples").is_dir()
        ),
        None,
    )
)
"""The published samples' directory: `HARVEST_SERVICE_SAMPLES`, else `shared/spec/service-samples` in a
directory above the project."""


def sample(name: str) -> Any:
    """One published sample answer (`_v1_forum_post_comments.json`), as JSON; the test skips without it."""
    if SAMPLES is None or not (SAMPLES / name).is_file():
        pytest.skip(
            f"the service's published samples are not here (no shared/spec/service-samples/{name} above {ROOT})"
        )
    return json.loads((SAMPLES / name).read_text(encoding="utf-8"))


Answer = Callable[[Mapping[str, str]], Any]
"""A path's answer to one request: its query parameters -> the JSON body (answered 200)."""


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        server: Any = self.server
        url = urlsplit(self.path)
        params = dict(parse_qsl(url.query, keep_blank_values=True))
        server.asked.append((url.path, params))
        if url.path == OLD_BALANCE:
            status, body = 200, {"creditCount": 1_000_000}
        elif url.path in server.routes:
            status, body = 200, server.routes[url.path](params)
        else:
            status, body = 404, {"success": False, "error": "not_found"}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def sample_service(routes: Mapping[str, Answer]) -> Iterator[tuple[str, list[tuple[str, dict[str, str]]]]]:
    """A server answering `routes` (and the free balance) on 127.0.0.1: its URL, and the requests it was asked
    (path, query parameters), in order."""
    server = LoopbackServer((LOOPBACK, 0), _Handler)
    server.routes, server.asked = dict(routes), []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{LOOPBACK}:{server.server_port}", server.asked  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()


def thread_items(comments: list[Any]) -> list[dict[str, Any]]:
    """Every comment of a forum thread and every reply at every level, counted by walking the sample itself
    (`replies.items` under each), independently of harvest's paths."""
    out: list[dict[str, Any]] = []
    for comment in comments:
        out.append(comment)
        replies = comment.get("replies")
        if isinstance(replies, dict) and isinstance(replies.get("items"), list):
            out.extend(thread_items(replies["items"]))
    return out
