"""What the service says of a thing it did not find. "Not found" has no single shape: a 200 with a flag such as
`account_deactivated: true`, a mostly empty object with `account_status: private` and a `message`, the same under
`data` (`accountDoesNotExist: true`), or a 404 with `error: not_found`. A query that ends `not_found` carries the
service's own words, so a private page, an age-restricted one and one that does not exist are told apart in the
run's lines and in `query_state.error`, not all said as one "not found"."""

from __future__ import annotations

from typing import Any

WORDS = ("message", "error", "account_status")
"""The fields whose text says why (the first found, at the top or under `data`, with the others beside it)."""

SAID = "the service answered: "
"""How a `not_found` query's error brings in the service's words (its line in the run shows them from there)."""

LONGEST = 300
"""Characters kept of what the service said: a sentence, not a page."""


def deactivated(body: Any) -> bool:
    """The real service's "no such account": 200 with `account_deactivated: true` (billed)."""
    return isinstance(body, dict) and body.get("account_deactivated") is True


def not_found_words(body: Any) -> str | None:
    """What the answer says of why nothing was found (`message: Profile is private; account_status: private`), or
    None when it says nothing in words."""
    if not isinstance(body, dict):
        return None
    for holder in (body, body.get("data")):
        if isinstance(holder, dict):
            said = [
                f"{name}: {value.strip()}" for name in WORDS if isinstance(value := holder.get(name), str)
            ]
            said = [words for words in said if not words.endswith(": ")]
            if said:
                text = "; ".join(said)
                return text if len(text) <= LONGEST else text[: LONGEST - 3] + "..."
    return None


def said_of(status: object, error: object) -> list[str]:
    """The service's words in a `not_found` query's error, as its line in the run shows them (none: [])."""
    if status == "not_found" and isinstance(error, str) and SAID in error:
        return [SAID + error.split(SAID, 1)[1]]
    return []
