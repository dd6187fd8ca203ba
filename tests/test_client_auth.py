"""Where the key comes from, and that it stays out of text."""

from __future__ import annotations

import pickle
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from harvest.connectors.errors import HarvestError, MissingApiKey
from harvest.connectors.http import auth
from harvest.connectors.http.auth import ApiKey, aload_api_key, key_from_env, load_api_key, redact
from tests.endpoints import CREATIVE, PINS
from tests.flow_helpers import job_spec

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


# ------------------------------------------------------------------------------------ Prefect Secret blocks
@pytest.fixture
def secret_blocks(prefect_harness: None) -> Iterator[dict[str, str]]:
    """Real Secret blocks saved on the session's Prefect server: `key` holds KEY, `json` a JSON object;
    `missing` names none. Names are unique per test (the server is shared) and deleted afterwards."""
    from prefect.blocks.system import Secret

    tag = uuid.uuid4().hex[:12]
    names = {"key": f"harvest-key-{tag}", "json": f"json-secret-{tag}", "missing": f"missing-{tag}"}
    Secret(value=KEY).save(names["key"])
    Secret(value={"a": 1}).save(names["json"])
    yield names
    for which in ("key", "json"):
        Secret.delete(names[which])


def test_key_from_prefect_secret(secret_blocks: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HARVEST_API_KEY", raising=False)
    key = load_api_key(secret_block=secret_blocks["key"])
    assert key.reveal() == KEY
    with pytest.raises(MissingApiKey, match=f"'{secret_blocks['missing']}'"):
        auth.key_from_prefect_secret(secret_blocks["missing"])
    with pytest.raises(MissingApiKey, match="plain string"):
        auth.key_from_prefect_secret(secret_blocks["json"])


async def test_aload_api_key(secret_blocks: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert (await aload_api_key(secret_block=secret_blocks["key"])).reveal() == KEY
    monkeypatch.setenv("ALT", "abc")
    assert (await aload_api_key(env_var="ALT")).reveal() == "abc"
    with pytest.raises(MissingApiKey, match=f"'{secret_blocks['missing']}'"):
        await aload_api_key(secret_block=secret_blocks["missing"])


def test_a_run_pays_with_the_key_of_its_secret_block(
    prefect_api_url: str, secret_blocks: dict[str, str], tmp_path: Path
) -> None:
    """README: `api_key_secret` names a Prefect Secret block holding the key. A real `harvest run` against the
    sandbox, reporting to the session's Prefect server where the block is saved: every request carries the
    block's key, not the one in the environment variable (the block wins), and the key is in nothing it
    wrote or printed."""
    from harvest.sandbox.config import SandboxConfig
    from harvest.sandbox.wire.billing import key_id
    from harvest.sandbox.wire.serving import running
    from tests.flow_helpers import HARVEST, assert_no_secret_in_outputs, subprocess_env, write_spec

    env_key = "env-key-that-must-not-be-used"
    output = tmp_path / "out"
    with running(SandboxConfig(api_keys={KEY: 1000, env_key: 1000}, pages=(2, 2))) as sb:
        spec = write_spec(
            tmp_path,
            job_spec(
                sb.base_url,
                output,
                [{"id": "pins", "endpoint": PINS, "params": {"query": "oak"}}],
                name="secret-key",
                credits=10,
                service={"api_key_secret": secret_blocks["key"]},
            ),
        )
        env = subprocess_env(tmp_path, PREFECT_API_URL=prefect_api_url, HARVEST_API_KEY=env_key)
        proc = subprocess.run(
            [str(HARVEST), "run", str(spec)], env=env, capture_output=True, text=True, timeout=300
        )
        ledger = sb.ledger
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ledger and {e.key_id for e in ledger} == {key_id(KEY)}, "every request used the block's key"
    assert sum(e.path == PINS for e in ledger) == 3  # two pages, the one ending pin search
    assert KEY not in proc.stdout + proc.stderr
    assert_no_secret_in_outputs(output, KEY)


async def test_a_query_that_breaks_unexpectedly_never_quotes_the_key() -> None:
    """Whatever raises while paging (a bug, a library's message) may quote anything; the query's error,
    which reaches the summary, the manifest and Prefect, has the key cut out. Nothing is sent here."""
    from harvest.connectors.catalog import endpoints as catalog
    from harvest.connectors.credits.ledger import CreditLedger
    from harvest.connectors.http.client import ServiceClient
    from harvest.connectors.paging.pager import QueryPager, QuerySpec

    endpoint = catalog.endpoints()[CREATIVE]
    ledger = CreditLedger(10)
    kept: list[object] = []
    async with ServiceClient("http://127.0.0.1:9", KEY, ledger) as client:
        pager = QueryPager(
            QuerySpec("q", endpoint.path, {"query": "x"}), endpoint, client, ledger, keep=kept.append
        )
        pager.broke(RuntimeError(f"header x-api-key: {KEY} rejected"))
    assert pager.outcome.status == "failed"
    assert pager.outcome.error == "RuntimeError: header x-api-key: *** rejected"
