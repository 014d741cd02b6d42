"""Rules R29 and R30, each with the bug it pins planted into a conformant stream (issue 13):
keys the API always sends (as null when empty) and the logprob entries' shape. Both broke the
Vercel AI SDK, which validates every event, while the Python SDK let them pass."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from streamfold.specs import check
from tests.specs.wire_streams import good_stream, index_of, summary_and_code_stream

TRACES = Path(__file__).resolve().parents[2] / "specs" / "traces"


def rules(events: list[Any]) -> set[str]:
    return {v.rule for v in check(events)}


def test_the_planting_streams_are_conformant() -> None:
    assert check(good_stream()) == [] and check(summary_and_code_stream()) == []


@pytest.mark.parametrize("where", ["added", "done"])
def test_r29_code_interpreter_call_without_outputs(where: str) -> None:
    events = summary_and_code_stream()
    at = index_of(events, f"response.output_item.{where}", output_index=1)
    del events[at]["item"]["outputs"]
    found = [v for v in check(events) if v.rule == "R29"]
    assert len(found) == 1 and "outputs" in found[0].message and found[0].position == at


def test_r29_function_tool_without_parameters_or_strict() -> None:
    events = good_stream()
    for event in (events[0], events[1], events[-1]):
        event["response"]["tools"] = [{"type": "function", "name": "get_weather"}]
    assert rules(events) == {"R29"}
    for event in (events[0], events[1], events[-1]):
        event["response"]["tools"][0].update(parameters=None, strict=None)
    assert check(events) == []


def test_r29_failed_response_error_without_type() -> None:
    events = good_stream()
    events[-1]["type"] = "response.failed"
    events[-1]["response"].update(
        status="failed", error={"code": "server_error", "message": "engine died"}
    )
    (violation,) = check(events)
    assert violation.rule == "R29" and "type" in violation.message
    events[-1]["response"]["error"]["type"] = "server_error"
    assert check(events) == []


def _entry(**fields: Any) -> dict[str, Any]:
    return {"token": "Hi", "logprob": -0.5, "top_logprobs": [], **fields}


@pytest.mark.parametrize(
    "entry",
    [
        {"token": "Hi", "logprob": -0.5},  # no top_logprobs: the Vercel AI SDK drops the delta
        _entry(top_logprobs=None),
        _entry(top_logprobs=[{"token": "Ho"}]),
        _entry(logprob="-0.5"),
        "Hi",
    ],
)
def test_r30_malformed_logprob_entry_on_a_delta(entry: Any) -> None:
    events = good_stream()
    at = index_of(events, "response.output_text.delta")
    events[at]["logprobs"] = [entry]
    found = check(events)
    assert {v.rule for v in found} == {"R30"} and found[0].position == at


def test_r30_content_part_logprobs_need_bytes() -> None:
    events = good_stream()
    at = index_of(events, "response.content_part.done", output_index=1)
    events[at]["part"]["logprobs"] = [_entry()]
    assert rules(events) == {"R30"}
    events[at]["part"]["logprobs"] = [_entry(bytes=[72, 105])]
    assert "R30" not in rules(events)


def test_r30_streamfold_logprob_stream_is_well_formed() -> None:
    path = TRACES / "logprobs_on_deltas_sglang_pr9368.golden.jsonl"
    events = [json.loads(line) for line in path.read_text().splitlines()]
    assert check(events) == []
    for event in events:
        for entry in event.get("logprobs", []):
            entry.pop("top_logprobs")
    assert "R30" in rules(events)
