"""`close_interrupted`: ending a stream cut off mid-response from its events alone.

Invariant: for any generated completion cut after any step, the prefix followed by
`close_interrupted(prefix)` is a conformant stream the SDK digests, ending in `response.failed`
with every item's text as far as it went; and where the reducer held nothing back, it is what
`finish(state, "error")` would have said, usage aside. The same holds for a cut at *any event*,
also inside one step's or one finish's events (issue 14: a cut there gave R16, R15 and R4
violations at 7 of hello.golden's 26 cut points), over generated streams and every golden.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streamfold.specs
from streamfold.specs.strategies import HarmonyCompletion, harmony_completions
from streamfold.statemachine import (
    Event,
    ReducerUsageError,
    ResponseFailedEvent,
    close_interrupted,
    finish,
    loads,
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
    from streamfold.engines.vocab import harmony_encoding

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


GOLDENS = sorted((Path(streamfold.specs.__file__).parent / "traces").glob("*.golden.jsonl"))


def _assert_closes_at_every_event(stream: list[Event], *, sdk_at: int | None = None) -> None:
    """Cut `stream` after each of its events but the terminal one and close it: conformant,
    the closing response is the snapshot, and no item or streamed text is lost."""
    for cut in range(1, len(stream)):
        prefix = stream[:cut]
        closing = close_interrupted(prefix, "cut")
        whole = [*prefix, *closing]
        assert_conformant(whole)
        if cut == sdk_at:
            assert_sdk_digests(whole)
        terminal = closing[-1]
        assert isinstance(terminal, ResponseFailedEvent)
        assert snapshot(whole) == terminal.response
        before = snapshot(prefix).output
        after = terminal.response.output
        assert len(after) == len(before)
        for seen, closed in zip(before, after, strict=True):
            assert closed.id == seen.id
            # (an MCP tool listing has no status; a tool that failed leaves its call "failed")
            assert getattr(closed, "status", "completed") in ("completed", "incomplete", "failed")
            if getattr(seen, "content", None):
                assert closed.content[0].text == seen.content[0].text  # type: ignore[union-attr]
            for field in ("arguments", "code"):
                if getattr(seen, field, None):
                    assert getattr(closed, field) == getattr(seen, field)


@pytest.mark.parametrize("path", GOLDENS, ids=lambda p: p.name.removesuffix(".golden.jsonl"))
def test_every_golden_cut_at_every_event_is_closed_conformantly(path: Path) -> None:
    stream = [loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    _assert_closes_at_every_event(stream, sdk_at=len(stream) // 2)


@PROPERTY
@given(
    completion=harmony_completions(),
    reason=st.sampled_from(["stop", "length", "abort", "error"]),
    data=st.data(),
)
def test_a_generated_stream_cut_at_any_event_is_closed_conformantly(
    completion: HarmonyCompletion, reason: str, data: st.DataObject
) -> None:
    """Cuts inside one step's events and inside finish's events included, with logprobs on
    some tokens (they ride on deltas the closing events must not contradict)."""
    logprobs = data.draw(
        st.lists(
            st.none() | st.floats(-20, 0),
            min_size=len(completion.tokens),
            max_size=len(completion.tokens),
        )
    )
    state, stream = start(GRAMMAR, new_response())
    for token, logprob in zip(completion.tokens, logprobs, strict=True):
        state, new = step(state, token, logprob)
        stream += new
    _, new = finish(state, reason, "stopped")  # type: ignore[arg-type]
    stream += new
    _assert_closes_at_every_event(stream, sdk_at=data.draw(st.integers(1, len(stream) - 1)))


def test_a_cut_right_after_response_created_still_sends_in_progress() -> None:
    """Issue 14: the cut between `start`'s two events closed with R4 (no in_progress)."""
    created = run([])[:1]
    closing = close_interrupted(created, "cut")
    assert [e.type for e in closing] == ["response.in_progress", "response.failed"]
    assert_conformant([*created, *closing])


def test_a_cut_inside_a_close_is_not_closed_twice() -> None:
    """Issue 14: a cut after `function_call_arguments.done` sent a second one (R16)."""
    from streamfold.engines.vocab import harmony_encoding

    tokens = harmony_encoding().encode(
        '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": '
        '"Paris"}<|call|>',
        allowed_special="all",
    )
    stream = run(tokens, reason="stop")
    cut = next(i for i, e in enumerate(stream) if e.type.endswith("arguments.done")) + 1
    closing = close_interrupted(stream[:cut], "cut")
    assert [e.type for e in closing] == ["response.output_item.done", "response.failed"]
    assert closing[0].item.arguments == '{"city": "Paris"}'  # type: ignore[union-attr]
    assert_conformant([*stream[:cut], *closing])


def test_events_that_are_not_the_reducers_are_a_usage_error() -> None:
    stream = run([])
    created, in_progress = stream[0], stream[1]
    from streamfold.statemachine import (
        ResponseOutputItemAddedEvent,
        ResponseOutputMessage,
        ResponseReasoningTextDoneEvent,
    )

    added = ResponseOutputItemAddedEvent(
        sequence_number=2,
        output_index=0,
        item=ResponseOutputMessage(id="msg_1", status="in_progress", content=()),
    )
    foreign = ResponseReasoningTextDoneEvent(
        sequence_number=3, item_id="msg_1", output_index=0, content_index=0, text=""
    )
    with pytest.raises(ReducerUsageError, match="not the reducer's"):
        close_interrupted([created, in_progress, added, foreign], "cut")
