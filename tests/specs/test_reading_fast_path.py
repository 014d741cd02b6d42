"""Reading JSON lines by one scan of the text gives what reading line by line gives.

`read_stream` first tries `_reading_fast.json_lines` (one JSON value per line, read without
splitting the text; benchmarks/bench_cli.py measures why) and falls back to the line-by-line
reading for anything else. The invariant: on any input, the outcome (the events, or the error
and its message naming the line) is the same as with the line-by-line reading alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamfold.specs import _reading_fast
from streamfold.specs._reading import StreamReading, UnreadableStreamError, read_stream

GOLDENS = sorted((Path(__file__).resolve().parents[2] / "specs" / "traces").glob("*.golden.jsonl"))


def _outcome(data: bytes) -> StreamReading | str:
    try:
        return read_stream(data)
    except UnreadableStreamError as exc:
        return f"UnreadableStreamError: {exc}"


def _line_by_line(data: bytes, monkeypatch: pytest.MonkeyPatch) -> StreamReading | str:
    with monkeypatch.context() as patch:
        patch.setattr(_reading_fast, "json_lines", lambda text: None)
        return _outcome(data)


@pytest.mark.parametrize("path", GOLDENS, ids=lambda p: p.name)
def test_goldens_read_the_same(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = path.read_bytes()
    assert _reading_fast.json_lines(data.decode()) is not None  # the fast path is taken
    assert _outcome(data) == _line_by_line(data, monkeypatch)


_value = st.one_of(
    st.dictionaries(
        st.sampled_from(["type", "delta", "n"]), st.integers() | st.text(max_size=5)
    ).map(json.dumps),
    st.sampled_from(['{"a":1} {"b":2}', '{"a":', "1}", "[1,", "2]", "nul", "NaN", '"x"', "7"]),
    st.sampled_from(["", " ", "\t", "\x0c", "\u00a0", "{}", "[]"]),
)
_gap = st.sampled_from(["\n", "\r\n", "\r", " \n", "\n\n", "\t\r\n  ", "\n\x0b"])


@given(st.lists(st.tuples(_value, _gap), max_size=6), st.sampled_from(["", "\n", "  "]))
def test_fast_and_line_by_line_agree(parts: list[tuple[str, str]], tail: str) -> None:
    text = "".join(value + gap for value, gap in parts) + tail
    data = text.encode()
    fast = _outcome(data)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_reading_fast, "json_lines", lambda text: None)
        slow = _outcome(data)
    assert fast == slow
