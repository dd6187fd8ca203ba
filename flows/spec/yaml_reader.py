"""Reading a spec's YAML safely: bounded in bytes, nodes and depth, printable, with a line for every key.

Specs are small (the examples are 1-2 KB), but YAML can make a small file huge: an alias (`*a`) repeats the
node its anchor (`&a`) names, so ten short lines of aliases of aliases stand for 10^9 nodes (the "billion
laughs"). PyYAML composes an alias as the same node object, cheaply; what exploded was every walk over the
tree afterwards (line numbers, validation, hashing): 90 s and 5.8 GB to a MemoryError. So the composer
here counts nodes as aliases would expand them and stops at `MAX_NODES`, and the line map visits each node
once. Control characters are refused before PyYAML sees them, with line and column: PyYAML's own ReaderError
names neither.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

try:
    from yaml._yaml import CParser
except ImportError:  # PyYAML without libyaml: _PythonLoader is used
    CParser = object  # type: ignore[misc,assignment]

Loc = tuple[int | str, ...]

MAX_SPEC_BYTES = 1_000_000
"""A spec of a thousand queries with long fan-out lists is ~100 KB; a megabyte is no spec."""
MAX_NODES = 100_000
"""YAML nodes (mappings, lists, scalars) with every alias expanded: a 100,000-value fan-out list fits."""
MAX_DEPTH = 64
"""Nesting levels; a spec needs about six (queries, a query, params, a value, a list, an object)."""

_NON_PRINTABLE = yaml.reader.Reader.NON_PRINTABLE
"""What PyYAML refuses in a stream: C0 controls but tab, LF and CR; DEL; C1 but NEL; surrogates; U+FFFE/F."""
_CONTROL_IN_VALUE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""Control characters a value may carry through a double-quoted escape (`"\\e"`), tab and newline allowed."""
_NAMES = {0x00: "NUL", 0x07: "BEL", 0x08: "BS", 0x0B: "VT", 0x0C: "FF", 0x1B: "ESC", 0x7F: "DEL"}
_SHOWN = 5
"""Control characters reported one by one; a binary file would otherwise give thousands of lines."""
PRINTABLE = "printable text; tabs and line breaks"


@dataclass(frozen=True)
class Flaw:
    """A problem found while reading the YAML, before any field has a meaning."""

    line: int | None
    problem: str
    allowed: str


class UnreadableSpec(Exception):
    def __init__(self, flaws: list[Flaw]) -> None:
        self.flaws = flaws
        super().__init__("; ".join(f.problem for f in flaws))


def describe_char(char: str) -> str:
    code = ord(char)
    name = _NAMES.get(code)
    return f"U+{code:04X} ({name})" if name else f"U+{code:04X}"


def read_spec_text(path: Path) -> str:
    """The spec file's text, refused unread when it is larger than MAX_SPEC_BYTES (a wrong path, a dump)."""
    with path.open("rb") as stream:
        data = stream.read(MAX_SPEC_BYTES + 1)
    if len(data) > MAX_SPEC_BYTES:
        raise UnreadableSpec([_too_big()])
    return data.decode("utf-8")


def _too_big() -> Flaw:
    return Flaw(None, f"larger than {MAX_SPEC_BYTES:,} bytes", f"a spec up to {MAX_SPEC_BYTES:,} bytes")


def check_text(text: str) -> None:
    """Refuse what no YAML reader should see: too many bytes, control characters (each with line and column)."""
    if len(text) > MAX_SPEC_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_SPEC_BYTES:
        raise UnreadableSpec([_too_big()])
    found = list(_NON_PRINTABLE.finditer(text))
    if not found:
        return
    flaws = []
    for match in found[:_SHOWN]:
        line, column = _position(text, match.start())
        what = f"control character {describe_char(match.group())} at column {column}"
        flaws.append(Flaw(line, what, PRINTABLE))
    if len(found) > _SHOWN:
        line, column = _position(text, found[_SHOWN].start())
        more = f"{len(found) - _SHOWN} more control characters, the first at column {column}"
        flaws.append(Flaw(line, more, PRINTABLE))
    raise UnreadableSpec(flaws)


def _position(text: str, offset: int) -> tuple[int, int]:
    """1-based (line, column) of a character offset."""
    return text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1) + 1


class _Limited(yaml.YAMLError):
    def __init__(self, mark: Any, problem: str, allowed: str) -> None:
        self.mark, self.problem, self.allowed = mark, problem, allowed


