"""Reading a recorded stream: SSE as a server sends it, or JSON lines.

The framing is detected from the first non-blank line: an SSE field (`event:`, `data:`, `id:`,
`retry:`) or comment (`:`) means SSE; anything else is read as JSON, either one event per line
or one JSON array of events. Framing-level rules (R24, R25) are judged here, because `check`
only ever sees the parsed events.

`check_file` reads a file or pipe line by line and hands each event to the checker as it is
read, so memory follows the checker's state, not the input's length; a line longer than
`MAX_LINE_BYTES` is an error (issue 14: `check` on endless input read 23 GB). Input that is not
a stream at all gets an error that says what it is: an error answer from a server, or a
streamfold trace that `streamfold replay` turns into a stream.
"""

from __future__ import annotations

import io
import itertools
import json
import re
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

import attrs

from streamfold.statemachine import StreamfoldError
from streamfold.statemachine._sse import SSEParser

from ._checker import check
from ._violation import Violation

__all__ = [
    "MAX_LINE_BYTES",
    "StreamReading",
    "UnreadableStreamError",
    "check_bytes",
    "check_file",
    "read_stream",
]

_SSE_LINE = re.compile(r"(event|data|id|retry)(:|$)|:")
_LINE_END = re.compile(r"\r\n|\r|\n")
# The fast path for JSON lines: one JSON value, then spaces and at least one line break.
# The C scanner json.loads itself uses (typeshed does not declare the attribute).
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_BETWEEN = re.compile(r"[ \t]*(?:\r\n|\r|\n)[ \t\r\n]*")
#: Lines of JSON are read in batches of about this many characters, each in one scan.
_BATCH = 2**20
#: The longest line read (an SSE `data:` line holds one event; `response.completed` carries the
#: whole output): longer is an error, not a memory hog.
MAX_LINE_BYTES = 64 * 2**20


class UnreadableStreamError(StreamfoldError, ValueError):
    """The input is neither JSON lines nor an SSE stream of JSON events."""


@attrs.frozen(kw_only=True)
class StreamReading:
    """The events read from the input, how they were framed, and framing-level violations.

    `check_file` keeps no events (`events` is empty); `event_count` says how many were read."""

    events: tuple[Any, ...]
    framing: str  # "sse", "jsonl" or "json"
    violations: tuple[Violation, ...] = ()
    truncated: bool = False  # SSE only: the input ended inside an event, which was dropped
    event_count: int = attrs.field(
        default=attrs.Factory(lambda self: len(self.events), takes_self=True)
    )


