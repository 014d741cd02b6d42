"""`shape_for`: every `tool_choice` form and `text.format` as the Shape it asks for (the table
in `adapters/structured/_request.py`), and a request asking nothing costs nothing."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from streamfold.adapters.formats import HARMONY
from streamfold.adapters.protocol import RequestError, parse_create_request
from streamfold.adapters.structured import (
    JsonBody,
    Shape,
    TextBody,
    budget_shape,
    harmony_grammar,
    shape_for,
)

F = {"type": "function", "name": "f", "parameters": {"type": "object"}}
G = {
    "type": "function",
    "name": "g",
    "strict": True,
    "parameters": {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    },
}
SCHEMA = {"type": "json_schema", "name": "x", "schema": {"type": "object"}}


def _shape(**body: Any) -> Shape:
    return shape_for(parse_create_request({"model": "m", "input": "hi", **body}))


def _recipients(shape: Shape) -> list[str] | None:
    return None if shape.calls is None else [call.recipient for call in shape.calls]


def test_a_request_asking_nothing_gets_no_grammar() -> None:
    request = parse_create_request({"model": "m", "input": "hi", "tools": [F]})
    assert shape_for(request).free and HARMONY.constraint_for(request) is None


@pytest.mark.parametrize(
    ("body", "answer", "recipients"),
    [
        ({"tools": [F], "tool_choice": "none"}, TextBody, []),
        ({"tools": [F, G]}, TextBody, ["functions.f", "functions.g"]),  # g strict: enforce
        ({"tools": [F], "text": {"format": SCHEMA}}, JsonBody, ["functions.f"]),
        ({"tools": [F, G], "tool_choice": "required"}, None, ["functions.f", "functions.g"]),
        (
            {"tools": [F, G], "tool_choice": {"type": "function", "name": "g"}},
            None,
            ["functions.g"],
        ),
        (
            {
                "tools": [F, G],
                "tool_choice": {
                    "type": "allowed_tools",
                    "mode": "auto",
                    "tools": [{"type": "function", "name": "f"}],
                },
            },
            TextBody,
            ["functions.f"],
        ),
        ({"text": {"format": {"type": "json_object"}}}, JsonBody, []),
    ],
)
def test_each_form(body: dict[str, Any], answer: type | None, recipients: list[str]) -> None:
    shape = _shape(**body)
    assert (None if shape.answer is None else type(shape.answer)) is answer
    assert _recipients(shape) == recipients


def test_in_the_servers_loop_a_forced_call_relaxes_to_auto_after_one_ran() -> None:
    request = parse_create_request(
        {"model": "m", "input": "hi", "tools": [G], "tool_choice": "required"}
    )
    assert shape_for(request).answer is None
    assert isinstance(shape_for(request, after_call=True).answer, TextBody)


def test_the_budget_keeps_half_for_the_answer() -> None:
    shape = budget_shape(_shape(text={"format": SCHEMA}), 300)
    assert shape.reasoning_tokens == (300 - 150) // 3 - 6
    assert budget_shape(_shape(tools=[F]), 300).reasoning_tokens is None  # free: untouched


NAMESPACED = {"type": "namespace", "name": "ns", "description": "d", "tools": [F]}


def test_allowed_tools_may_name_a_function_inside_a_namespace() -> None:
    """The request's check and the shape read one table of which entry names which tool
    (`protocol.choice_entry`): an `allowed_tools` entry naming a namespace's function was
    refused by the check (400, "not in tools") while the shape offers that very call."""
    entry = {"type": "function", "name": "f"}
    shape = _shape(
        tools=[NAMESPACED],
        tool_choice={"type": "allowed_tools", "mode": "required", "tools": [entry]},
    )
    assert _recipients(shape) == ["ns.f"]


def test_a_custom_tool_entry_names_a_custom_tool_by_its_name() -> None:
    """Read from the same table: an entry `{type: custom, name}` naming no declared custom
    tool is refused (it was taken for any custom tool, and the shape then allowed nothing)."""
    custom = {"type": "custom", "name": "x"}
    named = {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "custom", "name": "x"}]}
    assert _recipients(_shape(tools=[custom], tool_choice=named)) == ["functions.x"]
    other = {**named, "tools": [{"type": "custom", "name": "nope"}]}
    with pytest.raises(RequestError) as refused:
        _shape(tools=[custom], tool_choice=other)
    assert refused.value.param == "tool_choice.tools[0]"


def test_parallel_tool_calls_is_read_but_constrains_nothing_alone() -> None:
    """The shape says whether several calls may end the completion (`parallel_tool_calls`,
    true by default); a request asking nothing else stays free, and harmony's grammar, whose
    completion stops at its one call, is the same either way."""
    assert _shape(tools=[F], tool_choice="required").parallel_calls is True
    serial = _shape(tools=[F], tool_choice="required", parallel_tool_calls=False)
    assert serial.parallel_calls is False
    assert _shape(tools=[F], parallel_tool_calls=False).free
    assert harmony_grammar(serial) == harmony_grammar(attrs.evolve(serial, parallel_calls=True))
