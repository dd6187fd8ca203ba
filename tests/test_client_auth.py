"""Where the key comes from, and that it stays out of text."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from connectors import auth
from connectors.auth import ApiKey, aload_api_key, key_from_env, load_api_key, redact
from connectors.errors import HarvestError, MissingApiKey

KEY = "sk-live-auth-4242/x+y"


def test_key_from_env_default_and_custom_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARVEST_API_KEY", f" {KEY}\n")
    assert key_from_env().reveal() == KEY  # stray whitespace from shells and files is dropped
    assert key_from_env("OTHER", {"OTHER": "abc"}).reveal() == "abc"
    assert load_api_key().reveal() == KEY


@pytest.mark.parametrize("environ", [{}, {"MY_KEY": ""}, {"MY_KEY": "   "}])
def test_missing_key_names_the_variable(environ: dict[str, str]) -> None:
    with pytest.raises(MissingApiKey, match="MY_KEY") as info:
        key_from_env("MY_KEY", environ)
    assert isinstance(info.value, HarvestError)


@pytest.mark.parametrize("bad", ["two words", "line\nbreak", "tab\tkey", "k\u00e9y"])
def test_unusable_keys_are_refused_without_quoting_them(bad: str) -> None:
    with pytest.raises(MissingApiKey) as info:
        ApiKey(bad)
    assert bad.strip() not in str(info.value)


def test_api_key_never_shows_itself() -> None:
    key = ApiKey(KEY)
    for text in (str(key), repr(key), f"{key}", f"{key!r}", repr([key]), repr({"k": key})):
        assert KEY not in text
    assert pickle.loads(pickle.dumps(key)) == key
    assert key == ApiKey(KEY) and key != ApiKey("other") and hash(key) == hash(ApiKey(KEY))


def test_redact() -> None:
    assert redact(f"bad key {KEY}!", KEY) == "bad key ***!"
    assert redact("url?k=sk-live-auth-4242%2Fx%2By", ApiKey(KEY)) == "url?k=***"
    assert redact("nothing here", KEY) == "nothing here"
    assert redact("text", None) == "text" and redact("text", "") == "text"


class _FakeBlock:
    def __init__(self, value: Any) -> None:
        self.value = value

    def get(self) -> Any:
        return self.value


def _fake_secret(monkeypatch: pytest.MonkeyPatch, blocks: dict[str, Any]) -> None:
    from prefect.blocks.system import Secret

    def load(name: str, _sync: bool | None = None) -> _FakeBlock:
        if name not in blocks:
            raise ValueError(f"Unable to find block document named {name}")
        return _FakeBlock(blocks[name])

    async def aload(name: str) -> _FakeBlock:
        return load(name)

    monkeypatch.setattr(Secret, "load", staticmethod(load))
    monkeypatch.setattr(Secret, "aload", staticmethod(aload))


def test_key_from_prefect_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_secret(monkeypatch, {"harvest-key": KEY, "json-secret": {"a": 1}})
    monkeypatch.delenv("HARVEST_API_KEY", raising=False)
    assert load_api_key(secret_block="harvest-key").reveal() == KEY
    with pytest.raises(MissingApiKey, match="'missing'"):
        auth.key_from_prefect_secret("missing")
    with pytest.raises(MissingApiKey, match="plain string"):
        auth.key_from_prefect_secret("json-secret")


async def test_aload_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_secret(monkeypatch, {"harvest-key": KEY})
    assert (await aload_api_key(secret_block="harvest-key")).reveal() == KEY
    monkeypatch.setenv("ALT", "abc")
    assert (await aload_api_key(env_var="ALT")).reveal() == "abc"
    with pytest.raises(MissingApiKey, match="'nope'"):
        await aload_api_key(secret_block="nope")


async def test_a_query_that_breaks_unexpectedly_never_quotes_the_key() -> None:
    """Whatever raises while paging (a bug, a library's message) may quote anything; the query's error,
    which reaches the summary, the manifest and Prefect, has the key cut out. Nothing is sent here."""
    from connectors import catalog
    from connectors.client import ServiceClient
    from connectors.ledger import CreditLedger
    from connectors.pager import QueryPager, QuerySpec

    endpoint = catalog.endpoints()["/v1/creative/materials"]
    ledger = CreditLedger(10)
    async with ServiceClient("http://127.0.0.1:9", KEY, ledger) as client:
        pager = QueryPager(QuerySpec("q", endpoint.path, {"query": "x"}), endpoint, client, ledger)
        pager.broke(RuntimeError(f"header x-api-key: {KEY} rejected"))
    assert pager.outcome.status == "failed"
    assert pager.outcome.error == "RuntimeError: header x-api-key: *** rejected"
