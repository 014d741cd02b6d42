"""The think-tag grammar: unit cases for every mode × kind of text, then properties over drawn
completions (expected items, chunking invariance, truncation prefix, fuzz), every stream judged
by the checker, the openai SDK's models and the SDK's stream accumulator."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamfold.specs.strategies_thinktags import (
    TAGS,
    ExpectedItem,
    ThinkTagCompletion,
    malformed_thinktag_texts,
    thinktag_completions,
    tokenizations,
)
from streamfold.statemachine import ReducerUsageError, ThinkTagGrammar, to_wire
from tests.statemachine.thinktags_helpers import (
    GRAMMAR,
    IN_REASONING,
    INDEX,
    PROPERTY,
    VOCAB,
    assert_sound,
    run,
    summary,
    terminal_output,
)

_SETTINGS = PROPERTY


def toks(*pieces: str) -> list[int]:
    """Token ids for exact pieces of the small vocabulary (a tag name is its special token)."""
    out = []
    for piece in pieces:
        if piece in VOCAB.special:
            out.append(VOCAB.special[piece])
        else:
            out.append(INDEX.ids[piece.encode()])
    return out


def text_toks(text: str) -> list[int]:
    """`text` as single-byte tokens: the worst split there is."""
    return [INDEX.ids[bytes([b])] for b in text.encode()]


M, R, F = "message", "reasoning", "function_call"


# -- every mode × every kind of text ---------------------------------------------------------


def test_reasoning_then_answer_with_tags_as_special_tokens() -> None:
    tokens = toks("<think>", "\n", "reason", "ing", "</think>", ">\n\nHi", " world")
    state, events = run(GRAMMAR, tokens)
    assert_sound(events)
    # `>\n\nHi` after the special `</think>`: the `>` is answer text, not a tag.
    assert summary(events) == [ExpectedItem(R, "reasoning"), ExpectedItem(M, ">\n\nHi world")]
    assert state.reasoning_tokens == 5  # `<think>`, three inside, `</think>`


@pytest.mark.parametrize("tag", TAGS)
def test_every_split_of_every_tag_gives_the_same_items(tag: str) -> None:
    """Each tag cut into ordinary tokens in all 2^(n-1) ways reads as the special token does."""
    before, after = {
        "<think>": ("Hi ", "deep</think>Yes"),
        "</think>": ("hmm", "Answer"),
        "<tool_call>": ("Sure", '{"name": "f", "arguments": {"a": 1}}</tool_call>'),
        "</tool_call>": ('Ok<tool_call>{"name": "f", "arguments": {"a": [1]}}', " done"),
    }[tag]
    grammar = IN_REASONING if tag == "</think>" else GRAMMAR
    whole = summary(run(grammar, [*text_toks(before), VOCAB.special[tag], *text_toks(after)])[1])
    assert len(whole) >= 2
    raw = tag.encode()
    for cuts in itertools.product((False, True), repeat=len(raw) - 1):
        pieces, start = [], 0
        for at, cut in enumerate(cuts, 1):
            if cut:
                pieces.append(raw[start:at])
                start = at
        pieces.append(raw[start:])
        split = [INDEX.ids[p] for p in pieces]
        tokens = [*text_toks(before), *split, *text_toks(after)]
        assert summary(run(grammar, tokens)[1]) == whole, pieces


def test_one_token_with_end_of_reasoning_content_and_call_start_vllm_pr42691() -> None:
    """Bugs 21-23: one token carries `…</think>\\n\\nThe answer<tool_call>\\n{"`; every part
    lands in its own item, nothing dropped or overwritten."""
    tokens = [
        *toks("<think>", "reason", 'ok</think>\n\nThe answer<tool_call>\n{"', "name", '": '),
        *text_toks('"lookup", "arguments": {"q": "x"}'),
        *toks("}\n</tool_call>"),
    ]
    _, events = run(GRAMMAR, tokens)
    assert_sound(events)
    assert summary(events) == [
        ExpectedItem(R, "reasonok"),
        ExpectedItem(M, "The answer"),
        ExpectedItem(F, '{"q": "x"}', "lookup"),
    ]


def test_start_in_reasoning_and_a_repeated_think_marker_is_dropped_vllm_pr55210() -> None:
    for prefix in ("", "<think>\n"):
        tokens = text_toks(prefix + "Let me see.</think>\n\nFour.")
        _, events = run(IN_REASONING, tokens)
        assert_sound(events)
        assert summary(events) == [ExpectedItem(R, "Let me see."), ExpectedItem(M, "Four.")]
    # Once reasoning has text, `<think>` is literal reasoning text.
    _, events = run(IN_REASONING, text_toks("a <think> b</think>"))
    assert summary(events) == [ExpectedItem(R, "a <think> b")]


def test_stray_close_tags_outside_their_block_are_kept_as_text() -> None:
    _, events = run(GRAMMAR, text_toks("Done.</think> Really</tool_call>"))
    assert_sound(events)
    assert summary(events) == [ExpectedItem(M, "Done.</think> Really</tool_call>")]


def test_tool_call_inside_reasoning_is_reasoning_text() -> None:
    text = '<think>maybe <tool_call>{"name": "f"}</tool_call></think>no'
    _, events = run(GRAMMAR, text_toks(text))
    assert summary(events) == [
        ExpectedItem(R, 'maybe <tool_call>{"name": "f"}</tool_call>'),
        ExpectedItem(M, "no"),
    ]


@pytest.mark.parametrize(("reason", "status"), [("stop", "completed"), ("length", "incomplete")])
def test_unclosed_think_at_finish_keeps_the_reasoning(reason: str, status: str) -> None:
    _, events = run(GRAMMAR, text_toks("<think>still thinking"), reason)
    assert_sound(events)
    [item] = terminal_output(events)
    assert (item["type"], item["status"]) == ("reasoning", status)
    assert item["content"][0]["text"] == "still thinking"


@pytest.mark.parametrize(
    "body",
    ["not json", '{"arguments": {}}', '{"name": "", "arguments": {}}', "[1, 2]", '{"name": 3}'],
)
def test_tool_call_that_is_not_a_call_falls_back_to_message_text(body: str) -> None:
    text = f"Sure <tool_call>{body}</tool_call> ok"
    _, events = run(GRAMMAR, text_toks(text))
    assert_sound(events)
    assert summary(events) == [ExpectedItem(M, text)]


def test_unclosed_tool_call_at_stop_is_read_whole_or_kept_as_text() -> None:
    _, events = run(GRAMMAR, text_toks('<tool_call>{"arguments": {}, "name": "f"}'))
    assert summary(events) == [ExpectedItem(F, "{}", "f")]
    _, events = run(GRAMMAR, text_toks("<tool_call>oops"))
    assert summary(events) == [ExpectedItem(M, "<tool_call>oops")]


def test_call_whose_name_is_past_the_head_limit_is_read_whole() -> None:
    from streamfold.statemachine._grammars.hermes import HEAD_LIMIT

    name = "n" * HEAD_LIMIT
    text = f'<tool_call>{{"name": "{name}", "parameters": {{"a":1}}}}</tool_call>'
    _, events = run(GRAMMAR, text_toks(text))
    assert_sound(events)
    assert summary(events) == [ExpectedItem(F, '{"a": 1}', name)]
    added = [to_wire(e) for e in events if e.type == "response.output_item.added"]
    assert added[0]["item"]["name"] == name


def test_arguments_stream_before_the_call_closes() -> None:
    head = text_toks('<tool_call>{"name": "get_weather", "arguments": {"city": "Par')
    tail = text_toks('is"}}\n</tool_call>')
    from streamfold.statemachine import Response, start, step

    response = Response(id="resp_x", created_at=1, model="m", status="in_progress")
    state, _ = start(GRAMMAR, response)
    events = []
    for token in head:
        state, new = step(state, token)
        events += [to_wire(e) for e in new]
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert added[0]["item"]["name"] == "get_weather"
    streamed = "".join(e["delta"] for e in events if e["type"].endswith("arguments.delta"))
    assert streamed == '{"city": "Par'
    for token in tail:
        state, new = step(state, token)
        events += [to_wire(e) for e in new]
    done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert done[0]["arguments"] == '{"city": "Paris"}'
    assert json.loads(done[0]["arguments"]) == {"city": "Paris"}


def test_committed_call_keeps_unbalanced_arguments_and_text_after_it() -> None:
    text = '<tool_call>{"name": "f", "arguments": {"a": "x</tool_call>y"}}</tool_call>'
    _, events = run(GRAMMAR, text_toks(text))
    assert_sound(events)
    # As in vLLM's hermes parser the first `</tool_call>` ends the call; the rest is text.
    assert summary(events) == [
        ExpectedItem(F, '{"a": "x', "f"),
        ExpectedItem(M, 'y"}}</tool_call>'),
    ]


def test_two_calls_get_their_own_items_and_stable_call_ids() -> None:
    call = '<tool_call>{"name": "f", "arguments": {}}</tool_call>\n'
    _, events = run(GRAMMAR, text_toks(call + call), response_id="resp_abc")
    assert_sound(events)
    calls = terminal_output(events)
    assert [(c["id"], c["call_id"]) for c in calls] == [
        ("fc_abc_0", "call_abc_0"),
        ("fc_abc_1", "call_abc_1"),
    ]
    added = [
        to_wire(e)["item"]["call_id"] for e in events if e.type == "response.output_item.added"
    ]
    assert added == ["call_abc_0", "call_abc_1"]


def test_control_tokens_show_no_text() -> None:
    tokens = toks("<|im_end|>", "Hello", "<|endoftext|>", " world", "<|im_end|>")
    _, events = run(GRAMMAR, tokens)
    assert summary(events) == [ExpectedItem(M, "Hello world")]


def test_characters_split_over_tokens_and_invalid_bytes() -> None:
    _, events = run(GRAMMAR, text_toks("é🎉<think>ü</think>"))
    assert summary(events) == [ExpectedItem(M, "é🎉"), ExpectedItem(R, "ü")]
    bad = [INDEX.ids[b"a"], INDEX.ids[b"\xff"], INDEX.ids[b"b"], INDEX.ids[b"\xe2"]]
    _, events = run(GRAMMAR, bad)
    assert_sound(events)
    assert summary(events) == [ExpectedItem(M, "a\ufffdb\ufffd")]


def test_held_tag_start_is_released_on_stop_and_dropped_when_cut() -> None:
    assert summary(run(GRAMMAR, text_toks("a <th"))[1]) == [ExpectedItem(M, "a <th")]
    assert summary(run(GRAMMAR, text_toks("a <th"), "length")[1]) == [ExpectedItem(M, "a")]
    assert summary(run(GRAMMAR, text_toks("a <th"), "abort")[1]) == [ExpectedItem(M, "a")]


def test_item_text_is_its_run_without_whitespace_at_either_end() -> None:
    text = "\n\nHello\n  world \n\n<think>\n x \n</think>\n\n Bye\t"
    _, events = run(GRAMMAR, text_toks(text))
    assert_sound(events)
    assert summary(events) == [
        ExpectedItem(M, "Hello\n  world"),
        ExpectedItem(R, "x"),
        ExpectedItem(M, "Bye"),
    ]


def test_long_blank_run_is_released_in_blocks_whatever_the_chunking() -> None:
    from streamfold.statemachine import Vocabulary
    from streamfold.statemachine._grammars.thinktags import BLANK_LIMIT

    vocab = Vocabulary(name="blanks", token_bytes=(b"a", b" ", b" " * 100, b" " * 300, b"<think>b"))
    grammar = ThinkTagGrammar(vocab)
    blank = 2 * BLANK_LIMIT + 19  # 531 = 300 + 100 + 100 + 31
    ones = [0, *[1] * blank, 4]
    mixed = [0, 3, 2, 1, 2, *[1] * 30, 4]
    assert vocab.decode(ones) == vocab.decode(mixed)
    expected = [ExpectedItem(M, "a" + " " * 2 * BLANK_LIMIT), ExpectedItem(R, "b")]
    assert summary(run(grammar, ones)[1]) == expected
    assert summary(run(grammar, mixed)[1]) == expected


def test_whitespace_only_runs_open_no_item() -> None:
    _, events = run(GRAMMAR, text_toks("\n<think>\n\n</think>\n\n  \n"))
    assert_sound(events)
    assert terminal_output(events) == []


def test_step_leaves_its_input_state_untouched() -> None:
    from streamfold.statemachine import Response, start, step

    state, _ = start(GRAMMAR, Response(id="resp_p", created_at=1, model="m", status="in_progress"))
    for token in text_toks("<think>x</thi"):
        state, _ = step(state, token)
    before = state
    first = [to_wire(e) for e in step(state, INDEX.ids[b"n"])[1]]
    assert state is before and state.parse.held == "</thi"
    assert [to_wire(e) for e in step(state, INDEX.ids[b"n"])[1]] == first


@pytest.mark.parametrize(
    "tags",
    [{"think_open": ""}, {"tool_open": "<think"}, {"think_close": "<think>x"}],
)
def test_tags_that_cannot_be_told_apart_are_refused(tags: dict[str, str]) -> None:
    with pytest.raises(ReducerUsageError, match="ThinkTagGrammar"):
        ThinkTagGrammar(VOCAB, **tags)


def test_custom_tags() -> None:
    grammar = ThinkTagGrammar(VOCAB, think_open="[T]", think_close="[/T]")
    _, events = run(grammar, text_toks("[T]hm[/T]ok <think>"))
    assert summary(events) == [ExpectedItem(R, "hm"), ExpectedItem(M, "ok <think>")]


# -- properties ------------------------------------------------------------------------------


def _grammar(completion: ThinkTagCompletion) -> ThinkTagGrammar:
    return IN_REASONING if completion.start_in_reasoning else GRAMMAR


@_SETTINGS
@given(completion=thinktag_completions(), data=st.data())
def test_completions_give_their_items_however_tokenized(
    completion: ThinkTagCompletion, data: st.DataObject
) -> None:
    grammar = _grammar(completion)
    tokens = data.draw(tokenizations(completion.text, INDEX))
    _, events = run(grammar, tokens)
    assert_sound(events)
    assert summary(events) == list(completion.expected)
    # Chunking invariance: another cut of the same text gives identical items, ids included.
    other = data.draw(tokenizations(completion.text, INDEX))
    assert terminal_output(run(grammar, other)[1]) == terminal_output(events)


@_SETTINGS
@given(text=malformed_thinktag_texts(), start_in_reasoning=st.booleans(), data=st.data())
def test_malformed_text_is_conformant_and_chunking_invariant(
    text: str, start_in_reasoning: bool, data: st.DataObject
) -> None:
    grammar = IN_REASONING if start_in_reasoning else GRAMMAR
    _, events = run(grammar, data.draw(tokenizations(text, INDEX)))
    assert_sound(events)
    other = data.draw(tokenizations(text, INDEX))
    assert terminal_output(run(grammar, other)[1]) == terminal_output(events)


def _assert_prefix_of(cut: list[dict], full: list[dict]) -> None:
    assert len(cut) <= len(full)
    for index, (short, long) in enumerate(zip(cut, full, strict=False)):
        assert (short["type"], short["id"]) == (long["type"], long["id"])
        if short["type"] == "function_call":
            assert long["arguments"].startswith(short["arguments"])
            assert short["name"] == long["name"]
        else:
            assert long["content"][0]["text"].startswith(short["content"][0]["text"])
        if index < len(cut) - 1:
            assert short == long  # only the last item can have been cut


@_SETTINGS
@given(
    text=malformed_thinktag_texts() | thinktag_completions().map(lambda c: c.text),
    start_in_reasoning=st.booleans(),
    reason=st.sampled_from(["length", "abort", "error"]),
    data=st.data(),
)
def test_a_cut_response_shows_a_prefix_of_the_full_one(
    text: str, start_in_reasoning: bool, reason: str, data: st.DataObject
) -> None:
    grammar = IN_REASONING if start_in_reasoning else GRAMMAR
    tokens = data.draw(tokenizations(text, INDEX))
    full = terminal_output(run(grammar, tokens)[1])
    cut_at = data.draw(st.integers(0, len(tokens)))
    _, events = run(grammar, tokens[:cut_at], reason)
    assert_sound(events)
    assert events[-1].type == ("response.incomplete" if reason == "length" else "response.failed")
    _assert_prefix_of(terminal_output(events), full)


@_SETTINGS
@given(
    tokens=st.lists(st.integers(0, len(VOCAB) - 1), max_size=60),
    start_in_reasoning=st.booleans(),
    reason=st.sampled_from(["stop", "length", "abort", "error"]),
)
def test_any_token_ids_give_a_sound_stream(
    tokens: list[int], start_in_reasoning: bool, reason: str
) -> None:
    grammar = IN_REASONING if start_in_reasoning else GRAMMAR
    assert_sound(run(grammar, tokens, reason)[1])


@settings(max_examples=60, deadline=None)
@given(text=st.text(max_size=80), data=st.data())
def test_any_text_gives_a_sound_stream(text: str, data: st.DataObject) -> None:
    _, events = run(GRAMMAR, data.draw(tokenizations(text, INDEX)))
    assert_sound(events)
    if not any(tag in text for tag in TAGS) and text.strip():
        assert summary(events) == [ExpectedItem(M, text.strip())]
