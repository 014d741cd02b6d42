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

Speed (issue 16: `check` as fast as `replay`). The input is read in blocks of whole lines, about
a megabyte each. A block of plain input, JSON lines or SSE frames exactly as servers write them
(`event: T`, `data: {...}`, a blank line), is decoded by the fast paths (`_reading_fast.py`:
`orjson` where it is installed, one call per event); every other block, and any block they
refuse, takes the general path here and its messages. So the fast paths give only events the
general path would give (tests/specs/test_reading_blocks.py holds the two equal over generated
and mutated input).
"""

from __future__ import annotations

import io
import itertools
import json
import re
from collections.abc import Iterable, Iterator
from typing import IO, Any

import attrs

from streamfold.statemachine import StreamfoldError
from streamfold.statemachine._sse import SSEParser

from . import _reading_fast
from ._checker import Checker
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
#: The input is read in blocks of about this many bytes, cut after a line end.
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
    """One pass over the input: the events, and what the framing showed on the way.

    `blocks` are the input cut after line ends (only the last may end inside a line)."""

    blocks: Iterator[bytes]
    max_bytes: int | None = None  # of a JSON array stream, which is read whole
    framing: str = ""
    count: int = 0
    violations: list[Violation] = attrs.Factory(list)
    truncated: bool = False

    def events(self) -> Iterator[Any]:
        for batch in self.batches():
            yield from batch

    def batches(self) -> Iterator[list[Any]]:
        """The events in batches (a block's, or one), each batch counted before it is handed
        on: the framing rules' positions (`self.count`) are those of the events."""
        head: list[bytes] = []
        first = None
        for block in self.blocks:
            head.append(block)
            first = _first_line(block)
            if first is not None:
                break
        if first is None:
            raise UnreadableStreamError(
                "the input is empty; give a stream recorded as SSE "
                "(`event:`/`data:` lines) or as JSON lines"
            )
        blocks = itertools.chain(head, self.blocks)
        if _SSE_LINE.match(first):
            self.framing = "sse"
            found = self._sse(blocks)
        elif first.lstrip().startswith("["):
            found = self._json(blocks)
        else:
            self.framing = "jsonl"
            found = self._lines_of_json(blocks)
        for batch in found:
            if batch:
                if self.count == 0:
                    _not_a_stream(batch[0])
                self.count += len(batch)
                yield batch

    def _json(self, blocks: Iterable[bytes]) -> Iterator[list[Any]]:
        """One JSON array of events (it must be read whole), or JSON lines after all."""
        data = b""
        for raw in blocks:
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
            yield whole
            return
        self.framing = "jsonl"
        yield from self._lines_of_json([data])

    def _lines_of_json(self, blocks: Iterable[bytes]) -> Iterator[list[Any]]:
        """JSON lines, a block of lines at a time."""
        number = 0  # lines before the block
        for block in blocks:
            fast = _reading_fast.fast_json_lines(block)
            if fast is not None:
                yield fast
                number += block.count(b"\n")  # no CR in a fast block: LF ends every line
                continue
            text = _decode_lines(block, number)
            yield _parse_json_lines(text, number)
            number += _count_lines(text)

    def _sse(self, blocks: Iterable[bytes]) -> Iterator[list[Any]]:
        parser = SSEParser()
        fed = False  # whether the parser has seen the stream's start (where a BOM is dropped)
        between = True  # whether the blocks so far ended between two events
        number = 0
        for block in itertools.chain(_cut_after_events(blocks), [None]):
            plain = _reading_fast.plain_sse(block) if between and block is not None else None
            if plain is not None:
                if not fed:  # a comment: the parser is past the start, and nothing else
                    parser.feed(b":\n")
                    fed = True
                names, events = plain
                number += len(events)
                if _reading_fast.same_types(names, events):
                    yield events  # no `event:` field differs from its type (R24)
                    continue
                for name, event in zip(names.split("\n"), events, strict=True):
                    self._event_field(name[7:] or None, event)
                    yield [event]
                continue
            if block is None:
                messages = parser.close()
            else:
                messages, fed = parser.feed(block), True
                between = block.endswith(b"\n\n")  # the blank line dispatched the last event
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
                event = _loads(message.data, f"SSE event #{number}", what="carries data that is")
                number += 1
                self._event_field(message.event, event)
                yield [event]
        self.truncated = parser.truncated
        if number == 0:
            raise UnreadableStreamError(
                "no complete SSE event in the input (an event ends with a blank line)"
            )

    def _event_field(self, name: str | None, event: Any) -> None:
        """R24: the SSE `event:` field names the data's type."""
        etype = event.get("type") if isinstance(event, dict) else None
        if name is not None and isinstance(etype, str) and name != etype:
            seq = event.get("sequence_number")
            self.violations.append(
                Violation(
                    position=self.count,
                    sequence_number=seq if type(seq) is int else None,
                    event_type=etype,
                    rule="R24",
                    message=f"SSE `event: {name}` but the data's type is {etype!r}",
                )
            )


def _cut_after_events(blocks: Iterable[bytes]) -> Iterator[bytes]:
    """SSE blocks re-cut after their last blank line (an event's end), the rest carried into
    the next block, so that whole blocks of events can take the fast path; a block without a
    blank line goes on whole (the carry stays under two blocks)."""
    carry = b""
    for block in blocks:
        block = carry + block if carry else block
        cut = block.rfind(b"\n\n") + 2
        if cut < 2:
            carry = b""
            yield block
            continue
        carry = block[cut:]
        yield block[:cut]
    if carry:
        yield carry


def _decode_lines(block: bytes, before: int) -> str:
    """A block of JSON lines as text (a leading BOM dropped); `before` lines came earlier."""
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = block.rfind(b"\n", 0, exc.start) + 1
        where = before + _count_lines(block[:start].decode("utf-8")) + 1
        raise UnreadableStreamError(
            f"line {where} is not UTF-8 ({exc.reason} at byte {exc.start - start}); JSON lines "
            "must be UTF-8"
        ) from exc
    return text.lstrip("\ufeff") if before == 0 else text


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
    fast = _reading_fast.json_lines(text)
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


def _first_line(block: bytes) -> str | None:
    """The block's first line that is not blank, if any (a BOM starting a line is dropped)."""
    for raw in block.split(b"\n"):
        text = raw.decode("utf-8", errors="replace").lstrip("\ufeff")
        first = next((line for line in _LINE_END.split(text) if line.strip()), None)
        if first is not None:
            return first
    return None


def _blocks(file: IO[bytes], max_line_bytes: int | None) -> Iterator[bytes]:
    """The input in blocks of about `_BATCH` bytes, each cut after a line end (the input's last
    line may have none). A line longer than `max_line_bytes` raises `UnreadableStreamError`
    once the lines before it are handed on, as reading line by line would."""
    rest = b""
    before = 0  # line ends before `rest`
    while True:
        chunk = file.read(_BATCH)
        data = rest + chunk if rest else chunk
        cut = data.rfind(b"\n") + 1 if chunk else len(data)
        block, rest = data[:cut], data[cut:]
        if max_line_bytes is not None:
            long = _long_line(block, max_line_bytes)
            if long is None and len(rest) > max_line_bytes:
                long = len(block)  # the line being read is too long already
            if long is not None:
                if long:
                    yield block[:long]
                number = before + block.count(b"\n", 0, long) + 1
                raise UnreadableStreamError(
                    f"line {number} is longer than {max_line_bytes} bytes; a stream's lines are "
                    "single events"
                )
        if block:
            before += block.count(b"\n")
            yield block
        if not chunk:
            return


def _long_line(block: bytes, limit: int) -> int | None:
    """Where the block's first line longer than `limit` bytes (its LF not counted) starts."""
    if len(block) <= limit:
        return None
    start = 0
    while start < len(block):
        end = block.find(b"\n", start)
        end = len(block) if end < 0 else end
        if end - start > limit:
            return start
        start = end + 1
    return None


def _check(reader: _Reader, keep: list[Any] | None) -> tuple[StreamReading, list[Violation]]:
    checker = Checker()
    for batch in reader.batches():
        if keep is not None:
            keep.extend(batch)
        checker.events(batch)
    found = checker.finish()
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
    reader = _Reader(blocks=_blocks(io.BytesIO(data), None))
    events = tuple(reader.events())
    return StreamReading(
        events=events,
        framing=reader.framing,
        violations=tuple(reader.violations),
        truncated=reader.truncated,
    )


def check_bytes(data: bytes) -> tuple[StreamReading, list[Violation]]:
    """Read a recorded stream and check it: framing violations and `check`'s, in order."""
    return _check(_Reader(blocks=_blocks(io.BytesIO(data), None)), keep=[])


def check_file(
    file: IO[bytes], *, max_line_bytes: int = MAX_LINE_BYTES
) -> tuple[StreamReading, list[Violation]]:
    """`check_bytes` for a file or pipe of any length, read a block of lines at a time without
    keeping the events; a line longer than `max_line_bytes` raises `UnreadableStreamError`."""
    reader = _Reader(blocks=_blocks(file, max_line_bytes), max_bytes=max_line_bytes)
    return _check(reader, keep=None)
