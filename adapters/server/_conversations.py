"""The Conversations API (`/v1/conversations`), and `conversation` on `POST /v1/responses`.

A conversation is an ordered list of items kept by the store (`_conversation_store.py`). Items
come in as the Responses API's input items (`{"role": "user", "content": "hi"}`) or as output
items dumped whole with their ids and status (the Agents SDK's `OpenAIConversationsSession`
sends those), and are kept as the API lists them: each with an id (the one it came with, else a
new one), messages with typed content parts and a status. Items of the input kinds are read as a
request's input is, so a bad one is a 400 naming `items[i]...` and a later response can always
replay it; items of the other kinds of openai `ConversationItem` (`compaction`, `program`,
hosted tool calls, ...) are kept as they came. A response replays the input kinds only.

Lists follow the API's cursor pages: `limit` 1-100 (default 20), `order` `desc` by default,
`after` an item id, and `has_more` exact (the store looks for one more item; smg guessed it
from `len == limit`, and ogx hard-coded it false, which broke the Agents SDK's paginator).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from ..protocol import (
    INCLUDABLE,
    INPUT_ITEM_PREFIX,
    INPUT_ITEM_TYPES,
    LOGPROBS_INCLUDE,
    RequestError,
    parse_item,
)
from ._conversation_store import ConversationStore, ItemRow, StoredConversation
from ._limits import shown
from ._references import resolve_references
from ._store import EventStore

__all__ = [
    "CONVERSATION_ITEM_TYPES",
    "DEFAULT_LIMIT",
    "MAX_ITEMS",
    "Conversations",
    "conversation_id_of",
    "conversation_store",
    "new_conversation_id",
    "replayed_items",
    "stored_items",
]

#: Items per create call, as the API allows.
MAX_ITEMS = 20
DEFAULT_LIMIT = 20
MAX_LIMIT = 100
#: Every `type` of openai `ConversationItem` (openai-python 3.57): kept whatever the kind.
CONVERSATION_ITEM_TYPES = frozenset(
    {
        "additional_tools",
        "apply_patch_call",
        "apply_patch_call_output",
        "code_interpreter_call",
        "compaction",
        "computer_call",
        "computer_call_output",
        "configuration_update",
        "custom_tool_call",
        "custom_tool_call_output",
        "file_search_call",
        "function_call",
        "function_call_output",
        "image_generation_call",
        "local_shell_call",
        "local_shell_call_output",
        "mcp_approval_request",
        "mcp_approval_response",
        "mcp_call",
        "mcp_list_tools",
        "message",
        "program",
        "program_output",
        "reasoning",
        "shell_call",
        "shell_call_output",
        "tool_search_call",
        "tool_search_output",
        "web_search_call",
    }
)
_ITEM_CALL_TYPES = frozenset(
    {"function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output"}
)


def new_conversation_id() -> str:
    return f"conv_{secrets.token_hex(24)}"


def _new_item_id(kind: str) -> str:
    return f"{INPUT_ITEM_PREFIX.get(kind, 'item')}_{secrets.token_hex(16)}"


def _parts(content: Any, part_type: str) -> list[Any]:
    parts = [{"type": part_type, "text": content}] if isinstance(content, str) else list(content)
    return [
        {**part, "annotations": part.get("annotations") or []}
        if isinstance(part, dict) and part.get("type") == "output_text"
        else part
        for part in parts
    ]


def _as_listed(item: Mapping[str, Any], item_id: str) -> dict[str, Any]:
    """An item as the API lists it: everything it came with, its id, and for a message its
    type, status and typed parts (`"hi"` -> `[{"type": "input_text", "text": "hi"}]`)."""
    listed = {**item, "id": item_id}
    kind = item.get("type", "message")
    if kind == "message":
        part_type = "output_text" if item.get("role") == "assistant" else "input_text"
        listed.update(
            type="message",
            status=item.get("status") or "completed",
            content=_parts(item.get("content", ""), part_type),
        )
    elif kind in _ITEM_CALL_TYPES:
        listed["status"] = item.get("status") or "completed"
    return listed


def stored_items(items: Sequence[Any], ids: Sequence[str]) -> list[ItemRow]:
    """The rows a store keeps for checked `items`, with their `ids`."""
    return [(i, json.dumps(_as_listed(item, i))) for item, i in zip(items, ids, strict=True)]


async def check_items(store: EventStore, value: Any, param: str = "items") -> list[ItemRow]:
    """The body's `items` as rows to store; a `RequestError` naming the first bad one."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise RequestError(f"{param} must be an array of items", param=param)
    if len(value) > MAX_ITEMS:
        raise RequestError(
            f"{param} may hold at most {MAX_ITEMS} items, got {len(value)}", param=param
        )
    try:
        resolved = await resolve_references(store, {"input": value})
    except RequestError as exc:  # names `input[i].id`: the body's field is `items`
        where = (exc.param or "").replace("input", param, 1)
        raise RequestError(exc.message, param=where or param) from exc
    items: list[dict[str, Any]] = resolved["input"]
    ids: list[str] = []
    for position, item in enumerate(items):
        where = f"{param}[{position}]"
        if not isinstance(item, Mapping):
            raise RequestError(f"{where} must be an object", param=where)
        kind = item.get("type", "message")
        if kind in INPUT_ITEM_TYPES:
            parse_item(item, param=where)
        elif kind not in CONVERSATION_ITEM_TYPES:
            raise RequestError(
                f"unsupported item type {shown(str(kind))!r}; a conversation holds the items "
                f"of openai ConversationItem: {', '.join(sorted(CONVERSATION_ITEM_TYPES))}",
                param=f"{where}.type",
            )
        item_id = item.get("id")
        if item_id is None:
            item_id = _new_item_id(str(kind))
        elif not isinstance(item_id, str) or not item_id:
            raise RequestError(f"{where}.id must be a non-empty string", param=f"{where}.id")
        if item_id in ids:
            raise RequestError(
                f"item id {shown(item_id)!r} appears twice in {param}", param=f"{where}.id"
            )
        ids.append(item_id)
    return stored_items(items, ids)


