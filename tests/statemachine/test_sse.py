"""SSE framing and the incremental WHATWG parser."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai._streaming import SSEDecoder

from streamfold.statemachine._sse import (
    SSEFramingError,
    SSEMessage,
    SSEParser,
    parse_sse,
    sse_frame,
)


def feed_in_pieces(data: bytes, cuts: list[int]) -> tuple[list[SSEMessage], bool]:
    parser = SSEParser()
    messages: list[SSEMessage] = []
    start = 0
    for cut in sorted(cuts):
        messages += parser.feed(data[start:cut])
        start = cut
    messages += parser.feed(data[start:])
    messages += parser.close()
    return messages, parser.truncated


# -- framing -------------------------------------------------------------------------------


def test_frame_is_event_line_data_line_blank_line() -> None:
    frame = sse_frame("response.output_text.delta", '{"delta":"hi"}')
    assert frame == b'event: response.output_text.delta\ndata: {"delta":"hi"}\n\n'


def test_frames_parse_back_to_the_same_events() -> None:
    events = [
        {"type": "response.output_text.delta", "delta": "a\nb\r☀", "sequence_number": k}
        for k in range(3)
    ]
    body = b"".join(sse_frame(ev["type"], json.dumps(ev, ensure_ascii=False)) for ev in events)
    assert b"[DONE]" not in body
    parsed = parse_sse(body)
    assert [m.event for m in parsed] == [ev["type"] for ev in events]
    assert [json.loads(m.data) for m in parsed] == events


def test_frame_splits_a_multi_line_value_into_data_lines() -> None:
    assert sse_frame("x", "a\nb") == b"event: x\ndata: a\ndata: b\n\n"
    assert parse_sse(sse_frame("x", "a\nb")) == [SSEMessage(event="x", data="a\nb")]


@pytest.mark.parametrize(("event_type", "data"), [("", "{}"), ("a\nb", "{}"), ("x", "a\rb")])
def test_frame_rejects_what_sse_cannot_carry(event_type: str, data: str) -> None:
    with pytest.raises(SSEFramingError, match=r"json\.dumps|event type"):
        sse_frame(event_type, data)


# -- parsing -------------------------------------------------------------------------------


@pytest.mark.parametrize("eol", [b"\n", b"\r", b"\r\n"])
def test_any_line_end(eol: bytes) -> None:
    body = eol.join([b"event: e", b"data: 1", b"", b"data: 2", b"", b""])
    assert parse_sse(body) == [SSEMessage(event="e", data="1"), SSEMessage(event=None, data="2")]


def test_comments_are_ignored_and_data_lines_joined() -> None:
    body = b": keep-alive\nevent: e\ndata: a\n: inside\ndata:b\ndata\n\n"
    assert parse_sse(body) == [SSEMessage(event="e", data="a\nb\n")]


def test_only_one_leading_space_is_stripped_and_unknown_fields_ignored() -> None:
    body = b"data:  two spaces\nid: 7\nretry: 10\nfoo: bar\n\n"
    assert parse_sse(body) == [SSEMessage(event=None, data=" two spaces")]


def test_event_without_data_is_not_dispatched() -> None:
    assert parse_sse(b"event: ping\n\ndata: x\n\n") == [SSEMessage(event=None, data="x")]


def test_unterminated_final_event_is_discarded() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: 1\n\ndata: 2\n") == [SSEMessage(event=None, data="1")]
    assert parser.close() == []
    assert parser.truncated


def test_clean_end_is_not_truncated() -> None:
    parser = SSEParser()
    parser.feed(b"data: 1\n\n")
    parser.close()
    assert not parser.truncated


def test_crlf_split_between_cr_and_lf_is_one_line_end() -> None:
    # Were the LF read as a second line end, "a" would be dispatched on its own.
    messages, _ = feed_in_pieces(b"data: a\r\ndata: b\r\n\r\n", [8])
    assert messages == [SSEMessage(event=None, data="a\nb")]


def test_utf8_character_split_across_feeds() -> None:
    body = "data: ☀ é\n\n".encode()
    assert feed_in_pieces(body, list(range(1, len(body))))[0] == [
        SSEMessage(event=None, data="☀ é")
    ]


def test_leading_bom_is_dropped_even_when_split() -> None:
    body = b"\xef\xbb\xbfdata: x\n\n"
    assert feed_in_pieces(body, [1, 2])[0] == [SSEMessage(event=None, data="x")]


def test_feed_after_close_is_misuse() -> None:
    parser = SSEParser()
    parser.close()
    with pytest.raises(SSEFramingError, match="new SSEParser"):
        parser.feed(b"data: x\n\n")


# -- properties ----------------------------------------------------------------------------

_eol = st.sampled_from(["\n", "\r", "\r\n"])
_text = st.text(
    st.characters(blacklist_categories=["Cs"], blacklist_characters="\r\n"), max_size=12
)
_line = st.one_of(
    st.tuples(st.sampled_from(["event: ", "data: ", "data:", ": ", "id: ", "x: "]), _text).map(
        "".join
    ),
    st.just(""),
)
_stream_text = st.lists(st.tuples(_line, _eol).map("".join), max_size=25).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_split_gives_the_same_messages(data: st.DataObject) -> None:
    body = data.draw(st.one_of(_stream_text.map(str.encode), st.binary(max_size=80)))
    cuts = data.draw(st.lists(st.integers(0, len(body)), max_size=10))
    whole, truncated = feed_in_pieces(body, [])
    assert feed_in_pieces(body, cuts) == (whole, truncated)
    assert feed_in_pieces(body, list(range(len(body)))) == (whole, truncated)


_frame = st.tuples(
    st.lists(st.sampled_from([": ping", "event: response.x", "id: 1"]), max_size=2),
    st.lists(_text.map(lambda t: "data: " + t), min_size=1, max_size=3),
    _eol,
).map(lambda f: f[2].join([*f[0], *f[1], "", ""]))


@settings(max_examples=200, deadline=None)
@given(st.lists(_frame, max_size=6), st.lists(st.integers(0, 400), max_size=6))
def test_agrees_with_the_openai_sdk_decoder(frames: list[str], cuts: list[int]) -> None:
    body = "".join(frames).encode()
    chunks = [
        body[a:b] for a, b in zip([0, *sorted(cuts)], [*sorted(cuts), len(body)], strict=True)
    ]
    sdk = [
        SSEMessage(event=e.event or None, data=e.data)
        for e in SSEDecoder().iter_bytes(iter(chunks))
    ]
    assert feed_in_pieces(body, cuts)[0] == sdk
