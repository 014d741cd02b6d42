"""Properties of the harmony reducer over generated completions (hypothesis at the centre)."""

from __future__ import annotations

import json

import attrs
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from openai_harmony import Role

from streamfold.adapters.grammars import iter_replay
from streamfold.engines import TokenChunk, Trace
from streamfold.engines.vocab import harmony_encoding
from streamfold.specs.strategies import HarmonyCompletion, chunkings, harmony_completions
from streamfold.statemachine import (
    ReducerUsageError,
    dumps,
    finish,
    snapshot,
    start,
    step,
)
from tests.harmony_helpers import (
    GRAMMAR,
    assert_conformant,
    assert_sdk_digests,
    final_output,
    new_response,
    run,
)

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _item_text(item: object) -> str:
    kind = item.type  # type: ignore[attr-defined]
    if kind == "message":
        return item.content[0].text  # type: ignore[attr-defined]
    if kind == "reasoning":
        return item.content[0].text  # type: ignore[attr-defined]
    if kind in ("function_call", "mcp_call"):
        return item.arguments  # type: ignore[attr-defined]
    if kind == "code_interpreter_call":
        return item.code  # type: ignore[attr-defined]
    return ""


@PROPERTY
@given(completion=harmony_completions())
def test_every_generated_completion_gives_a_conformant_stream_the_sdk_digests(
    completion: HarmonyCompletion,
) -> None:
    events = run(completion.tokens)
    assert_conformant(events)
    final = assert_sdk_digests(events)
    assert final is not None and final.status == "completed"
    assert snapshot(events) == events[-1].response  # type: ignore[union-attr]


@PROPERTY
@given(completion=harmony_completions())
def test_items_equal_what_openai_harmony_parses_from_the_same_tokens(
    completion: HarmonyCompletion,
) -> None:
    """Differential oracle: HarmonyEncoding.parse_messages_from_completion_tokens."""
    parsed = harmony_encoding().parse_messages_from_completion_tokens(
        list(completion.tokens), Role.ASSISTANT
    )
    items = final_output(run(completion.tokens))
    assert len(items) == len(parsed)
    for item, message in zip(items, parsed, strict=True):
        text = "".join(c.text for c in message.content)
        recipient = message.recipient
        if recipient is None:
            expected = {"analysis": "reasoning"}.get(message.channel, "message")
            assert item.type == expected
            assert _item_text(item) == text
        elif recipient.startswith("functions."):
            assert item.type == "function_call"
            assert item.name == recipient.removeprefix("functions.")
            assert item.arguments == text
        elif recipient.startswith("browser."):
            assert item.type == "web_search_call"
        elif recipient == "python":
            assert item.type == "code_interpreter_call"
            assert item.code == text
        else:
            assert item.type == "mcp_call"
            assert item.arguments == text
            assert f"{item.server_label}.{item.name}" == recipient


@PROPERTY
@given(completion=harmony_completions(), data=st.data())
def test_the_event_stream_is_identical_for_any_chunking(
    completion: HarmonyCompletion, data: st.DataObject
) -> None:
    header = {
        "trace": 1,
        "grammar": "harmony",
        "encoding": "o200k_harmony",
        "response_id": "resp_chunks",
        "model": "m",
        "created_at": 1,
    }
    tokens = completion.tokens
    sizes = data.draw(chunkings(len(tokens)))
    chunks, at = [], 0
    for size in sizes:
        chunks.append(TokenChunk(token_ids=tokens[at : at + size]))
        at += size
    one_by_one = Trace(
        header=header,
        chunks=tuple(TokenChunk(token_ids=(t,)) for t in tokens),
        finish_reason="stop",
    )
    whole = Trace(header=header, chunks=(TokenChunk(token_ids=tokens),), finish_reason="stop")
    chunked = attrs.evolve(one_by_one, chunks=tuple(chunks))
    expected = [dumps(e) for e in iter_replay(one_by_one)]
    assert [dumps(e) for e in iter_replay(chunked)] == expected
    assert [dumps(e) for e in iter_replay(whole)] == expected


@PROPERTY
@given(completion=harmony_completions(), data=st.data())
def test_truncating_anywhere_gives_an_incomplete_stream_whose_text_is_a_prefix(
    completion: HarmonyCompletion, data: st.DataObject
) -> None:
    cut = data.draw(st.integers(0, len(completion.tokens)))
    full = final_output(run(completion.tokens))
    events = run(completion.tokens[:cut], reason="length")
    assert_conformant(events)
    assert_sdk_digests(events)
    terminal = events[-1]
    assert terminal.type == "response.incomplete"
    assert terminal.response.incomplete_details.reason == "max_output_tokens"  # type: ignore[union-attr]
    cut_items = final_output(events)
    assert len(cut_items) <= len(full)
    for cut_item, full_item in zip(cut_items, full, strict=False):
        assert cut_item.type == full_item.type
        assert _item_text(full_item).startswith(_item_text(cut_item).rstrip("\ufffd"))
    if cut_items:
        assert all(i.status == "completed" for i in cut_items[:-1])


_SPECIALS = st.sampled_from([199999, *range(200000, 200019)])


