"""Issue 13, item 5: reasoning is invisible to clients that read only reasoning summaries (the
Vercel AI SDK; LangChain's streaming). When a request asks for `reasoning.summary`, every
reasoning item also carries its text as a summary part (gpt-oss has no summariser: the summary
is its raw reasoning), streamed with the `response.reasoning_summary_*` events.
"""

from __future__ import annotations

from typing import Any

import pytest

from streamfold.engines.vocab import harmony_encoding, load_harmony_vocabulary
from streamfold.specs import check, format_report
from streamfold.statemachine import (
    HarmonyGrammar,
    ReasoningConfig,
    Response,
    close_interrupted,
    finish,
    start,
    step,
    to_wire,
)
from tests.sdk_oracle import validate_with_sdk

TEXT = (
    "<|channel|>analysis<|message|>User asks for the weather. Call the tool.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>It is sunny.<|return|>"
)
REASONING = "User asks for the weather. Call the tool."
SUMMARY_EVENTS = [
    "response.reasoning_summary_part.added",
    "response.reasoning_summary_text.delta",
    "response.reasoning_summary_text.done",
    "response.reasoning_summary_part.done",
]


def _events(summary: Any, *, cut: int | None = None, reason: str = "stop") -> list[Any]:
    grammar = HarmonyGrammar(vocabulary=load_harmony_vocabulary())
    response = Response(
        id="resp_sum",
        created_at=1,
        model="gpt-oss-20b",
        status="in_progress",
        reasoning=ReasoningConfig(effort="low", summary=summary),
    )
    state, events = start(grammar, response)
    for token in harmony_encoding().encode(TEXT, allowed_special="all")[:cut]:
        state, new = step(state, token)
        events += new
    state, new = finish(state, reason)  # type: ignore[arg-type]
    return events + new


@pytest.mark.parametrize("summary", ["auto", "concise", "detailed"])
def test_asked_for_summaries_stream_the_reasoning_as_one(summary: str) -> None:
    events = _events(summary)
    assert check(events) == [], format_report(check(events), event_count=len(events))
    for event in events:
        validate_with_sdk(to_wire(event))
    types = [event.type for event in events]
    start_at = types.index(SUMMARY_EVENTS[0])
    # After the reasoning text's part closes, before the reasoning item does.
    assert types[start_at - 1] == "response.content_part.done"
    assert types[start_at : start_at + 5] == [*SUMMARY_EVENTS, "response.output_item.done"]
    delta = events[start_at + 1]
    assert delta.delta == REASONING and delta.summary_index == 0
    final = to_wire(events[-1])["response"]["output"][0]
    assert final["summary"] == [{"type": "summary_text", "text": REASONING}]
    assert final["content"] == [{"type": "reasoning_text", "text": REASONING}]


def test_no_summary_without_reasoning_summary() -> None:
    types = [event.type for event in _events(None)]
    assert not any(t.startswith("response.reasoning_summary") for t in types)


def test_a_cut_reasoning_item_still_gets_its_summary() -> None:
    events = _events("auto", cut=8, reason="length")
    assert check(events) == []
    assert to_wire(events[-1])["response"]["output"][0]["summary"][0]["text"]


def test_close_interrupted_finishes_a_summary_cut_at_any_event() -> None:
    events = _events("auto")[:-1]  # the whole stream but its terminal event
    summary_at = [i for i, e in enumerate(events) if e.type in SUMMARY_EVENTS]
    for cut in range(summary_at[0] - 2, summary_at[-1] + 2):
        prefix = events[:cut]
        whole = prefix + close_interrupted(prefix, "the server stopped")
        violations = check(whole)
        assert violations == [], format_report(violations, event_count=len(whole))
