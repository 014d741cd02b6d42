"""The agent loop in the reducer (issue 12): many generations, one response.

Each test drives the pure calls the server's loop makes (`start(server_tools=...)`,
`list_tools`, `step`, `pending_call`, `tool_result`, `next_generation`, `approved_call`,
`finish`) and holds the whole stream to the checker, the openai SDK's models and accumulator,
and `snapshot`.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from streamfold.specs import check
from streamfold.statemachine import (
    Event,
    McpServer,
    McpToolInfo,
    ReducerUsageError,
    ResponseState,
    ServerTools,
    approved_call,
    close_interrupted,
    finish,
    list_tools,
    next_generation,
    pending_call,
    snapshot,
    start,
    step,
    to_wire,
    tool_result,
)
from streamfold.vocab import harmony_encoding
from tests.harmony_helpers import GRAMMAR, assert_conformant, assert_sdk_digests, new_response

TOOLS = ServerTools(
    browser=True,
    python=True,
    mcp=(
        McpServer(server_label="deepwiki"),
        McpServer(server_label="bank", require_approval=frozenset({"transfer"})),
    ),
)
WEATHER = McpToolInfo(
    name="ask",
    description="Ask about a repository",
    input_schema={"type": "object", "properties": {"q": {"type": "string"}}},
)


def tokens(text: str) -> list[int]:
    return harmony_encoding().encode(text, allowed_special="all")


class Run:
    """A response driven the way the server's loop drives it, keeping every event."""

    def __init__(self, server_tools: ServerTools = TOOLS, input_tokens: int = 10) -> None:
        self.state, self.events = start(
            GRAMMAR, new_response(), input_tokens=input_tokens, server_tools=server_tools
        )

    def take(self, result: tuple[ResponseState, list[Event]]) -> list[Event]:
        self.state, new = result
        self.events.extend(new)
        return new

    def generate(self, text: str) -> None:
        for token in tokens(text):
            self.take(step(self.state, token))

    def wire(self) -> list[dict[str, Any]]:
        return [to_wire(e) for e in self.events]

    def types(self, new: list[Event]) -> list[str]:
        return [e.type for e in new]


SEARCH = '<|channel|>analysis to=browser.search code<|message|>{"query": "paris weather"}<|call|>'
MCP = '<|channel|>commentary to=deepwiki.ask <|constrain|>json<|message|>{"q": "what?"}<|call|>'
PYTHON = "<|channel|>analysis to=python code<|message|>print(6 * 7)<|call|>"
SEARCHED = {"type": "search", "query": "paris weather"}
ANSWER = "<|channel|>final<|message|>It is sunny.<|return|>"


def test_list_tools_then_two_calls_in_two_generations_then_an_answer() -> None:
    run = Run()
    new = run.take(list_tools(run.state, "deepwiki", tools=(WEATHER,)))
    assert run.types(new) == [
        "response.output_item.added",
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.output_item.done",
    ]
    run.generate("<|channel|>analysis<|message|>Search first.<|end|><|start|>assistant" + SEARCH)
    call = pending_call(run.state)
    assert call is not None
    assert (call.kind, call.recipient, call.name) == ("web_search_call", "browser.search", "search")
    assert json.loads(call.arguments) == {"query": "paris weather"}
    assert run.events[-1].type == "response.web_search_call.searching"
    new = run.take(tool_result(run.state, call.item_id, "Sunny, 21C"))
    assert run.types(new) == ["response.web_search_call.completed", "response.output_item.done"]
    run.state = next_generation(run.state, input_tokens=30)
    run.generate(MCP)
    call = pending_call(run.state)
    assert call is not None and call.kind == "mcp_call"
    assert (call.server_label, call.name, call.recipient) == ("deepwiki", "ask", "deepwiki.ask")
    new = run.take(tool_result(run.state, call.item_id, "42"))
    assert run.types(new) == ["response.mcp_call.completed", "response.output_item.done"]
    run.state = next_generation(run.state, input_tokens=50)
    run.generate(ANSWER)
    assert pending_call(run.state) is None
    run.take(finish(run.state, "stop"))

    assert_conformant(run.events)
    final = assert_sdk_digests(run.events)
    assert final is not None and final.output_text == "It is sunny."
    wire = run.wire()
    response = wire[-1]["response"]
    assert [i["type"] for i in response["output"]] == [
        "mcp_list_tools",
        "reasoning",
        "web_search_call",
        "mcp_call",
        "message",
    ]
    assert [e["sequence_number"] for e in wire] == list(range(len(wire)))
    assert response["output"][0]["tools"][0]["name"] == "ask"
    assert response["output"][2]["action"] == {"type": "search", "query": "paris weather"}
    assert response["output"][3]["output"] == "42"
    assert response["output"][3]["status"] == "completed"
    # usage adds up over the generations: every prompt is input, every token output
    assert response["usage"]["input_tokens"] == 10 + 30 + 50
    generated = len(tokens("<|channel|>analysis<|message|>Search first.<|end|><|start|>assistant"))
    generated += len(tokens(SEARCH)) + len(tokens(MCP)) + len(tokens(ANSWER))
    assert response["usage"]["output_tokens"] == generated
    assert snapshot(run.events) == run.events[-1].response  # type: ignore[union-attr]


