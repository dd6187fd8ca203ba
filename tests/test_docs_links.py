"""The README and the pages under docs/ send a reader somewhere real.

Every relative link in README.md and docs/*.md resolves to a file of the repository, and a `#anchor` into a
Markdown page names one of its headings, by GitHub's slug rule and by mkdocs' (the README is read on the
repository, the pages on both). A page's links stay inside docs/, which is all the site holds. Every page is
in mkdocs.yml's `nav` (the site shows it) and linked from the README (the front door leads to it). Pure
Python, no docs extra: `make docs` builds the site with `mkdocs build --strict`, which checks the same from
its side.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
# A code span may wrap onto the next line, never past a blank one.
INLINE_CODE = re.compile(r"(`+)(?:[^`\n]|\n(?![ \t]*\n))+?\1(?!`)")
# Link text may wrap and hold one level of brackets; the target is up to a space (then a title) or `)`.
LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+[\"'(][^)]*)?\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:[ \t]*<?([^\s>]+)>?", re.MULTILINE)
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    fence = ""
    for number, line in enumerate(text.splitlines(), 1):
        opened = FENCE.match(line)
        if fence:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = ""
            continue
        if opened:
            fence = opened.group(1)
            continue
        yield number, line


def _prose(text: str) -> str:
    """The text with fenced blocks and code spans blanked out, every line where it was."""
    lines = dict(_prose_lines(text))
    kept = "\n".join(lines.get(n, "") for n in range(1, len(text.splitlines()) + 1))
    return INLINE_CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), kept)


def links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every inline link, image and reference definition outside code, in order."""
    prose = _prose(text)
    found = [(m.start(), m.group(2)) for m in LINK.finditer(prose)]
    found += [(m.start(), m.group(1)) for m in REFERENCE.finditer(prose)]
    return [(prose.count("\n", 0, start) + 1, target) for start, target in sorted(found)]


def _heading_text(raw: str) -> str:
    """A heading as rendered text: link targets, code and emphasis marks dropped."""
    return re.sub(r"[`*]", "", re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw))