@settings(max_examples=150, deadline=None)
@given(
    tokens=st.lists(st.integers(0, 201087) | _SPECIALS, max_size=60),
    reason=st.sampled_from(["stop", "length", "abort", "error"]),
)
def test_random_token_sequences_never_crash_and_stay_conformant(
    tokens: list[int], reason: str
) -> None:
    """Fuzz invariant: any token sequence, any finish reason, yields a conformant stream."""
    events = run(tokens, reason=reason, error="boom" if reason == "error" else None)
    assert_conformant(events)
    assert_sdk_digests(events)
    assert (
        sum(
            e.type.startswith("response.")
            and e.type in ("response.completed", "response.incomplete", "response.failed")
            for e in events
        )
        == 1
    )


@settings(max_examples=60, deadline=None)
@given(
    completion=harmony_completions(),
    noise=st.lists(
        st.tuples(st.integers(0, 10_000), _SPECIALS | st.integers(0, 200_000)), max_size=4
    ),
)
def test_valid_completions_with_injected_tokens_stay_conformant(
    completion: HarmonyCompletion, noise: list[tuple[int, int]]
) -> None:
    tokens = list(completion.tokens)
    for at, token in noise:
        tokens.insert(at % (len(tokens) + 1), token)
    events = run(tokens)
    assert_conformant(events)
    assert_sdk_digests(events)


@PROPERTY
@given(completion=harmony_completions())
def test_usage_counts_every_token_and_reasoning_tokens(completion: HarmonyCompletion) -> None:
    events = run(completion.tokens)
    usage = events[-1].response.usage  # type: ignore[union-attr]
    assert usage.output_tokens == len(completion.tokens)
    # Each analysis message's content tokens and the token that ends it.
    expected = sum(
        len(harmony_encoding().encode(m.text)) + 1
        for m in completion.messages
        if m.kind == "reasoning"
    )
    assert usage.output_tokens_details.reasoning_tokens == expected
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens


@PROPERTY
@given(completion=harmony_completions())
def test_snapshot_of_any_prefix_shows_the_text_so_far(completion: HarmonyCompletion) -> None:
    events = run(completion.tokens)
    final = snapshot(events)
    for k in range(2, len(events), max(1, len(events) // 7)):
        partial = snapshot(events[:k])
        for item, done in zip(partial.output, final.output, strict=False):
            assert item.id == done.id
            assert _item_text(done).startswith(_item_text(item))


def test_the_input_state_is_never_changed() -> None:
    tokens = harmony_encoding().encode(
        "<|channel|>final<|message|>Hi 🎉<|return|>", allowed_special="all"
    )
    state, _ = start(GRAMMAR, new_response())
    states = [state]
    for token in tokens:
        state, _ = step(state, token)
        states.append(state)
    frozen = [repr(s) for s in states]
    # Replaying from any saved state gives the same events again: nothing was mutated.
    again, _ = step(states[3], tokens[3])
    assert repr(again) == frozen[4]
    assert [repr(s) for s in states] == frozen


def test_stepping_after_finish_is_a_typed_error_that_says_what_to_do() -> None:
    state, _ = start(GRAMMAR, new_response())
    state, _ = finish(state, "stop")
    with pytest.raises(ReducerUsageError, match="start a new one"):
        step(state, 200005)
    with pytest.raises(ReducerUsageError, match="exactly one terminal event"):
        finish(state, "stop")


@pytest.mark.parametrize("token", [-1, 201089, 10**9])
def test_a_token_outside_the_vocabulary_is_a_typed_error(token: int) -> None:
    state, _ = start(GRAMMAR, new_response())
    with pytest.raises(ReducerUsageError, match="outside the o200k_harmony vocabulary"):
        step(state, token)


@pytest.mark.parametrize("token", ["5", 1.5, None, True, b"5"])
def test_a_token_that_is_not_an_int_is_a_typed_error(token: object) -> None:
    """Issue 14: a str, float or None token raised a bare TypeError from a comparison."""
    state, _ = start(GRAMMAR, new_response())
    with pytest.raises(ReducerUsageError, match="not an int; pass the engine's integer token"):
        step(state, token)  # type: ignore[arg-type]


@pytest.mark.parametrize("error", [{"x": 1}, 5, b"boom", ["a"]])
def test_a_finish_error_that_is_not_a_string_is_a_typed_error(error: object) -> None:
    """Issue 14: `finish(state, "error", {"x": 1})` was accepted and broke rule R7."""
    state, _ = start(GRAMMAR, new_response())
    with pytest.raises(ReducerUsageError, match="error must be a message string"):
        finish(state, "error", error)  # type: ignore[arg-type]


def test_an_unknown_finish_reason_is_a_typed_error() -> None:
    state, _ = start(GRAMMAR, new_response())
    with pytest.raises(ReducerUsageError, match="finish reason"):
        finish(state, "done")  # type: ignore[arg-type]


def test_function_call_arguments_are_valid_json_in_the_final_item() -> None:
    tokens = harmony_encoding().encode(
        '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": [1, "é"]}<|call|>',
        allowed_special="all",
    )
    (item,) = final_output(run(tokens))
    assert json.loads(item.arguments) == {"a": [1, "é"]}
    assume(True)


def test_a_recipient_cut_to_its_namespace_is_no_call() -> None:
    """Regression (found by the injected-token property): `to=functions.<|end|>…` cut the
    recipient to `functions.` and opened a function call with an empty name (rule R20)."""
    tokens = harmony_encoding().encode(
        "<|channel|>commentary to=functions.<|channel|>ef <|constrain|>json<|message|>"
        '{"a": 0}<|call|>',
        allowed_special="all",
    )
    events = run(tokens)
    assert_conformant(events)
    (item,) = final_output(events)
    assert item.type == "message"
    assert item.content[0].text == '{"a": 0}'
