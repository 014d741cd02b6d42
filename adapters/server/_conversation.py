"""`previous_response_id`: a conversation continued from a stored response.

The Responses API lets a request name the response it follows instead of sending the whole
conversation again. The context is then the earlier response's own input, its output, and the
new input, in that order (`instructions` are not carried over: each request sends its own, as
the API does). The store keeps every stored response's input (`InputStore`), so chains of any
length resolve one link at a time. Output items the prompt cannot show again (web search calls,
whose pages are not kept) are left out of the context; messages, reasoning, function calls and
the agent loop's MCP and code interpreter items are carried.
"""

from __future__ import annotations

import json
from typing import Any

from ._store import EventStore, InputStore
from .requests import RequestError

__all__ = ["CARRIED_ITEM_TYPES", "earlier_conversation", "input_items"]

#: The output item types a following request sees again.
CARRIED_ITEM_TYPES = frozenset(
    {
        "message",
        "reasoning",
        "function_call",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
        "code_interpreter_call",
    }
)


def input_items(value: Any) -> list[Any]:
    """A request's `input` as a list of items (a string is one user message)."""
    return [{"role": "user", "content": value}] if isinstance(value, str) else list(value)


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
    earlier = await store.load_input(previous_id)
    if earlier is None:
        raise RequestError(
            f"response {previous_id} was stored without its input (it was made before this "
            "server kept inputs); send the whole conversation in `input`",
            param=param,
        )
    output = [
        item
        for item in stored.response().get("output", [])
        if isinstance(item, dict) and item.get("type") in CARRIED_ITEM_TYPES
    ]
    return [*json.loads(earlier), *output]
