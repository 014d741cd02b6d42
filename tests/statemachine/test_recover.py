"""`close_interrupted`: ending a stream cut off mid-response from its events alone.

Invariant: for any generated completion cut after any step, the prefix followed by
`close_interrupted(prefix)` is a conformant stream the SDK digests, ending in `response.failed`
with every item's text as far as it went; and where the reducer held nothing back, it is what
`finish(state, "error")` would have said, usage aside.
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamfold.specs.strategies import HarmonyCompletion, harmony_completions
from streamfold.statemachine import (
    ReducerUsageError,
    ResponseFailedEvent,
    close_interrupted,
    finish,
    snapshot,
    start,
    step,
)
from tests.harmony_helpers import (
    GRAMMAR,
    assert_conformant,
    assert_sdk_digests,
    new_response,
    run,
)

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(completion=harmony_completions(), data=st.data())
def test_a_stream_cut_after_any_step_is_closed_conformantly(
    completion: HarmonyCompletion, data: st.DataObject
) -> None:
    cut = data.draw(st.integers(0, len(completion.tokens)))
    state, prefix = start(GRAMMAR, new_response())
    for token in completion.tokens[:cut]:
        state, new = step(state, token)
        prefix += new
    closing = close_interrupted(prefix, "the server stopped")
    stream = [*prefix, *closing]
    assert_conformant(stream)
    assert_sdk_digests(stream)  # every event validates and the accumulator takes them all
    terminal = closing[-1]
    assert isinstance(terminal, ResponseFailedEvent)
    assert terminal.response.error is not None
    assert terminal.response.error.message == "the server stopped"
    assert snapshot(stream) == terminal.response
    # Nothing lost: every item keeps the text it had streamed.
    assert len(terminal.response.output) == len(snapshot(prefix).output)

    _, finished = finish(state, "error", "the server stopped")
    # What the reducer held back is not in the events: a half-read header, a half character,
    # and a web search call's arguments (they become its action on close, never deltas).
    held_back = any(
        e.type == "response.output_item.added"
        or "delta" in e.type
        or (e.type == "response.output_item.done" and e.item.type == "web_search_call")  # type: ignore[union-attr]
        for e in finished
    )
    if not held_back:
        assert [e for e in closing[:-1]] == finished[:-1]
        assert terminal.response == attrs.evolve(finished[-1].response, usage=None)  # type: ignore[union-attr]


def test_a_whole_message_cut_mid_text_keeps_its_text() -> None:
    from streamfold.vocab import harmony_encoding

    tokens = harmony_encoding().encode(
        "<|channel|>final<|message|>The weather in Paris is", allowed_special="all"
    )
    events = run(tokens, reason="stop")[:-4]  # drop the close events and the terminal one
    closing = close_interrupted(events, "restarted")
    message = closing[-1].response.output[0]  # type: ignore[union-attr]
    assert message.status == "incomplete"
    assert message.content[0].text == "The weather in Paris is"
    assert_conformant([*events, *closing])


def test_a_finished_stream_or_a_headless_one_is_a_usage_error() -> None:
    events = run([])
    with pytest.raises(ReducerUsageError, match="already has its terminal event"):
        close_interrupted(events, "x")
    with pytest.raises(ReducerUsageError, match=r"response\.created"):
        close_interrupted(events[1:2], "x")
    with pytest.raises(ReducerUsageError, match=r"response\.created"):
        close_interrupted([], "x")
