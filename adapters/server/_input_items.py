"""`GET /v1/responses/{id}/input_items`: the conversation a stored response answered.

The store keeps each response's input as the wire items the request sent (with what
`previous_response_id` brought in, see `_conversation.py`). Requests may send them in short forms
(`{"role": "user", "content": "hi"}`, no ids); the API lists them as full items, each with an
id, so they are filled in here: the id an item came with (an earlier response's output item)
or one derived from the response id and the item's position, so listing twice gives the same
ids. The page follows the API's cursor list: newest first by default (`order=desc`), `limit`
items (1-100, default 20) after the item whose id is `after`.
"""

from __future__ import annotations

from typing import Any, Literal

from ..protocol import AGENT_INPUT_TYPES, INPUT_ITEM_PREFIX, RequestError

__all__ = ["DEFAULT_LIMIT", "input_item_page", "listed_items"]

DEFAULT_LIMIT = 20
MAX_LIMIT = 100


def _text_parts(content: Any, part_type: str) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]]
    if isinstance(content, str):
        parts = [{"type": part_type, "text": content}]
    else:
        parts = [dict(part) for part in content]
    if part_type == "output_text":
        for part in parts:
            part.setdefault("annotations", [])
    return parts


def _listed(item: dict[str, Any], item_id: str) -> dict[str, Any]:
    kind = item.get("type", "message")
    if kind == "message":
        role = item["role"]
        part_type = "output_text" if role == "assistant" else "input_text"
        return {
            "id": item_id,
            "type": "message",
            "role": role,
            "status": item.get("status", "completed"),
            "content": _text_parts(item["content"], part_type),
        }
    if kind == "function_call":
        return {
            "id": item_id,
            "type": "function_call",
            "call_id": item["call_id"],
            "name": item["name"],
            "arguments": item["arguments"],
            "status": item.get("status", "completed"),
        }
    if kind == "function_call_output":
        return {
            "id": item_id,
            "type": "function_call_output",
            "call_id": item["call_id"],
            "output": item["output"],
            "status": item.get("status", "completed"),
        }
    if kind in AGENT_INPUT_TYPES:  # the agent loop's items are listed as they were sent
        return {**item, "id": item_id}
    listed = {"id": item_id, "type": "reasoning", "summary": list(item.get("summary") or [])}
    if item.get("content") is not None:
        listed["content"] = list(item["content"])
    return listed


def listed_items(response_id: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stored input items as the API lists them, oldest first, each with an id."""
    base = response_id.removeprefix("resp_")
    return [
        _listed(
            item, item.get("id") or f"{INPUT_ITEM_PREFIX[item.get('type', 'message')]}_{base}_in{i}"
        )
        for i, item in enumerate(items)
    ]


def input_item_page(
    items: list[dict[str, Any]],
    *,
    after: str | None = None,
    limit: int = DEFAULT_LIMIT,
    order: Literal["asc", "desc"] = "desc",
) -> dict[str, Any]:
    """One page of a cursor list over `items` (oldest first, as `listed_items` returns them)."""
    if not 1 <= limit <= MAX_LIMIT:
        raise RequestError(f"limit must be between 1 and {MAX_LIMIT}, got {limit}", param="limit")
    ordered = items if order == "asc" else items[::-1]
    start = 0
    if after is not None:
        ids = [item["id"] for item in ordered]
        if after not in ids:
            raise RequestError(f"no input item with id {after!r} in this response", param="after")
        start = ids.index(after) + 1
    page = ordered[start : start + limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": start + limit < len(ordered),
    }
