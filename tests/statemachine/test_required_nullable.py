"""Bug (issue 13, item 2): keys the API always sends, even as null, were left out of the wire.

openai-python's pydantic models mark a required-but-nullable field `Optional[...] = None`, so the
SDK itself cannot tell it from an optional one; its request types (`*_param.py` TypedDicts) mark
it `Required[Optional[...]]`. Clients that validate (the Vercel AI SDK, with zod) reject an item
without such a key: `code_interpreter_call` without `outputs` broke every python tool call.

These tests walk the SDK's TypedDict of every output item type and tool type streamfold emits,
recursively, and check that the wire JSON has every key the TypedDict marks `Required`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Required, Union, get_args, get_origin

import openai.types.responses as sdk
import pytest
from openai.types.responses import response_input_item_param as input_params
from typing_extensions import get_type_hints, is_typeddict

from streamfold.statemachine import _model as m
from streamfold.statemachine import to_wire

TRACES = Path(__file__).resolve().parents[2] / "specs" / "traces"


def _members(union: Any) -> list[Any]:
    out: list[Any] = []
    for arg in get_args(union):
        out += _members(arg) if get_origin(arg) is Union else [arg]
    return out


def _type_literal(td: Any) -> str | None:
    hint = get_type_hints(td, include_extras=True).get("type")
    while hint is not None and get_origin(hint) is Required:
        hint = get_args(hint)[0]
    args = get_args(hint) if hint is not None else ()
    return args[0] if len(args) == 1 and isinstance(args[0], str) else None


# The TypedDict the SDK checks an output item of each `type` against. Input-item params share the
# output items' shapes; `message` has three input forms, of which the output message is ours.
ITEM_PARAMS: dict[str, Any] = {
    lit: td
    for td in _members(input_params.ResponseInputItemParam)
    if (lit := _type_literal(td)) is not None and lit != "message"
}
ITEM_PARAMS["message"] = sdk.ResponseOutputMessageParam
TOOL_PARAMS = {"function": sdk.FunctionToolParam}


def _is_typed_dict(tp: Any) -> bool:
    # The SDK builds its TypedDicts with typing_extensions, which typing.is_typeddict misses.
    return isinstance(tp, type) and is_typeddict(tp)


def _typed_dicts(annotation: Any) -> list[Any]:
    """The TypedDicts an annotation may hold (through Required, Optional, unions, iterables)."""
    if _is_typed_dict(annotation):
        return [annotation]
    return [td for arg in get_args(annotation) for td in _typed_dicts(arg)]


def missing_required(value: Any, td: Any, path: str = "$") -> list[str]:
    """Paths of keys `td` (recursively) marks `Required` that `value` lacks."""
    if not isinstance(value, dict):
        return []
    hints = get_type_hints(td, include_extras=True)
    missing = [
        f"{path}.{key}"
        for key, hint in hints.items()
        if get_origin(hint) is Required and key not in value
    ]
    for key, hint in hints.items():
        if key not in value:
            continue
        candidates = _typed_dicts(hint)
        items = value[key] if isinstance(value[key], list) else [value[key]]
        for i, item in enumerate(items):
            if not isinstance(item, dict) or not candidates:
                continue
            fitting = [c for c in candidates if _type_literal(c) in (None, item.get("type"))]
            where = f"{path}.{key}" + (f"[{i}]" if isinstance(value[key], list) else "")
            if fitting:
                missing += min((missing_required(item, c, where) for c in fitting), key=len)
    return missing


# One instance of every output item class, with every optional field left at its default:
# the emptiest item streamfold can send. A new item class fails `test_every_item_class_...`
# until it is added here.
EMPTIEST: dict[type, Any] = {
    m.ResponseOutputMessage: m.ResponseOutputMessage(
        id="msg_1", status="completed", content=(m.ResponseOutputText(text="hi"),)
    ),
    m.ResponseReasoningItem: m.ResponseReasoningItem(id="rs_1"),
    m.ResponseFunctionToolCall: m.ResponseFunctionToolCall(
        id="fc_1", call_id="call_1", name="f", arguments="{}"
    ),
    m.ResponseCustomToolCall: m.ResponseCustomToolCall(
        id="ctc_1", call_id="call_1", name="apply_patch", input=""
    ),
    m.ResponseFunctionWebSearch: m.ResponseFunctionWebSearch(
        id="ws_1", action=m.ActionSearch(), status="completed"
    ),
    m.ResponseCodeInterpreterToolCall: m.ResponseCodeInterpreterToolCall(
        id="ci_1", code=None, container_id="cntr_1", status="completed"
    ),
    m.McpCall: m.McpCall(id="mcp_1", name="f", server_label="s", arguments="{}"),
    m.McpListTools: m.McpListTools(id="mcpl_1", server_label="s"),
    m.McpApprovalRequest: m.McpApprovalRequest(
        id="mcpr_1", arguments="{}", name="f", server_label="s"
    ),
    m.ResponseToolSearchCall: m.ResponseToolSearchCall(
        id="tsc_1", call_id="call_1", arguments={}, status="completed"
    ),
}


def test_every_item_class_has_an_emptiest_instance() -> None:
    assert set(_members(m.OutputItem)) <= set(EMPTIEST), "add the new item class to EMPTIEST"


@pytest.mark.parametrize("item", list(EMPTIEST.values()), ids=lambda i: i.type)
def test_items_carry_every_key_the_sdk_requires(item: Any) -> None:
    wire = to_wire(item)
    assert missing_required(wire, ITEM_PARAMS[wire["type"]]) == []


def test_code_interpreter_call_sends_null_outputs_and_code() -> None:
    """The bug as the Vercel AI SDK saw it: `outputs` absent instead of null."""
    wire = to_wire(EMPTIEST[m.ResponseCodeInterpreterToolCall])
    assert "outputs" in wire and wire["outputs"] is None
    assert "code" in wire and wire["code"] is None


def test_function_tools_echo_null_parameters_and_strict() -> None:
    wire = to_wire(m.FunctionTool(name="f"))
    assert missing_required(wire, TOOL_PARAMS["function"]) == []
    assert wire["parameters"] is None and wire["strict"] is None


def test_failed_response_error_has_type_and_param() -> None:
    """Bug (issue 13, item 4): `error` without `type`; `generateText` then showed a schema
    error instead of the failure's message."""
    wire = to_wire(m.ResponseError(message="boom"))
    assert wire == {
        "code": "server_error",
        "message": "boom",
        "type": "server_error",
        "param": None,
    }


