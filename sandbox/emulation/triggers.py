"""Trigger words: how a test asks the sandbox for the service's "not found", "blocked" and "does not exist"
answers without any hidden state.

A subject value (handle, user id, url, group id, query, subreddit, root continuation token) containing, case
insensitively:

- `nonexistent` -> 400 naming that parameter ("does not exist"), as the real service answers some unknown
  handles and URLs. Not billed, like every 400.
- `blocked` -> 403 `{"success": false, "error": "forbidden"}`: the source platform blocked the content. Billed
  (the service did fetch; a client must count it as spent).
- `missing` -> "not found", answered the real ways while the `real_not_found` quirk is on (each endpoint's
  `not_found` in `sandbox.emulation.endpoint_table`), else a uniform 404 `{"success": false, "error": "not_found"}`. Billed
  either way.
"""

from __future__ import annotations

from harvest.sandbox.emulation.page import Ctx, ServedPage
from harvest.sandbox.wire.validation import InvalidRequest

NONEXISTENT = "nonexistent"
BLOCKED = "blocked"
MISSING = "missing"


def triggered(ctx: Ctx) -> ServedPage | None:
    """The answer a trigger word forces, or None. Raises `InvalidRequest` for `nonexistent`."""
    found: dict[str, str] = {}
    for name, value in ctx.endpoint.subjects(ctx.params):
        lowered = value.lower()
        for word in (NONEXISTENT, BLOCKED, MISSING):
            if word in lowered:
                found.setdefault(word, name)
    if NONEXISTENT in found:
        name = found[NONEXISTENT]
        raise InvalidRequest(name, f"'{name}' does not exist")
    if BLOCKED in found:
        return ServedPage(
            {"error": "forbidden", "message": "The source platform blocked access to this content."},
            status=403,
            success=False,
        )
    if MISSING in found:
        not_found = ctx.endpoint.not_found
        if ctx.config.quirks.real_not_found and not_found is not None:
            body = not_found.body_for(ctx.params)
            return ServedPage(body, status=not_found.status, envelope=not_found.envelope)
        return ServedPage({"error": "not_found", "message": "Not found."}, status=404, success=False)
    return None
