"""The checker's item shapes (`specs/_wire.ITEM_FIELDS`, rule R2) cover every kind streamfold
emits (issue 28: adding an item kind).

Bug: `tool_search_call` was added to the kinds table (and so to streamfold's streams) without
its shape in the checker, so a server that sent a tool search call without `execution` or
`status`, which the openai SDK's `ResponseToolSearchCall` requires, passed `streamfold check`.
The checker stays independent of the table on purpose (it judges any server's JSON); this test
is what holds the two together.
"""

from __future__ import annotations

import typing
from typing import Any

import pytest
from openai.types.responses import ResponseOutputItem

from streamfold.specs import _wire as w
from streamfold.specs import check
from streamfold.statemachine import Response, ToolSearchTool, finish, start, step, to_wire
from streamfold.statemachine._kinds import KINDS
from tests.statemachine.thinktags_helpers import GRAMMAR, INDEX


def _sdk_items() -> dict[str, type]:
    """The openai SDK's output item classes by wire `type`."""
    (union, *_) = typing.get_args(ResponseOutputItem)  # Annotated[Union[...], discriminator]
    return {cls.model_fields["type"].annotation.__args__[0]: cls for cls in typing.get_args(union)}


SDK_ITEMS = _sdk_items()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_checker_knows_the_fields_the_sdk_requires_of_each_kind(kind: str) -> None:
    required = {n for n, f in SDK_ITEMS[kind].model_fields.items() if f.is_required()}
    assert required - {"type"} <= set(w.ITEM_FIELDS.get(kind, {})), kind


def _tool_search_stream() -> list[dict[str, Any]]:
    text = '<tool_call>{"name": "tool_search", "arguments": {"query": "weather"}}</tool_call>'
    response = Response(
        id="resp_search",
        created_at=1,
        model="qwen3",
        status="in_progress",
        tools=(ToolSearchTool(execution="client"),),
    )
    state, events = start(GRAMMAR, response)
    for byte in text.encode():
        state, new = step(state, INDEX.ids[bytes([byte])])
        events.extend(new)
    _, new = finish(state, "stop", None)
    return [to_wire(event) for event in [*events, *new]]


@pytest.mark.parametrize("key", ["id", "arguments", "execution", "status"])
def test_a_tool_search_call_without_a_required_field_is_reported(key: str) -> None:
    events = _tool_search_stream()
    assert check(events) == []
    done = next(e for e in events if e["type"] == "response.output_item.done")
    assert done["item"]["type"] == "tool_search_call"
    del done["item"][key]
    found = [v for v in check(events) if v.rule == "R2"]
    assert any(f"tool_search_call item: item.{key} is missing" in v.message for v in found), found
