"""Trace reading's fast path for plain chunk lines reads exactly what the general path reads.

`parse_trace` skips `json.loads` and the field checks for lines shaped exactly like
`{"token_ids":[1,2]}` (benchmarks/bench_cli.py measures why). The invariant pinned here: with
or without the fast path, any input gives the same `Trace`, or the same error naming the same
line. The reference is the general path alone (the fast path's pattern patched to match
nothing).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamfold.engines import Trace, TraceFormatError, _trace, parse_trace, read_trace

TRACES = Path(__file__).resolve().parents[2] / "specs" / "traces"
HEADER = (
    '{"trace":1,"grammar":"harmony","encoding":"o200k_harmony","response_id":"r",'
    '"model":"m","created_at":1}'
)


def _general(lines: list[str]) -> Trace | str:
    saved = _trace._PLAIN_CHUNK
    _trace._PLAIN_CHUNK = re.compile(r"(?!)")  # matches nothing: every line takes json.loads
    try:
        return _outcome(lines)
    finally:
        _trace._PLAIN_CHUNK = saved


def _outcome(lines: list[str]) -> Trace | str:
    try:
        return parse_trace(lines, name="t.jsonl")
    except TraceFormatError as exc:
        return f"TraceFormatError: {exc}"


@pytest.mark.parametrize("path", sorted(TRACES.glob("*.jsonl")), ids=lambda p: p.name)
def test_every_bundled_trace_reads_the_same(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    assert _outcome(lines) == _general(lines)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"token_ids":[-1]}', 't.jsonl:3: "token_ids" must be a list of non-negative'),
        ('{"token_ids":[01]}', "t.jsonl:3: not JSON"),
        ('{"token_ids":[1,]}', "t.jsonl:3: not JSON"),
        ('{"token_ids":[true]}', 't.jsonl:3: "token_ids" must be a list of non-negative'),
        ('{"token_ids":[1.0]}', 't.jsonl:3: "token_ids" must be a list of non-negative'),
        ('{"token_ids":[1]}}', "t.jsonl:3: not JSON"),
    ],
)
def test_near_misses_keep_their_error_and_line(line: str, message: str) -> None:
    lines = [HEADER, '{"token_ids":[1]}', line, '{"finish_reason":"stop"}']
    outcome = _outcome(lines)
    assert isinstance(outcome, str) and outcome.startswith(f"TraceFormatError: {message}")
    assert outcome == _general(lines)


def test_a_plain_line_in_the_wrong_place_is_still_an_error() -> None:
    after_finish = [HEADER, '{"finish_reason":"stop"}', '{"token_ids":[1]}']
    assert _outcome(after_finish) == (
        "TraceFormatError: t.jsonl:3: nothing may follow the finish_reason line"
    )
    first = ['{"token_ids":[1]}', HEADER]
    assert "t.jsonl:1: the first line must be a header" in str(_outcome(first))


def test_repeated_lines_give_equal_chunks_in_order() -> None:
    lines = [HEADER, '{"token_ids":[5]}', '{"token_ids":[7,8]}', '{"token_ids":[5]}']
    trace = _outcome(lines)
    assert isinstance(trace, Trace)
    assert [c.token_ids for c in trace.chunks] == [(5,), (7, 8), (5,)]


_number = st.one_of(
    st.integers(min_value=0, max_value=300_000).map(str),
    st.sampled_from(["-1", "01", "00", "1.5", "1e3", "true", "null", '"1"', " 1", "", "2 "]),
)
_line = st.one_of(
    st.lists(_number, max_size=4).map(lambda ns: '{"token_ids":[' + ",".join(ns) + "]}"),
    st.lists(_number, max_size=3).map(lambda ns: '{"token_ids": [' + ", ".join(ns) + "]}"),
    st.builds(
        lambda ns, lp: f'{{"token_ids":[{",".join(ns)}],"logprobs":[{lp}]}}',
        st.lists(st.integers(0, 9).map(str), min_size=1, max_size=2),
        st.sampled_from(["-0.5", "-0.5,-1", "x"]),
    ),
    st.sampled_from(
        ['{"finish_reason":"stop"}', '{"finish_reason":"nope"}', "", "  ", "[1]", "{}", "x"]
    ),
)


@given(st.lists(_line, max_size=8), st.booleans(), st.sampled_from(["", "\n", "\r\n", " \n"]))
def test_fast_and_general_paths_agree_on_any_lines(
    lines: list[str], header: bool, end: str
) -> None:
    """Also with each line's ending as a file gives it (`read_trace` keeps the newline)."""
    lines = [line + end for line in ([HEADER, *lines] if header else lines)]
    assert _outcome(lines) == _general(lines)


def test_a_trace_file_takes_the_fast_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: `read_trace` hands lines on with their newline, which the fast path's pattern
    once refused, so every chunk line of every file went through `json.loads` (replay 3x slower
    in benchmarks/bench_cli.py, and no test noticed). Only the header and finish lines may."""
    path = tmp_path / "t.jsonl"
    path.write_text(
        HEADER + '\n{"token_ids":[5]}\n{"token_ids":[7,8]}\n{"finish_reason":"stop"}\n',
        encoding="utf-8",
    )
    decoded: list[str] = []
    real_loads = _trace.json.loads

    def loads(text: str) -> object:
        decoded.append(text)
        return real_loads(text)

    monkeypatch.setattr(_trace.json, "loads", loads)
    trace = read_trace(path)
    assert [c.token_ids for c in trace.chunks] == [(5,), (7, 8)]
    assert decoded == [HEADER + "\n", '{"finish_reason":"stop"}\n']
