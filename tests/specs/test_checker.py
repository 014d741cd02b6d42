"""The conformance checker: it accepts a correct stream and names each peer's bug by its rule.

Each `test_rejects_*` plants one bug from the peers' bug catalogue
(`shared/reference/peers-and-their-bugs.md` §4 and §6) into the hand-built good stream and
asserts that the rule written for that bug fires.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import ResponseStreamEvent

import streamfold.specs
import streamfold.statemachine
from streamfold.specs import RULES, Violation, check, format_report
from tests.specs.wire_streams import (
    RESPONSE_ID,
    good_stream,
    index_of,
    renumber,
    summary_and_code_stream,
)


def rules(events: list[Any]) -> set[str]:
    return {v.rule for v in check(events)}


def without(events: list[dict[str, Any]], *positions: int) -> list[dict[str, Any]]:
    return renumber([ev for i, ev in enumerate(events) if i not in positions])


# -- the good stream ----------------------------------------------------------------------


def test_accepts_hand_built_openai_stream() -> None:
    assert check(good_stream()) == []


def test_good_stream_validates_against_openai_sdk() -> None:
    adapter = pydantic.TypeAdapter(ResponseStreamEvent)
    events = good_stream()
    parsed = [adapter.validate_python(ev) for ev in events]
    assert [p.type for p in parsed] == [ev["type"] for ev in events]
    assert parsed[-1].response.output_text == "Let me check the weather for you. ☀"


def test_accepts_summary_and_code_interpreter_stream() -> None:
    adapter = pydantic.TypeAdapter(ResponseStreamEvent)
    events = summary_and_code_stream()
    for ev in events:
        adapter.validate_python(ev)
    assert check(events) == []


def test_rejects_code_deltas_that_miss_the_done_code() -> None:
    events = summary_and_code_stream()
    events[index_of(events, "response.code_interpreter_call_code.done")]["code"] = "print(4)"
    assert "R17" in rules(events)


def test_rejects_summary_part_index_not_from_zero() -> None:
    events = summary_and_code_stream()
    for ev in events:
        if "summary_index" in ev:
            ev["summary_index"] = 1
    assert "R14" in rules(events)


def test_accepts_openai_sdk_event_objects() -> None:
    adapter = pydantic.TypeAdapter(ResponseStreamEvent)
    assert check(adapter.validate_python(ev) for ev in good_stream()) == []
    events = [adapter.validate_python(ev) for ev in good_stream()[:-1]]
    assert rules(events) == {"R6"}


def test_accepts_stream_read_back_from_json() -> None:
    lines = [json.dumps(ev) for ev in good_stream()]
    assert check(json.loads(line) for line in lines) == []


# -- one test per bug class of the peers' catalogue ----------------------------------------


def test_rejects_done_output_index_off_by_one_sglang_serving_responses() -> None:
    # SGLang's python server bumps output_index before emitting the previous item's done events.
    events = good_stream()
    events[index_of(events, "response.output_item.done", output_index=1)]["output_index"] = 2
    found = check(events)
    assert "R10" in {v.rule for v in found}
    r10 = next(v for v in found if v.rule == "R10")
    assert r10.event_type == "response.output_item.done"
    assert "output_index 2" in r10.message and "msg_68f1c0a4" in r10.message


def test_rejects_output_index_minus_one_gpt_oss_reference_server() -> None:
    # openai/gpt-oss api_server starts output_index at -1: added/deltas at -1, done at 0.
    events = good_stream()
    for ev in events[2:8]:
        if ev["type"] != "response.output_item.done":
            ev["output_index"] = -1
    assert {"R2", "R10"} <= rules(events)


def test_rejects_content_index_bumped_per_delta_vllm_pr35184() -> None:
    events = good_stream()
    deltas = [ev for ev in events if ev["type"] == "response.reasoning_text.delta"]
    for k, ev in enumerate(deltas):
        ev["content_index"] = k
    found = [v for v in check(events) if v.rule == "R15"]
    assert len(found) == 1  # only the delta at content_index 1 points at a missing part
    assert "part 1" in found[0].message and "never added" in found[0].message


def test_rejects_content_index_not_reset_per_item_vllm_issue45742() -> None:
    events = good_stream()
    for ev in events:
        if ev.get("item_id") == "msg_68f1c0a4" and "content_index" in ev:
            ev["content_index"] = 1
    found = check(events)
    assert "R14" in {v.rule for v in found}
    assert any("expected content_index 0" in v.message for v in found if v.rule == "R14")


def test_rejects_empty_item_id() -> None:
    events = good_stream()
    for ev in events:
        if ev.get("item_id") == "msg_68f1c0a4":
            ev["item_id"] = ""
        item = ev.get("item")
        if isinstance(item, dict) and item.get("id") == "msg_68f1c0a4":
            item["id"] = ""
    events[-1]["response"]["output"][1]["id"] = ""
    found = [v for v in check(events) if v.rule == "R12"]
    assert found and "non-empty" in found[0].message


def test_rejects_null_id_on_done_item_vllm_pr44608() -> None:
    events = good_stream()
    events[index_of(events, "response.output_item.done", output_index=2)]["item"]["id"] = None
    assert "R12" in rules(events)


def test_rejects_shared_item_id_sglang_serving_responses() -> None:
    # One `item_<uuid>` reused for every item of the stream.
    events = good_stream()
    shared = "item_5b0c"
    for ev in events:
        if "item_id" in ev:
            ev["item_id"] = shared
        if isinstance(ev.get("item"), dict):
            ev["item"]["id"] = shared
    for item in events[-1]["response"]["output"]:
        item["id"] = shared
    found = [v for v in check(events) if v.rule == "R12"]
    assert any("already used" in v.message for v in found)


def test_rejects_missing_final_done_events_vllm_pr37071() -> None:
    # The last message's done events were only sent when a next message started: never.
    events = good_stream()
    first_call_event = index_of(events, "response.output_item.added", output_index=2)
    events = events[:first_call_event] + events[-1:]
    events[-1]["response"]["output"] = events[-1]["response"]["output"][:2]
    text_done = index_of(events, "response.output_text.done")
    events = without(events, text_done, text_done + 1, text_done + 2)
    found = check(events)
    r21 = [v for v in found if v.rule == "R21"]
    assert r21 and r21[0].event_type == "response.completed"
    assert "msg_68f1c0a4" in r21[0].message


def test_rejects_sequence_number_minus_one_vllm_placeholder() -> None:
    events = good_stream()
    position = index_of(events, "response.output_text.done")
    events[position]["sequence_number"] = -1
    found = check(events)
    assert [v.rule for v in found] == ["R3"]
    assert found[0].position == position and found[0].sequence_number == -1


def test_rejects_lost_delta_vllm_pr30437() -> None:
    # Multi-token engine steps lost tokens: the deltas no longer add up to the done text.
    events = good_stream()
    events = without(events, index_of(events, "response.output_text.delta", nth=2))
    found = check(events)
    assert [v.rule for v in found] == ["R17"]
    assert found[0].event_type == "response.output_text.done"
    assert "first difference at character 17" in found[0].message


def test_rejects_changed_call_id_smg_harmony_streaming() -> None:
    # smg mints call_id once in parse_chunk (added) and again in finalize (done).
    events = good_stream()
    done = events[index_of(events, "response.output_item.done", output_index=2)]
    done["item"]["call_id"] = "call_second_uuid"
    events[-1]["response"]["output"][2]["call_id"] = "call_second_uuid"
    found = [v for v in check(events) if v.rule == "R20"]
    assert any("added with 'call_Xq3bT9aE1'" in v.message for v in found)


def test_rejects_call_id_reminted_in_completed_vllm_pr47916() -> None:
    events = good_stream()
    events[-1]["response"]["output"][2]["call_id"] = "call_fresh"
    assert {"R20", "R22"} <= rules(events)


def test_rejects_an_item_added_already_completed_peers_section_5_1() -> None:
    # Peers that build the whole item at the end send it added as `completed`.
    events = good_stream()
    position = index_of(events, "response.output_item.added", output_index=1)
    events[position]["item"]["status"] = "completed"
    found = check(events)
    assert [(v.rule, v.position) for v in found] == [("R26", position)]


def test_rejects_a_done_item_still_in_progress() -> None:
    # An item "closed" by copying its added event: done, yet still in progress.
    events = good_stream()
    position = index_of(events, "response.output_item.done", output_index=1)
    events[position]["item"]["status"] = "in_progress"
    events[-1]["response"]["output"][1]["status"] = "in_progress"
    found = check(events)
    assert [(v.rule, v.position) for v in found] == [("R26", position)]


def test_rejects_duplicate_added_item_sdk_appends_twice() -> None:
    events = good_stream()
    position = index_of(events, "response.output_item.added", output_index=1)
    events.insert(position + 1, json.loads(json.dumps(events[position])))
    found = check(renumber(events))
    assert [v.rule for v in found] == ["R10"]
    assert found[0].position == position + 1


def test_rejects_no_terminal_event_ollama_issue17118() -> None:
    events = good_stream()[:-1]
    found = check(events)
    assert [v.rule for v in found] == ["R6"]
    assert found[0].position == len(events) and found[0].event_type is None


# -- more rules --------------------------------------------------------------------------


def test_rejects_stream_not_opening_with_created() -> None:
    assert rules(without(good_stream(), 0)) >= {"R4"}


def test_rejects_changed_response_id() -> None:
    events = good_stream()
    events[-1]["response"]["id"] = "resp_other"
    found = [v for v in check(events) if v.rule == "R5"]
    assert found and RESPONSE_ID in found[0].message


def test_rejects_completed_without_usage() -> None:
    events = good_stream()
    events[-1]["response"]["usage"] = None
    assert rules(events) == {"R8"}


def test_rejects_incomplete_without_reason_vllm_pr45386() -> None:
    events = good_stream()
    events[-1]["type"] = "response.incomplete"
    events[-1]["response"]["status"] = "incomplete"
    assert rules(events) == {"R7"}
    events[-1]["response"]["incomplete_details"] = {"reason": "max_output_tokens"}
    assert check(events) == []


def test_rejects_truncation_reported_as_completed_status() -> None:
    events = good_stream()
    events[-1]["response"]["status"] = "incomplete"
    assert rules(events) == {"R7"}


def test_rejects_interleaved_items() -> None:
    events = good_stream()
    call_added = events.pop(index_of(events, "response.output_item.added", output_index=2))
    events.insert(index_of(events, "response.output_item.added", output_index=1) + 1, call_added)
    assert "R11" in rules(renumber(events))


def test_rejects_text_delta_into_function_call_item() -> None:
    events = good_stream()
    delta = events[index_of(events, "response.function_call_arguments.delta")]
    delta.update(type="response.output_text.delta", content_index=0, logprobs=[])
    assert "R13" in rules(events)


def test_rejects_final_output_that_differs_from_done_items() -> None:
    events = good_stream()
    events[-1]["response"]["output"][1]["content"][0]["text"] = "something else"
    found = [v for v in check(events) if v.rule == "R22"]
    assert found and "response.output[1].content[0].text" in found[0].message


def test_rejects_part_done_text_that_differs_from_done_text() -> None:
    events = good_stream()
    events[index_of(events, "response.content_part.done", output_index=1)]["part"]["text"] = "x"
    assert "R18" in rules(events)


def test_rejects_item_done_text_that_differs_from_parts() -> None:
    events = good_stream()
    done = events[index_of(events, "response.output_item.done", output_index=2)]
    done["item"]["arguments"] = "{}"
    assert "R19" in rules(events)


def test_rejects_delta_after_done() -> None:
    events = good_stream()
    position = index_of(events, "response.output_text.done")
    events.insert(position + 1, dict(events[position - 1]))
    assert "R16" in rules(renumber(events))


def test_rejects_unknown_event_type_vllm_reasoning_part() -> None:
    events = good_stream()
    events.insert(3, {"type": "response.reasoning_part.added", "output_index": 0})
    found = check(renumber(events))
    assert [v.rule for v in found] == ["R1"]


def test_rejects_events_after_terminal() -> None:
    events = good_stream()
    events.append(dict(events[-1]))
    found = check(renumber(events))
    assert [v.rule for v in found] == ["R6"]


@pytest.mark.parametrize(
    "error",
    [
        {"type": "error", "code": "server_error", "message": "engine died", "param": None},
        {
            "type": "error",
            "error": {
                "type": "server_error",
                "code": "server_error",
                "message": "engine died",
                "param": None,
            },
        },
    ],
    ids=["flat", "nested"],
)
def test_error_event_ends_a_stream_as_failure(error: dict[str, Any]) -> None:
    events = good_stream()
    cut = index_of(events, "response.output_text.delta", nth=1)
    assert check(renumber([*events[:cut], error])) == []


@pytest.mark.parametrize("status", ["failed", "cancelled"])
def test_response_failed_carries_failed_or_cancelled_and_an_error(status: str) -> None:
    events = good_stream()
    events[-1]["type"] = "response.failed"
    events[-1]["response"]["status"] = status
    assert rules(events) == {"R7"}  # no error object yet
    events[-1]["response"]["error"] = {
        "code": "server_error",
        "message": "cancelled",
        "type": "server_error",
    }
    assert check(events) == []
    events[-1]["response"]["status"] = "completed"
    assert rules(events) == {"R7"}


def test_error_may_be_followed_by_response_failed_only() -> None:
    events = good_stream()[:2]
    failed = json.loads(json.dumps(events[0]))
    failed["type"] = "response.failed"
    failed["response"].update(
        status="failed",
        error={"code": "server_error", "message": "engine died", "type": "server_error"},
    )
    error = {"type": "error", "code": "server_error", "message": "engine died"}
    assert check(renumber([*events, error, failed])) == []
    assert rules(renumber([*events, error, failed, dict(failed)])) == {"R6"}
    assert rules(renumber([*events, {"type": "error"}])) == {"R23"}


def test_violation_says_where_and_what() -> None:
    events = good_stream()
    events = without(events, index_of(events, "response.output_text.delta", nth=0))
    (violation,) = check(events)
    assert violation == Violation(
        position=violation.position,
        sequence_number=violation.position,
        event_type="response.output_text.done",
        rule="R17",
        message=violation.message,
    )
    report = format_report([violation], event_count=len(events))
    assert "R17" in report and RULES["R17"] in report and "NOT conformant" in report
    assert format_report([], event_count=3) == "conformant: 3 events, no violations\n"


# -- typed events ------------------------------------------------------------------------


def test_typed_events_go_through_to_wire(monkeypatch: pytest.MonkeyPatch) -> None:
    class Typed:
        def __init__(self, wire: dict[str, Any]) -> None:
            self.wire = wire

    def to_wire(event: object) -> dict[str, Any]:
        if not isinstance(event, Typed):
            raise TypeError(f"not an event: {event!r}")
        return event.wire

    monkeypatch.setattr(streamfold.statemachine, "to_wire", to_wire, raising=False)
    assert check(Typed(ev) for ev in good_stream()) == []
    found = check([object()])
    assert found[0].rule == "R1" and "to_wire" in found[0].message


# -- robustness ----------------------------------------------------------------------------

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 5)
    | st.floats(allow_nan=False)
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=8,
)
_TYPES = sorted(
    {ev["type"] for ev in good_stream()} | {"error", "response.failed", "response.incomplete"}
)
_keys = st.sampled_from(
    [
        "type",
        "sequence_number",
        "output_index",
        "content_index",
        "item_id",
        "item",
        "part",
        "delta",
        "text",
        "arguments",
        "response",
        "error",
        "summary_index",
        "message",
    ]
)
_eventish = st.dictionaries(_keys, _json | st.sampled_from(_TYPES), max_size=7)


@settings(max_examples=150, deadline=None)
@given(st.lists(_eventish | _json, max_size=12))
def test_checker_never_raises_on_arbitrary_json(events: list[Any]) -> None:
    found = check(events)
    assert all(v.rule in RULES for v in found)
    if not events:
        assert [v.rule for v in found] == ["R6"]


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_checker_never_raises_on_mutated_good_stream(data: st.DataObject) -> None:
    events, original = good_stream(), good_stream()
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(events) - 1))
        ev = events[at]
        key = data.draw(st.sampled_from(sorted(set(ev) - {"obfuscation", "logprobs"})))
        # Differ from the good stream's value, not just the current one: a second mutation of
        # the same field must not put the original back (that stream is conformant).
        ev[key] = data.draw(_json.filter(lambda value, old=original[at][key]: value != old))
    found = check(events)
    assert found, "a changed required field must be reported"


def test_every_rule_is_stated_in_the_readme() -> None:
    readme = (Path(streamfold.specs.__file__).parent / "README.md").read_text()
    stated = re.findall(r"^\*\*(R\d+): ", readme, flags=re.MULTILINE)
    assert stated == list(RULES)
