"""What a store keeps for the Conversations API: conversations, and their items in order.

A conversation is its id, creation time, metadata and owner (the hash of the API key that
made it, once keys exist), and an ordered list of items. Each item is kept as the wire JSON the
API lists it as (`ItemRow`: its id and that text), never re-read into a typed value: an item of
a type this server does not know is listed back as it came, and can never make a list fail
(stdapi #260: one unusual stored item made every later list a 500).

A response created with `conversation` appends its input and its output to the conversation
when it ends completed or incomplete, in the store transaction that writes its terminal event
(`bind_conversation`): a conversation never holds the input of a response whose end is not
stored, nor misses the output of one that is. A response that fails or is cancelled appends
nothing.

`MemoryConversations` is the in-memory half of `MemoryEventStore`; `SQLiteEventStore` keeps
them in its file (`_sqlite_conversations.py`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import attrs

__all__ = [
    "ConversationStore",
    "ItemPage",
    "ItemRow",
    "MemoryConversations",
    "StoredConversation",
    "ended_items",
]

#: An item of a conversation: its id, and its wire JSON text.
ItemRow = tuple[str, str]


@attrs.frozen(kw_only=True)
class StoredConversation:
    id: str
    created_at: int
    metadata: dict[str, str] = attrs.Factory(dict)
    owner: str | None = None  # the hash of the API key that made it (None: no keys)

    def wire(self) -> dict[str, Any]:
        """openai `Conversation`."""
        return {
            "id": self.id,
            "object": "conversation",
            "created_at": self.created_at,
            "metadata": dict(self.metadata),
        }


@attrs.frozen(kw_only=True)
class ItemPage:
    """A page of items (their JSON text, in the order asked for), and whether more follow."""

    items: list[str]
    has_more: bool


@runtime_checkable
class ConversationStore(Protocol):
    """Conversations and their items (see the module docstring)."""

    async def create_conversation(
        self, conversation: StoredConversation, items: Sequence[ItemRow]
    ) -> None:
        """Keep a new conversation with its first items (ids distinct: the caller checks)."""

    async def get_conversation(self, conversation_id: str) -> StoredConversation | None: ...

    async def update_conversation(
        self, conversation_id: str, metadata: dict[str, str]
    ) -> StoredConversation | None:
        """Replace its metadata; None for an unknown id."""

    async def delete_conversation(self, conversation_id: str) -> bool:
        """Forget it and its items; False for an unknown id."""

    async def add_conversation_items(
        self, conversation_id: str, items: Sequence[ItemRow]
    ) -> list[str]:
        """Append every item, or none: the ids already in the conversation (then nothing is
        added), else []."""

    async def conversation_items(
        self,
        conversation_id: str,
        *,
        after: str | None,
        limit: int,
        order: Literal["asc", "desc"],
    ) -> ItemPage | None:
        """Up to `limit` items after the item `after` in `order`; None when `after` is not an
        item of the conversation. `has_more` is exact (one more item is looked for)."""

    async def conversation_item(self, conversation_id: str, item_id: str) -> str | None: ...

    async def delete_conversation_item(self, conversation_id: str, item_id: str) -> bool: ...

    async def bind_conversation(
        self, response_id: str, conversation_id: str, items: Sequence[ItemRow]
    ) -> None:
        """When `response_id`'s log ends completed or incomplete, append `items` (its input)
        and its output items to the conversation, in the transaction of that last write."""


def ended_items(event: str) -> list[ItemRow] | None:
    """The output items a response appends to its conversation, from the wire JSON of its
    terminal event; None when it ended failed or cancelled (it appends nothing)."""
    response = json.loads(event)["response"]
    if response.get("status") not in ("completed", "incomplete"):
        return None
    return [
        (item["id"], json.dumps(item))
        for item in response.get("output") or ()
        if isinstance(item, dict) and isinstance(item.get("id"), str)
    ]


class MemoryConversations:
    """Conversations in dicts (each conversation's items in insertion order)."""

    def __init__(self) -> None:
        self._conversations: dict[str, StoredConversation] = {}
        self._items: dict[str, dict[str, str]] = {}
        self._bound: dict[str, tuple[str, list[ItemRow]]] = {}

    async def create_conversation(
        self, conversation: StoredConversation, items: Sequence[ItemRow]
    ) -> None:
        self._conversations[conversation.id] = conversation
        self._items[conversation.id] = dict(items)

    async def get_conversation(self, conversation_id: str) -> StoredConversation | None:
        return self._conversations.get(conversation_id)

    async def update_conversation(
        self, conversation_id: str, metadata: dict[str, str]
    ) -> StoredConversation | None:
        old = self._conversations.get(conversation_id)
        if old is None:
            return None
        new = self._conversations[conversation_id] = attrs.evolve(old, metadata=dict(metadata))
        return new

    async def delete_conversation(self, conversation_id: str) -> bool:
        self._items.pop(conversation_id, None)
        return self._conversations.pop(conversation_id, None) is not None

    async def add_conversation_items(
        self, conversation_id: str, items: Sequence[ItemRow]
    ) -> list[str]:
        held = self._items.get(conversation_id)
        if held is None:
            return []
        taken = [item_id for item_id, _ in items if item_id in held]
        if not taken:
            held.update(items)
        return taken

    async def conversation_items(
        self,
        conversation_id: str,
        *,
        after: str | None,
        limit: int,
        order: Literal["asc", "desc"],
    ) -> ItemPage | None:
        held = self._items.get(conversation_id, {})
        ids = list(held) if order == "asc" else list(reversed(held))
        start = 0
        if after is not None:
            if after not in held:
                return None
            start = ids.index(after) + 1
        page = ids[start : start + limit + 1]
        return ItemPage(items=[held[i] for i in page[:limit]], has_more=len(page) > limit)

    async def conversation_item(self, conversation_id: str, item_id: str) -> str | None:
        return self._items.get(conversation_id, {}).get(item_id)

    async def delete_conversation_item(self, conversation_id: str, item_id: str) -> bool:
        return self._items.get(conversation_id, {}).pop(item_id, None) is not None

    async def bind_conversation(
        self, response_id: str, conversation_id: str, items: Sequence[ItemRow]
    ) -> None:
        self._bound[response_id] = conversation_id, list(items)

    def _response_ended(self, response_id: str, event: str) -> None:
        """`response_id`'s terminal event was appended (its `event`): append what it binds."""
        bound = self._bound.pop(response_id, None)
        if bound is None:
            return
        conversation_id, items = bound
        output = ended_items(event)
        held = self._items.get(conversation_id)
        if output is None or held is None:  # failed or cancelled; or the conversation is gone
            return
        for item_id, text in (*items, *output):
            held.setdefault(item_id, text)

    def _response_deleted(self, response_id: str) -> None:
        self._bound.pop(response_id, None)