def test_code_interpreter_call_carries_outputs_null_until_done() -> None:
    run = Run()
    run.generate(PYTHON)
    added = next(e for e in run.wire() if e["type"] == "response.output_item.added")
    assert "outputs" in added["item"] and added["item"]["outputs"] is None
    assert run.events[-1].type == "response.code_interpreter_call.interpreting"
    call = pending_call(run.state)
    assert call is not None and call.arguments == "print(6 * 7)"
    new = run.take(tool_result(run.state, call.item_id, "42\n"))
    assert [e.type for e in new] == [
        "response.code_interpreter_call.completed",
        "response.output_item.done",
    ]
    done = to_wire(new[-1])["item"]
    assert done["outputs"] == [{"type": "logs", "logs": "42\n"}]
    assert done["status"] == "completed"
    run.state = next_generation(run.state)
    run.generate(ANSWER)
    run.take(finish(run.state, "stop"))
    assert_conformant(run.events)
    assert_sdk_digests(run.events)


def test_a_tool_that_fails_marks_its_item_and_the_response_goes_on() -> None:
    run = Run()
    run.generate(MCP)
    call = pending_call(run.state)
    assert call is not None
    new = run.take(tool_result(run.state, call.item_id, error="timed out after 30 s"))
    assert [e.type for e in new] == ["response.mcp_call.failed", "response.output_item.done"]
    item = to_wire(new[-1])["item"]
    assert item["status"] == "failed"
    assert item["error"] == {
        "type": "mcp_tool_execution_error",
        "content": [{"type": "text", "text": "timed out after 30 s"}],
    }
    assert item["output"] is None  # a failed call has no output; the API sends the key as null
    run.state = next_generation(run.state, input_tokens=5)
    run.generate(ANSWER)
    run.take(finish(run.state, "stop"))
    assert_conformant(run.events)
    assert_sdk_digests(run.events)


def test_a_failed_web_search_and_code_run_end_failed() -> None:
    run = Run()
    run.generate(SEARCH)
    call = pending_call(run.state)
    assert call is not None
    new = run.take(tool_result(run.state, call.item_id, error="no backend"))
    assert [e.type for e in new] == ["response.output_item.done"]
    assert to_wire(new[-1])["item"]["status"] == "failed"
    run.state = next_generation(run.state)
    run.generate(PYTHON)
    call = pending_call(run.state)
    assert call is not None
    new = run.take(tool_result(run.state, call.item_id, error="Traceback: ZeroDivisionError"))
    item = to_wire(new[-1])["item"]
    assert item["status"] == "failed"
    assert item["outputs"] == [{"type": "logs", "logs": "Traceback: ZeroDivisionError"}]
    run.take(finish(run.state, "stop"))
    assert_conformant(run.events)
    assert_sdk_digests(run.events)


def test_listing_that_fails_is_a_failed_mcp_list_tools_item() -> None:
    run = Run()
    new = run.take(list_tools(run.state, "deepwiki", error="connection refused"))
    assert [e.type for e in new][1:3] == [
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.failed",
    ]
    item = to_wire(new[-1])["item"]
    assert item == {
        "type": "mcp_list_tools",
        "id": "mcpl_test_0",
        "server_label": "deepwiki",
        "tools": [],
        "error": "connection refused",
    }
    run.generate(ANSWER)
    run.take(finish(run.state, "stop"))
    assert_conformant(run.events)
    assert_sdk_digests(run.events)


