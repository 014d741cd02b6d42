"""The compiled hot paths (`_speedups.c`) against the Python functions they copy.

Invariants: for any token sequence, with or without logprobs, the compiled `step` and the
Python `step` return equal events (and byte-identical wire JSON) and equal states after every
token; for any plain event, the compiled `sse_event` and `json_line` write the same bytes as the
Python ones.
The compiled paths must also leak nothing (reference counts of what they touch come back) and
hand every misuse to Python, so the typed errors stay the same.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamfold.engines import TokenChunk
from streamfold.engines.vocab import harmony_encoding
from streamfold.specs.strategies import HarmonyCompletion, harmony_completions
from streamfold.statemachine import (
    ReducerUsageError,
    ResponseTextDeltaEvent,
    TextLogprob,
    _accel,
    _events,
    _reducer,
    _wire,
    dumps,
    finish,
    start,
)
from streamfold.statemachine._accel import event_text
from tests.harmony_helpers import GRAMMAR, new_response

try:
    from streamfold.statemachine import _speedups
except ImportError:  # built without a C compiler: the pure-Python path is the whole package
    _speedups = None  # type: ignore[assignment]

compiled = pytest.mark.skipif(_speedups is None, reason="the C extension was not built")
PROPERTY = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
VOCAB_SIZE = len(GRAMMAR.vocabulary)
Step = Callable[..., Any]
BYTE_TOKENS = {
    data[0]: token
    for token, data in enumerate(GRAMMAR.vocabulary.token_bytes)
    if len(data) == 1 and token not in GRAMMAR.vocabulary.special_ids
}


def test_ci_builds_the_extension() -> None:
    """CI sets STREAMFOLD_EXPECT_SPEEDUPS: there a missing build is a failure, not a skip."""
    if not os.environ.get("STREAMFOLD_EXPECT_SPEEDUPS"):
        pytest.skip("only where the build is expected to compile (CI)")
    assert _speedups is not None
    assert _accel.ACCELERATED
    # Every compiled function the server uses, not only the reducer's `step`.
    assert _accel.json_line is _speedups.json_line
    assert _accel.step_ready is _speedups.step_ready
    assert _accel.event_rows is not _accel._python_event_rows
    assert _accel.row_frames is _speedups.row_frames
    assert _accel.row_socket_frames is _speedups.row_socket_frames
    assert _accel.rows_numbered.func is _speedups.rows_numbered  # type: ignore[attr-defined]
    assert _accel.last_of_kinds.func is _speedups.last_of_kinds  # type: ignore[attr-defined]


@compiled
@pytest.mark.parametrize(
    ("name", "reference"), [("step", _reducer.step), ("sse_event", _wire.sse_event)]
)
def test_help_on_the_compiled_functions_shows_the_references_signature_and_first_line(
    name: str, reference: Callable[..., Any]
) -> None:
    """Issue 36, item 4: `help(streamfold.statemachine.step)` (the compiled one, which the
    package exports) said only "`streamfold.statemachine.step` with its text-token hot path
    compiled", a sentence that names itself; a user reading `help()` learnt nothing. It shows
    the Python reference's parameters and its docstring's first line, then says what is
    compiled."""
    import inspect
    import pydoc

    function = getattr(_speedups, name)
    want = [p.name for p in inspect.signature(reference).parameters.values()]
    assert [p.name for p in inspect.signature(function).parameters.values()] == want
    first = (reference.__doc__ or "").strip().splitlines()[0]
    shown = pydoc.render_doc(function, renderer=pydoc.plaintext)
    assert first in shown, shown
    assert f"`streamfold.statemachine.{name}`" not in shown, shown


def fold(
    step: Step, tokens: Sequence[int], logprobs: Sequence[float | None] | None = None
) -> list[tuple[Any, list[Any]]]:
    """Every (state, events) pair from start to finish."""
    state, events = start(GRAMMAR, new_response("resp_speed"))
    trail = [(state, events)]
    for i, token in enumerate(tokens):
        logprob = None if logprobs is None else logprobs[i]
        state, events = step(state, token) if logprob is None else step(state, token, logprob)
        trail.append((state, events))
    trail.append(finish(state, "stop"))
    return trail


def assert_same_fold(tokens: Sequence[int], logprobs: Sequence[float | None] | None = None) -> None:
    expected = fold(_reducer.step, tokens, logprobs)
    actual = fold(_speedups.step, tokens, logprobs)
    assert len(actual) == len(expected)
    for (state, events), (want_state, want_events) in zip(actual, expected, strict=True):
        assert events == want_events
        assert [dumps(e) for e in events] == [dumps(e) for e in want_events]
        assert state == want_state


@compiled
@PROPERTY
@given(completion=harmony_completions())
def test_compiled_step_equals_python_step_on_generated_completions(
    completion: HarmonyCompletion,
) -> None:
    assert_same_fold(completion.tokens)


@compiled
@PROPERTY
@given(data=st.data(), completion=harmony_completions())
def test_compiled_step_equals_python_step_when_some_tokens_carry_logprobs(
    data: st.DataObject, completion: HarmonyCompletion
) -> None:
    # Logprobs send a token down the general path; mixing both paths in one stream must not
    # change anything (the item's pending bytes and rope cross from one to the other).
    logprobs = data.draw(
        st.lists(
            st.none() | st.floats(-20, 0),
            min_size=len(completion.tokens),
            max_size=len(completion.tokens),
        )
    )
    assert_same_fold(completion.tokens, logprobs)


def _chunks(data: st.DataObject, tokens: Sequence[int]) -> list[TokenChunk]:
    """`tokens` cut into chunks as engines send them: mostly one token each, some of several
    or none, some with logprobs, and maybe a finish reason mid-way."""
    chunks, i = [], 0
    while i < len(tokens):
        size = data.draw(st.sampled_from([1, 1, 1, 1, 2, 3, 0]))
        ids = tuple(tokens[i : i + size])
        i += size
        logprobs = tuple(-0.5 for _ in ids) if data.draw(st.integers(0, 9)) == 0 else None
        chunks.append(TokenChunk(token_ids=ids, logprobs=logprobs))
    if chunks and data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(chunks) - 1))
        chunks[at] = TokenChunk(token_ids=chunks[at].token_ids, finish_reason="length")
    return chunks


def _step_all(chunks: list[TokenChunk], compiled_run: bool) -> tuple[Any, ...]:
    """`Generation._step_all` over `chunks` (from a started response): its result or error
    type, the events it added, and the state it kept."""
    from streamfold.adapters import driver

    unused: Any = None  # `_step_all` reads neither the source nor the request
    generation = driver.Generation(
        unused, unused, GRAMMAR, new_response("resp_speed"), input_tokens=0
    )
    pending = generation._start()
    saved = driver.step_ready
    driver.step_ready = saved if compiled_run else None
    try:
        outcome: Any = generation._step_all(list(chunks), pending)
    except Exception as exc:  # a refused token: raised after the earlier chunks' events
        outcome = type(exc)
    finally:
        driver.step_ready = saved
    return outcome, [dumps(e) for e in pending], generation.state


@compiled
@PROPERTY
@given(completion=harmony_completions(), data=st.data())
def test_the_compiled_run_of_text_chunks_steps_as_the_python_loop_does(
    completion: HarmonyCompletion, data: st.DataObject
) -> None:
    """The driver steps runs of one-token text chunks in C (`step_ready`) and the rest one
    chunk at a time: the same events, finish, refusal and state as stepping every chunk in
    Python, however the tokens are cut into chunks, with or without logprobs or a finish."""
    chunks = _chunks(data, completion.tokens)
    assert _step_all(chunks, True) == _step_all(chunks, False)


#: Any tokens, specials too: refusals, headers cut short, stray markers.
RANDOM_TOKENS = st.lists(
    st.integers(0, VOCAB_SIZE - 1) | st.sampled_from(sorted(GRAMMAR.vocabulary.special_ids)),
    max_size=60,
)


@compiled
@PROPERTY
@given(tokens=RANDOM_TOKENS, data=st.data())
def test_the_compiled_run_of_chunks_refuses_what_python_refuses(
    tokens: list[int], data: st.DataObject
) -> None:
    chunks = _chunks(data, [GRAMMAR.vocabulary.id_of("<|channel|>"), *tokens])
    assert _step_all(chunks, True) == _step_all(chunks, False)


def _in_final_text(words: str) -> tuple[Any, list[int], list[TokenChunk]]:
    """A state inside a final message, and `words` as tokens and as one-token chunks."""
    header = harmony_encoding().encode("<|channel|>final<|message|>", allowed_special="all")
    text = harmony_encoding().encode(words)
    state, _ = start(GRAMMAR, new_response("resp_speed"))
    for token in header:
        state, _ = _reducer.step(state, token)
    return state, text, [TokenChunk(token_ids=(t,)) for t in text]


@compiled
def test_step_ready_leaves_what_is_not_a_plain_text_chunk_to_its_caller() -> None:
    state, text, plain = _in_final_text(" hello there")
    odd: list[Any] = [
        TokenChunk(token_ids=(text[0],), logprobs=(-1.0,)),
        TokenChunk(token_ids=(text[0],), finish_reason="stop"),
        TokenChunk(token_ids=(text[0], text[1])),
        TokenChunk(token_ids=()),
        object(),  # no attributes at all: the caller's own step raises for it
    ]
    for chunk in odd:
        pending: list[Any] = []
        after, stop = _speedups.step_ready(state, [*plain, chunk, *plain], 0, pending)
        assert stop == len(plain)
        want, events = state, []
        for c in plain:
            want, produced = _reducer.step(want, c.token_ids[0])
            events += produced
        assert after == want and pending == events
    watched = [state, *plain, odd[0]]
    gc.collect()
    before = [sys.getrefcount(value) for value in watched]
    for _round in range(500):
        _speedups.step_ready(state, [*plain, odd[0]], 0, [])
    assert [sys.getrefcount(value) for value in watched] == before  # no leak
    pending = []
    assert _speedups.step_ready(state, plain, 1, pending)[1] == len(plain)
    assert _speedups.step_ready(state, plain, len(plain) + 5, pending) == (state, len(plain) + 5)


@compiled
def test_step_ready_changes_no_state_its_caller_can_see() -> None:
    """After its first token, `step_ready` updates the states it made itself in place (the
    loop holds the only reference to each, and each the only one to its open item): the
    caller's state, its open item, and every state the caller got back from an earlier call
    keep their values, down to each field's object. (The snapshot holds no reference to the
    open item itself, which would hide a change made to it in place.)"""
    state, _, plain = _in_final_text(" one two three four five six seven")
    open_at = type(state)._fields.index("open")

    def fields(value: Any) -> tuple[list[Any], list[Any]]:
        return [f for i, f in enumerate(value) if i != open_at], list(value.open)

    def unchanged(value: Any, before: tuple[list[Any], list[Any]]) -> bool:
        now = fields(value)
        return all(a is b for a, b in zip(now[0] + now[1], before[0] + before[1], strict=True))

    kept = []
    for _round in range(3):
        before = fields(state)
        after, stop = _speedups.step_ready(state, plain, 0, [])
        assert stop == len(plain)
        assert unchanged(state, before)
        kept.append((state, before))
        state = after
    assert all(unchanged(old, before) for old, before in kept)
    want = kept[0][0]
    for _round in range(3):
        for c in plain:
            want, _ = _reducer.step(want, c.token_ids[0])
    assert state == want


@compiled
@PROPERTY
@given(tokens=RANDOM_TOKENS)
def test_compiled_step_equals_python_step_on_random_tokens(tokens: list[int]) -> None:
    assert_same_fold([GRAMMAR.vocabulary.id_of("<|channel|>"), *tokens])


@compiled
@PROPERTY
@given(text=st.text(min_size=1, max_size=40), cut=st.integers(1, 3))
def test_compiled_step_equals_python_step_on_characters_split_across_tokens(
    text: str, cut: int
) -> None:
    # Byte-level tokens: every multi-byte character arrives in pieces (pending bytes held).
    header = harmony_encoding().encode("<|channel|>final<|message|>", allowed_special="all")
    byte_tokens = [BYTE_TOKENS[b] for b in text.encode()]
    assert_same_fold([*header, *byte_tokens[:cut], *byte_tokens[cut:]])


@compiled
def test_compiled_step_accepts_the_keyword_forms_and_rejects_unknown_keywords() -> None:
    header = harmony_encoding().encode("<|channel|>final<|message|>Hi", allowed_special="all")
    state, _ = start(GRAMMAR, new_response())
    for token in header[:-1]:
        state, _ = _reducer.step(state, token)
    want = _reducer.step(state, header[-1])
    assert _speedups.step(state, header[-1], logprob=None) == want
    assert _speedups.step(state, header[-1], None, None) == want
    assert _speedups.step(state, header[-1], top_logprobs=None, logprob=None) == want
    with pytest.raises(TypeError):
        _speedups.step(state, header[-1], temperature=None)
    with pytest.raises(TypeError):
        _speedups.step(state)


@compiled
@pytest.mark.parametrize("token", [-1, VOCAB_SIZE, 2**70, True, 3.0, "5", 1.5, None])
def test_compiled_step_raises_the_python_errors_for_bad_tokens(token: object) -> None:
    """Both paths raise the same ReducerUsageError (issue 14: "5", 1.5 and None gave
    TypeError from inside the vocabulary lookup)."""
    header = harmony_encoding().encode("<|channel|>final<|message|>", allowed_special="all")
    state, _ = start(GRAMMAR, new_response())
    for t in header:
        state, _ = _speedups.step(state, t)
    with pytest.raises(ReducerUsageError) as compiled_error:
        _speedups.step(state, token)
    with pytest.raises(ReducerUsageError) as python_error:
        _reducer.step(state, token)
    assert type(compiled_error.value) is type(python_error.value)
    assert str(compiled_error.value) == str(python_error.value)


@compiled
def test_compiled_step_after_finish_raises_the_usage_error() -> None:
    header = harmony_encoding().encode("<|channel|>final<|message|>Hi", allowed_special="all")
    state, _ = start(GRAMMAR, new_response())
    for t in header[:-1]:
        state, _ = _speedups.step(state, t)
    done, _ = finish(state, "stop")
    with pytest.raises(ReducerUsageError, match="after finish"):
        _speedups.step(done, header[-1])


@compiled
def test_compiled_step_leaks_no_references() -> None:
    """Reference counts of the values a text step reads come back after many steps."""
    tokens = harmony_encoding().encode(
        "<|channel|>analysis<|message|>" + "naïve café 🎉 " * 200, allowed_special="all"
    )
    state, _ = start(GRAMMAR, new_response())
    for token in tokens[:4]:
        state, _ = _speedups.step(state, token)
    watched = [GRAMMAR.text_bytes, state.open, state.open.item_id, state.response, GRAMMAR]
    gc.collect()
    before = [sys.getrefcount(value) for value in watched]
    for _round in range(3):  # not `_`: it holds the events that reference the item id
        s = state
        for token in tokens[4:]:
            s, events = _speedups.step(s, token)
        del s, events
    gc.collect()
    assert [sys.getrefcount(value) for value in watched] == before


# Any text at all: control characters, quotes, backslashes, every plane.
_any_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=30)
_any_int = st.integers(-(2**70), 2**70)


@compiled
@pytest.mark.parametrize("cls", _wire.PLAIN_EVENTS, ids=lambda cls: cls.__name__)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_compiled_frames_equal_python_frames_for_every_plain_event(
    cls: type, data: st.DataObject
) -> None:
    plain = _wire.plain_plan(cls)
    assert plain is not None
    fields = {
        name: data.draw(_any_text if kind == "str" else _any_int)
        for name, kind in plain[1]
        if kind in ("str", "int")
    }
    event = cls(**fields)
    assert _speedups.sse_event(event) == _wire.sse_event(event)
    assert _speedups.json_line(event) == _wire.json_line(event)


@compiled
@pytest.mark.parametrize("cls", _wire.PLAIN_EVENTS, ids=lambda cls: cls.__name__)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_event_text_is_dumps_for_every_plain_event(cls: type, data: st.DataObject) -> None:
    """The server logs `event_text(e)` (the compiled line writer for plain events) where it
    logged `dumps(e)`: the same text, lone surrogates included (the compiled writer refuses
    them; `dumps` keeps them)."""
    plain = _wire.plain_plan(cls)
    assert plain is not None
    text = st.text(st.characters(), max_size=30)  # surrogates too
    fields = {
        name: data.draw(text if kind == "str" else _any_int)
        for name, kind in plain[1]
        if kind in ("str", "int")
    }
    event = cls(**fields)
    assert event_text(event) == _wire.dumps(event)
    assert _accel.event_rows([event], Row) == [_row(event)]


class Row(NamedTuple):
    """A row of `event_rows` (the server's `EventRecord` has this shape)."""

    sequence_number: int
    type: str
    data: str


def _row(event: Any) -> Row:
    return Row(event.sequence_number, event.type, _wire.dumps(event))


def test_event_rows_are_each_events_number_type_and_dumps() -> None:
    """The server's log records of a batch (`event_rows`, compiled): for every golden trace,
    one call on its whole stream (plain and lifecycle events, tuple or list) gives a row of the
    given type per event, in order, with `dumps`'s text."""
    goldens = sorted(Path(__file__).resolve().parents[2].glob("specs/traces/*.golden.jsonl"))
    for path in goldens:
        events = [_wire.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        rows = _accel.event_rows(events, Row)
        assert rows == [_row(e) for e in events], path.name
        assert {type(r) for r in rows} == {Row}
        assert _accel.event_rows(tuple(events), Row) == rows
    assert _accel.event_rows([], Row) == []


@pytest.mark.parametrize(
    "text",
    [
        "x" * 5000,  # past the writer's stack buffer
        '"\\\n\x01' * 900 + "café 🎉" * 300,  # escapes and UTF-8 past it
        "a\ud800" * 400,  # a lone surrogate: `dumps` keeps it
    ],
    ids=["ascii", "escapes-and-utf8", "surrogate"],
)
def test_long_texts_are_written_as_python_writes_them(text: str) -> None:
    event = ResponseTextDeltaEvent(
        sequence_number=1, item_id="msg_1", output_index=0, content_index=0, delta=text
    )
    assert _accel.event_rows([event], Row) == [_row(event)]
    if "\ud800" not in text:
        assert _accel.json_line(event) == _wire.json_line(event)
        assert _accel.sse_event(event) == _wire.sse_event(event)


@pytest.mark.parametrize("special", ['"', "\\", "\x00", "\x1f", "\n", " ", "\x7f", "é", "🎉"])
def test_every_escape_is_written_wherever_it_falls_in_a_word(special: str) -> None:
    """The compiled writer copies text 8 bytes at a time until a word may need an escape: at
    every position around two words, each character that needs one (and neighbours that do
    not) is written as `dumps` writes it."""
    for position in range(18):
        for filler in ("a", "é"):
            delta = filler * position + special + "b" * (17 - position)
            event = ResponseTextDeltaEvent(
                sequence_number=1, item_id="msg_1", output_index=0, content_index=0, delta=delta
            )
            assert _accel.json_line(event) == _wire.json_line(event), (position, filler)
            assert _accel.event_rows([event], Row) == [_row(event)]


@compiled
def test_compiled_event_rows_refuse_what_is_not_a_sequence_or_a_named_tuple() -> None:
    event = ResponseTextDeltaEvent(
        sequence_number=1, item_id="msg_1", output_index=0, content_index=0, delta="a"
    )
    with pytest.raises(TypeError, match="sequence"):
        _speedups.event_rows(5, Row, _wire.dumps)
    with pytest.raises(TypeError, match="NamedTuple"):
        _speedups.event_rows([event], list, _wire.dumps)
    with pytest.raises(AttributeError):  # not an event: no sequence number
        _speedups.event_rows([object()], Row, lambda e: "{}")
    with pytest.raises(ZeroDivisionError):  # the fallback's own error
        _speedups.event_rows([object()], Row, lambda e: 1 / 0)


@given(
    st.lists(
        st.tuples(st.integers(0, 10**6), st.text(max_size=40), st.text(max_size=300)),
        max_size=20,
    )
)
def test_row_frames_are_the_python_frames(rows: list[tuple[int, str, str]]) -> None:
    """The server's SSE bytes of a batch (`row_frames`, compiled): the Python f-string frames
    byte for byte, for any text (UTF-8, escapes, lone surrogates: both raise)."""
    try:
        expected: bytes | None = _accel._python_row_frames([Row(*r) for r in rows])
    except UnicodeEncodeError:
        expected = None
    if expected is None:
        with pytest.raises(UnicodeEncodeError):
            _accel.row_frames([Row(*r) for r in rows])
    else:
        assert _accel.row_frames([Row(*r) for r in rows]) == expected
        assert _accel.row_frames(list(rows)) == expected  # plain tuples too


def test_row_frames_of_every_golden_event_are_its_sse_frames() -> None:
    goldens = sorted(Path(__file__).resolve().parents[2].glob("specs/traces/*.golden.jsonl"))
    for path in goldens:
        events = [_wire.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        frames = _accel.row_frames(_accel.event_rows(events, Row))
        assert frames == b"".join(_wire.sse_event(e) for e in events), path.name


@compiled
def test_compiled_row_frames_refuse_what_is_not_a_list_of_rows_and_leak_nothing() -> None:
    with pytest.raises(TypeError, match="list"):
        _speedups.row_frames((Row(0, "a", "{}"),))
    with pytest.raises(TypeError, match="tuple"):
        _speedups.row_frames([Row(0, "a", "{}"), ["x"]])
    with pytest.raises(TypeError, match="str"):
        _speedups.row_frames([(0, b"a", "{}")])
    data = "{" + "é" * 50 + "}"
    rows = [Row(i, "response.output_text.delta", data) for i in range(3)]
    before = sys.getrefcount(data)
    for _ in range(100):
        _speedups.row_frames(rows)
        with pytest.raises(UnicodeEncodeError):
            _speedups.row_frames([*rows, Row(3, "t", "\ud800")])
    assert sys.getrefcount(data) == before


def _read_socket_frames(frames: bytes) -> list[tuple[bool, str, str]]:
    """`frames` as the `websockets` library's own parser reads them: (final, opcode, text)."""
    from websockets.frames import Frame
    from websockets.streams import StreamReader

    reader = StreamReader()
    reader.feed_data(frames)
    reader.feed_eof()
    read = []
    while reader.buffer:  # every frame, to the last byte
        parse = Frame.parse(reader.read_exact, mask=False, max_size=None)
        try:
            while True:
                next(parse)
        except StopIteration as done:
            frame = done.value
        read.append((frame.fin, frame.opcode.name, frame.data.decode()))
    return read


_SUFFIXES = st.sampled_from(["", ', "stream_id": "lane"}', ', "stream_id": "\\u00e9t\\u00e9"}'])


@given(
    st.lists(
        st.tuples(
            st.integers(0, 10**6),
            st.text(max_size=10),
            st.one_of(
                st.text(max_size=300),
                st.text(max_size=300).map(lambda text: "{" + text + "}"),
                # Around the header's length boundaries: 125/126 bytes, 65535/65536 bytes.
                st.sampled_from([123, 124, 125, 126, 127, 65534, 65535, 65536, 65537]).map(
                    lambda n: "{" + "x" * (n - 2) + "}"
                ),
            ),
        ),
        max_size=6,
    ),
    _SUFFIXES,
)
@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
def test_row_socket_frames_are_websocket_text_frames(
    rows: list[tuple[int, str, str]], suffix: str
) -> None:
    """The server's WebSocket bytes of a batch (`row_socket_frames`): compiled and Python alike,
    byte for byte, and what a real WebSocket parser (the `websockets` library's) reads as one
    final text message per row, its data (with the lane's suffix for its last brace)."""
    try:
        expected: bytes | None = _accel._python_row_socket_frames([Row(*r) for r in rows], suffix)
    except (UnicodeEncodeError, ValueError) as error:
        with pytest.raises(type(error)):
            _accel.row_socket_frames([Row(*r) for r in rows], suffix)
        assert isinstance(error, UnicodeEncodeError) or any(not r[2].endswith("}") for r in rows)
        return
    assert _accel.row_socket_frames([Row(*r) for r in rows], suffix) == expected
    assert _accel.row_socket_frames(list(rows), suffix) == expected
    messages = [r[2][:-1] + suffix if suffix else r[2] for r in rows]
    assert _read_socket_frames(expected) == [(True, "TEXT", m) for m in messages]


@compiled
def test_compiled_row_socket_frames_refuse_bad_rows_and_leak_nothing() -> None:
    with pytest.raises(TypeError, match="list"):
        _speedups.row_socket_frames((Row(0, "a", "{}"),), "")
    with pytest.raises(TypeError, match="tuple"):
        _speedups.row_socket_frames([Row(0, "a", "{}"), ["x"]], "")
    with pytest.raises(TypeError, match="str"):
        _speedups.row_socket_frames([(0, "a", b"{}")], "")
    with pytest.raises(ValueError, match="JSON object"):
        _speedups.row_socket_frames([(0, "a", "")], "}")
    with pytest.raises(ValueError, match="JSON object"):
        _speedups.row_socket_frames([(0, "a", "{}é")], "}")
    data = "{" + "é" * 50 + "}"
    suffix = ', "stream_id": "é"}'
    rows = [Row(i, "response.output_text.delta", data) for i in range(3)]
    before = sys.getrefcount(data), sys.getrefcount(suffix)
    for _ in range(100):
        _speedups.row_socket_frames(rows, suffix)
        with pytest.raises(UnicodeEncodeError):
            _speedups.row_socket_frames([*rows, Row(3, "t", "\ud800")], suffix)
    assert (sys.getrefcount(data), sys.getrefcount(suffix)) == before


def test_event_text_keeps_a_lone_surrogate_as_dumps_does() -> None:
    event = ResponseTextDeltaEvent(
        sequence_number=0, item_id="msg_1", output_index=0, content_index=0, delta="a\ud800"
    )
    assert event_text(event) == _wire.dumps(event)
    assert "\ud800" in event_text(event)


def test_event_text_is_dumps_for_every_golden_event() -> None:
    goldens = sorted(Path(__file__).resolve().parents[2].glob("specs/traces/*.golden.jsonl"))
    assert goldens
    for path in goldens:
        for line in path.read_text(encoding="utf-8").splitlines():
            event = _wire.loads(line)
            assert event_text(event) == _wire.dumps(event) == line, path.name


@compiled
def test_compiled_frame_hands_a_delta_with_logprobs_to_python() -> None:
    event = ResponseTextDeltaEvent(
        sequence_number=3,
        item_id="msg_1",
        output_index=0,
        content_index=0,
        delta="Hi",
        logprobs=(TextLogprob(token="Hi", logprob=-0.5),),
    )
    frame = _speedups.sse_event(event)
    assert frame == _wire.sse_event(event)
    assert b'"logprob":-0.5' in frame
    line = _speedups.json_line(event)
    assert line == _wire.json_line(event)
    assert b'"logprob":-0.5' in line


@compiled
def test_compiled_frame_of_a_lone_surrogate_raises_as_python_does() -> None:
    event = ResponseTextDeltaEvent(
        sequence_number=0, item_id="msg_1", output_index=0, content_index=0, delta="\ud800"
    )
    with pytest.raises(UnicodeEncodeError):
        _wire.sse_event(event)
    with pytest.raises(UnicodeEncodeError):
        _speedups.sse_event(event)
    with pytest.raises(UnicodeEncodeError):
        _wire.json_line(event)
    with pytest.raises(UnicodeEncodeError):
        _speedups.json_line(event)


@compiled
def test_compiled_frame_leaks_no_references() -> None:
    event = ResponseTextDeltaEvent(
        sequence_number=7, item_id="msg_1", output_index=0, content_index=0, delta="café 🎉"
    )
    watched = [event.item_id, event.delta, event.logprobs, event]
    before = [sys.getrefcount(value) for value in watched]
    created = _events.ResponseCreatedEvent(sequence_number=0, response=new_response())
    watched += [created, created.response]
    _speedups.event_rows([event, created], Row, _wire.dumps)  # what `dumps` caches, once
    # No collection inside: one would free earlier tests' garbage that holds the shared `()`.
    gc.collect()
    gc.disable()
    try:
        before = [sys.getrefcount(value) for value in watched]
        for _round in range(2000):
            _speedups.sse_event(event)
            _speedups.json_line(event)
            _speedups.event_rows([event, created], Row, _wire.dumps)
        assert [sys.getrefcount(value) for value in watched] == before
    finally:
        gc.enable()


@compiled
def test_compiled_step_keeps_the_text_rope_out_of_the_garbage_collector() -> None:
    """Regression: CPython reaches a rope newest node first and untracked one node per
    collection, so every collection walked the whole answer (half the cost of a step)."""
    tokens = harmony_encoding().encode(
        "<|channel|>final<|message|>" + "naïve café 🎉 " * 300, allowed_special="all"
    )
    state, _ = start(GRAMMAR, new_response())
    for token in tokens:
        state, _ = _speedups.step(state, token)
    nodes = []
    rope = state.open.text
    while rope is not None:
        nodes.append(rope)
        rope = rope[0]
    assert len(nodes) > 500
    assert not any(gc.is_tracked(node) for node in nodes)


@compiled
def test_a_grammar_subclass_that_overrides_feed_is_not_bypassed() -> None:
    """The compiled path copies HarmonyGrammar.feed; a subclass's own feed must still run."""
    from streamfold.statemachine import HarmonyGrammar

    class Shouting(HarmonyGrammar):
        def feed(self, state, out, token, logprob, top_logprobs):  # type: ignore[no-untyped-def]
            if state.open is not None and state.open.kind == "message":
                out.emit(
                    _events.ResponseTextDeltaEvent,
                    item_id=state.open.item_id,
                    output_index=state.open.output_index,
                    content_index=0,
                    delta="!",
                )
            return super().feed(state, out, token, logprob, top_logprobs)

    tokens = harmony_encoding().encode("<|channel|>final<|message|>Hi there", allowed_special="all")
    state, _ = start(Shouting(vocabulary=GRAMMAR.vocabulary), new_response())
    deltas = []
    for token in tokens:
        state, events = _speedups.step(state, token)
        deltas += [e.delta for e in events if e.type == "response.output_text.delta"]
    assert deltas.count("!") == len(tokens) - 3
