"""`step`, `sse_event` and `json_line`, with their hot paths compiled where the C extension
was built.

`_speedups.c` holds two of them: the harmony hot path of `_reducer.step` (one token of text
inside an open item: decode, one delta event, one new item, one new state), and the SSE frame
of a plain event (a delta or progress event, `_wire.plain_plan`). Every other call it hands to
the Python function, which stays the reference. Both give equal events, states and bytes
(tests/statemachine/test_speedups.py), so which one runs changes speed only.

The extension is optional: a platform without a C compiler installs the pure-Python package,
and `STREAMFOLD_PURE_PYTHON=1` in the environment chooses the Python path even where the
extension exists (to debug, or to measure the difference).
"""

from __future__ import annotations

import json
import os  # the one environment read in statemachine/: at import, to pick an implementation
from collections.abc import Callable, Sequence, Set
from functools import partial
from operator import itemgetter
from typing import TYPE_CHECKING, Any, TypeVar

from . import _items, _wire
from ._grammar import ResponseState
from ._grammars import harmony as _harmony
from ._reducer import step as python_step
from ._wire import json_line as python_json_line
from ._wire import sse_event as python_sse_event

__all__ = [
    "ACCELERATED",
    "event_rows",
    "event_text",
    "json_line",
    "last_of_kinds",
    "row_frames",
    "row_socket_frames",
    "rows_numbered",
    "sse_event",
    "step",
    "step_ready",
]

# The fields the compiled step reads, in the order `configure` takes their positions.
_STATE_FIELDS = (
    "grammar",
    "seq",
    "open",
    "parse",
    "output_tokens",
    "reasoning_tokens",
    "finished",
)
_ITEM_FIELDS = ("kind", "item_id", "output_index", "text", "pending")
# How `_speedups_sse.c` writes a field's value (its FIELD_* constants).
_FIELD_KINDS = {"type": 0, "int": 1, "str": 2, "empty": 3}


def _frame_specs() -> dict[type, tuple[bytes, tuple[tuple[bytes, Any, int], ...]]]:
    """Each plain event's frame as `_speedups_sse.c` writes it: the head, then per field the
    bytes before its value (separator and key, or the whole `"type":"..."`), its slot
    descriptor and how to write the value."""
    specs = {}
    for cls in _wire.PLAIN_EVENTS:
        plain = _wire.plain_plan(cls)
        assert plain is not None
        event_type, plan = plain
        fields = []
        for i, (name, kind) in enumerate(plan):
            prefix = ("," if i else "") + f'"{name}":'
            if kind == "type":
                prefix += json.dumps(event_type)
            fields.append((prefix.encode(), cls.__dict__[name], _FIELD_KINDS[kind]))
        specs[cls] = (f"event: {event_type}\ndata: {{".encode(), tuple(fields))
    return specs


def _compiled() -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]] | None:
    if os.environ.get("STREAMFOLD_PURE_PYTHON"):
        return None
    try:
        from . import _speedups
    except ImportError:
        return None
    frames = _frame_specs()
    _speedups.configure_sse(python_sse_event, frames)
    json_line: Callable[..., bytes] = python_json_line
    # An extension built before json_line existed (a worktree not rebuilt since) still serves
    # step and sse_event; tests/statemachine/test_speedups.py fails on such a build in CI.
    if hasattr(_speedups, "configure_json_line"):
        # The same layouts as one JSON line: the object alone, without the SSE head.
        lines = {k: (b"{", f) for k, (_, f) in frames.items()}
        _speedups.configure_json_line(python_json_line, lines)
        json_line = _speedups.json_line
    specs = {kind: None if make is None else make.plan for kind, make in _items.DELTAS.items()}
    state_fields = ResponseState._fields
    item_fields = _items.OpenItem._fields
    _speedups.configure(
        python_step,
        ResponseState,
        _items.OpenItem,
        _harmony.HarmonyGrammar,
        _harmony.CONTENT_PHASE,
        "reasoning",
        specs,
        (*(state_fields.index(f) for f in _STATE_FIELDS), len(state_fields)),
        (*(item_fields.index(f) for f in _ITEM_FIELDS), len(item_fields)),
    )
    return _speedups.step, _speedups.sse_event, json_line


_compiled_functions = _compiled()
#: Whether `step`, `sse_event` and `json_line` run the compiled hot paths.
ACCELERATED = _compiled_functions is not None
if TYPE_CHECKING:
    step = python_step  # the same signatures, whichever runs
    sse_event = python_sse_event
    json_line: Callable[..., bytes] = python_json_line
else:
    step, sse_event, json_line = _compiled_functions or (
        python_step,
        python_sse_event,
        python_json_line,
    )


_PLAIN_EVENTS = frozenset(_wire.PLAIN_EVENTS)


def event_text(event: Any) -> str:
    """`dumps(event)`: the same text, through the compiled line writer for plain events (deltas,
    progress events) where the extension is built (about 2.5x faster than `dumps` for a delta;
    `tests/statemachine/test_speedups.py` holds its bytes equal). The server logs every event
    it sends as this text."""
    if _compiled_functions is not None and type(event) in _PLAIN_EVENTS:
        try:
            return json_line(event)[:-1].decode()
        except UnicodeEncodeError:  # a lone surrogate: `dumps` keeps it (the store refuses it)
            pass
    return _wire.dumps(event)


