"""The wire format: every event type round-trips and validates against the openai SDK."""

from __future__ import annotations

import json
import subprocess
import sys

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamfold.statemachine import (
    EVENT_TYPES,
    FunctionTool,
    McpListToolsTool,
    OutputItem,
    Response,
    ResponseToolSearchCall,
    ResponseUsage,
    WireFormatError,
    dumps,
    from_wire,
    loads,
    sse_event,
    to_wire,
)
from tests.sdk_oracle import validate_with_sdk

_text = st.text(max_size=8)
_unit = st.none() | st.floats(min_value=0, max_value=2)
st.register_type_strategy(str, _text)
# JSON has no NaN or infinity, and the API never sends them.
st.register_type_strategy(float, st.floats(allow_nan=False, allow_infinity=False))
# An MCP tool's schema is a JSON object; hypothesis would fill `dict[str, object]` with anything.
st.register_type_strategy(
    McpListToolsTool,
    st.builds(
        McpListToolsTool,
        name=_text,
        input_schema=st.just({"type": "object", "properties": {"q": {"type": "string"}}}),
        annotations=st.none() | st.just({"readOnlyHint": True}),
    ),
)
# A tool search call's `arguments` is the JSON value the model wrote (its text if not JSON).
st.register_type_strategy(
    ResponseToolSearchCall,
    st.builds(
        ResponseToolSearchCall,
        id=_text,
        call_id=_text,
        arguments=st.dictionaries(_text, _text, max_size=2) | _text,
        status=st.sampled_from(["in_progress", "completed", "incomplete"]),
    ),
)
st.register_type_strategy(
    Response,
    st.builds(
        Response,
        id=_text,
        created_at=st.integers(0, 2**40),
        model=_text,
        status=st.sampled_from(["completed", "failed", "in_progress", "incomplete"]),
        output=st.lists(st.from_type(OutputItem), max_size=2).map(tuple),
        tools=st.lists(
            st.builds(FunctionTool, name=_text, parameters=st.just({"type": "object"})),
            max_size=1,
        ).map(tuple),
        metadata=st.none() | st.dictionaries(_text, _text, max_size=2),
        temperature=_unit,
        top_p=_unit,
        usage=st.none() | st.from_type(ResponseUsage),
    ),
)


@pytest.mark.parametrize("event_type", sorted(EVENT_TYPES))
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_every_event_type_round_trips_and_validates_against_the_sdk(
    event_type: str, data: st.DataObject
) -> None:
    event = data.draw(st.from_type(EVENT_TYPES[event_type]))
    wire = to_wire(event)
    assert wire["type"] == event_type
    assert from_wire(json.loads(dumps(event))) == event
    # The fast writers for plain events are byte-identical to the generic converter path.
    assert dumps(event) == json.dumps(wire, separators=(",", ":"), ensure_ascii=False)
    assert sse_event(event) == f"event: {event_type}\ndata: {dumps(event)}\n\n".encode()
    parsed = validate_with_sdk(wire)
    assert parsed.type == event_type
    # The SDK sees the same fields we wrote (no field lost or renamed on its side).
    assert set(wire) <= set(parsed.model_dump(exclude_unset=True, by_alias=True)) | {"type"}


def test_optional_nulls_are_left_out_except_on_the_response() -> None:
    from streamfold.statemachine import Response, ResponseCreatedEvent, ResponseFunctionToolCall

    created = to_wire(
        ResponseCreatedEvent(
            sequence_number=0,
            response=Response(id="resp_1", created_at=1, model="m", status="in_progress"),
        )
    )
    assert created["response"]["usage"] is None  # the API sends usage: null until the end
    call = to_wire(ResponseFunctionToolCall(id="fc_1", call_id="call_1", name="f", arguments=""))
    assert "status" not in call


@pytest.mark.parametrize(
    ("wire", "path"),
    [
        (
            {
                "type": "response.output_text.delta",
                "sequence_number": 1,
                "item_id": "m",
                "output_index": 0,
                "content_index": "0",
                "delta": "x",
            },
            "$.content_index",
        ),
        (
            {
                "type": "response.output_item.added",
                "sequence_number": 2,
                "output_index": 0,
                "item": {
                    "type": "function_call",
                    "id": "fc",
                    "call_id": 7,
                    "name": "f",
                    "arguments": "",
                },
            },
            "$.item.call_id",
        ),
        (
            {
                "type": "response.output_text.delta",
                "sequence_number": True,
                "item_id": "m",
                "output_index": 0,
                "content_index": 0,
                "delta": "x",
            },
            "$.sequence_number",
        ),
        ({"type": "response.exploded", "sequence_number": 0}, "'response.exploded'"),
        ({"sequence_number": 0}, "unknown event type None"),
    ],
)
def test_reading_rejects_malformed_events_naming_the_field(wire: dict, path: str) -> None:
    with pytest.raises(WireFormatError, match=path.replace("$", r"\$").replace(".", r"\.")):
        from_wire(wire)


def test_loads_rejects_non_json() -> None:
    with pytest.raises(WireFormatError, match="not JSON"):
        loads("{nope")


def test_events_are_frozen() -> None:
    from streamfold.statemachine import ResponseTextDeltaEvent

    event = ResponseTextDeltaEvent(
        sequence_number=0, item_id="m", output_index=0, content_index=0, delta="x"
    )
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        event.delta = "y"  # type: ignore[misc]


def test_importing_the_reducer_imports_neither_torch_nor_an_http_stack() -> None:
    code = (
        "import sys, streamfold.statemachine, streamfold.specs, streamfold.engines;"
        "heavy = {'torch', 'transformers', 'starlette', 'uvicorn', 'httpx', 'vllm', 'sglang'};"
        "print(sorted(heavy & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
