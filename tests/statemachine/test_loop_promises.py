"""What the reducer's agent loop (`_loop.py`) promises about a pending call and its result,
each pinned by a bug that was planted in it and survived the suite (issue 37)."""

from __future__ import annotations

from typing import Any

import pytest

from streamfold.statemachine import (
    ApprovedCallStep,
    CodeInterpreterOutputLogs,
    ListToolsStep,
    McpErrorText,
    McpProtocolError,
    McpServer,
    McpToolExecutionError,
    NextGenerationStep,
    ReducerUsageError,
    ServerTools,
    ToolResultStep,
    apply_loop_step,
    approved_call,
    close_interrupted,
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
from tests.harmony_helpers import GRAMMAR, assert_conformant, new_response

TOOLS = ServerTools(browser=True, python=True)


def _pending(call: str) -> tuple[Any, list[Any]]:
    """A response whose model wrote `call` (after `<|channel|>`), now pending."""
    text = f"<|start|>assistant<|channel|>{call}<|call|>"
    state, events = start(GRAMMAR, new_response(), server_tools=TOOLS)
    for token in harmony_encoding().encode(text, allowed_special="all"):
        state, new = step(state, token)
        events += new
    assert pending_call(state) is not None
    return state, events


def _done_item(state: Any, events: list[Any]) -> dict[str, Any]:
    state, new = finish(state, "stop")
    events = [*events, *new]
    assert_conformant(events)
    (done,) = [to_wire(e)["item"] for e in events if e.type == "response.output_item.done"]
    return done


def test_a_call_to_plain_browser_has_the_recipient_browser() -> None:
    """Bug (planted, issue 37): a call to `browser` with no method got the recipient
    `browser.None`, which the server's loop then rendered back into the prompt."""
    state, _ = _pending('analysis to=browser code<|message|>{"query": "x"}')
    call = pending_call(state)
    assert call is not None and call.kind == "web_search_call"
    assert (call.recipient, call.name) == ("browser", None)
    state, _ = _pending('analysis to=browser.search code<|message|>{"query": "x"}')
    call = pending_call(state)
    assert call is not None and (call.recipient, call.name) == ("browser.search", "search")


def test_pending_arguments_keep_their_whitespace() -> None:
    """Bug (planted, issue 37): the pending call's arguments were stripped; Python code's
    indentation and its last newline are part of the program the server runs."""
    code = "\n    x = 1\nif x:\n    print(x)\n\n"
    state, _ = _pending(f"analysis to=python code<|message|>{code}")
    call = pending_call(state)
    assert call is not None and call.recipient == "python" and call.arguments == code


OUTPUTS = (CodeInterpreterOutputLogs(logs="1\n2\n"), CodeInterpreterOutputLogs(logs="3\n"))


@pytest.mark.parametrize(
    ("result", "status"),
    [
        ({"output": "the text", "outputs": OUTPUTS}, "completed"),
        # A timed-out python call: what it printed before the limit, and why it stopped.
        ({"error": "the call timed out after 10 s", "outputs": OUTPUTS}, "failed"),
    ],
)
@pytest.mark.parametrize("replayed", [False, True])
def test_the_outputs_given_to_tool_result_are_the_items_outputs(
    result: dict[str, Any], status: str, replayed: bool
) -> None:
    """Bug (planted, issue 37): the `outputs` given to `tool_result` (and to a replayed
    `ToolResultStep`) could be replaced by the `output`/`error` text unnoticed: only a
    timed-out python call, whose logs differ from its error, shows it."""
    state, events = _pending("analysis to=python code<|message|>print(1)")
    call = pending_call(state)
    assert call is not None
    if replayed:
        state, new = apply_loop_step(state, ToolResultStep(item_id=call.item_id, **result))
    else:
        state, new = tool_result(state, call.item_id, **result)
    done = _done_item(state, [*events, *new])
    assert done["status"] == status
    assert done["outputs"] == [{"type": "logs", "logs": "1\n2\n"}, {"type": "logs", "logs": "3\n"}]


@pytest.mark.parametrize("replayed", [False, True])
def test_without_outputs_a_python_call_shows_its_text_as_logs(replayed: bool) -> None:
    state, events = _pending("analysis to=python code<|message|>print(1)")
    call = pending_call(state)
    assert call is not None
    if replayed:
        state, new = apply_loop_step(state, ToolResultStep(item_id=call.item_id, error="boom"))
    else:
        state, new = tool_result(state, call.item_id, error="boom")
    done = _done_item(state, [*events, *new])
    assert done["status"] == "failed"
    assert done["outputs"] == [{"type": "logs", "logs": "boom"}]


@pytest.mark.parametrize("cut", [1, 2])  # after output_item.added, after .in_progress
def test_a_tool_listing_cut_off_is_closed_failed_with_an_error_that_says_so(cut: int) -> None:
    """Bug (found by cosmic-ray, issue 37): `error is None` made `is not None` in the listing's
    done item: a listing cut off mid-way (a server killed while it listed) was closed with
    `mcp_list_tools.failed` and no `error`, against rule R28."""
    tools = ServerTools(mcp=(McpServer(server_label="deepwiki"),))
    state, events = start(GRAMMAR, new_response(), server_tools=tools)
    state, listed = list_tools(state, "deepwiki", tools=())
    events = [*events, *listed[:cut]]  # the log a killed server left
    closed = [*events, *close_interrupted(events, "the server stopped")]
    assert_conformant(closed)
    (done,) = [to_wire(e)["item"] for e in closed if e.type == "response.output_item.done"]
    assert done["type"] == "mcp_list_tools"
    assert done["error"] == "the tool listing did not finish"


# -- cosmic-ray's survivors in _loop.py (issue 37) -------------------------------------------

MCP_TOOLS = ServerTools(
    python=True, mcp=(McpServer(server_label="deepwiki"), McpServer(server_label="zeta"))
)


def test_each_loop_step_replays_as_the_call_it_stands_for() -> None:
    """`isinstance(action, NextGenerationStep)` or `ApprovedCallStep` negated survived: a
    recorded run replays through `apply_loop_step`, which must make the same call."""
    state, _ = start(GRAMMAR, new_response(), server_tools=MCP_TOOLS)
    direct, _ = list_tools(state, "deepwiki", tools=())
    replayed, _ = apply_loop_step(state, ListToolsStep(server_label="deepwiki"))
    assert replayed == direct
    assert apply_loop_step(direct, NextGenerationStep(input_tokens=7)) == (
        next_generation(direct, input_tokens=7),
        [],
    )
    approved = approved_call(direct, "mcpr_x", "deepwiki", "ask", '{"q": 1}')
    step_ = ApprovedCallStep(
        approval_request_id="mcpr_x", server_label="deepwiki", name="ask", arguments='{"q": 1}'
    )
    assert apply_loop_step(direct, step_) == approved
    with pytest.raises(ReducerUsageError, match="apply_loop_step"):
        apply_loop_step(direct, "next")  # type: ignore[arg-type]


def test_next_generation_adds_exactly_the_prompt_it_is_given() -> None:
    """Defaults of 1 or -1 and a bound of `< -1` survived."""
    state, _ = start(GRAMMAR, new_response(), input_tokens=5)
    assert next_generation(state).input_tokens == 5
    assert apply_loop_step(state, NextGenerationStep())[0].input_tokens == 5
    assert next_generation(state, input_tokens=0).input_tokens == 5
    for bad in (-1, -2, 1.5, "3"):
        with pytest.raises(ReducerUsageError, match="non-negative int"):
            next_generation(state, input_tokens=bad)  # type: ignore[arg-type]


def test_tool_result_answers_only_the_pending_call() -> None:
    """`call.item_id != item_id` made `>` survived: an id that sorts after the pending one
    was taken for it."""
    state, _ = _pending("analysis to=python code<|message|>print(1)")
    call = pending_call(state)
    assert call is not None
    for wrong in ("a_wrong_id", "zz_wrong_id"):
        with pytest.raises(ReducerUsageError) as raised:
            tool_result(state, wrong, "1")
        assert str(raised.value).startswith(f"tool_result({wrong!r}): {call.item_id} is pending")
    # An id read back from a recorded trace is equal, not the same object (`is not` survived).
    done, _ = tool_result(state, "".join(list(call.item_id)), "1")
    with pytest.raises(ReducerUsageError, match="after finish"):
        tool_result(finish(done, "stop")[0], call.item_id, "1")


def test_each_server_is_listed_once_whatever_the_order() -> None:
    """`i.server_label == server_label` made `<=`, `>=` or `is` survived."""
    for first, second in (("deepwiki", "zeta"), ("zeta", "deepwiki")):
        state, _ = start(GRAMMAR, new_response(), server_tools=MCP_TOOLS)
        state, _ = list_tools(state, first)
        state, _ = list_tools(state, second)  # another server, sorting after or before: listed
        with pytest.raises(ReducerUsageError, match="called twice"):
            list_tools(state, "".join(list(first)))  # equal, not the same object


@pytest.mark.parametrize(
    "error",
    [
        McpToolExecutionError(content=(McpErrorText(text="no such"), McpErrorText(text="repo"))),
        McpProtocolError(code=-32601, message="no such method"),
    ],
)
def test_an_error_value_is_the_mcp_calls_error_and_a_python_calls_logs(error: Any) -> None:
    """`elif error is not None` negated and `isinstance(error, McpToolExecutionError)` negated
    survived: an error given as a value (not a string) is the MCP call's `error` as given, and
    a python call shows its text as logs."""
    text = "no such\nrepo" if isinstance(error, McpToolExecutionError) else "no such method"
    state, events = start(GRAMMAR, new_response(), server_tools=MCP_TOOLS)
    for token in harmony_encoding().encode(
        "<|start|>assistant<|channel|>commentary to=deepwiki.ask <|constrain|>json<|message|>"
        '{"q": 1}<|call|>',
        allowed_special="all",
    ):
        state, new = step(state, token)
        events += new
    call = pending_call(state)
    assert call is not None
    state, new = tool_result(state, call.item_id, error=error)
    assert to_wire(new[-1])["item"]["error"] == to_wire(error)
    state, _ = _pending("analysis to=python code<|message|>print(1)")
    call = pending_call(state)
    assert call is not None
    state, new = tool_result(state, call.item_id, error=error)
    assert to_wire(new[-1])["item"]["outputs"] == [{"type": "logs", "logs": text}]