def test_a_tool_needing_approval_ends_the_response_with_an_approval_request() -> None:
    run = Run()
    run.generate(
        "<|channel|>commentary to=bank.transfer <|constrain|>json<|message|>"
        '{"to": "bob", "eur": 5}<|call|>'
    )
    assert pending_call(run.state) is None
    run.take(finish(run.state, "stop"))
    assert_conformant(run.events)
    assert_sdk_digests(run.events)
    wire = run.wire()
    types = [e["type"] for e in wire]
    assert types[2:4] == ["response.output_item.added", "response.output_item.done"]
    (request,) = wire[-1]["response"]["output"]
    assert request == {
        "type": "mcp_approval_request",
        "id": "mcpr_test_0",
        "arguments": '{"to": "bob", "eur": 5}',
        "name": "transfer",
        "server_label": "bank",
    }
    # The next request approves it: the loop runs the call, then generates the answer.
    nxt = Run()
    new = nxt.take(
        approved_call(nxt.state, "mcpr_test_0", "bank", "transfer", request["arguments"])
    )
    assert [e.type for e in new] == [
        "response.output_item.added",
        "response.mcp_call.in_progress",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
    ]
    call = pending_call(nxt.state)
    assert call is not None and call.arguments == request["arguments"]
    nxt.take(tool_result(nxt.state, call.item_id, "sent"))
    nxt.state = next_generation(nxt.state, input_tokens=3)
    nxt.generate(ANSWER)
    nxt.take(finish(nxt.state, "stop"))
    assert_conformant(nxt.events)
    assert_sdk_digests(nxt.events)
    done = nxt.wire()[-1]["response"]["output"][0]
    assert done["approval_request_id"] == "mcpr_test_0"
    assert done["output"] == "sent"


def test_finish_with_a_call_pending_closes_it_incomplete() -> None:
    run = Run()
    run.generate(PYTHON)
    new = run.take(finish(run.state, "abort"))
    assert [e.type for e in new] == ["response.output_item.done", "response.failed"]
    assert to_wire(new[0])["item"]["status"] == "incomplete"
    assert_conformant(run.events)


def test_tool_limit_ends_incomplete_with_max_messages() -> None:
    run = Run()
    run.generate(MCP)
    call = pending_call(run.state)
    assert call is not None
    run.take(tool_result(run.state, call.item_id, error="max_tool_calls (1) reached"))
    new = run.take(finish(run.state, "tool_limit"))
    response = to_wire(new[-1])["response"]
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_messages"}
    assert_conformant(run.events)
    assert_sdk_digests(run.events)


def test_without_server_tools_calls_close_as_before() -> None:
    run = Run(server_tools=ServerTools())
    run.generate(PYTHON)
    assert pending_call(run.state) is None
    assert run.events[-1].type == "response.output_item.done"
    run.generate("<|start|>assistant" + ANSWER)  # stepping goes on: nothing is pending


def test_only_the_listed_mcp_server_runs_its_calls() -> None:
    run = Run(server_tools=ServerTools(mcp=(McpServer(server_label="other"),)))
    run.generate(MCP)  # deepwiki is not a server of this response: closed as written
    assert pending_call(run.state) is None
    assert run.events[-2].type == "response.mcp_call.completed"


# -- misuse raises ReducerUsageError saying what to do -------------------------------------


def test_stepping_while_a_call_is_pending_says_to_answer_it() -> None:
    run = Run()
    run.generate(MCP)
    with pytest.raises(ReducerUsageError, match=r"tool_result\(\).*next_generation\(\)"):
        step(run.state, tokens("Hi")[0])
    with pytest.raises(ReducerUsageError, match="waits for its result"):
        next_generation(run.state)
    with pytest.raises(ReducerUsageError, match="waits for its result"):
        list_tools(run.state, "deepwiki")


