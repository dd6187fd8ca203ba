"""A run's ended queries' summaries, held compressed (`PackedSummaries`): what the run's end reads back must be
what each query said, in order, whichever way it reads them (in order, backwards, by index, after a change), and a
wide night must not hold them as dicts or as plain JSON."""

from __future__ import annotations

import copy
import pickle
import random
import tracemalloc
from typing import Any

import pytest

from harvest.tasks.output.packed_summaries import BLOCK, PackedSummaries


def _summary(q: int) -> dict[str, Any]:
    """As a dependent query of a night of comments ends: ~1 KB of JSON, most of it like its neighbours'."""
    return {
        "query_id": f"comments[url=https://www.short-video.example/@maker00/video/{2997021391759379937 + q * 7919}]",
        "endpoint": "/v1/short-video/video/comments", "status": "max_pages", "pages": 1, "records": 10 + q % 3,
        "credits": 1, "error": None, "next_cursor": {"cursor": f"ZDAuMTAu{q:08x}"}, "files": [],
        "extraction": {
            "found": ["short_video_comments"], "missing_lists": {}, "missing_why": {}, "read_at": {}, "repairs": {},
            "tables": {"short_video_comments": {
                "dropped": 0, "dropped_example": None, "empty": {}, "empty_hints": {}, "failed": 0, "failure": None,
                "kept": 10 + q % 3, "misfit_examples": {}, "misfits": {}, "new_fields": [], "no_key": 0,
                "no_key_example": None, "repaired": 0, "seen": 10 + q % 3, "text": "line one\nline two, é"}},
        },
        "history": [["2026-12-01", q]],
    }  # fmt: skip


@pytest.mark.parametrize("n", [0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 5 * BLOCK + 3])
def test_every_summary_reads_back_as_it_was_given_in_order_backwards_and_by_index(n: int) -> None:
    given = [_summary(q) for q in range(n)]
    packed = PackedSummaries(given)
    assert len(packed) == n
    assert list(packed) == given
    assert list(reversed(packed)) == given[::-1]
    assert [packed[i] for i in random.Random(n).sample(range(n), n)] == [
        given[i] for i in random.Random(n).sample(range(n), n)
    ]
    if n:
        assert packed[-1] == given[-1] and packed[-n] == given[0]
    with pytest.raises(IndexError):
        packed[n]
    with pytest.raises(IndexError):
        packed[-n - 1]
    assert packed[1:-1:2] == given[1:-1:2]
    assert packed == given and packed == PackedSummaries(given)


def test_a_change_is_kept_only_when_assigned_back_wherever_the_summary_is() -> None:
    """`settle_refusals` changes a refused query's credits by index: in a compressed block, or among the last."""
    given = [_summary(q) for q in range(3 * BLOCK + 5)]
    packed = PackedSummaries(given)
    packed[3]["credits"] = 99  # a fresh dict: not kept
    assert packed[3] == given[3]
    for i in (0, 3, BLOCK, 2 * BLOCK - 1, 3 * BLOCK, -1):
        changed = {**packed[i], "credits": 0, "error": f"refused {i}"}
        packed[i] = changed
        given[i] = changed
    assert list(packed) == given and list(reversed(packed)) == given[::-1]
    packed.append(_summary(1000))
    given.append(_summary(1000))
    assert list(packed) == given


def test_deleting_inserting_and_slices_keep_the_order() -> None:
    given = [_summary(q) for q in range(2 * BLOCK + 7)]
    packed = PackedSummaries(given)
    for change in (
        lambda s: s.__delitem__(5),
        lambda s: s.insert(0, _summary(500)),
        lambda s: s.insert(BLOCK + 1, _summary(501)),
        lambda s: s.__setitem__(slice(2, 4), [_summary(502)]),
        lambda s: s.__delitem__(slice(-3, None)),
        lambda s: s.extend([_summary(503), _summary(504)]),
        lambda s: s.__iadd__([_summary(505)]),
    ):
        change(packed)
        change(given)
        assert list(packed) == given and len(packed) == len(given)


def test_a_copy_or_a_pickle_is_a_list_of_its_own() -> None:
    """Dask rounds send summaries between processes; a copy changed must not change the run's."""
    given = [_summary(q) for q in range(BLOCK + 3)]
    packed = PackedSummaries(given)
    for other in (copy.copy(packed), copy.deepcopy(packed), pickle.loads(pickle.dumps(packed))):
        assert other == packed and list(other) == given
        other[0] = _summary(900)
        other.append(_summary(901))
        assert list(packed) == given


def test_a_wide_night_holds_its_summaries_in_a_fraction_of_their_json() -> None:
    """40,000 dependent queries held ~1 KB each as JSON (40 MB, more in the allocator's arenas); 3,000 here."""
    summaries = [_summary(q) for q in range(3000)]
    json_size = sum(len(line) for line in PackedSummaries(summaries).each_json())
    tracemalloc.start()
    try:
        packed = PackedSummaries(summaries)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert list(packed) == summaries
    assert held < json_size / 8, (held / len(summaries), json_size / len(summaries))


def test_an_arrow_without_zstd_packs_with_zlib_as_the_raw_store_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each block says its codec: blocks made either way read back together."""
    import harvest.tasks.output.packed_summaries as packed_module
    from harvest.tasks.output.raw_store import CODEC_ZLIB

    given = [_summary(q) for q in range(4 * BLOCK)]
    packed = PackedSummaries(given[: 2 * BLOCK])
    monkeypatch.setattr(packed_module, "default_codec", lambda: CODEC_ZLIB)
    packed.extend(given[2 * BLOCK :])
    packed[0] = {**given[0], "credits": 7}
    given[0] = {**given[0], "credits": 7}
    assert list(packed) == given and list(reversed(packed)) == given[::-1]
