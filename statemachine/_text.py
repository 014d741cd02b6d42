"""Text that grows by sharing: a persistent rope, and UTF-8 decoding that waits for whole
characters.

A rope is `None` (empty) or a pair `(earlier_rope, piece)`. Appending builds one pair and
shares everything before it, so each token costs O(1) however long the answer grows; the text
is joined once, when its item closes.
"""

from __future__ import annotations

import codecs
from typing import Any

__all__ = ["Rope", "decode_utf8", "flush_utf8", "rope_items", "rope_text"]

Rope = tuple[Any, Any] | None

_decode = codecs.utf_8_decode


def rope_items(rope: Rope) -> list[Any]:
    """The pieces of a rope, oldest first."""
    pieces = []
    while rope is not None:
        rope, piece = rope
        pieces.append(piece)
    pieces.reverse()
    return pieces


def rope_text(rope: Rope) -> str:
    return "".join(rope_items(rope))


def decode_utf8(pending: bytes, data: bytes) -> tuple[str, bytes]:
    """Decode `pending + data` up to the last whole character; return (text, still pending).

    An incomplete character at the end waits for the next token's bytes; bytes that can never
    be valid become U+FFFD at once, so one bad byte never stalls the rest of the message.
    """
    if pending:
        data = pending + data
    text, used = _decode(data, "replace", False)
    return text, data[used:]


def flush_utf8(pending: bytes) -> str:
    """What is left of an unfinished character when its item closes (U+FFFD, if anything)."""
    return _decode(pending, "replace", True)[0] if pending else ""
