"""Reading a stream in blocks, with orjson on plain blocks, reads what the general path reads.

`specs/_reading.py` reads the input in blocks of whole lines and decodes a block of plain JSON
lines or plain SSE frames with orjson (`specs/_reading_fast.py`, issue 16); everything else goes
through the general path (json, the SSE parser). Invariants: on any input, in any block size,
the outcome (events, framing, framing violations, truncation, or the error and its message) is
the same as the general path's alone (orjson switched off); a line longer than the limit is
refused with the same line number as reading line by line (the reader this replaced, kept here
as reference); and plain input does take the fast path.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamfold.specs import _reading, _reading_fast
from streamfold.specs._reading import StreamReading, UnreadableStreamError, check_file, read_stream

GOLDENS = sorted((Path(__file__).resolve().parents[2] / "specs" / "traces").glob("*.golden.jsonl"))
needs_orjson = pytest.mark.skipif(
    _reading_fast._orjson_loads is None, reason="orjson not installed"
)


def _outcome(data: bytes) -> StreamReading | str:
    try:
        return read_stream(data)
    except UnreadableStreamError as exc:
        return f"UnreadableStreamError: {exc}"


def _general(data: bytes) -> StreamReading | str:
    """The outcome with orjson switched off where the fast paths read it (`setattr` raises if
    the name moved, so the comparison cannot turn into fast against fast)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_reading_fast, "_orjson_loads", None)
        return _outcome(data)


