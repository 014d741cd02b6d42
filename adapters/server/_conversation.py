"""`previous_response_id`: a conversation continued from a stored response.

The Responses API lets a request name the response it follows instead of sending the whole
conversation again. The context is then the earlier response's own input, its output, and the
new input, in that order (`instructions` are not carried over: each request sends its own, as
the API does). The store keeps each stored response's own input once (`InputStore`): a request
that followed another is saved as `{"previous_response_id": ..., "items": [...]}` (its own items
only), any other as the JSON array of its items, so a chain of n links stores n inputs, not n
conversations (30 links of 100 KB once took 48.6 MB). A conversation is rebuilt by walking the
chain back to its start (`conversation_of`). Output items the prompt cannot show again (web
search calls, whose pages are not kept) are left out of the context; messages, reasoning,
function calls and the agent loop's MCP and code interpreter items are carried.
"""

from __future__ import annotations

import json
from typing import Any

from ..protocol import CARRIED_ITEM_TYPES, RequestError
from ._store import EventStore, InputStore, StoredResponse

__all__ = ["carried_items", "conversation_of", "earlier_conversation", "saved_input"]


def saved_input(previous_id: str | None, items: list[Any]) -> Any:
    """What the store keeps of a request's input (see the module docstring)."""
    return {"previous_response_id": previous_id, "items": items} if previous_id else items


def carried_items(response: dict[str, Any]) -> list[Any]:
    """The output items of a Response (wire JSON) that a later request's prompt shows again."""
    return [
        item
        for item in response.get("output", [])
        if isinstance(item, dict) and item.get("type") in CARRIED_ITEM_TYPES
    ]


def _carried(stored: StoredResponse) -> list[Any]:
    return carried_items(stored.response())


async def conversation_of(store: EventStore, response_id: str) -> list[Any] | None:
    """The whole input `response_id` answered, as wire items; None if its input was not kept.

    Walks `previous_response_id` links back to the first response, iteratively. A link whose
    response was deleted since is a `RequestError`: the conversation cannot be rebuilt."""
    if not isinstance(store, InputStore):
        return None
    parts: list[list[Any]] = []  # newest first
    current = response_id
    while True:
        raw = await store.load_input(current)
        if raw is None:
            if current == response_id:
                return None
            raise RequestError(
                f"the conversation of response {response_id} cannot be rebuilt: the input of "
                f"{current}, which it follows, is no longer stored",
                param="previous_response_id",
            )
        saved = json.loads(raw)
        if isinstance(saved, list):  # the first link (or a store from before links)
            parts.append(saved)
            break
        parts.append(saved["items"])
        previous = saved["previous_response_id"]
        stored = await store.snapshot(previous)
        if stored is None:
            raise RequestError(
                f"the conversation of response {response_id} cannot be rebuilt: response "
                f"{previous}, which it follows, was deleted",
                param="previous_response_id",
            )
        parts.append(_carried(stored))
        current = previous
    return [item for part in reversed(parts) for item in part]


async def earlier_conversation(
    store: EventStore, previous_id: str, *, running: bool = False
) -> list[Any]:
    """What a request that follows `previous_id` sees before its own input, as wire items: that
    response's input and its output. A `RequestError` naming `previous_response_id` when that
    response cannot be continued (`running`: it is being generated here now)."""
    param = "previous_response_id"
    still_running = RequestError(
        f"response {previous_id} is still in progress; continue it once it has finished",
        param=param,
    )
    # A store that shows each API key its own responses (`_guard.OwnedStore`): another key's
    # response does not exist, not even as "still in progress".
    visible = getattr(store, "visible", None)
    if visible is not None and not await visible(previous_id):
        raise RequestError(
            f"no response with id {previous_id!r}", param=param, status=404, code="not_found"
        )
    if running:
        raise still_running
    if not isinstance(store, InputStore):
        raise RequestError(
            "this server's event store keeps no inputs, so previous_response_id cannot be "
            "used; send the whole conversation in `input`",
            param=param,
        )
    stored = await store.snapshot(previous_id)
    if stored is None:
        raise RequestError(
            f"no response with id {previous_id!r}", param=param, status=404, code="not_found"
        )
    if not stored.finished:
        raise still_running
    earlier = await conversation_of(store, previous_id)
    if earlier is None:
        raise RequestError(
            f"response {previous_id} was stored without its input (it was made before this "
            "server kept inputs); send the whole conversation in `input`",
            param=param,
        )
    return [*earlier, *_carried(stored)]
