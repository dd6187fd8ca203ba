"""The chain of errors behind an error: what a wrapper (Prefect's, httpx's, pydantic's) raised it from."""

from __future__ import annotations

from collections.abc import Iterator


def error_chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, then the error it was raised from or during (`__cause__`, else `__context__`), and so on: what a
    wrapper (Prefect's, httpx's, pydantic's) hides. Each error once, so a cycle ends the walk."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        yield link
        seen.add(id(link))
        link = link.__cause__ or link.__context__
