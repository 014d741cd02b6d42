"""Reading a recorded stream from bytes: SSE as a server sends it, or JSON lines.

The framing is detected from the first non-blank line: an SSE field (`event:`, `data:`, `id:`,
`retry:`) or comment (`:`) means SSE; anything else is read as JSON, either one event per line
or one JSON array of events. Framing-level rules (R24, R25) are judged here, because `check`
only ever sees the parsed events.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import attrs

from streamfold.statemachine import StreamfoldError
from streamfold.statemachine._sse import SSEParser

from ._checker import check
from ._violation import Violation

__all__ = ["StreamReading", "UnreadableStreamError", "check_bytes", "read_stream"]

_SSE_LINE = re.compile(r"(event|data|id|retry)(:|$)|:")
_LINE_END = re.compile(r"\r\n|\r|\n")
# The fast path for JSON lines: one JSON value, then spaces and at least one line break.
# The C scanner json.loads itself uses (typeshed does not declare the attribute).
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_BETWEEN = re.compile(r"[ \t]*(?:\r\n|\r|\n)[ \t\r\n]*")


class UnreadableStreamError(StreamfoldError, ValueError):
    """The input is neither JSON lines nor an SSE stream of JSON events."""


@attrs.frozen(kw_only=True)
class StreamReading:
    """The events read from the input, how they were framed, and framing-level violations."""

    events: tuple[Any, ...]
    framing: str  # "sse", "jsonl" or "json"
    violations: tuple[Violation, ...] = ()
    truncated: bool = False  # SSE only: the input ended inside an event, which was dropped


def read_stream(data: bytes) -> StreamReading:
    """Parse `data` into events; raise `UnreadableStreamError` when it is not a stream."""
    first = _first_line(data)
    if first is None:
        raise UnreadableStreamError("the input is empty; give a stream recorded as SSE "
                                    "(`event:`/`data:` lines) or as JSON lines")
    if _SSE_LINE.match(first):
        return _read_sse(data)
    try:
        text = data.decode("utf-8").lstrip("\ufeff")
    except UnicodeDecodeError as exc:
        raise UnreadableStreamError(f"the input is not UTF-8 ({exc.reason} at byte "
                                    f"{exc.start}); JSON lines must be UTF-8") from exc
    if first.lstrip().startswith("["):
        try:
            whole = json.loads(text)
        except json.JSONDecodeError:
            whole = None  # maybe JSON lines whose first event is a list; read line by line
        if isinstance(whole, list):
            return StreamReading(events=tuple(whole), framing="json")
    fast = _json_lines(text)
    if fast is not None:
        return StreamReading(events=tuple(fast), framing="jsonl")
    events = []
    for number, line in enumerate(_LINE_END.split(text), start=1):
        if not line.strip():
            continue
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise UnreadableStreamError(
                f"line {number} is not JSON ({exc.msg} at column {exc.colno}): "
                f"{line[:60]!r}; give one JSON event per line, or an SSE stream"
            ) from exc
    return StreamReading(events=tuple(events), framing="jsonl")


def _json_lines(text: str) -> list[Any] | None:
    """JSON lines read by scanning the text once instead of splitting it and calling
    `json.loads` per line; None for anything but plain lines of one JSON value each (blank
    lines allowed), so that every other input, good or bad, gets the line-by-line reading and
    its messages. Where both succeed they give the same events."""
    events: list[Any] = []
    pos, end = len(text) - len(text.lstrip(" \t\r\n")), len(text)
    between = _BETWEEN.match
    while pos < end:
        try:
            value, pos = _SCAN(text, pos)
        except (StopIteration, ValueError):  # not a value here: the slow path says why
            return None
        events.append(value)
        gap = between(text, pos)
        if gap is None:
            return events if not text[pos:].strip(" \t") else None
        pos = gap.end()
    return events


def _first_line(data: bytes) -> str | None:
    """The first non-blank line, read without splitting the whole input."""
    start = 0
    while start < len(data):
        end = len(data)
        for eol in (b"\n", b"\r"):
            found = data.find(eol, start, end)
            end = found if found >= 0 else end
        line = data[start:end].decode("utf-8", errors="replace").lstrip("\ufeff")
        if line.strip():
            return line
        start = end + 1
    return None


def _read_sse(data: bytes) -> StreamReading:
    parser = SSEParser()
    messages = parser.feed(data)
    messages += parser.close()
    if not messages:
        raise UnreadableStreamError("no complete SSE event in the input (an event ends with a "
                                    "blank line)")
    events: list[Any] = []
    violations = []
    for number, message in enumerate(messages):
        if message.data.strip() == "[DONE]":
            violations.append(Violation(
                position=len(events), sequence_number=None, event_type=None, rule="R25",
                message=f"SSE event #{number} is `data: [DONE]`; the Responses API sends no "
                        "sentinel: its terminal event ends the stream (the openai SDK skips "
                        "it, other clients fail to parse it)"))
            continue
        try:
            event = json.loads(message.data)
        except json.JSONDecodeError as exc:
            raise UnreadableStreamError(
                f"SSE event #{number} carries data that is not JSON ({exc.msg}): "
                f"{message.data[:60]!r}"
            ) from exc
        etype = event.get("type") if isinstance(event, dict) else None
        if message.event is not None and isinstance(etype, str) and message.event != etype:
            seq = event.get("sequence_number")
            violations.append(Violation(
                position=len(events), sequence_number=seq if type(seq) is int else None,
                event_type=etype, rule="R24",
                message=f"SSE `event: {message.event}` but the data's type is {etype!r}"))
        events.append(event)
    return StreamReading(events=tuple(events), framing="sse", violations=tuple(violations),
                         truncated=parser.truncated)


def check_bytes(data: bytes) -> tuple[StreamReading, list[Violation]]:
    """Read a recorded stream and check it: framing violations and `check`'s, in order."""
    reading = read_stream(data)
    found = [*reading.violations, *check(reading.events)]
    return reading, sorted(found, key=lambda v: v.position)
