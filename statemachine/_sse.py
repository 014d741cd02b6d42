"""Server-sent events: framing on the way out, an incremental parser on the way in.

Pure and sans-IO, like the rest of `streamfold.statemachine`: the caller hands bytes in and
gets messages back; nothing here reads a socket.

The Responses API frames each event as `event: <type>` + `data: <json>` + a blank line, with
no `id:`/`retry:` fields and no `data: [DONE]` sentinel (the terminal lifecycle event is the
end-of-stream marker). The parser follows the WHATWG "event stream interpretation" rules, which
is what the openai SDK's decoder does too, so a stream it accepts is one the SDK accepts:

- lines end with CR, LF or CRLF, and a CRLF may be split across two `feed` calls;
- lines starting with `:` are comments (keep-alives) and are ignored;
- several `data:` lines of one event are joined with "\\n";
- an event is dispatched on a blank line; one without any `data:` line is dropped;
- bytes are decoded as UTF-8 incrementally (a character may be split across `feed` calls),
  a leading BOM is dropped, and invalid bytes become U+FFFD as the standard says;
- whatever is pending when the stream ends (an event with no closing blank line) is discarded.
"""

from __future__ import annotations

import codecs
import re

import attrs

from ._errors import StreamfoldError

__all__ = ["SSEFramingError", "SSEMessage", "SSEParser", "parse_sse", "sse_frame"]

_BOM = "\ufeff"
_LINE_END = re.compile(r"\r\n|\r|\n")


class SSEFramingError(StreamfoldError, ValueError):
    """A value cannot be written as one server-sent event, or the parser was misused."""


@attrs.frozen(kw_only=True)
class SSEMessage:
    """One dispatched event: its `event:` field (None when the event had none) and its data."""

    event: str | None
    data: str


def sse_frame(event_type: str, data_json: str) -> bytes:
    """Frame one event as `event: <type>\\ndata: <json>\\n\\n`, UTF-8 encoded.

    `data_json` is expected to be one line of JSON (`json.dumps` escapes newlines, so its output
    always is). A value with LF in it is still framed correctly, as several `data:` lines that
    a parser joins back with "\\n"; a CR cannot be represented and is rejected.
    """
    if not event_type or any(c in event_type for c in "\r\n"):
        raise SSEFramingError(
            f"event type {event_type!r} cannot be framed: it must be non-empty and contain no "
            "CR or LF; pass the event's wire `type` string"
        )
    if "\r" in data_json:
        raise SSEFramingError(
            "event data contains a raw CR, which SSE reads as a line end and cannot carry; "
            "serialise it with json.dumps, which escapes it as \\r"
        )
    data_lines = "".join(f"data: {line}\n" for line in data_json.split("\n"))
    return f"event: {event_type}\n{data_lines}\n".encode()


class SSEParser:
    """Incremental WHATWG event-stream parser: `feed(bytes) -> [SSEMessage]`, then `close()`.

    Feeding the same bytes in any split gives the same messages (tested by property).
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._line = ""  # text of the current, not yet terminated line
        self._skip_lf = False  # the previous chunk ended in CR; an LF right after it is its pair
        self._at_start = True  # a BOM is only dropped at the very start of the stream
        self._event: str | None = None
        self._data: list[str] = []
        self._has_data = False
        self._closed = False
        self.truncated = False
        """After `close()`: True when an unterminated event (or line) was discarded."""

    def feed(self, data: bytes) -> list[SSEMessage]:
        """Parse the next bytes of the stream; return the events completed by them."""
        if self._closed:
            raise SSEFramingError("feed() called after close(); create a new SSEParser per stream")
        return self._feed_text(self._decoder.decode(data))

    def close(self) -> list[SSEMessage]:
        """End the stream. Pending bytes never form an event (SSE rules), so this returns no
        messages; `truncated` tells whether anything was discarded."""
        if self._closed:
            return []
        messages = self._feed_text(self._decoder.decode(b"", final=True))
        self._closed = True
        self.truncated = bool(self._line) or self._has_data or self._event is not None
        self._line, self._data, self._has_data, self._event = "", [], False, None
        return messages

    def _feed_text(self, text: str) -> list[SSEMessage]:
        if self._at_start and text:
            self._at_start = False
            if text.startswith(_BOM):
                text = text[1:]
        messages: list[SSEMessage] = []
        start = 0
        if self._skip_lf and text:
            self._skip_lf = False
            if text[0] == "\n":
                start = 1
        for match in _LINE_END.finditer(text, start):
            self._line += text[start : match.start()]
            self._end_line(messages)
            start = match.end()
            # A CR that ends the chunk may be the first half of a CRLF split across feeds.
            self._skip_lf = match.group() == "\r" and start == len(text)
        self._line += text[start:]
        return messages

    def _end_line(self, messages: list[SSEMessage]) -> None:
        line, self._line = self._line, ""
        if not line:
            self._dispatch(messages)
            return
        if line.startswith(":"):
            return
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
            self._has_data = True
        # `id` and `retry` are legal but unused by the Responses API; unknown fields are ignored.

    def _dispatch(self, messages: list[SSEMessage]) -> None:
        if self._has_data:
            messages.append(SSEMessage(event=self._event or None, data="\n".join(self._data)))
        self._event, self._data, self._has_data = None, [], False


def parse_sse(data: bytes) -> list[SSEMessage]:
    """Parse a complete SSE body; an unterminated final event is discarded."""
    parser = SSEParser()
    messages = parser.feed(data)
    messages.extend(parser.close())
    return messages