def _golden_items() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(TRACES.glob("*.golden.jsonl")):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            items = [event["item"]] if "item" in event else []
            items += event.get("response", {}).get("output", [])
            found += [(path.stem, item) for item in items]
    return found


def test_every_item_of_every_golden_stream_carries_the_required_keys() -> None:
    items = _golden_items()
    assert {item["type"] for _, item in items} >= {"message", "reasoning", "function_call"}
    bad = [
        (name, item["type"], missing)
        for name, item in items
        if (missing := missing_required(item, ITEM_PARAMS[item["type"]]))
    ]
    assert bad == []


def test_the_walk_finds_a_planted_missing_key() -> None:
    """The check itself can fail: a code interpreter call without `outputs` is reported."""
    wire = to_wire(EMPTIEST[m.ResponseCodeInterpreterToolCall])
    del wire["outputs"]
    assert missing_required(wire, ITEM_PARAMS["code_interpreter_call"]) == ["$.outputs"]
    message = to_wire(EMPTIEST[m.ResponseOutputMessage])
    del message["content"][0]["annotations"]
    assert missing_required(message, ITEM_PARAMS["message"]) == ["$.content[0].annotations"]


def test_every_logprob_entry_carries_a_top_logprobs_array() -> None:
    """Bug (issue 13, item 3): logprob entries on `output_text` events had no `top_logprobs`
    when none were asked for; the Vercel AI SDK drops every such delta. It is `[]` now."""
    entries = []
    for line in (TRACES / "logprobs_on_deltas_sglang_pr9368.golden.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["type"] in ("response.output_text.delta", "response.output_text.done"):
            entries += event["logprobs"]
    assert entries, "the golden stream has logprobs"
    assert all(isinstance(entry.get("top_logprobs"), list) for entry in entries)
    assert to_wire(m.TextLogprob(token="a", logprob=-1.0))["top_logprobs"] == []


def test_mcp_items_send_the_keys_the_api_always_sends() -> None:
    """Issue 31: MCP items left out `error` and `approval_request_id` (null), which the API
    sends on every mcp_call (and `error` on every mcp_list_tools) though the SDK does not mark
    them required."""
    call = to_wire(EMPTIEST[m.McpCall])
    assert (call["approval_request_id"], call["error"], call["output"]) == (None, None, None)
    assert to_wire(EMPTIEST[m.McpListTools])["error"] is None