@attrs.define
class _Reader:
    """One pass over the input's lines: the events, and what the framing showed on the way."""

    lines: Iterator[bytes]
    max_bytes: int | None = None  # of a JSON array stream, which is read whole
    framing: str = ""
    count: int = 0
    violations: list[Violation] = attrs.Factory(list)
    truncated: bool = False

    def events(self) -> Iterator[Any]:
        head: list[bytes] = []
        first = None
        for raw in self.lines:
            head.append(raw)
            text = raw.decode("utf-8", errors="replace").lstrip("\ufeff")
            first = next((line for line in _LINE_END.split(text) if line.strip()), None)
            if first is not None:
                break
        if first is None:
            raise UnreadableStreamError(
                "the input is empty; give a stream recorded as SSE "
                "(`event:`/`data:` lines) or as JSON lines"
            )
        lines = itertools.chain(head, self.lines)
        if _SSE_LINE.match(first):
            self.framing = "sse"
            found = self._sse(lines)
        elif first.lstrip().startswith("["):
            found = self._json(lines)
        else:
            self.framing = "jsonl"
            found = self._lines_of_json(lines)
        for event in found:
            if self.count == 0:
                _not_a_stream(event)
            self.count += 1
            yield event

    def _json(self, lines: Iterable[bytes]) -> Iterator[Any]:
        """One JSON array of events (it must be read whole), or JSON lines after all."""
        data = b""
        for raw in lines:
            data += raw
            if self.max_bytes is not None and len(data) > self.max_bytes:
                raise UnreadableStreamError(
                    f"a JSON array stream longer than {self.max_bytes} bytes; give the events "
                    "as JSON lines, one per line, to check a stream of any length"
                )
        try:
            whole = _loads(data.decode("utf-8").lstrip("\ufeff"), "the input")
        except (UnicodeDecodeError, UnreadableStreamError):
            whole = None  # maybe JSON lines whose first event is a list; read line by line
        if isinstance(whole, list):
            self.framing = "json"
            yield from whole
            return
        self.framing = "jsonl"
        yield from self._lines_of_json(io.BytesIO(data))

    def _lines_of_json(self, lines: Iterable[bytes]) -> Iterator[Any]:
        """JSON lines, decoded line by line and parsed a batch of lines at a time."""
        number = 0  # lines before the batch
        batch: list[str] = []
        size = 0
        for raw in itertools.chain(lines, [None]):
            if raw is not None:
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    where = number + sum(_count_lines(t) for t in batch) + 1
                    raise UnreadableStreamError(
                        f"line {where} is not UTF-8 ({exc.reason} at byte {exc.start}); JSON "
                        "lines must be UTF-8"
                    ) from exc
                batch.append(text.lstrip("\ufeff") if number == 0 and not batch else text)
                size += len(text)
                if size < _BATCH:
                    continue
            text, batch, size = "".join(batch), [], 0
            yield from _parse_json_lines(text, number)
            number += _count_lines(text)

    def _sse(self, lines: Iterable[bytes]) -> Iterator[Any]:
        parser = SSEParser()
        number = 0
        for raw in itertools.chain(lines, [None]):
            messages = parser.close() if raw is None else parser.feed(raw)
            for message in messages:
                if message.data.strip() == "[DONE]":
                    self.violations.append(
                        Violation(
                            position=self.count,
                            sequence_number=None,
                            event_type=None,
                            rule="R25",
                            message=f"SSE event #{number} is `data: [DONE]`; the Responses API "
                            "sends no sentinel: its terminal event ends the stream (the "
                            "openai SDK skips it, other clients fail to parse it)",
                        )
                    )
                    number += 1
                    continue
                event = _loads(message.data, f"SSE event #{number}", what="carries data that")
                number += 1
                etype = event.get("type") if isinstance(event, dict) else None
                if message.event is not None and isinstance(etype, str) and message.event != etype:
                    seq = event.get("sequence_number")
                    self.violations.append(
                        Violation(
                            position=self.count,
                            sequence_number=seq if type(seq) is int else None,
                            event_type=etype,
                            rule="R24",
                            message=f"SSE `event: {message.event}` but the data's type is "
                            f"{etype!r}",
                        )
                    )
                yield event
        self.truncated = parser.truncated
        if number == 0:
            raise UnreadableStreamError(
                "no complete SSE event in the input (an event ends with a blank line)"
            )


def _loads(text: str, where: str, *, what: str = "is", hint: str = "") -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        column = f" at column {exc.colno}" if hint else ""
        raise UnreadableStreamError(
            f"{where} {what} not JSON ({exc.msg}{column}): {text[:60]!r}"
            + (f"; {hint}" if hint else "")
        ) from exc
    except RecursionError:
        raise UnreadableStreamError(f"{where} is JSON nested too deeply to be an event") from None


def _count_lines(text: str) -> int:
    return text.count("\n") + text.count("\r") - text.count("\r\n")


def _parse_json_lines(text: str, before: int) -> list[Any]:
    """The events of whole lines of JSON; `before` lines came earlier (for the messages)."""
    fast = _json_lines(text)
    if fast is not None:
        return fast
    events = []
    end = 2 if text.endswith("\r\n") else 1 if text.endswith(("\n", "\r")) else 0
    for number, line in enumerate(_LINE_END.split(text[: len(text) - end]), start=before + 1):
        if line.strip():
            events.append(
                _loads(
                    line, f"line {number}", hint="give one JSON event per line, or an SSE stream"
                )
            )
    return events


