"""A catalog file a job names is read as strictly as the spec itself: a key written twice (a column, or a whole
endpoint path: YAML keeps the last, so the first would vanish without a word) and a control character written
as an escape are refused at the catalog file's line, by `harvest validate` and by `harvest run` before anything
is sent (exit 2)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from typer.testing import CliRunner

import harvest.flows.collect  # noqa: F401  (Prefect binds its log handlers on first import: not inside CliRunner)
from harvest.flows.cli import app
from tests.net_helpers import LoopbackServer

runner = CliRunner()

CATALOG = """\
endpoints:
  /v9/mine/shop/products:
    summary: A shop's products.
    params:
      url: {type: string, required: true}
    price: {credits: 1}
    records:
      mine_shop_products:
        at: products
        key: id
        columns:
          id: {type: text, path: product_id}
          title: text
          title: {type: integer, path: sold_info.sold_count}
          price: {type: decimal, path: price}
"""

SECOND_PATH = """\
  /v9/mine/shop/products:
    summary: pasted again by mistake
    params:
      url: {type: string, required: true}
    records:
      mine_shop_others:
        at: products
        key: id
        columns: {id: text}
"""


def job(tmp_path: Path, catalog: str, base_url: str = "sandbox") -> Path:
    (tmp_path / "catalogs").mkdir(parents=True)
    (tmp_path / "catalogs" / "mine.yaml").write_text(catalog)
    spec = tmp_path / "job.yaml"
    spec.write_text(
        f"name: mine\nservice: {{base_url: '{base_url}', api_key_env: MINE_KEY}}\nbudget: {{credits: 5}}\n"
        f"output: {tmp_path / 'out'}\ncatalogs: [catalogs/mine.yaml]\nqueries:\n"
        "  - id: shop\n    endpoint: /v9/mine/shop/products\n    params: {url: 'https://shop.example/a'}\n"
    )
    return spec


def refused(spec: Path, *command: str) -> list[str]:
    result = runner.invoke(app, [*command, str(spec)], env={"MINE_KEY": "k3y-for-the-test"})
    assert result.exit_code == 2, result.output
    return [line.removeprefix("error: ") for line in result.stderr.splitlines()]


def test_a_column_written_twice_in_a_catalog_file_is_refused_at_its_line(tmp_path: Path) -> None:
    spec = job(tmp_path, CATALOG)
    lines = refused(spec, "validate")
    assert lines == [
        f"{tmp_path / 'catalogs' / 'mine.yaml'}:14: "
        'endpoints["/v9/mine/shop/products"].records.mine_shop_products.columns.title: '
        "duplicate key 'title' (YAML keeps the last); allowed: each key once",
        f"1 problem in {spec}; nothing was sent.",
    ]


def test_a_path_declared_twice_in_a_catalog_file_is_refused_naming_both_lines(tmp_path: Path) -> None:
    spec = job(tmp_path, CATALOG.replace("          title: {type: integer, path: sold_info.sold_count}\n", "")
               + SECOND_PATH)  # fmt: skip
    assert refused(spec, "validate")[0] == (
        f"{tmp_path / 'catalogs' / 'mine.yaml'}:15: "
        'endpoints["/v9/mine/shop/products"]: /v9/mine/shop/products is declared twice, first at line 2 '
        "(YAML keeps the last); allowed: each path once"
    )


def test_an_escaped_control_character_in_a_catalog_file_is_refused_as_in_a_spec(tmp_path: Path) -> None:
    spec = job(tmp_path, CATALOG.replace("summary: A shop's products.", 'summary: "A shop\\e products."'))
    assert refused(spec, "validate")[0] == (
        f"{tmp_path / 'catalogs' / 'mine.yaml'}:3: "
        'endpoints["/v9/mine/shop/products"].summary: control character U+001B (ESC) at column 21, written as '
        "\\e; allowed: printable text; tabs and line breaks"
    )


class _Counting(BaseHTTPRequestHandler):
    seen: list[str] = []

    def do_GET(self) -> None:
        self.seen.append(self.path)
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def service() -> Iterator[tuple[str, list[str]]]:
    """A service on 127.0.0.1 that records every request it gets."""
    seen: list[str] = []
    handler = type("Handler", (_Counting,), {"seen": seen})
    server = LoopbackServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def test_run_refuses_a_catalog_file_with_a_key_written_twice_before_anything_is_sent(
    tmp_path: Path, service: tuple[str, list[str]]
) -> None:
    url, seen = service
    spec = job(tmp_path, CATALOG, base_url=url)
    lines = refused(spec, "run")
    assert lines[0].startswith(f"{tmp_path / 'catalogs' / 'mine.yaml'}:14: "), lines
    assert "duplicate key 'title' (YAML keeps the last)" in lines[0]
    assert seen == [] and not (tmp_path / "out").exists()
    fixed = job(tmp_path / "fixed", CATALOG.replace("          title: text\n", ""), base_url=url)
    result = runner.invoke(app, ["validate", str(fixed)])
    assert result.exit_code == 0, result.output


GOOD = CATALOG.replace("          title: {type: integer, path: sold_info.sold_count}\n", "")
TYPO = "endpoint:\n" + SECOND_PATH.replace("/v9/mine/shop/products", "/v9/mine/shop/others")


@pytest.mark.parametrize(
    ("catalog", "line", "key", "hint"),
    [
        pytest.param(
            GOOD + TYPO, 15, "endpoint", " (the closest: endpoints)", id="a second block misspelled"
        ),
        pytest.param("summary: a shop's endpoints\n" + GOOD, 1, "summary", "", id="a summary line"),
        pytest.param(TYPO, 1, "endpoint", " (the closest: endpoints)", id="the only block misspelled"),
    ],
)
def test_an_unknown_top_level_key_of_a_catalog_file_is_refused_at_its_line(
    tmp_path: Path, catalog: str, line: int, key: str, hint: str
) -> None:
    """A misspelled `endpoint:` block beside `endpoints:` validated and its declarations were dropped without a
    word; alone, it was refused as `unknown key None`."""
    spec = job(tmp_path, catalog)
    said = refused(spec, "validate")
    assert (
        f"{tmp_path / 'catalogs' / 'mine.yaml'}:{line}: {key}: unknown key {key!r}{hint}; allowed: endpoints"
        in said
    )
