"""docs/service-shapes.md says what the service's published answers hold; where it lists the fields of a list of
objects, they are the fields the published answer has there (the streaming clip's top-level `videoQualities`
holds only URLs: names and frame rates are in `assets[0].videoQualities`)."""

from __future__ import annotations

import json
import re

from tests.flow_helpers import ROOT
from tests.published_helpers import PUBLISHED, skip_without

skip_without(PUBLISHED)


def entry(title: str) -> str:
    """One entry of the doc's "Record fields", its lines joined."""
    text = (ROOT / "docs" / "service-shapes.md").read_text()
    found = re.search(rf"^- \*\*{re.escape(title)}\*\*:(.*?)(?=^- \*\*|^## )", text, re.S | re.M)
    assert found, title
    return " ".join(found.group(1).split())


def written(fields: str) -> set[str]:
    return set(re.findall(r"`([^`]+)`", fields))


def test_the_clip_entry_lists_each_video_qualities_list_as_the_published_clip_holds_it() -> None:
    clip = json.loads((PUBLISHED / "v1_streaming_clip--cli.json").read_text())[0]["data"]["clip"]
    lists = re.findall(r"`videoQualities` \[\{([^}]*)\}\]", entry("clip (4.6)"))
    sent = [clip["assets"][0]["videoQualities"][0], clip["videoQualities"][0]]
    assert [written(f) for f in lists] == [set(q) - {"__typename"} for q in sent], lists
    assert set(re.findall(r"`assets` \[\{`([^`]+)`", entry("clip (4.6)"))) <= set(clip["assets"][0])