def _too_many(mark: Any) -> _Limited:
    return _Limited(
        mark,
        f"more than {MAX_NODES:,} YAML nodes with aliases expanded (an alias repeats its anchor's node)",
        f"up to {MAX_NODES:,} nodes; repeat a value with fewer nested aliases",
    )


_NODE_EVENTS = (yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent)


def count_written_nodes(text: str) -> int:
    """The nodes as written (aliases not expanded), read from libyaml's events; stops past MAX_NODES.

    A quick first refusal: the composer counts too (aliases expanded), but in Python, ~15 us a node, so a
    spec of 100,000 plain nodes took 1.5-4 s to refuse; libyaml's events take ~2.5 us a node, and a real spec of
    a few hundred nodes pays well under a millisecond. Without libyaml the events would cost as much as
    composing: not counted here (0).
    """
    if not yaml.__with_libyaml__:
        return 0
    parser = CParser(text)
    count = 0
    try:
        while parser.check_event():
            event = parser.get_event()
            if isinstance(event, _NODE_EVENTS):
                count += 1
                if count > MAX_NODES:
                    raise _too_many(event.start_mark)
    finally:
        parser.dispose()
    return count


class BoundedComposer(Composer):
    """A composer that counts nodes as aliases expand them, and refuses deep nesting and recursive aliases.

    `sizes` holds the expanded size of every composed node, so an alias adds its anchor's size in O(1)."""

    peek_event: Any  # from the parser it is mixed with

    def start_counting(self) -> None:
        self.expanded = 0
        self.depth = 0
        self.sizes: dict[int, int] = {}

    def _grow(self, count: int, mark: Any) -> None:
        self.expanded += count
        if self.expanded > MAX_NODES:
            raise _too_many(mark)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            target = self.anchors.get(event.anchor or "")
            if target is not None:
                size = self.sizes.get(id(target))
                if size is None:
                    raise _Limited(
                        event.start_mark,
                        f"alias *{event.anchor} is inside its own anchor",
                        "aliases of complete nodes",
                    )
                self._grow(size, event.start_mark)
            return super().compose_node(parent, index)
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _Limited(
                event.start_mark, f"nested deeper than {MAX_DEPTH} levels", f"up to {MAX_DEPTH} levels"
            )
        before = self.expanded
        self._grow(1, event.start_mark)
        node = super().compose_node(parent, index)
        self.depth -= 1
        self.sizes[id(node)] = self.expanded - before
        return node


class _LibyamlLoader(BoundedComposer, CParser, SafeConstructor, Resolver):
    """libyaml's parser (ten times faster: 100,000 nodes in half a second) under the counting composer."""

    def __init__(self, stream: str) -> None:
        CParser.__init__(self, stream)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self.start_counting()


class _PythonLoader(BoundedComposer, Reader, Scanner, Parser, SafeConstructor, Resolver):
    """The same in pure Python, where PyYAML was built without libyaml."""

    def __init__(self, stream: str) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self.start_counting()


def load_yaml(text: str) -> tuple[Any, LineMap | None]:
    """(data, line map) of a spec's text; UnreadableSpec names the line of a syntax error or a limit.

    The limits are harvest's own, whichever YAML library reads the text. libyaml (bundled with PyYAML since
    6.0.4) refuses nesting past its own depth itself, and its scanner reads ahead of the events, so it refuses a
    deep document before the composer sees level 65: such a text is read again by the pure-Python loader, whose
    scanner keeps no depth of its own, and the composer's limit is the one reported, with its line.
    """
    check_text(text)
    libyaml = bool(yaml.__with_libyaml__)
    try:
        return _compose(text, libyaml)
    except _LibraryDepthLimit:
        return _compose(text, libyaml=False)


class _LibraryDepthLimit(Exception):
    """The YAML library refused nesting deeper than its own limit (above MAX_DEPTH)."""


def _refuses_depth(exc: yaml.MarkedYAMLError) -> bool:
    return "nesting depth" in (exc.problem or "")


