"""The single entry point from a request to its page: validate, apply trigger words, run the endpoint's
builder.

The HTTP handler and `sandbox.expected` both go through here, so what a test expects is computed by the very
code that answers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.emulation.emulated import EmulatedEndpoint
from harvest.sandbox.emulation.page import Ctx, ServedPage
from harvest.sandbox.emulation.triggers import triggered
from harvest.sandbox.emulation.variation import vary
from harvest.sandbox.wire.validation import validate


def make_ctx(
    endpoint: EmulatedEndpoint,
    items: Sequence[tuple[str, str]],
    config: SandboxConfig,
    path_values: Mapping[str, str] | None = None,
) -> Ctx:
    """Validate a request's query parameters (raises `InvalidRequest`). A path parameter a declared endpoint
    lists among its parameters is checked as one, its value taken from the path."""
    given = {n: v for n, v in (path_values or {}).items() if n in endpoint.names}
    if given:
        items = [*((n, v) for n, v in items if n not in given), *given.items()]
    params = validate(endpoint, items, config.quirks)
    if endpoint.effective is not None:
        params = endpoint.effective(params)
    return Ctx(endpoint, params, config, dict(path_values or {}))


def build(ctx: Ctx) -> ServedPage:
    """The page answering a validated request (raises `InvalidRequest` for a bad cursor or a `nonexistent`
    subject)."""
    forced = triggered(ctx)
    if forced is not None:
        return forced
    return vary(ctx, ctx.endpoint.builder(ctx))
