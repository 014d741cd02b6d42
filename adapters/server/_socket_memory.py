"""What one WebSocket connection remembers: the conversations of its recent responses that the
store does not hold (`store: false`, and warm-ups), so `previous_response_id` can continue them.

Bounded twice: at most `count` responses, and at most `max_bytes` of their conversations' JSON
text together. Each conversation is kept as that text (what a client sent and the server
answered, one compact string: its size is its cost), and read back as items when a create
names it. The oldest go first; a conversation larger than the whole budget is not kept at all,
and a create that names it is answered `previous_response_not_found`, as it would be on another
connection (the client then sends its whole context).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["SocketMemory"]


class SocketMemory(Mapping[str, list[Any]]):
    """Response id -> its whole conversation (wire items), newest last, within both bounds."""

    def __init__(self, count: int, max_bytes: int) -> None:
        self.count = count
        self.max_bytes = max_bytes
        self.bytes = 0  # the kept conversations' text, together
        self._kept: OrderedDict[str, str] = OrderedDict()

    def __getitem__(self, response_id: str) -> list[Any]:
        items: list[Any] = json.loads(self._kept[response_id])
        return items

    def __iter__(self) -> Iterator[str]:
        return iter(self._kept)

    def __len__(self) -> int:
        return len(self._kept)

    def remember(self, response_id: str, items: list[Any]) -> None:
        """Keep `items` as `response_id`'s conversation, forgetting the oldest beyond a bound."""
        # ASCII (non-ASCII escaped), so the text's length is its size in bytes, in memory too.
        text = json.dumps(items, separators=(",", ":"))
        if len(text) > self.max_bytes:
            return  # larger than the whole budget: the client resends it
        self.forget(response_id)
        self._kept[response_id] = text
        self.bytes += len(text)
        while len(self._kept) > self.count or self.bytes > self.max_bytes:
            self.forget(next(iter(self._kept)))

    def forget(self, response_id: str) -> None:
        text = self._kept.pop(response_id, None)
        if text is not None:
            self.bytes -= len(text)