@contextlib.contextmanager
def _blocks_of(size: int) -> Iterator[None]:
    """Blocks of `size` bytes: small ones put block ends everywhere (hypothesis runs many
    examples per test, so no function-scoped monkeypatch)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_reading, "_BATCH", size)
        yield


def _sse(events: list[dict[str, Any]]) -> bytes:
    return b"".join(
        f"event: {ev['type']}\ndata: {json.dumps(ev, ensure_ascii=False)}\n\n".encode()
        for ev in events
    )


@needs_orjson
@pytest.mark.parametrize("path", GOLDENS, ids=lambda p: p.name)
def test_goldens_take_the_fast_path_and_read_the_same(path: Path) -> None:
    data = path.read_bytes()
    assert _reading_fast.fast_json_lines(data) is not None
    events = list(read_stream(data).events)
    sse = _sse(events)
    assert _reading_fast.plain_sse(sse) is not None
    assert _outcome(data) == _general(data)
    assert _outcome(sse) == _general(sse)
    assert list(read_stream(sse).events) == events


_EVENT = st.fixed_dictionaries(
    {"type": st.sampled_from(["response.output_text.delta", "response.created"])},
    optional={
        "sequence_number": st.integers(-1, 3) | st.sampled_from([2**63, 2**64, -(2**63) - 1]),
        "delta": st.text(max_size=4),
        "x": st.floats(allow_nan=False, allow_infinity=False) | st.none(),
    },
)
# JSON texts json reads and orjson may not (or reads differently), and near misses.
_ODD = st.sampled_from(
    [
        "NaN",
        "1e400",
        "-1e400",
        '"\\ud800"',
        "12345678901234567890123",
        '{"sequence_number": 18446744073709551616}',
        "[" * 600 + "]" * 600,
        "[" * 60 + "]" * 60,
        "[DONE]",
        '{"a":1} {"b":2}',
        "[1,",
        "2]",
        "{}",
        "7",
        '"x"',
        "\ufeff{}",
        '{"type":"x"}\r{"type":"y"}',
    ]
)
_JSON_TEXT = _EVENT.map(lambda ev: json.dumps(ev, ensure_ascii=False)) | _ODD
_LINE_END = st.sampled_from(["\n", "\n", "\n", "\r\n", "\r", " \n", "\n\n", "\n\x0b\n"])
_BATCHES = st.sampled_from([8, 64, 300, 2**20])


@needs_orjson
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_JSON_TEXT, _LINE_END), max_size=8), _BATCHES, st.booleans())
def test_json_lines_read_the_same(lines: list[tuple[str, str]], batch: int, bad: bool) -> None:
    data = "".join(text + end for text, end in lines).encode()
    if bad and data:
        data = data[: len(data) // 2] + b"\xff" + data[len(data) // 2 :]
    with _blocks_of(batch):
        assert _outcome(data) == _general(data)


_FRAME = st.one_of(
    st.builds(lambda ev: f"event: {ev['type']}\ndata: {json.dumps(ev)}\n\n", _EVENT),
    st.builds(lambda ev: f"event: other\ndata: {json.dumps(ev)}\n\n", _EVENT),  # R24
    st.builds(lambda ev: f"data: {json.dumps(ev)}\n\n", _EVENT),
    st.builds(lambda ev: f"event:{ev['type']}\ndata:{json.dumps(ev)}\n\n", _EVENT),
    st.builds(lambda ev: f"event: {ev['type']}\r\ndata: {json.dumps(ev)}\r\n\r\n", _EVENT),
    st.builds(lambda text: f"event: x\ndata: {text}\n\n", _ODD),
    st.sampled_from(
        [
            ": keep-alive\n\n",
            "data: [DONE]\n\n",
            'id: 7\nevent: response.created\ndata: {"type":"response.created"}\n\n',
            'data: {"type":\ndata: "x"}\n\n',
            'event: \ndata: {"type":"x"}\n\n',
            "\n",
            'event: a\ndata: {"type":"a"}\n',  # no blank line yet
            '\ufeffevent: b\ndata: {"type":"c"}\n\n',  # a BOM is dropped at the start only
        ]
    ),
)


@needs_orjson
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_FRAME, min_size=1, max_size=8), _BATCHES, st.sampled_from(["", "\ufeff", "x"]))
def test_sse_reads_the_same(frames: list[str], batch: int, lead: str) -> None:
    body = "".join(frames)
    data = (lead + body).encode() if lead != "x" else body.encode() + b"\xff\n\n"
    with _blocks_of(batch):
        assert _outcome(data) == _general(data)


def _line_by_line(file: IO[bytes], max_line_bytes: int) -> Iterator[bytes]:
    """The reader `_blocks` replaced (specs/_reading.py before issue 16): the reference."""
    number = 0
    while raw := file.readline(max_line_bytes + 1):
        number += 1
        if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
            raise UnreadableStreamError(
                f"line {number} is longer than {max_line_bytes} bytes; a stream's lines are "
                "single events"
            )
        yield raw


def _read_all(pieces: Iterator[bytes]) -> tuple[bytes, str | None]:
    out = b""
    try:
        for piece in pieces:
            out += piece
    except UnreadableStreamError as exc:
        return out, str(exc)
    return out, None


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([b"a", b"bb", b"\n", b"\r", b"x" * 7]), max_size=40),
    st.integers(1, 9),
    st.sampled_from([1, 3, 8, 64]),
)
def test_long_lines_are_refused_as_line_by_line_did(
    pieces: list[bytes], limit: int, batch: int
) -> None:
    data = b"".join(pieces)
    expected = _read_all(_line_by_line(io.BytesIO(data), limit))
    with _blocks_of(batch):
        assert _read_all(_reading._blocks(io.BytesIO(data), limit)) == expected


def test_check_file_names_the_long_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_reading, "_BATCH", 16)
    data = b'{"type":"a"}\n' * 5 + b"x" * 40 + b"\n"
    with pytest.raises(UnreadableStreamError, match=r"^line 6 is longer than 32 bytes"):
        check_file(io.BytesIO(data), max_line_bytes=32)


def test_the_fast_paths_refuse_what_orjson_reads_differently() -> None:
    """Regression guards for the differences found while writing the fast path: orjson reads
    an integer past 64 bits as a float, and refuses 1e400, NaN and lone surrogates that json
    reads; a CR is a line break to the general path only."""
    assert _reading_fast.fast_json_lines(b'{"n":18446744073709551616}\n') is None
    assert _reading_fast.fast_json_lines(b'{"a":\r1}\n') is None
    assert _reading_fast.fast_json_lines(b"1e400\n") is None
    assert _reading_fast.fast_json_lines(b"[" * 600 + b"]" * 600 + b"\n") is None
    frame = b'event: t\ndata: {"n":-9223372036854775809}\n\n'
    assert _reading_fast.plain_sse(frame) is None
    big = read_stream(b'{"type":"x","sequence_number":18446744073709551616}\n').events
    assert big[0]["sequence_number"] == 2**64 and type(big[0]["sequence_number"]) is int


@needs_orjson
def test_a_bom_after_fast_blocks_is_not_dropped() -> None:
    """The SSE parser drops a BOM at the stream's start only: after fast blocks it never saw,
    it must still know the start is past (a BOM later makes `\\ufeffevent` an unknown field)."""
    plain = b'event: a\ndata: {"type":"a"}\n\n'
    data = plain * 2 + '\ufeffevent: b\ndata: {"type":"c"}\n\n'.encode()
    with _blocks_of(len(plain) * 2):  # the second block starts with the BOM
        assert _reading_fast.plain_sse(plain * 2) is not None
        fast = _outcome(data)
        assert fast == _general(data)
        assert isinstance(fast, StreamReading) and fast.violations == ()


# -- SSE frames at block boundaries (issue 16: the fast path must read them as the parser does)


def _frame(event: dict[str, Any], name: str | None = None, end: str = "\n") -> bytes:
    name = event["type"] if name is None else name
    return f"event: {name}{end}data: {json.dumps(event)}{end}{end}".encode()


def _stream(n: int = 6) -> list[dict[str, Any]]:
    """Events of plain shapes (what the fast path takes), `n` of them."""
    return [
        {"type": "response.output_text.delta", "sequence_number": i, "delta": "ab" * (i % 3)}
        for i in range(n)
    ]


def _same_at_every_block_size(data: bytes, frame: int) -> StreamReading | str:
    """The outcome, the same as the general path's in blocks of every size up to a few frames
    of `frame` bytes (a block end at every byte of a frame), and in one block."""
    whole = _general(data)
    for size in [*range(1, 4 * frame), 2**20]:
        with _blocks_of(size):
            assert _outcome(data) == whole, size
    return whole


@needs_orjson
@pytest.mark.parametrize(
    "case",
    ["plain", "crlf", "crlf frame inside", "no blank line at the end", "cut inside data"],
)
def test_sse_reads_the_same_at_every_block_boundary(case: str) -> None:
    """A block end anywhere in a frame (in `event:`, in `data:`, between the two LFs of the
    blank line), CRLF frames among LF ones, and a last frame without its blank line (dropped,
    and `truncated`, as SSE clients drop it): the same events and framing as the parser's."""
    events = _stream()
    frames = [_frame(ev) for ev in events]
    if case == "crlf":
        frames = [_frame(ev, end="\r\n") for ev in events]
    elif case == "crlf frame inside":
        frames[2] = _frame(events[2], end="\r\n")
    elif case == "no blank line at the end":
        frames[-1] = frames[-1][:-1]
    elif case == "cut inside data":
        frames[-1] = frames[-1][: len(frames[-1]) // 2]
    whole = _same_at_every_block_size(b"".join(frames), len(frames[0]))
    assert isinstance(whole, StreamReading) and whole.framing == "sse"
    complete = len(events) - (case in ("no blank line at the end", "cut inside data"))
    assert list(whole.events) == events[:complete]
    assert whole.truncated == (complete < len(events))


@needs_orjson
@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        # R24: the `event:` name is not the data's type; named at the event's position.
        (b'event: response.created\ndata: {"type":"response.output_text.delta"}\n\n', "R24"),
        # No data line: no event (SSE clients dispatch nothing), the rest is read.
        (b"event: response.output_text.delta\n\n", "skipped"),
        # Bad JSON: an error naming the event's number in the stream.
        (b'event: response.output_text.delta\ndata: {"type":\n\n', "SSE event #3"),
        (b"event: response.output_text.delta\ndata: [DONE]\n\n", "R25"),
        # No blank line before the next frame: one event, whose data is two lines of JSON.
        (b'event: response.output_text.delta\ndata: {"type":"x"}\n', "SSE event #3"),
        # Not blank where the blank line goes: the same, past a comment.
        (b'event: response.output_text.delta\ndata: {"type":"x"}\n: c\n', "SSE event #3"),
    ],
    ids=[
        "event-type mismatch",
        "missing data line",
        "bad JSON",
        "DONE sentinel",
        "no blank line",
        "comment for blank line",
    ],
)
def test_a_malformed_frame_among_plain_ones_is_reported_as_by_the_parser(
    bad: bytes, expected: str
) -> None:
    """One malformed frame after three plain ones, at every block boundary: reported exactly
    as the general path reports it (rule, position, message), the frames around it read."""
    frames = [_frame(ev) for ev in _stream()]
    whole = _same_at_every_block_size(b"".join([*frames[:3], bad, *frames[3:]]), len(bad))
    if expected == "SSE event #3":
        assert isinstance(whole, str) and "SSE event #3 carries data that is not JSON" in whole
        return
    assert isinstance(whole, StreamReading)
    assert whole.event_count == len(frames) + (expected == "R24")
    if expected == "skipped":
        assert whole.violations == ()
    else:
        assert [(v.rule, v.position) for v in whole.violations] == [(expected, 3)]