def _json_lines(text: str) -> list[Any] | None:
    """JSON lines read by scanning the text once instead of splitting it and calling
    `json.loads` per line; None for anything but plain lines of one JSON value each (blank
    lines allowed), so that every other input, good or bad, gets the line-by-line reading and
    its messages. Where both succeed they give the same events."""
    events: list[Any] = []
    pos, end = len(text) - len(text.lstrip(" \t\r\n")), len(text)
    between = _BETWEEN.match
    while pos < end:
        start = pos
        try:
            value, pos = _SCAN(text, pos)
        except (StopIteration, ValueError, RecursionError):  # the slow path says why
            return None
        if text.find("\n", start, pos) >= 0 or text.find("\r", start, pos) >= 0:
            return None  # a value over several lines is not JSON lines: the slow path says so
        events.append(value)
        gap = between(text, pos)
        if gap is None:
            return events if not text[pos:].strip(" \t") else None
        pos = gap.end()
    return events


def _not_a_stream(first: Any) -> None:
    """Say what the input is when its first object is plainly not an event."""
    if not isinstance(first, dict) or "type" in first:
        return
    error = first.get("error")
    if isinstance(error, dict):
        code = error.get("code") or error.get("type") or "error"
        raise UnreadableStreamError(
            f"the server answered an error, not a stream: {code}: {error.get('message', '')}"
        )
    if first.get("trace") == 1:
        raise UnreadableStreamError(
            "this is a streamfold trace (recorded token ids), not an event stream; replay it "
            "into one first: streamfold replay TRACE --format sse | streamfold check -"
        )


def _bounded_lines(file: IO[bytes], max_line_bytes: int) -> Iterator[bytes]:
    number = 0
    while raw := file.readline(max_line_bytes + 1):
        number += 1
        if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
            raise UnreadableStreamError(
                f"line {number} is longer than {max_line_bytes} bytes; a stream's lines are "
                "single events"
            )
        yield raw


def _kept(events: Iterator[Any], keep: list[Any]) -> Iterator[Any]:
    for event in events:
        keep.append(event)
        yield event


def _check(reader: _Reader, keep: list[Any] | None) -> tuple[StreamReading, list[Violation]]:
    events = reader.events()
    found = check(events if keep is None else _kept(events, keep))
    reading = StreamReading(
        events=tuple(keep or ()),
        framing=reader.framing,
        violations=tuple(reader.violations),
        truncated=reader.truncated,
        event_count=reader.count,
    )
    return reading, sorted([*reading.violations, *found], key=lambda v: v.position)


def read_stream(data: bytes) -> StreamReading:
    """Parse `data` into events; raise `UnreadableStreamError` when it is not a stream."""
    reader = _Reader(lines=iter(io.BytesIO(data)))
    events = tuple(reader.events())
    return StreamReading(
        events=events,
        framing=reader.framing,
        violations=tuple(reader.violations),
        truncated=reader.truncated,
    )


def check_bytes(data: bytes) -> tuple[StreamReading, list[Violation]]:
    """Read a recorded stream and check it: framing violations and `check`'s, in order."""
    return _check(_Reader(lines=iter(io.BytesIO(data))), keep=[])


def check_file(
    file: IO[bytes], *, max_line_bytes: int = MAX_LINE_BYTES
) -> tuple[StreamReading, list[Violation]]:
    """`check_bytes` for a file or pipe of any length, read line by line without keeping the
    events; a line longer than `max_line_bytes` raises `UnreadableStreamError`."""
    reader = _Reader(lines=_bounded_lines(file, max_line_bytes), max_bytes=max_line_bytes)
    return _check(reader, keep=None)
