"""`collect_job`'s parameters go to Prefect as they are; a value that is not plain JSON still goes through
Prefect's own encoder (so a flow given one is not refused or stored wrong)."""

from __future__ import annotations

from datetime import date
from pathlib import Path

from harvest.flows.collect import collect_job
from harvest.flows.orchestrator.plain_flow import PlainParametersFlow


def test_plain_parameters_are_sent_as_they_are() -> None:
    assert isinstance(collect_job, PlainParametersFlow)
    plain = {"spec_path": "/jobs/a.yaml", "budget": 40, "full": False, "base_url": None, "ratio": 0.5}
    assert collect_job.serialize_parameters(plain) == plain


def test_other_values_go_through_prefects_encoder() -> None:
    sent = collect_job.serialize_parameters({"output": Path("/data/out"), "day": date(2026, 11, 27), "n": 3})
    assert sent == {"output": "/data/out", "day": "2026-11-27", "n": 3}
