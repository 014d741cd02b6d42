"""`item_reference` input items: earlier items named by id, resolved from the store.

A client that stores its responses (the Vercel AI SDK does by default, `store: true`) sends the
items of an earlier response back as `{"type": "item_reference", "id": "fc_…"}` instead of
repeating them. streamfold's item ids name their response: an output item is
`<prefix>_<base>_<output_index>` and a listed input item `<prefix>_<base>_in<position>`, where
`resp_<base>` is the response (`statemachine._items.item_ids`, `_input_items.listed_items`). So a
reference is one lookup in that response's log (or its stored input), never a search. A
reference that names no stored item is refused with a 400 naming its position in `input`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..protocol import RequestError
from ._input_items import listed_items
from ._store import EventStore, InputStore

__all__ = ["resolve_references"]


def _split(item_id: str) -> tuple[str, str] | None:
    """`fc_<base>_3` -> (`resp_<base>`, `3`); `msg_<base>_in0` -> (`resp_<base>`, `in0`)."""
    prefix, _, rest = item_id.partition("_")
    base, _, position = rest.rpartition("_")
    if not prefix or not base or not position:
        return None
    return f"resp_{base}", position


async def _lookup(store: EventStore, item_id: str) -> dict[str, Any] | None:
    split = _split(item_id)
    if split is None:
        return None
    response_id, position = split
    if position.startswith("in") and position[2:].isdigit():
        raw = await store.load_input(response_id) if isinstance(store, InputStore) else None
        items = listed_items(response_id, json.loads(raw)) if raw is not None else []
    elif position.isdigit():
        stored = await store.snapshot(response_id)
        items = stored.response().get("output", []) if stored is not None else []
    else:
        return None
    found = [item for item in items if isinstance(item, dict) and item.get("id") == item_id]
    return found[0] if found else None


async def resolve_references(store: EventStore, body: Any) -> Any:
    """`body` with each `item_reference` in its `input` replaced by the item it names.

    Anything that is not a list of items is returned as it is, for the request parser to judge.
    """
    if not isinstance(body, Mapping) or not isinstance(body.get("input"), list):
        return body
    items = body["input"]
    if not any(isinstance(i, Mapping) and i.get("type") == "item_reference" for i in items):
        return body
    resolved = []
    for position, item in enumerate(items):
        if not (isinstance(item, Mapping) and item.get("type") == "item_reference"):
            resolved.append(item)
            continue
        item_id = item.get("id")
        if not isinstance(item_id, str) or not item_id:
            raise RequestError(
                "an item_reference needs the id of an earlier item (a string)",
                param=f"input[{position}].id",
            )
        found = await _lookup(store, item_id)
        if found is None:
            raise RequestError(
                f"no stored item with id {item_id!r}: an item_reference names an item of an "
                "earlier response that was stored (store: true) on this server; send the item "
                "itself instead",
                param=f"input[{position}].id",
            )
        resolved.append(found)
    return {**body, "input": resolved}