_Row = TypeVar("_Row", bound=tuple[Any, ...])


def _python_event_rows(events: Sequence[Any], row_type: type[_Row]) -> list[_Row]:
    return [tuple.__new__(row_type, (e.sequence_number, e.type, event_text(e))) for e in events]


def _extension(name: str) -> Any:
    """The built extension's function `name`, or None: the Python path runs, or the build
    predates the function (a worktree not rebuilt since; CI's build has them all, see
    `test_ci_builds_the_extension`). Its writers are configured by `_compiled` above."""
    if _compiled_functions is None:
        return None
    from . import _speedups

    return getattr(_speedups, name, None)


_compiled_rows = _extension("event_rows")


#: `event_rows(events, row_type)`: `[row_type((e.sequence_number, e.type, event_text(e)))]`, in
#: C where the extension is built (the per-event Python of that list costs as much as writing
#: a delta's text). `row_type` is a NamedTuple of three fields; the server's log records.
event_rows: Callable[[Sequence[Any], type[_Row]], list[_Row]] = (
    _python_event_rows
    if _compiled_rows is None
    else lambda events, row_type: _compiled_rows(events, row_type, _wire.dumps)
)


#: `step_ready(state, chunks, start, pending) -> (state, stop)`, compiled, or None: steps
#: `chunks[start:]` while each is one plain text token (no logprobs, no finish reason), adding
#: their events to `pending`, and stops at the first chunk it leaves to its caller (to step the
#: general way: `step_chunk`, or `step` for a token that is not text). The same states and
#: events as `step` per chunk, without a Python call per token.
step_ready: Callable[[Any, list[Any], int, list[Any]], tuple[Any, int]] | None = _extension(
    "step_ready"
)


def _python_row_frames(rows: list[Any]) -> bytes:
    return "".join([f"event: {r[1]}\ndata: {r[2]}\n\n" for r in rows]).encode()


#: `row_frames(rows) -> bytes`: the SSE frames (`event: T\ndata: D\n\n`) of rows of
#: (sequence number, type, data), as `event_rows` makes them, in one bytes object; compiled
#: where the extension is built (one copy of each text instead of a Python f-string per event).
#: Nothing is checked: the rows are the server's own records, whose JSON is one line.
row_frames: Callable[[list[Any]], bytes] = _extension("row_frames") or _python_row_frames


def _socket_header(size: int) -> bytes:
    if size < 126:
        return bytes((0x81, size))
    if size < 65536:
        return bytes((0x81, 126)) + size.to_bytes(2, "big")
    return bytes((0x81, 127)) + size.to_bytes(8, "big")


def _python_row_socket_frames(rows: list[Any], suffix: str) -> bytes:
    frames: list[bytes] = []
    for row in rows:
        data = row[2]
        if suffix:
            if not data.endswith("}"):
                raise ValueError(
                    "row_socket_frames: with a suffix, each row's data must be a JSON object "
                    "(end with '}')"
                )
            data = data[:-1] + suffix
        payload = data.encode()
        frames += (_socket_header(len(payload)), payload)
    return b"".join(frames)


#: `row_socket_frames(rows, suffix) -> bytes`: the WebSocket frames of rows of (sequence number,
#: type, data), one unmasked final text frame per row (RFC 6455: a server's frames are not
#: masked), in one bytes object for one write; with a non-empty `suffix`, each data's last
#: character (its JSON object's closing brace) is replaced by it (`, "stream_id": ...}`).
#: Compiled where the extension is built: a frame's header is 2 to 10 bytes, and building it
#: through a WebSocket library's frame object cost more than the event's JSON.
row_socket_frames: Callable[[list[Any], str], bytes] = (
    _extension("row_socket_frames") or _python_row_socket_frames
)


_row_number = itemgetter(0)
_row_type = itemgetter(1)


def _python_rows_numbered(rows: Sequence[Any], first: int) -> bool:
    return list(map(_row_number, rows)) == list(range(first, first + len(rows)))


def _python_last_of_kinds(rows: Sequence[Any], kinds: Set[str]) -> int:
    if kinds.isdisjoint(map(_row_type, rows)):
        return -1
    return next(i for i in range(len(rows) - 1, -1, -1) if rows[i][1] in kinds)


_compiled_numbered = _extension("rows_numbered")
_compiled_last_of_kinds = _extension("last_of_kinds")

#: `rows_numbered(rows, first) -> bool`: whether the rows' sequence numbers (`row[0]`) are
#: `first, first + 1, ...` with no gap; `last_of_kinds(rows, kinds) -> int`: the index of the
#: last row whose type (`row[1]`) is in `kinds`, or -1. The stores check every batch they log
#: with both (is it the log's continuation, does it change the response's lifecycle); compiled
#: where the extension is built, one pass without a Python call per row (the Python scans cost
#: about 0.1 us a row).
rows_numbered: Callable[[Sequence[Any], int], bool] = (
    _python_rows_numbered
    if _compiled_numbered is None
    else partial(_compiled_numbered, _python_rows_numbered)
)
last_of_kinds: Callable[[Sequence[Any], Set[str]], int] = (
    _python_last_of_kinds
    if _compiled_last_of_kinds is None
    else partial(_compiled_last_of_kinds, _python_last_of_kinds)
)