def _compose(text: str, libyaml: bool) -> tuple[Any, LineMap | None]:
    loader: _LibyamlLoader | _PythonLoader | None = None
    try:
        if libyaml:
            count_written_nodes(text)
        loader = _LibyamlLoader(text) if libyaml else _PythonLoader(text)
        node = loader.get_single_node()
        if node is None:
            return None, None
        lines = line_map(node, text)  # before constructing: merge keys (`<<`) rewrite the mapping nodes
        return loader.construct_document(node), lines
    except _Limited as exc:
        raise UnreadableSpec([Flaw(_line_of(exc.mark), exc.problem, exc.allowed)]) from None
    except yaml.MarkedYAMLError as exc:
        if libyaml and _refuses_depth(exc):
            raise _LibraryDepthLimit from None
        mark = exc.problem_mark or exc.context_mark
        what = " ".join(p for p in (exc.context, exc.problem) if p)
        raise UnreadableSpec([Flaw(_line_of(mark), f"YAML syntax: {what}", "valid YAML")]) from None
    except yaml.YAMLError as exc:
        raise UnreadableSpec([Flaw(None, f"YAML: {exc}", "valid YAML")]) from None
    finally:
        if loader is not None:
            loader.dispose()


def _line_of(mark: yaml.Mark | None) -> int | None:
    return mark.line + 1 if mark else None


@dataclass(frozen=True)
class EscapedControl:
    """A control character a double-quoted value carries as an escape (`"\\e"`): where the escape is written."""

    loc: Loc
    line: int
    column: int | None
    """None when the escape is not found in the value's text (the value's line is still right)."""
    char: str
    written: str = ""
    """The escape as written (`\\e`, `\\x1b`), printable."""


@dataclass
class LineMap:
    """Line of every mapping key and sequence item by location, duplicate keys, and escaped control chars."""

    text: str = ""
    lines: dict[Loc, int] = field(default_factory=dict)
    duplicates: list[tuple[Loc, int]] = field(default_factory=list)
    controls: list[EscapedControl] = field(default_factory=list)

    def line(self, loc: Loc) -> int | None:
        """The line of `loc`, or of its longest prefix that has one (inside an alias: where the alias is)."""
        for end in range(len(loc), -1, -1):
            if loc[:end] in self.lines:
                return self.lines[loc[:end]]
        return None


def line_map(root: yaml.Node, text: str = "") -> LineMap:
    """Walk the node tree once per node, in document order: an alias's node is not walked again."""
    found = LineMap(text, lines={(): root.start_mark.line + 1})
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, Loc]] = [(root, ())]
    while stack:
        node, loc = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        children = list(_children(node, loc, found))
        stack.extend(reversed(children))
    return found


def _children(node: yaml.Node, loc: Loc, found: LineMap) -> Iterator[tuple[yaml.Node, Loc]]:
    if isinstance(node, yaml.ScalarNode):
        match = _CONTROL_IN_VALUE.search(str(node.value))
        if match:
            found.controls.append(_escaped_control(node, loc, match.group(), found.text))
    elif isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = (*loc, str(key_node.value))
            if key in found.lines:
                found.duplicates.append((key, key_node.start_mark.line + 1))
                continue
            found.lines[key] = key_node.start_mark.line + 1
            yield key_node, key
            yield value_node, key
    elif isinstance(node, yaml.SequenceNode):
        for n, item in enumerate(node.value):
            found.lines[(*loc, n)] = item.start_mark.line + 1
            yield item, (*loc, n)


def _escaped_control(node: yaml.ScalarNode, loc: Loc, char: str, text: str) -> EscapedControl:
    """Where the first escape giving a control character is written in a double-quoted scalar's text.

    The node's marks hold its first and last character (line and column count characters, with libyaml too);
    the escapes between them are read as PyYAML reads them. Other styles cannot write a control character: raw
    ones are refused by `check_text` before parsing.
    """
    line = node.start_mark.line + 1
    if node.style != '"' or not text:
        return EscapedControl(loc, line, None, describe_char(char))
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    start, end = (starts[m.line] + m.column for m in (node.start_mark, node.end_mark))
    i = start + 1
    while i < end - 1:
        if text[i] != "\\":
            i += 1
            continue
        code = text[i + 1]
        size = Scanner.ESCAPE_CODES.get(code, 0)
        try:
            value = (
                chr(int(text[i + 2 : i + 2 + size], 16))
                if size
                else Scanner.ESCAPE_REPLACEMENTS.get(code, "")
            )
        except ValueError:
            value = ""
        if _CONTROL_IN_VALUE.fullmatch(value):
            at, column = _position(text, i)
            return EscapedControl(loc, at, column, describe_char(value), text[i : i + 2 + size])
        i += 2 + size
    return EscapedControl(loc, line, None, describe_char(char))
