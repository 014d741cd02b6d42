"""Shared helpers for harmony reducer tests."""

from __future__ import annotations

from collections.abc import Sequence

from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response as SdkResponse

from streamfold.engines.vocab import load_harmony_vocabulary
from streamfold.specs import check, format_report
from streamfold.statemachine import (
    Event,
    HarmonyGrammar,
    Response,
    finish,
    start,
    step,
    to_wire,
)
from tests.sdk_oracle import validate_with_sdk

GRAMMAR = HarmonyGrammar(vocabulary=load_harmony_vocabulary())


def new_response(response_id: str = "resp_test") -> Response:
    return Response(
        id=response_id, created_at=1763800000, model="gpt-oss-20b", status="in_progress"
    )


def run(
    tokens: Sequence[int],
    reason: str = "stop",
    response_id: str = "resp_test",
    error: str | None = None,
) -> list[Event]:
    state, events = start(GRAMMAR, new_response(response_id))
    for token in tokens:
        state, new = step(state, token)
        events.extend(new)
    state, new = finish(state, reason, error)  # type: ignore[arg-type]
    return [*events, *new]


def assert_conformant(events: Sequence[Event]) -> None:
    violations = check(events)
    assert not violations, format_report(violations)


def assert_sdk_digests(events: Sequence[Event]) -> SdkResponse | None:
    """Every event validates against the SDK, and its accumulator digests the stream."""
    accumulator: ResponseStreamState[object] = ResponseStreamState(input_tools=[], text_format=omit)
    for event in events:
        accumulator.handle_event(validate_with_sdk(to_wire(event)))  # type: ignore[arg-type]
    return accumulator._completed_response


def final_output(events: Sequence[Event]) -> tuple:
    return events[-1].response.output  # type: ignore[union-attr]