def _metadata(value: Any) -> dict[str, str]:
    """`metadata` as the API bounds it: up to 16 pairs, keys <= 64 and values <= 512 chars."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise RequestError(
            "metadata must be an object of string keys and string values", param="metadata"
        )
    if len(value) > 16:
        raise RequestError(
            f"metadata may hold at most 16 pairs, got {len(value)}", param="metadata"
        )
    for key, text in value.items():
        if len(key) > 64:
            raise RequestError(
                f"metadata keys may be at most 64 characters, got one of {len(key)}",
                param=f"metadata.{shown(key)}",
            )
        if len(text) > 512:
            raise RequestError(
                f"metadata values may be at most 512 characters; {shown(key)!r} has {len(text)}",
                param=f"metadata.{shown(key)}",
            )
    return dict(value)


def _include(values: Sequence[str]) -> frozenset[str]:
    unknown = [v for v in values if v not in INCLUDABLE]
    if unknown:
        raise RequestError(
            f"unknown include value {shown(unknown[0])!r}; expected any of "
            + ", ".join(sorted(INCLUDABLE)),
            param="include",
        )
    return frozenset(values)


def _shown_item(text: str, include: frozenset[str]) -> Any:
    """A stored item as listed: logprobs on output text only when `include` asks for them."""
    item = json.loads(text)
    if LOGPROBS_INCLUDE not in include and isinstance(item, dict):
        content = item.get("content")
        if isinstance(content, list) and any(
            isinstance(p, dict) and "logprobs" in p for p in content
        ):
            item["content"] = [
                {k: v for k, v in p.items() if k != "logprobs"} if isinstance(p, dict) else p
                for p in content
            ]
    return item


def conversation_store(store: EventStore) -> ConversationStore:
    if not isinstance(store, ConversationStore):
        raise RequestError(
            "this server's event store keeps no conversations (it implements no "
            "ConversationStore); use the built-in SQLite or memory store",
            status=404,
            code="not_found",
        )
    return store


def conversation_id_of(body: Mapping[str, Any]) -> str | None:
    """`conversation` of a `POST /v1/responses` body: an id, or `{"id": ...}`; None if absent."""
    value = body.get("conversation")
    if value is None:
        return None
    if isinstance(value, Mapping):
        value = value.get("id")
    if not isinstance(value, str) or not value:
        raise RequestError(
            'conversation must be a conversation id or an object {"id": ...}',
            param="conversation",
        )
    return value


async def replayed_items(
    store: EventStore, conversation_id: str, owner: str | None
) -> list[dict[str, Any]]:
    """The items a response with `conversation` sees before its input, oldest first: every
    item of an input kind, reasoning included (smg dropped reasoning on replay; the chat format
    decides what of it the prompt shows). A 404 naming `conversation` for an unknown id."""
    conversations = conversation_store(store)
    found = await conversations.get_conversation(conversation_id)
    if found is None or found.owner != owner:
        raise _not_found(conversation_id, "conversation")
    items: list[dict[str, Any]] = []
    after = None
    while True:
        page = await conversations.conversation_items(
            conversation_id, after=after, limit=MAX_LIMIT, order="asc"
        )
        if page is None:  # an item deleted between two pages: read it again from the start
            items, after = [], None
            continue
        loaded = [json.loads(text) for text in page.items]
        items += [i for i in loaded if isinstance(i, dict) and i.get("type") in INPUT_ITEM_TYPES]
        if not page.has_more or not loaded:
            return items
        after = loaded[-1]["id"]


def _not_found(conversation_id: str, param: str) -> RequestError:
    return RequestError(
        f"Conversation with id '{shown(conversation_id)}' not found.",
        param=param,
        status=404,
        code="not_found",
    )


class Conversations:
    """The endpoints' logic over the store: values in, wire dicts out. `owner` is the hash
    of the caller's API key (None without keys): a conversation is found only by its owner."""

    def __init__(self, store: EventStore, clock: Callable[[], float]) -> None:
        self.store = store
        self.clock = clock

    async def _get(self, conversation_id: str, owner: str | None) -> StoredConversation:
        found = await conversation_store(self.store).get_conversation(conversation_id)
        if found is None or found.owner != owner:
            raise _not_found(conversation_id, "conversation_id")
        return found

    async def create(self, body: Any, owner: str | None) -> dict[str, Any]:
        if not isinstance(body, Mapping):
            raise RequestError("the request body must be a JSON object")
        metadata = _metadata(body.get("metadata"))
        rows = await check_items(self.store, body.get("items"))
        conversation = StoredConversation(
            id=new_conversation_id(), created_at=int(self.clock()), metadata=metadata, owner=owner
        )
        await conversation_store(self.store).create_conversation(conversation, rows)
        return conversation.wire()

    async def retrieve(self, conversation_id: str, owner: str | None) -> dict[str, Any]:
        return (await self._get(conversation_id, owner)).wire()

    async def update(self, conversation_id: str, body: Any, owner: str | None) -> dict[str, Any]:
        if not isinstance(body, Mapping) or "metadata" not in body:
            raise RequestError("metadata is required", param="metadata")
        metadata = _metadata(body["metadata"])
        await self._get(conversation_id, owner)
        updated = await conversation_store(self.store).update_conversation(
            conversation_id, metadata
        )
        if updated is None:
            raise _not_found(conversation_id, "conversation_id")
        return updated.wire()

    async def delete(self, conversation_id: str, owner: str | None) -> dict[str, Any]:
        await self._get(conversation_id, owner)
        await conversation_store(self.store).delete_conversation(conversation_id)
        return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}

    async def add_items(
        self, conversation_id: str, body: Any, include: Sequence[str], owner: str | None
    ) -> dict[str, Any]:
        shown_include = _include(include)
        await self._get(conversation_id, owner)
        if not isinstance(body, Mapping) or "items" not in body:
            raise RequestError("items is required", param="items")
        rows = await check_items(self.store, body["items"])
        if not rows:
            raise RequestError("items must hold at least one item", param="items")
        taken = await conversation_store(self.store).add_conversation_items(conversation_id, rows)
        if taken:
            position = [item_id for item_id, _ in rows].index(taken[0])
            raise RequestError(
                f"item {shown(taken[0])!r} is already in conversation {conversation_id}",
                param=f"items[{position}].id",
                code="item_already_in_conversation",
            )
        data = [_shown_item(text, shown_include) for _, text in rows]
        return {
            "object": "list",
            "data": data,
            "first_id": rows[0][0],
            "last_id": rows[-1][0],
            "has_more": False,
        }

    async def list_items(
        self,
        conversation_id: str,
        *,
        after: str | None,
        limit: int,
        order: Literal["asc", "desc"],
        include: Sequence[str],
        owner: str | None,
    ) -> dict[str, Any]:
        if not 1 <= limit <= MAX_LIMIT:
            raise RequestError(
                f"limit must be between 1 and {MAX_LIMIT}, got {limit}", param="limit"
            )
        shown_include = _include(include)
        await self._get(conversation_id, owner)
        page = await conversation_store(self.store).conversation_items(
            conversation_id, after=after, limit=limit, order=order
        )
        if page is None:
            raise RequestError(
                f"no item with id {shown(str(after))!r} in conversation {conversation_id}",
                param="after",
            )
        data = [_shown_item(text, shown_include) for text in page.items]
        return {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": page.has_more,
        }

    async def retrieve_item(
        self, conversation_id: str, item_id: str, include: Sequence[str], owner: str | None
    ) -> Any:
        shown_include = _include(include)
        await self._get(conversation_id, owner)
        text = await conversation_store(self.store).conversation_item(conversation_id, item_id)
        if text is None:
            raise _item_not_found(conversation_id, item_id)
        return _shown_item(text, shown_include)

    async def delete_item(
        self, conversation_id: str, item_id: str, owner: str | None
    ) -> dict[str, Any]:
        """Returns the conversation (as the API does), read after the delete."""
        await self._get(conversation_id, owner)
        conversations = conversation_store(self.store)
        if not await conversations.delete_conversation_item(conversation_id, item_id):
            raise _item_not_found(conversation_id, item_id)
        return (await self._get(conversation_id, owner)).wire()


def _item_not_found(conversation_id: str, item_id: str) -> RequestError:
    return RequestError(
        f"Item with id '{shown(item_id)}' not found in conversation {conversation_id}.",
        param="item_id",
        status=404,
        code="not_found",
    )