def github_slug(heading: str) -> str:
    """GitHub: lowercase; every character but letters, digits, spaces, hyphens and underscores dropped; each
    space a hyphen."""
    text = _heading_text(heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def mkdocs_slug(heading: str) -> str:
    """Python-Markdown's toc (mkdocs' default): ASCII-folded, punctuation dropped, lowercase, runs of spaces
    and hyphens one hyphen."""
    text = unicodedata.normalize("NFKD", _heading_text(heading)).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(text: str) -> tuple[set[str], set[str]]:
    """The ids headings get on GitHub and in mkdocs; a repeated heading gets -1, -2 (GitHub) or _1, _2
    (mkdocs)."""
    github: set[str] = set()
    mkdocs: set[str] = set()
    for _, line in _prose_lines(text):
        heading = HEADING.match(line)
        if not heading:
            continue
        for ids, slug, sep in ((github, github_slug, "-"), (mkdocs, mkdocs_slug, "_")):
            base = candidate = slug(heading.group(2))
            n = 0
            while candidate in ids:
                n += 1
                candidate = f"{base}{sep}{n}"
            ids.add(candidate)
    return github, mkdocs


def dead_links(page: Path, text: str, root: Path = ROOT, docs: Path = DOCS) -> list[str]:
    """Every link of `page` (text `text`) that sends a reader nowhere, as `file:line: target: why`."""
    problems = []
    where = page.relative_to(root)
    for number, target in links(text):
        if not target or SCHEME.match(target) or target.startswith("//"):
            continue  # external (https:, mailto:, ...) or empty: not ours to check
        path_part, _, anchor = target.partition("#")
        say = f"{where}:{number}: {target}: "
        if path_part.startswith("/"):
            problems.append(say + "absolute path (relative links only)")
            continue
        if not path_part:  # an anchor into the page itself
            if anchor not in set.intersection(*anchors(text)):
                problems.append(say + "no such heading (GitHub or mkdocs anchor)")
            continue
        resolved = (page.parent / unquote(path_part)).resolve()
        if not resolved.is_relative_to(root.resolve()):
            problems.append(say + "outside the repository")
            continue
        if not resolved.exists():
            problems.append(say + "no such file")
            continue
        if page.resolve().is_relative_to(docs.resolve()) and not resolved.is_relative_to(docs.resolve()):
            problems.append(say + "outside docs/, which is all the site holds")
            continue
        if (
            anchor
            and resolved.suffix == ".md"
            and anchor not in set.intersection(*anchors(resolved.read_text(encoding="utf-8")))
        ):
            problems.append(say + "no such heading (GitHub or mkdocs anchor)")
    return problems


def pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def nav_pages(config_text: str) -> list[str]:
    """Every page mkdocs.yml's `nav` names, at any depth."""

    def walk(node: object) -> Iterator[str]:
        if isinstance(node, str):
            if node.endswith(".md"):
                yield node
        elif isinstance(node, dict):
            for value in node.values():
                yield from walk(value)
        elif isinstance(node, list):
            for value in node:
                yield from walk(value)

    return list(walk(yaml.safe_load(config_text).get("nav", [])))


def linked_pages(page: Path) -> set[Path]:
    """The files `page` links to."""
    out = set()
    for _, target in links(page.read_text(encoding="utf-8")):
        path_part = target.partition("#")[0]
        if path_part and not SCHEME.match(path_part):
            out.add((page.parent / unquote(path_part)).resolve())
    return out


@pytest.mark.parametrize("page", [README, *pages()], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves(page: Path) -> None:
    assert dead_links(page, page.read_text(encoding="utf-8")) == []


def test_every_page_is_in_the_nav() -> None:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    named = nav_pages(config)
    every = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}  # docs/endpoints/ too
    assert sorted(named) == sorted(every), "mkdocs.yml's nav and docs/**/*.md differ"
    assert len(named) == len(set(named)), "a page is twice in the nav"
    assert yaml.safe_load(config)["docs_dir"] == "docs"


def test_every_page_is_linked_from_the_readme() -> None:
    from_readme = linked_pages(README)
    assert [p.name for p in pages() if p.resolve() not in from_readme] == []


def test_every_page_is_linked_from_the_site_home() -> None:
    index = DOCS / "index.md"
    from_index = linked_pages(index)
    assert [p.name for p in pages() if p != index and p.resolve() not in from_index] == []


def test_the_two_commands_stay_on_the_front_door() -> None:
    readme = README.read_text(encoding="utf-8")
    assert "make demo" in readme and "make test" in readme
    assert len(readme.splitlines()) <= 150  # a front door: the topics have their pages under docs/


# The checker itself must be able to fail.


def test_a_dead_link_is_named(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "there.md").write_text("# A page\n\n## Its part, with `code`!\n", encoding="utf-8")
    page = tmp_path / "README.md"
    text = (
        "[fine](docs/there.md) [fine too](docs/there.md#its-part-with-code) [self](#top)\n"
        "# Top\n"
        "[gone](docs/missing.md) and ![picture](docs/missing.png)\n"
        "[wrong heading](docs/there.md#its-part)\n"
        "[escapes](../elsewhere.md) [absolute](/docs/there.md)\n"
        "[external](https://example.org/x.md) `[in code](docs/missing.md)`\n"
        "```\n[in a fence](docs/missing.md)\n```\n"
        "[ref]: docs/also-missing.md\n"
    )
    assert dead_links(page, text, root=tmp_path, docs=tmp_path / "docs") == [
        "README.md:3: docs/missing.md: no such file",
        "README.md:3: docs/missing.png: no such file",
        "README.md:4: docs/there.md#its-part: no such heading (GitHub or mkdocs anchor)",
        "README.md:5: ../elsewhere.md: outside the repository",
        "README.md:5: /docs/there.md: absolute path (relative links only)",
        "README.md:10: docs/also-missing.md: no such file",
    ]


def test_a_page_linking_outside_docs_is_named(tmp_path: Path) -> None:
    """The site holds docs/ only: a page's link to ../README.md works on the repository, not on the site."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# harvest\n", encoding="utf-8")
    page = tmp_path / "docs" / "page.md"
    assert dead_links(page, "[front door](../README.md)\n", root=tmp_path, docs=tmp_path / "docs") == [
        "docs/page.md:1: ../README.md: outside docs/, which is all the site holds"
    ]


@pytest.mark.parametrize(
    ("heading", "github", "mkdocs"),
    [
        ("Scheduled jobs", "scheduled-jobs", "scheduled-jobs"),
        ("When the service changes shape",
         "when-the-service-changes-shape", "when-the-service-changes-shape"),
        ("Warehouse hand-off", "warehouse-hand-off", "warehouse-hand-off"),
        ("Errors (sandbox; the real service's documented and observed ones)",
         "errors-sandbox-the-real-services-documented-and-observed-ones",
         "errors-sandbox-the-real-services-documented-and-observed-ones"),
        ("spec -> plan", "spec---plan", "spec-plan"),
        ("`harvest run` and **Prefect**", "harvest-run-and-prefect", "harvest-run-and-prefect"),
    ],
)  # fmt: skip
def test_slugs_follow_github_and_mkdocs(heading: str, github: str, mkdocs: str) -> None:
    assert (github_slug(heading), mkdocs_slug(heading)) == (github, mkdocs)


def test_a_page_missing_from_the_nav_is_seen() -> None:
    config = "docs_dir: docs\nnav:\n  - Home: index.md\n  - Topics:\n      - A: a.md\n      - b.md\n"
    assert nav_pages(config) == ["index.md", "a.md", "b.md"]
