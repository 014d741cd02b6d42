"""Checker rules for hosted tools and the agent loop (R27, R28, and R2 for the new items).

Each `test_rejects_*` plants one bug into a conformant agent-loop stream (list tools, a web
search, a code run, an MCP call that fails, an answer; written by the reducer) and asserts that
the rule written for it fires, and only where planted.
"""

from __future__ import annotations

from typing import Any

import pytest

from streamfold.specs import check
from streamfold.statemachine import (
    McpServer,
    McpToolInfo,
    ServerTools,
    finish,
    list_tools,
    next_generation,
    pending_call,
    start,
    step,
    to_wire,
    tool_result,
)
from streamfold.vocab import harmony_encoding
from tests.harmony_helpers import GRAMMAR, new_response
from tests.specs.wire_streams import renumber

TOOLS = ServerTools(browser=True, python=True, mcp=(McpServer(server_label="wiki"),))
GENERATIONS = (
    '<|channel|>analysis to=browser.search code<|message|>{"query": "x"}<|call|>',
    "<|channel|>analysis to=python code<|message|>print(1)<|call|>",
    '<|channel|>commentary to=wiki.ask <|constrain|>json<|message|>{"q": 1}<|call|>',
    "<|channel|>final<|message|>Done.<|return|>",
)
RESULTS: tuple[dict[str, Any], ...] = ({"output": "hits"}, {"output": "1\n"}, {"error": "boom"})


def agent_stream() -> list[dict[str, Any]]:
    state, events = start(GRAMMAR, new_response(), server_tools=TOOLS)
    state, new = list_tools(state, "wiki", tools=(McpToolInfo(name="ask"),))
    events += new
    for i, text in enumerate(GENERATIONS):
        if i:
            state = next_generation(state, input_tokens=1)
        for token in harmony_encoding().encode(text, allowed_special="all"):
            state, new = step(state, token)
            events += new
        call = pending_call(state)
        if call is not None:
            state, new = tool_result(state, call.item_id, **RESULTS[i])
            events += new
    state, new = finish(state, "stop")
    return [to_wire(e) for e in [*events, *new]]


def rules(events: list[dict[str, Any]]) -> set[str]:
    return {v.rule for v in check(events)}


def at(events: list[dict[str, Any]], etype: str, nth: int = 0) -> int:
    return [i for i, e in enumerate(events) if e["type"] == etype][nth]


def moved(events: list[dict[str, Any]], src: int, dst: int) -> list[dict[str, Any]]:
    events = list(events)
    events.insert(dst, events.pop(src))
    return renumber(events)


def test_the_agent_stream_is_conformant() -> None:
    events = agent_stream()
    assert check(events) == []
    types = [e["type"] for e in events]
    for stage in ("mcp_list_tools.completed", "web_search_call.searching", "mcp_call.failed"):
        assert f"response.{stage}" in types


# -- R27: stages in order, once each, after the call's text --------------------------------


def test_rejects_completed_sent_twice() -> None:
    events = agent_stream()
    i = at(events, "response.web_search_call.completed")
    events = renumber([*events[: i + 1], dict(events[i]), *events[i + 1 :]])
    assert rules(events) == {"R27"}


def test_rejects_searching_after_completed() -> None:
    events = agent_stream()
    events = moved(
        events,
        at(events, "response.web_search_call.searching"),
        at(events, "response.web_search_call.completed"),
    )
    assert rules(events) == {"R27"}


def test_rejects_code_streamed_after_the_interpreter_started() -> None:
    events = agent_stream()
    events = moved(
        events,
        at(events, "response.code_interpreter_call.interpreting"),
        at(events, "response.code_interpreter_call_code.delta"),
    )
    assert rules(events) == {"R27"}


def test_rejects_mcp_in_progress_after_failed() -> None:
    events = agent_stream()
    events = moved(
        events, at(events, "response.mcp_call.in_progress"), at(events, "response.mcp_call.failed")
    )
    assert "R27" in rules(events)


# -- R28: the outcome agrees with the done item --------------------------------------------


def test_rejects_tool_output_only_in_the_done_item_vllm23221() -> None:
    events = agent_stream()
    events = renumber(
        [e for e in events if e["type"] != "response.code_interpreter_call.completed"]
    )
    assert rules(events) == {"R28"}


def test_rejects_failed_mcp_call_without_error() -> None:
    events = agent_stream()
    i = at(events, "response.output_item.done", 3)
    assert events[i]["item"]["type"] == "mcp_call"
    for where in (events[i]["item"], events[-1]["response"]["output"][3]):
        del where["error"]
    assert rules(events) == {"R28", "R29"}  # R29: the API always sends `error`


def test_rejects_failed_mcp_call_reported_completed() -> None:
    events = agent_stream()
    i = at(events, "response.output_item.done", 3)
    for where in (events[i]["item"], events[-1]["response"]["output"][3]):
        where["status"] = "completed"
        del where["error"]
    assert rules(events) == {"R28", "R29"}


def test_rejects_failed_listing_without_its_reason() -> None:
    events = agent_stream()
    i = at(events, "response.mcp_list_tools.completed")
    events[i]["type"] = "response.mcp_list_tools.failed"
    assert rules(events) == {"R28"}


def test_rejects_completed_listing_with_an_error() -> None:
    events = agent_stream()
    i = at(events, "response.output_item.done", 0)
    for where in (events[i]["item"], events[-1]["response"]["output"][0]):
        where["error"] = "401"
    assert rules(events) == {"R28"}


# -- R2 for the loop's items ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "field"),
    [("mcp_list_tools", "tools"), ("mcp_list_tools", "server_label"), ("mcp_call", "name")],
)
def test_rejects_loop_items_missing_a_required_field(kind: str, field: str) -> None:
    events = agent_stream()
    i = next(
        i
        for i, e in enumerate(events)
        if e["type"] == "response.output_item.done" and e["item"]["type"] == kind
    )
    del events[i]["item"][field]
    assert "R2" in rules(events)