@pytest.mark.parametrize(
    "call",
    [
        lambda s, c: tool_result(s, "mcp_nope", "x"),
        lambda s, c: tool_result(s, c.item_id),
        lambda s, c: tool_result(s, c.item_id, "x", error="y"),
    ],
    ids=["wrong id", "neither", "both"],
)
def test_tool_result_misuse(call: Any) -> None:
    run = Run()
    run.generate(MCP)
    pending = pending_call(run.state)
    with pytest.raises(ReducerUsageError, match="tool_result"):
        call(run.state, pending)


def test_tool_result_with_nothing_pending_or_twice() -> None:
    run = Run()
    with pytest.raises(ReducerUsageError, match="nothing is pending"):
        tool_result(run.state, "ws_test_0", "x")
    run.generate(SEARCH)
    call = pending_call(run.state)
    assert call is not None
    run.take(tool_result(run.state, call.item_id, "ok"))
    with pytest.raises(ReducerUsageError, match="nothing is pending"):
        tool_result(run.state, call.item_id, "ok")


def test_list_tools_misuse() -> None:
    run = Run()
    with pytest.raises(ReducerUsageError, match="no MCP server with that label"):
        list_tools(run.state, "nope")
    run.take(list_tools(run.state, "deepwiki"))
    with pytest.raises(ReducerUsageError, match="called twice"):
        list_tools(run.state, "deepwiki")
    run.generate("<|channel|>final<|message|>Half")
    with pytest.raises(ReducerUsageError, match="still being generated"):
        list_tools(run.state, "bank")
    run.take(finish(run.state, "stop"))
    with pytest.raises(ReducerUsageError, match="after finish"):
        next_generation(run.state)


def test_server_tools_misuse() -> None:
    with pytest.raises(ReducerUsageError, match="server_label twice"):
        ServerTools(mcp=(McpServer(server_label="a"), McpServer(server_label="a")))
    with pytest.raises(ReducerUsageError, match="takes a ServerTools"):
        start(GRAMMAR, new_response(), server_tools={"browser": True})  # type: ignore[arg-type]


def test_the_checker_accepts_every_stream_here() -> None:
    # A guard that the helpers above really check: a stream with a planted gap fails.
    run = Run()
    run.generate(MCP)
    wire = run.wire()
    del wire[3]
    assert check(wire)


def _agent_run() -> Run:
    run = Run()
    run.take(list_tools(run.state, "deepwiki", tools=(WEATHER,)))
    run.generate(SEARCH)
    call = pending_call(run.state)
    assert call is not None
    run.take(tool_result(run.state, call.item_id, "Sunny"))
    run.state = next_generation(run.state, input_tokens=4)
    run.generate(PYTHON)
    call = pending_call(run.state)
    assert call is not None
    run.take(tool_result(run.state, call.item_id, "42"))
    run.state = next_generation(run.state, input_tokens=4)
    run.generate(ANSWER)
    run.take(finish(run.state, "stop"))
    return run


def test_close_interrupted_ends_an_agent_run_cut_at_any_event() -> None:
    events = _agent_run().events
    for cut in range(1, len(events) - 1):
        prefix = events[:cut]
        closed = [*prefix, *close_interrupted(prefix, "server lost")]
        assert_conformant(closed)
        assert snapshot(closed) == closed[-1].response  # type: ignore[union-attr]


def test_close_interrupted_while_a_tool_runs_ends_its_call_incomplete() -> None:
    # Cut while the search ran: `searching` was sent, `completed` never. The call did not
    # complete, so it must not be closed as if it had (the reducer's finish does the same).
    run = Run()
    run.generate(SEARCH)
    assert run.events[-1].type == "response.web_search_call.searching"
    tail = close_interrupted(run.events, "server lost")
    assert [e.type for e in tail] == ["response.output_item.done", "response.failed"]
    assert to_wire(tail[0])["item"]["status"] == "incomplete"
    by_finish = finish(run.state, "error", "server lost")[1]
    # The same close, except the query: no event carries a search's arguments before its
    # done item, so a log cannot bring them back (see _recover's docstring).
    assert [e.type for e in tail] == [e.type for e in by_finish]
    assert to_wire(by_finish[0])["item"] == {**to_wire(tail[0])["item"], "action": SEARCHED}
