"""R31 and R32: what a completed response says, against the controls its request echoed.

Each test plants the peer bug the rule names on a conformant stream's terminal response (the
request's `text`, `tool_choice` or `tools` as the response echoes them) and expects the rule,
or holds the rule silent where the content keeps the promise."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from streamfold.specs import check
from streamfold.specs._content import content_rules
from tests.specs.wire_streams import good_stream

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
    "required": ["city"],
    "additionalProperties": False,
}


def _rules(response: dict[str, Any]) -> list[str]:
    seen: list[str] = []
    content_rules(response, lambda rule, message: seen.append(f"{rule}: {message}"))
    return seen


def _answer(text: str, *, fmt: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    message = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    response: dict[str, Any] = {"output": [message], "tool_choice": "auto", "tools": [], **extra}
    if fmt is not None:
        response["text"] = {"format": fmt}
    return response


STRICT = {"type": "json_schema", "name": "city", "strict": True, "schema": SCHEMA}


def test_a_strict_json_answer_that_follows_its_schema_passes() -> None:
    assert _rules(_answer('{"city":"Paris"}', fmt=STRICT)) == []


@pytest.mark.parametrize(
    "text", ["Sure! Here is the JSON: {}", '{"city":"Berlin"}', '{"city":"Paris","x":1}']
)
def test_a_strict_json_answer_that_escapes_is_r31_vllm23120(text: str) -> None:
    assert [r[:3] for r in _rules(_answer(text, fmt=STRICT))] == ["R31"]


def test_json_object_must_be_an_object_and_non_strict_schemas_are_not_judged() -> None:
    assert _rules(_answer("[1]", fmt={"type": "json_object"}))[0].startswith("R31")
    loose = {**STRICT, "strict": False}
    assert _rules(_answer("not json", fmt=loose)) == []


def test_strict_function_arguments_follow_their_parameters() -> None:
    tool = {"type": "function", "name": "w", "strict": True, "parameters": SCHEMA}
    call = {"type": "function_call", "name": "w", "arguments": '{"city":"Oslo"}', "call_id": "c"}
    response = {"output": [call], "tools": [tool], "tool_choice": "auto"}
    assert [r[:3] for r in _rules(response)] == ["R31"]
    call["arguments"] = '{"city":"Rome"}'
    assert _rules(response) == []


def test_required_with_a_plain_message_is_r32_vllm44216() -> None:
    assert [r[:3] for r in _rules(_answer("hi", tool_choice="required"))] == ["R32"]


def test_none_with_a_call_and_a_named_tool_calling_another_are_r32() -> None:
    call = {"type": "function_call", "name": "other", "arguments": "{}", "call_id": "c"}
    assert _rules({"output": [call], "tool_choice": "none"})[0].startswith("R32")
    named = {"type": "function", "name": "w"}
    assert _rules({"output": [call], "tool_choice": named})[0].startswith("R32")
    allowed = {"type": "allowed_tools", "mode": "auto", "tools": [named]}
    assert _rules({"output": [call], "tool_choice": allowed})[0].startswith("R32")


def test_the_checker_applies_them_to_a_streams_completed_response() -> None:
    events = good_stream()  # reasoning, a plain message, then a get_weather call
    assert check(events) == []
    planted = copy.deepcopy(events)
    planted[-1]["response"]["tool_choice"] = "none"
    assert [v.rule for v in check(planted)] == ["R32"]


def test_output_over_the_echoed_budget_is_r33_issue36() -> None:
    """Bug (issue 36): `max_output_tokens: 16` echoed on a completed response with 57 output
    tokens was called conformant: the server left the budget to a source that ignored it."""
    events = good_stream()
    used = events[-1]["response"]["usage"]["output_tokens"]
    for event in events:
        if isinstance(event.get("response"), dict):
            event["response"]["max_output_tokens"] = used
    assert check(events) == []  # exactly at the budget is fine
    over = copy.deepcopy(events)
    over[-1]["response"]["max_output_tokens"] = used - 1
    found = check(over)
    assert [v.rule for v in found] == ["R33"]
    assert str(used) in found[0].message


FN = {"type": "function_call", "name": "w", "arguments": "{}", "call_id": "c1"}
CUSTOM = {"type": "custom_tool_call", "name": "patch", "input": "x", "call_id": "c2"}
OTHER_CUSTOM = {**CUSTOM, "name": "shell"}
MCP = {"type": "mcp_call", "server_label": "docs", "name": "search", "arguments": "{}"}
SEARCH = {"type": "web_search_call", "status": "completed", "action": {"type": "search"}}
MESSAGE = _answer("hi")["output"][0]

#: (tool_choice, output, whether R32 holds it broken). Bug pinned (issue 30, item 6: "named/
#: allowed -> only those"): R32 read only function names, so a named custom tool, MCP server or
#: hosted tool answered with a plain message, or a call to another tool kind, passed unseen.
NAMED = [
    ({"type": "custom", "name": "patch"}, [CUSTOM], False),
    ({"type": "custom", "name": "patch"}, [MESSAGE], True),
    ({"type": "custom", "name": "patch"}, [OTHER_CUSTOM], True),
    ({"type": "custom", "name": "patch"}, [FN], True),
    ({"type": "function", "name": "w"}, [FN], False),
    ({"type": "function", "name": "w"}, [CUSTOM], True),
    ({"type": "mcp", "server_label": "docs"}, [MCP], False),
    ({"type": "mcp", "server_label": "docs"}, [MESSAGE], True),
    ({"type": "mcp", "server_label": "web"}, [MCP], True),
    ({"type": "mcp", "server_label": "docs", "name": "search"}, [MCP], False),
    ({"type": "mcp", "server_label": "docs", "name": "fetch"}, [MCP], True),
    ({"type": "web_search_preview"}, [SEARCH], False),
    ({"type": "web_search_preview"}, [MESSAGE], True),
    ({"type": "web_search_preview"}, [FN], True),
    (
        {
            "type": "allowed_tools",
            "mode": "required",
            "tools": [{"type": "custom", "name": "patch"}],
        },
        [CUSTOM],
        False,
    ),
    (
        {
            "type": "allowed_tools",
            "mode": "required",
            "tools": [{"type": "custom", "name": "patch"}],
        },
        [OTHER_CUSTOM],
        True,
    ),
    (
        {
            "type": "allowed_tools",
            "mode": "auto",
            "tools": [{"type": "mcp", "server_label": "docs"}],
        },
        [MESSAGE],
        False,
    ),
    (
        {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "w"}]},
        [MCP],
        True,
    ),
]


@pytest.mark.parametrize(("choice", "output", "broken"), NAMED)
def test_every_named_and_allowed_form_holds_only_its_tools(
    choice: dict[str, Any], output: list[Any], broken: bool
) -> None:
    rules = [r[:3] for r in _rules({"output": output, "tool_choice": choice})]
    assert rules == (["R32"] if broken else []), (choice, output, rules)


@pytest.mark.parametrize(
    ("parallel", "output", "broken"),
    [
        (False, [FN, {**FN, "call_id": "c3"}], True),
        (False, [FN, CUSTOM], True),
        (False, [FN], False),
        (False, [MCP, SEARCH, FN], False),  # the server's own calls are not counted
        (True, [FN, {**FN, "call_id": "c3"}], False),
        (None, [FN, CUSTOM], False),  # not echoed: the API's default, parallel
    ],
)
def test_parallel_tool_calls_false_allows_one_client_call(
    parallel: bool | None, output: list[Any], broken: bool
) -> None:
    """Bug pinned: a think-tag model served with `parallel_tool_calls: false` and no constraint
    had both calls it wrote come back, and the checker called the stream conformant."""
    response: dict[str, Any] = {"output": output, "tool_choice": "auto"}
    if parallel is not None:
        response["parallel_tool_calls"] = parallel
    rules = [r[:3] for r in _rules(response)]
    assert rules == (["R34"] if broken else [])


def test_the_checker_applies_r34_to_a_streams_completed_response() -> None:
    events = good_stream()  # reasoning, a plain message, then a get_weather call
    planted = copy.deepcopy(events)
    final = planted[-1]["response"]
    final["parallel_tool_calls"] = False
    assert check(planted) == []  # one call
    final["output"].append({**final["output"][-1], "id": "fc_other", "call_id": "call_other"})
    assert "R34" in [v.rule for v in check(planted)]
