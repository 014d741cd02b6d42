"""Logprobs on think-tag message text.

Invariants, for any drawn completion (well-formed or malformed) cut into any tokens, each
token given a distinct logprob:
- logprobs change nothing else: with them stripped, the events are exactly those of the run
  without logprobs;
- a token's logprob goes out at most once, on an `output_text.delta`, in token order, with
  the token's own top logprobs;
- a message's `output_text.done` carries the logprobs of its deltas, in order.
Unit cases pin where a logprob goes: every token of a plain answer, a token straddling
`</think>`, a held tag start, held whitespace.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
from hypothesis import given
from hypothesis import strategies as st

from streamfold.specs.strategies_thinktags import (
    malformed_thinktag_texts,
    thinktag_completions,
    tokenizations,
)
from streamfold.statemachine import (
    Event,
    Response,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
    ThinkTagGrammar,
    finish,
    start,
    step,
)
from tests.statemachine.thinktags_helpers import (
    GRAMMAR,
    IN_REASONING,
    INDEX,
    PROPERTY,
    assert_sound,
    run,
)

_SETTINGS = PROPERTY


def run_with_logprobs(
    grammar: ThinkTagGrammar, tokens: Sequence[int], reason: str = "stop"
) -> list[Event]:
    """Token i gets logprob -(i + 1), so a logprob names the token it belongs to."""
    response = Response(id="resp_think", created_at=1763800000, model="qwen3", status="in_progress")
    state, events = start(grammar, response)
    for i, token in enumerate(tokens):
        state, new = step(state, token, -(i + 1.0), ((token, -(i + 1.0)),))
        events.extend(new)
    state, new = finish(state, reason)  # type: ignore[arg-type]
    return [*events, *new]


def without_logprobs(events: Sequence[Event]) -> list[Event]:
    stripped: list[Event] = []
    for event in events:
        if isinstance(event, ResponseTextDeltaEvent | ResponseTextDoneEvent):
            event = attrs.evolve(event, logprobs=())
        elif event.type in ("response.content_part.done", "response.output_item.done"):
            event = _strip_item_logprobs(event)
        elif event.type in ("response.completed", "response.incomplete", "response.failed"):
            response = event.response  # type: ignore[union-attr]
            output = tuple(_strip_output(item) for item in response.output)
            event = attrs.evolve(event, response=attrs.evolve(response, output=output))
        stripped.append(event)
    return stripped


def _strip_output(item: object) -> object:
    if getattr(item, "type", None) == "message":
        content = tuple(attrs.evolve(part, logprobs=()) for part in item.content)  # type: ignore[attr-defined]
        return attrs.evolve(item, content=content)
    return item


def _strip_item_logprobs(event: Event) -> Event:
    if event.type == "response.content_part.done":
        part = event.part  # type: ignore[union-attr]
        if getattr(part, "type", None) == "output_text":
            return attrs.evolve(event, part=attrs.evolve(part, logprobs=()))
        return event
    return attrs.evolve(event, item=_strip_output(event.item))  # type: ignore[union-attr]


def delta_logprobs(events: Sequence[Event]) -> list[float]:
    return [
        lp.logprob for e in events if isinstance(e, ResponseTextDeltaEvent) for lp in e.logprobs
    ]


def check_logprobs(
    tokens: list[int], text_reason: str = "stop", grammar: ThinkTagGrammar = GRAMMAR
) -> None:
    _, plain = run(grammar, tokens, text_reason)
    events = run_with_logprobs(grammar, tokens, text_reason)
    assert_sound(events)
    assert without_logprobs(events) == plain
    sent = delta_logprobs(events)
    # At most once each, in token order (logprob -(i+1) is token i).
    assert sent == sorted(sent, reverse=True)
    assert len(set(sent)) == len(sent)
    for event in events:
        if isinstance(event, ResponseTextDeltaEvent):
            for lp in event.logprobs:
                # The logprob's own token and its top list agree (the entry is the token's).
                assert lp.top_logprobs is not None and lp.top_logprobs[0].logprob == lp.logprob
    by_item: dict[str, list[float]] = {}
    for event in events:
        if isinstance(event, ResponseTextDeltaEvent):
            by_item.setdefault(event.item_id, []).extend(lp.logprob for lp in event.logprobs)
        if isinstance(event, ResponseTextDoneEvent):
            assert [lp.logprob for lp in event.logprobs] == by_item.get(event.item_id, [])


@_SETTINGS
@given(completion=thinktag_completions(), data=st.data())
def test_logprobs_on_drawn_completions_change_nothing_else_and_go_out_once(
    completion: object, data: st.DataObject
) -> None:
    tokens = data.draw(tokenizations(completion.text, INDEX))  # type: ignore[attr-defined]
    grammar = IN_REASONING if completion.start_in_reasoning else GRAMMAR  # type: ignore[attr-defined]
    check_logprobs(tokens, data.draw(st.sampled_from(["stop", "length"])), grammar)


@_SETTINGS
@given(text=malformed_thinktag_texts(), data=st.data())
def test_logprobs_on_malformed_text_change_nothing_else_and_go_out_once(
    text: str, data: st.DataObject
) -> None:
    check_logprobs(data.draw(tokenizations(text, INDEX)))


def test_every_token_of_a_plain_answer_has_its_logprob_on_a_delta() -> None:
    tokens = data_tokens("The answer is 42, naïve café 🎉.")
    events = run_with_logprobs(GRAMMAR, tokens)
    assert delta_logprobs(events) == [-(i + 1.0) for i in range(len(tokens))]


def test_a_token_straddling_the_end_of_reasoning_puts_its_logprob_on_the_answer() -> None:
    # `>\n\nHi` ends `</think>` and starts the answer: its logprob goes on "Hi"; the tokens
    # of the reasoning and of the rest of the tag have none.
    tokens = [*data_tokens("<think>reasoning</think"), INDEX.ids[b">\n\nHi"]]
    events = run_with_logprobs(GRAMMAR, tokens)
    deltas = [e for e in events if isinstance(e, ResponseTextDeltaEvent)]
    assert [d.delta for d in deltas] == ["Hi"]
    assert [lp.logprob for lp in deltas[0].logprobs] == [-float(len(tokens))]
    assert deltas[0].logprobs[0].token == ">\n\nHi"


def test_a_held_tag_start_that_is_text_after_all_gets_its_logprob_on_its_delta() -> None:
    # "<" may start `<think>`: held, then "x" says it was text. "<" "<": the first goes out,
    # the second is still held and keeps its logprob until it is decided.
    tokens = [*data_tokens("Hello"), INDEX.ids[b"<"], INDEX.ids[b"<"], INDEX.ids[b"x"]]
    events = run_with_logprobs(GRAMMAR, tokens)
    deltas = [e for e in events if isinstance(e, ResponseTextDeltaEvent)]
    assert [d.delta for d in deltas] == ["Hello", "<", "<x"]
    assert [[lp.logprob for lp in d.logprobs] for d in deltas] == [[-1.0], [-2.0], [-3.0, -4.0]]


def test_held_whitespace_carries_its_logprob_to_the_text_after_it() -> None:
    tokens = [INDEX.ids[b"Hello"], INDEX.ids[b" "], INDEX.ids[b" world"]]
    events = run_with_logprobs(GRAMMAR, tokens)
    deltas = [e for e in events if isinstance(e, ResponseTextDeltaEvent)]
    # The blank " " waits for the visible text after it and goes out with it, logprob too.
    assert [d.delta for d in deltas] == ["Hello", "  world"]
    assert [[lp.logprob for lp in d.logprobs] for d in deltas] == [[-1.0], [-2.0, -3.0]]


def data_tokens(text: str) -> list[int]:
    """The greedy longest-match tokens of `text` in the small vocabulary (tags as specials)."""
    out: list[int] = []
    data = text.encode()
    at = 0
    while at < len(data):
        for name, token in INDEX.tags.items():
            if data.startswith(name.encode(), at):
                out.append(token)
                at += len(name.encode())
                break
        else:
            size = min(INDEX.longest, len(data) - at)
            while data[at : at + size] not in INDEX.ids:
                size -= 1
            out.append(INDEX.ids[data[at : at + size]])
            at += size
    return out
