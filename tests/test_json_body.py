"""Reading an answer's bytes: what strict JSON parsers refuse but real services send is read, repaired and
counted; a body cut short says so (it may be retried once); anything else is unreadable, never guessed."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harvest.connectors.reading.json_body import (
    BOM,
    CONTROL,
    LONE_SURROGATE,
    MAX_POSITIONAL_REPAIRS,
    NON_FINITE,
    NOT_UTF8,
    TRAILING_COMMA,
    TRAILING_NUL,
    XSSI,
    describe_repairs,
    read_body,
)

pytestmark = pytest.mark.filterwarnings(
    # Hypothesis warns when the global `random` state moves while it generates; these strategies use only
    # Hypothesis, and what moves it is another thread of the test session (jitter in a retry or a polling
    # loop left running by an earlier test), which Hypothesis's own check calls a race it cannot tell apart
    "ignore:Do not use the `random` module inside strategies"
)

TWEETS = (
    b'{"success": true, "tweets": [{"id": "1", "full_text": "sunrise \\ud83d"}, '
    b'{"id": "2", "full_text": "ok \\ud83d\\ude00"}], "credits_remaining": 9}'
)
"""A tweet cut in the middle of an emoji (a lone high surrogate) beside a whole one (a pair)."""


def test_strict_json_is_read_by_orjson_with_no_repair() -> None:
    body = read_body(b'{"a": [1, 2.5, "x", null, true]}')
    assert body.value == {"a": [1, 2.5, "x", None, True]}
    assert (body.repairs, body.problem, body.ends_early) == ({}, None, False)


def test_a_lone_surrogate_becomes_the_replacement_character_and_pairs_stay_whole() -> None:
    body = read_body(TWEETS)
    assert body.value is not None
    tweets = body.value["tweets"]  # type: ignore[call-overload]
    assert [t["full_text"] for t in tweets] == ["sunrise \ufffd", "ok \U0001f600"]
    assert body.repairs == {LONE_SURROGATE: 1}
    orjson.dumps(body.value)  # every string is valid UTF-8 again: Arrow and Parquet take it


def test_lone_surrogates_in_keys_and_low_halves_are_repaired_too() -> None:
    body = read_body(b'{"k\\udc00": ["\\ud800\\ud800", "\\udfff"]}')
    assert body.value == {"k\ufffd": ["\ufffd\ufffd", "\ufffd"]}
    assert body.repairs == {LONE_SURROGATE: 4}


@pytest.mark.parametrize(
    "token",
    [b"NaN", b"Infinity", b"-Infinity", b"nan", b"-nan", b"NAN", b"inf", b"-inf", b"1e999", b"-2e400"],
)
def test_non_finite_numbers_become_null(token: bytes) -> None:
    body = read_body(b'{"count": ' + token + b', "id": "a", "n": [1, ' + token + b"]}")
    assert body.value == {"count": None, "id": "a", "n": [1, None]}
    assert body.repairs == {NON_FINITE: 2}


def test_a_nan_inside_a_string_is_text_not_a_number() -> None:
    body = read_body(b'{"t": "NaN, -nan, inf", "n": -nan}')
    assert body.value == {"t": "NaN, -nan, inf", "n": None}
    assert body.repairs == {NON_FINITE: 1}


def test_integers_beyond_64_bits_read_as_orjson_reads_them() -> None:
    """Not a repair: both parsers agree (a float); one beyond a double is non-finite (null)."""
    big = b'{"a": 123456789012345678901234567890, "b": ' + b"9" * 5000 + b', "c": "\\ud83d"}'
    body = read_body(big)
    assert body.value == {"a": float(123456789012345678901234567890), "b": None, "c": "\ufffd"}
    assert body.repairs == {NON_FINITE: 1, LONE_SURROGATE: 1}
    assert orjson.loads(b'{"a": 123456789012345678901234567890}') == {"a": body.value["a"]}  # type: ignore[call-overload]


def test_bytes_that_are_not_utf8_become_replacement_characters() -> None:
    body = read_body(
        '{"name": "Café", "city": "Zürich \ufffd"}'.encode("latin-1", "replace").replace(
            b"?", b"\xef\xbf\xbd"
        )
    )
    assert body.value == {"name": "Caf\ufffd", "city": "Z\ufffdrich \ufffd"}
    assert body.repairs == {NOT_UTF8: 2}  # the U+FFFD the service sent itself is no repair


def test_a_byte_order_mark_an_xssi_guard_and_nul_padding_are_dropped() -> None:
    assert read_body(b'\xef\xbb\xbf{"a": 1}').repairs == {BOM: 1}
    assert read_body(b')]}\'\n{"a": 1}').repairs == {XSSI: 1}
    padded = read_body(b'{"a": 1}\n\x00\x00\x00')
    assert (padded.value, padded.repairs) == ({"a": 1}, {TRAILING_NUL: 1})


def test_raw_control_characters_inside_strings_are_kept_and_counted() -> None:
    body = read_body(b'{"text": "a\tb\x01c",\n "n": 1}')
    assert body.value == {"text": "a\tb\x01c", "n": 1}
    assert body.repairs == {CONTROL: 2}  # the newline between the members is whitespace, not a repair


def test_trailing_commas_are_dropped() -> None:
    body = read_body(b'{"a": [1, 2, ], "b": {"c": 3,},}')
    assert body.value == {"a": [1, 2], "b": {"c": 3}}
    assert body.repairs == {TRAILING_COMMA: 3}


def test_every_repair_at_once_is_counted_once_each() -> None:
    raw = b'\xef\xbb\xbf{"t": "x\\ud83d", "n": NaN, "m": -nan, "l": [1,], "c": "caf\xe9"}\x00'
    body = read_body(raw)
    assert body.value == {"t": "x\ufffd", "n": None, "m": None, "l": [1], "c": "caf\ufffd"}
    assert body.repairs == {
        BOM: 1,
        LONE_SURROGATE: 1,
        NON_FINITE: 2,
        TRAILING_COMMA: 1,
        NOT_UTF8: 1,
        TRAILING_NUL: 1,
    }
    assert describe_repairs(body.repairs) == (
        "1 byte order mark dropped, 1 lone surrogate as U+FFFD, 2 NaN or infinite numbers as null, "
        "1 byte not UTF-8 as U+FFFD, 1 trailing comma dropped, 1 NUL padding after the document dropped"
    )


@pytest.mark.parametrize(
    "raw",
    [b'{"a": "xy', b'{"a": [1, 2', b'{"a": tru', b'{"a"', b'[{"id": 1}, {"id": 2', b'{"a": 1.', b"[", b""],
)
def test_a_body_that_ends_early_says_so(raw: bytes) -> None:
    body = read_body(raw)
    assert body.value is None and body.ends_early, body
    assert body.problem is not None and body.problem.startswith("the body ends early")


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b"<html><body>Service busy</body></html>", "not JSON (expecting value at character 0 of 38)"),
        (
            b'{"a": 1} {"b": 2}',
            "not JSON (more than one JSON document, or text after the document at character 8",
        ),
        (b'{"a": 1\x00\x00, "b": 2}', "not JSON"),
        (b'"a string"', "a JSON str, not an object or array"),
        (b"42", "a JSON int, not an object or array"),
        (b"[" * 100_000 + b"]" * 100_000, "nested deeper than a parser can follow"),
    ],
)
def test_what_no_reading_can_take_is_unreadable_not_guessed(raw: bytes, problem: str) -> None:
    body = read_body(raw)
    assert body.value is None and not body.ends_early
    assert body.problem is not None and body.problem.startswith(problem), body.problem


def test_positional_repairs_are_bounded() -> None:
    many = b"[" + b", ".join([b"-nan"] * (MAX_POSITIONAL_REPAIRS + 5)) + b"]"
    body = read_body(many)
    assert body.value is None and body.problem == f"more than {MAX_POSITIONAL_REPAIRS} repairs needed"
    fewer = read_body(b"[" + b", ".join([b"-nan"] * 50) + b"]")
    assert fewer.value == [None] * 50 and fewer.repairs == {NON_FINITE: 50}


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)
DOCUMENTS = st.one_of(
    st.lists(JSON_VALUES, max_size=5), st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=5)
)


@pytest.mark.scenario
@settings(max_examples=300, deadline=None)
@given(DOCUMENTS, st.booleans())
def test_any_valid_document_reads_as_it_was_written(doc: Any, ascii_only: bool) -> None:
    """Whichever way it is written (escaped to ASCII or not), with no repair."""
    body = read_body(json.dumps(doc, ensure_ascii=ascii_only).encode())
    assert body.repairs == {} and body.value == orjson.loads(orjson.dumps(doc))


@pytest.mark.scenario
@settings(max_examples=300, deadline=None)
@given(DOCUMENTS, st.data())
def test_any_document_cut_short_ends_early_and_is_never_misread(doc: Any, data: st.DataObject) -> None:
    raw = orjson.dumps(doc, option=orjson.OPT_INDENT_2 if data.draw(st.booleans()) else 0)
    cut = data.draw(st.integers(0, len(raw) - 1))
    body = read_body(raw[:cut])
    assert body.value is None and body.ends_early, (raw[:cut], body)
