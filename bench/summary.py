"""The figures `make bench` is judged by, side by side in one table at the end of one invocation.

Each row is a function of the bench's result (`bench/run.py`'s report, its `details` included): a figure's
name, what this invocation measured, and its target; None when the invocation did not measure it (`--quick`
still prints every row it has). A measure added to the bench adds its row to `ROWS`, where the others are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Row = tuple[str, str, str]
"""(figure, measured, target)"""


def _end_to_end_json(res: dict[str, Any]) -> Row | None:
    if "ratio_script_json" not in res:
        return None
    return ("end to end / json script (200k records)", f"{res['ratio_script_json']}x", ">= 1.0x")


def _end_to_end_orjson(res: dict[str, Any]) -> Row | None:
    if "ratio_script" not in res:
        return None
    return ("end to end / orjson + Arrow script", f"{res['ratio_script']}x", ">= 0.8x")


def _blip(res: dict[str, Any]) -> Row | None:
    blip = res.get("details", {}).get("blip")
    if not blip:
        return None
    back = "never" if blip["recovered_s"] is None else f"{blip['recovered_s']} s"
    return (
        "blip of 429s: pace after / quiet; back at 90%",
        f"{blip['after_vs_quiet']}x; {back}",
        "a few seconds",
    )


def _rss(res: dict[str, Any]) -> Row | None:
    if "rss_mb_200k" not in res:
        return None
    return ("peak RSS at 200k records", f"{res['rss_mb_200k']:.0f} MB", "<= 250 MB")


def _large_answer(res: dict[str, Any]) -> Row | None:
    big = res.get("details", {}).get("large_answer")
    if not big or big.get("per_answer_mb") is None:
        return None
    return (
        f"one {big['answer_mb']:.0f} MB answer: RSS above one record",
        f"{big['per_answer_mb']}x ({big['above_one_record_mb']:.0f} MB)",
        "<= 2x",
    )


def _start_up(res: dict[str, Any]) -> Row | None:
    if not res.get("import_s") or "fixed_s_server" not in res:
        return None
    ratio = res["fixed_s_server"] / res["import_s"]
    return (
        "one-page job, running server / import",
        f"{ratio:.2f}x ({res['fixed_s_server']} s / {res['import_s']} s)",
        "<= 2x",
    )


def _start_up_temporary(res: dict[str, Any]) -> Row | None:
    if not res.get("import_s") or "fixed_s_temporary" not in res:
        return None
    ratio = res["fixed_s_temporary"] / res["import_s"]
    return ("one-page job, temporary server / import", f"{ratio:.2f}x ({res['fixed_s_temporary']} s)", "")


ROWS: list[Callable[[dict[str, Any]], Row | None]] = [
    _blip,
    _end_to_end_json,
    _end_to_end_orjson,
    _rss,
    _large_answer,
    _start_up,
    _start_up_temporary,
]


def rows(res: dict[str, Any]) -> list[Row]:
    return [row for make in ROWS if (row := make(res)) is not None]


def print_summary(res: dict[str, Any]) -> None:
    got = [("figure", "measured", "target"), *rows(res)]
    widths = [max(len(row[i]) for row in got) for i in range(3)]
    print("\nthe figures, side by side (this invocation):")
    for row in got:
        print("  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