@needs_orjson
@pytest.mark.parametrize(
    "block",
    [
        # A first line that is not `event:` (a comment, an id), three lines all the same.
        b": keep-alive\ndata: {}\n\n",
        b"id: 1\ndata: {}\n\n",
        # A second line that is not `data:`, whose text past six bytes is JSON.
        b'event: a\nretry:{"type":"a"}\n\n',
        b'event: a\nid: 1,{"type":"a"}\n\n',
        # Nested past `_DEEP` levels: json may refuse what orjson reads.
        b"event: a\ndata: " + b"[" * 600 + b"]" * 600 + b"\n\n",
    ],
    ids=["comment", "id", "retry", "id-json", "deep"],
)
def test_the_sse_fast_path_refuses_frames_that_are_not_plain(block: bytes) -> None:
    """Guards of `_plain_sse`, each a frame the parser reads otherwise than `event: T`,
    `data: JSON`, blank line: after a plain frame, the block goes to the general path."""
    plain = _frame(_stream(1)[0])
    assert _reading_fast.plain_sse(plain) is not None
    assert _reading_fast.plain_sse(plain + block) is None
    assert _reading_fast.plain_sse(block + plain) is None
    data = plain + block
    assert _outcome(data) == _general(data)


@needs_orjson
def test_plain_frames_take_the_fast_path_in_blocks_of_any_size() -> None:
    """Blocks cut inside a frame are cut again after their last whole frame, the rest carried
    to the next block, so every event of plain input is decoded by the fast path (in blocks of
    two frames or more: a block then holds a frame's end)."""
    events = _stream(12)
    frames = [_frame(ev) for ev in events]
    data = b"".join(frames)
    real = _reading_fast.plain_sse
    fast: list[Any] = []

    def spy(block: bytes) -> tuple[str, list[Any]] | None:
        plain = real(block)
        fast.extend(plain[1] if plain is not None else [])
        return plain

    for size in range(2 * len(frames[0]), 4 * len(frames[0])):
        fast.clear()
        with _blocks_of(size), pytest.MonkeyPatch.context() as patch:
            patch.setattr(_reading_fast, "plain_sse", spy)
            assert list(read_stream(data).events) == events
        assert fast == events, size
