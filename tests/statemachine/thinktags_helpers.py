"""Running the think-tag grammar and judging its streams: the checker, the openai SDK's models
and the SDK's own stream accumulator."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, settings
from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState

from streamfold.specs import check, format_report
from streamfold.specs.strategies_thinktags import ExpectedItem, VocabularyIndex, small_vocabulary
from streamfold.statemachine import (
    Event,
    Response,
    ThinkTagGrammar,
    finish,
    start,
    step,
    to_wire,
)
from streamfold.statemachine._grammar import ResponseState
from tests.sdk_oracle import validate_with_sdk

RESPONSE_ID = "resp_think"
VOCAB = small_vocabulary()
INDEX = VocabularyIndex(VOCAB)
GRAMMAR = ThinkTagGrammar(VOCAB)
IN_REASONING = ThinkTagGrammar(VOCAB, start_in_reasoning=True)
PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run(
    grammar: ThinkTagGrammar,
    tokens: Sequence[int],
    reason: str = "stop",
    response_id: str = RESPONSE_ID,
) -> tuple[ResponseState, list[Event]]:
    response = Response(id=response_id, created_at=1763800000, model="qwen3", status="in_progress")
    state, events = start(grammar, response)
    for token in tokens:
        state, new = step(state, token)
        events.extend(new)
    state, new = finish(state, reason, "engine failed" if reason == "error" else None)  # type: ignore[arg-type]
    return state, [*events, *new]


def terminal_output(events: Sequence[Event]) -> list[dict[str, Any]]:
    return to_wire(events[-1])["response"]["output"]  # type: ignore[no-any-return]


def summary(events: Sequence[Event]) -> list[ExpectedItem]:
    """The terminal response's items, reduced to what a test states about them."""
    items = []
    for item in terminal_output(events):
        if item["type"] == "function_call":
            items.append(ExpectedItem("function_call", item["arguments"], item["name"]))
        else:
            text = item["content"][0]["text"] if item["content"] else ""
            items.append(ExpectedItem(item["type"], text))
    return items


def texts_by_delta(events: Sequence[Event]) -> dict[str, str]:
    """Each item's text as the concatenation of its deltas."""
    texts: dict[str, str] = {}
    for event in events:
        wire = to_wire(event)
        if wire["type"].endswith(".delta"):
            texts[wire["item_id"]] = texts.get(wire["item_id"], "") + wire["delta"]
    return texts


def assert_sound(events: Sequence[Event]) -> None:
    """Conformant by the checker; every event valid for the SDK; deltas add up to the done
    texts (a call's: its arguments or input); the SDK's accumulator digests the stream and agrees
    with the terminal response."""
    violations = check(events)
    assert not violations, format_report(violations, event_count=len(events))
    accumulator: ResponseStreamState[object] = ResponseStreamState(
        input_tools=omit, text_format=omit
    )
    for event in events:
        accumulator.handle_event(validate_with_sdk(to_wire(event)))  # type: ignore[arg-type]
    final = terminal_output(events)
    deltas = texts_by_delta(events)
    snapshot = accumulator._ResponseStreamState__current_snapshot  # type: ignore[attr-defined]
    accumulated = {item.id: item for item in snapshot.output}
    for item in final:
        if item["type"] == "function_call":
            assert deltas.get(item["id"], "") == item["arguments"]
            assert accumulated[item["id"]].arguments == item["arguments"]
        elif item["type"] == "custom_tool_call":
            assert deltas.get(item["id"], "") == item["input"]
        elif item["type"] == "message":
            assert deltas.get(item["id"], "") == item["content"][0]["text"]
            assert accumulated[item["id"]].content[0].text == item["content"][0]["text"]
        elif item["type"] == "reasoning":
            assert deltas.get(item["id"], "") == item["content"][0]["text"]
    assert [item.id for item in snapshot.output] == [item["id"] for item in final]
