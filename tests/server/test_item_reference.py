"""Bug (issue 13, item 1): `item_reference` input items were refused with a 400.

The Vercel AI SDK stores its responses by default and sends their items back as
`{"type": "item_reference", "id": ...}`, so step 2 of every tool loop failed. References now
resolve from the store, over a real socket.
"""

from __future__ import annotations

import openai
import pytest

from .conftest import Server


def _call(server: Server) -> tuple[str, str, str, str]:
    first = server.client.responses.create(model="weather_call", input="Weather in Paris?")
    reasoning, call = first.output
    assert reasoning.type == "reasoning" and call.type == "function_call"
    assert call.id is not None
    return first.id, reasoning.id, call.id, call.call_id


def test_references_to_earlier_output_items_resolve(server: Server) -> None:
    _, reasoning_id, call_id, call_call_id = _call(server)
    second = server.client.responses.create(
        model="greeting",
        input=[
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "item_reference", "id": reasoning_id},
            {"type": "item_reference", "id": call_id},
            {"type": "function_call_output", "call_id": call_call_id, "output": "sunny"},
        ],
    )
    assert second.status == "completed"
    listed = server.client.responses.input_items.list(second.id, order="asc").data
    assert [item.type for item in listed] == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert listed[2].id == call_id and listed[2].call_id == call_call_id  # type: ignore[union-attr]


def test_references_to_listed_input_items_resolve(server: Server) -> None:
    first_id, *_ = _call(server)
    listed = server.client.responses.input_items.list(first_id).data
    second = server.client.responses.create(
        model="greeting", input=[{"type": "item_reference", "id": listed[0].id}]
    )
    assert second.status == "completed"


@pytest.mark.parametrize("ref", ["fc_nosuchresponse_0", "nonsense", "msg_nosuch_in0", "fc_x_y"])
def test_an_unknown_reference_is_a_400_naming_its_position(server: Server, ref: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        server.client.responses.create(
            model="greeting",
            input=[{"role": "user", "content": "hi"}, {"type": "item_reference", "id": ref}],
        )
    error = caught.value.body
    assert isinstance(error, dict)
    assert error["param"] == "input[1].id"
    assert ref in error["message"]
