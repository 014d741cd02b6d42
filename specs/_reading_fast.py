"""The fast paths of reading a stream (issue 16: `check` as fast as `replay`).

Each decoder here takes a block of plain input whole and returns its events, or None for
anything it does not read exactly as the general path (`_reading.py`: json, the SSE parser)
would; the general path then reads that block and gives its messages. A block of JSON lines or
of SSE frames exactly as servers write them (`event: T`, `data: {...}`, a blank line) is
decoded by `orjson` where it is installed, one call per event; JSON lines that orjson does not
take are first tried by one scan of the text (json's own scanner). So the fast paths give only
events the general path would give (tests/specs/test_reading_blocks.py and
test_reading_fast_path.py hold the two equal over generated and mutated input, with the fast
paths switched off here).
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable
from typing import Any

_orjson_loads: Callable[[bytes], Any] | None
try:
    from orjson import loads as _orjson_loads
except ImportError:  # an optional speed-up (CPython only); json reads the same, slower
    _orjson_loads = None

__all__ = ["fast_json_lines", "json_lines", "plain_sse", "same_types"]

_TYPE = operator.itemgetter("type")
# The fast path for JSON lines: one JSON value, then spaces and at least one line break.
# The C scanner json.loads itself uses (typeshed does not declare the attribute).
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_BETWEEN = re.compile(r"[ \t]*(?:\r\n|\r|\n)[ \t\r\n]*")
# orjson reads an integer past 64 bits as a float where json keeps an int (a verdict on R2):
# a block with a run of 19 digits anywhere takes the general path. (Found by mapping digits to
# "0" and all else to "."; a regex took a second per 30 MB.)
_DIGITS_ONLY = bytes(48 if 48 <= b <= 57 else 46 for b in range(256))
_LONG_DIGITS = b"0" * 19
# orjson reads 1024 levels of nesting, json only what Python's recursion limit leaves (the
# general path's "nested too deeply"): a line that may hold 500 levels takes the general path.
_DEEP = 500
_OPEN_RUN = b"[" * _DEEP
_OPENERS = bytes.maketrans(b"{", b"[")
_NEITHER_OPENER_NOR_LF = bytes(b for b in range(256) if b not in b"[{\n")


def same_types(names: str, events: list[Any]) -> bool:
    """Whether each `event: T` line names its event's `type` (then R24 has nothing to say),
    compared as two joined strings: equal with as many lines, no type can hold an LF."""
    try:
        types = "\n".join(map(_TYPE, events))
    except (KeyError, TypeError):  # not an object, no type, not a string: judged one by one
        return False
    return names.replace("\nevent: ", "\n")[7:] == types


def fast_json_lines(block: bytes) -> list[Any] | None:
    """The events of a block of plain JSON lines, one orjson call per line; None for anything
    orjson does not read exactly as json would (the general path then reads the block)."""
    if _orjson_loads is None:
        return None
    if b"\r" in block or _LONG_DIGITS in block.translate(_DIGITS_ONLY):
        return None  # a CR breaks lines for the general path, and orjson would skip it
    if _maybe_deep(block):
        return None
    lines = block.split(b"\n")
    try:
        return [_orjson_loads(line) for line in lines if line and not line.isspace()]
    except ValueError:  # not JSON, a lone surrogate, NaN, 1e400, a BOM: the general path says
        return None


def _maybe_deep(block: bytes) -> bool:
    """Whether a line may nest `_DEEP` levels: has as many `[` and `{`. Counted in C: the
    block cut down to its openers (as `[`) and line ends, then searched for a run."""
    return _OPEN_RUN in block.translate(_OPENERS, _NEITHER_OPENER_NOR_LF)


def plain_sse(block: bytes) -> tuple[str, list[Any]] | None:
    """The `event: ...` lines (joined by LF) and the events of a block of plain frames
    (`event: T`, `data: {...}`, blank line, LF only), or None: the general path (the SSE parser)
    then reads the block."""
    if _orjson_loads is None or not block.endswith(b"\n\n"):
        return None
    if b"\r" in block or _LONG_DIGITS in block.translate(_DIGITS_ONLY):
        return None
    lines = block.split(b"\n")
    del lines[-1]  # after the last LF
    if len(lines) % 3 or lines[2::3].count(b"") != len(lines) // 3:
        return None
    # Every frame's first line starts `event: ` and its second `data: `. With the blank lines
    # where they are, that is counted in C rather than checked line by line: the first lines
    # joined by LF start `event: ` and hold `\nevent: ` once per later frame (a line holds no
    # LF, so each find starts a line), and in the block only a data line can start `\ndata: `.
    frames = len(lines) // 3
    first = b"\n".join(lines[0::3])
    if not first.startswith(b"event: ") or first.count(b"\nevent: ") != frames - 1:
        return None
    if block.count(b"\ndata: ") != frames:
        return None
    data = lines[1::3]
    # Only a data line is decoded, and nesting `_DEEP` deep takes as many bytes.
    if max(map(len, data)) > _DEEP and _maybe_deep(block):
        return None
    try:
        return first.decode(), [_orjson_loads(line[6:]) for line in data]
    except ValueError:  # not UTF-8, not JSON, `[DONE]`: the general path says what
        return None


def json_lines(text: str) -> list[Any] | None:
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
