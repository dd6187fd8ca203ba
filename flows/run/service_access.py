"""Which service a run talks to, and with which key.

The embedded sandbox serves harvest's catalog (the endpoints it emulates no other way from their declarations) and
the job's declared endpoints (`catalogs:` and `endpoints:`), from the same plain declarations the run reads.

`sandbox` must be asked for explicitly (spec, `--base-url sandbox` or HARVEST_BASE_URL=sandbox): synthetic rows
must never mix into tables meant to hold real data, so a run without any service URL is refused instead.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from harvest.connectors.http.auth import ApiKey, aload_api_key
from harvest.flows.spec import SANDBOX, JobSpec, resolve_base_url
from harvest.flows.spec.key_in_spec import refuse_key_in_spec
from harvest.flows.spec.service_url import EMBEDDED_SANDBOX
from harvest.tasks.run_context import ClientSettings

SANDBOX_CREDITS = 10_000_000
"""The embedded sandbox's own balance: large, so that the job's budget is what stops a demo run."""


@dataclass(frozen=True)
class ServiceAccess:
    url: str
    api_key: ApiKey
    label: str
    """Recorded in the `runs` table: the base URL (never the key), or `sandbox (embedded)`."""


def service_label(base_url: str) -> str:
    """What a run records as its service (a resume must match it): the base URL (never the key), or
    `sandbox (embedded)`. `base_url`: as `resolve_base_url` gives it."""
    return EMBEDDED_SANDBOX if base_url == SANDBOX else base_url.rstrip("/")


@asynccontextmanager
async def open_service(spec: JobSpec, cli_base_url: str | None) -> AsyncIterator[ServiceAccess]:
    base_url = resolve_base_url(spec, cli_base_url)
    if base_url != SANDBOX:
        service = spec.service
        key = await aload_api_key(
            env_var=service.api_key_env, secret_block=service.api_key_secret, places=spec.key_places()
        )
        refuse_key_in_spec(spec, base_url, key)  # `harvest run` said it already; a team's own flow had not
        yield ServiceAccess(base_url.rstrip("/"), key, service_label(base_url))
        return
    from harvest.connectors.catalog.job_catalog import builtin_declarations
    from harvest.sandbox.wire.serving import running

    sandbox_key = secrets.token_hex(16)
    with running(
        api_keys={sandbox_key: SANDBOX_CREDITS}, declared=spec.declared(), catalog=builtin_declarations()
    ) as sb:
        yield ServiceAccess(sb.base_url, ApiKey(sandbox_key), service_label(SANDBOX))


def client_settings(spec: JobSpec) -> ClientSettings:
    """The spec's word on how to talk to the service (`tasks.run_context.service_client` builds the client)."""
    return ClientSettings(
        timeout_seconds=spec.service.timeout_seconds,
        attempts=spec.service.attempts,
        concurrency=spec.concurrency,
        max_answer_bytes=int(spec.service.max_answer_mb * 2**20),
        per_second=spec.rate_limit.per_second,
        max_wait_seconds=spec.rate_limit.max_wait_seconds,
    )
