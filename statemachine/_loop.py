"""The agent loop inside one response, as pure functions over `ResponseState`.

Theory of operation. The server's loop (`streamfold.adapters`) does the I/O: it lists MCP
tools, runs calls and feeds their results back into the prompt. Every event it causes comes
from here, so one response stays one conformant stream however many generations it spans:

    state, events = start(grammar, response, server_tools=ServerTools(...))
    state, events = list_tools(state, "deepwiki", tools=(McpToolInfo(...),))   # per MCP server
    loop:
        state, events = step(state, token)            # one generation, as ever
        call = pending_call(state)                    # a server-side call the model wrote?
        if call is None: break
        state, events = tool_result(state, call.item_id, output)   # or error=...
        state = next_generation(state, input_tokens=n)              # the prompt grew
    state, events = finish(state, "stop")

A call is *pending* from the moment the model finished writing it (its arguments done and its
`running` progress events sent: `web_search_call.searching`, `code_interpreter_call
.interpreting`) until `tool_result` sends its `completed` (or `failed`) events and
`output_item.done`. Ids, output indices and sequence numbers run on across generations; usage
adds up (each generation's prompt is input, every generated token output).

An MCP tool that needs approval becomes an `mcp_approval_request` item instead (see
`_harmony._route`); the response ends there and the next request's `mcp_approval_response`
brings it back: `approved_call` then opens the approved `mcp_call` as a pending call.
"""

from __future__ import annotations

import attrs

from . import _events as ev
from . import _model as m
from ._errors import ReducerUsageError
from ._grammar import ResponseState, replace_state, settle_call
from ._items import Out, append_text, end_call, open_item, settle
from ._kinds import CallKind, ItemStatus, Outcome
from ._reducer import closed_error
from ._text import rope_text

__all__ = [
    "ApprovedCallStep",
    "ListToolsStep",
    "LoopStep",
    "McpToolInfo",
    "NextGenerationStep",
    "PendingCall",
    "ToolResultStep",
    "apply_loop_step",
    "approved_call",
    "list_tools",
    "next_generation",
    "pending_call",
    "tool_result",
]

#: One tool an MCP server lists (openai `McpListToolsTool`).
McpToolInfo = m.McpListToolsTool


@attrs.frozen(kw_only=True)
class PendingCall:
    """A call the model wrote to a tool the server runs, waiting for `tool_result`.

    `recipient` is the harmony recipient (`browser.search`, `python`, `deepwiki.ask`);
    `arguments` the text the model wrote for it (the code, for `python`).
    """

    item_id: str
    kind: CallKind
    recipient: str
    server_label: str | None
    name: str | None
    arguments: str


def pending_call(state: ResponseState) -> PendingCall | None:
    """The call the server must run before the response can go on, if any (no events)."""
    call = state.call
    if call is None:
        return None
    if call.kind == "web_search_call":
        recipient = "browser" if call.name is None else f"browser.{call.name}"
    elif call.kind == "code_interpreter_call":
        recipient = "python"
    else:
        recipient = f"{call.server_label}.{call.name}"
    return PendingCall(
        item_id=call.item_id,
        kind=call.kind,  # type: ignore[arg-type]  # only these kinds are ever pending
        recipient=recipient,
        server_label=call.server_label,
        name=call.name,
        arguments=rope_text(call.text),
    )


def _between_items(state: ResponseState, what: str) -> None:
    """Raise unless `what` may add an item now: not finished, nothing open or pending."""
    if state.finished or state.call is not None:
        raise closed_error(state, what)
    if state.open is not None:
        raise ReducerUsageError(
            f"{what} while the {state.open.kind} {state.open.item_id} is still being "
            "generated: call it before the first generation or after one has ended"
        )


def list_tools(
    state: ResponseState,
    server_label: str,
    tools: tuple[m.McpListToolsTool, ...] = (),
    error: str | None = None,
) -> tuple[ResponseState, list[ev.Event]]:
    """One whole `mcp_list_tools` item: what an MCP server offers, or why listing it failed.

    Emits `output_item.added`, `response.mcp_list_tools.in_progress`, `.completed` (`.failed`
    when `error` is given) and `output_item.done`. Once per MCP server of `server_tools`.
    """
    _between_items(state, "list_tools()")
    if state.server_tools.mcp_server(server_label) is None:
        known = [s.server_label for s in state.server_tools.mcp]
        raise ReducerUsageError(
            f"list_tools({server_label!r}): no MCP server with that label was given to "
            f"start(server_tools=...) (known: {known})"
        )
    if any(isinstance(i, m.McpListTools) and i.server_label == server_label for i in state.output):
        raise ReducerUsageError(
            f"list_tools({server_label!r}) called twice: a response lists each server once"
        )
    tools = tuple(tools)
    if not all(isinstance(tool, m.McpListToolsTool) for tool in tools):
        raise ReducerUsageError("list_tools(tools=...) takes McpToolInfo values")
    out = Out(state.seq)
    item = open_item(
        out,
        kind="mcp_list_tools",
        output_index=state.next_output_index,
        response_id=state.response.id,
        server_label=server_label,
    )
    status: ItemStatus = "completed" if error is None else "failed"
    outcome = Outcome(tools=tools, listing_error=error)
    done = settle(out, item, "", status, outcome=outcome)
    return replace_state(state, seq=out.seq, output=(*state.output, done)), out.events


def tool_result(
    state: ResponseState,
    item_id: str,
    output: str | None = None,
    *,
    error: str | m.McpCallError | None = None,
    outputs: tuple[m.CodeInterpreterOutputLogs, ...] | None = None,
) -> tuple[ResponseState, list[ev.Event]]:
    """Complete the pending call `item_id` with what its tool said: `output` when it ran,
    `error` when it failed (or timed out, or a limit stopped it).

    A web search ends `completed` (or `failed`); a code interpreter call carries `outputs`
    (by default the `output` or `error` text as logs); an MCP call carries `output`, or `error`
    (a string becomes an `mcp_tool_execution_error` with that text) and ends with
    `response.mcp_call.completed` or `.failed`. Then `output_item.done`.
    """
    call = state.call
    if state.finished or call is None or call.item_id != item_id:
        pending = "nothing is pending" if call is None else f"{call.item_id} is pending"
        after = " after finish()" if state.finished else ""
        raise ReducerUsageError(
            f"tool_result({item_id!r}){after}: {pending}; answer the call that "
            "pending_call(state) returns, once"
        )
    if (output is None) == (error is None):
        raise ReducerUsageError(
            "tool_result() takes exactly one of output (the tool ran) or error (it failed)"
        )
    failed = error is not None
    if error is None:
        text = output or ""
    else:
        text = error if isinstance(error, str) else _error_text(error)
    if outputs is None and call.kind == "code_interpreter_call":
        outputs = (m.CodeInterpreterOutputLogs(logs=text),)
    mcp_error: m.McpCallError | None = None
    if isinstance(error, str):
        mcp_error = m.McpToolExecutionError(content=(m.McpErrorText(text=error),))
    elif error is not None:
        mcp_error = error
    outcome = Outcome(
        output=None if failed else output,
        error=mcp_error if call.kind == "mcp_call" else None,
        outputs=outputs,
    )
    out = Out(state.seq)
    state = settle_call(state, out, "failed" if failed else "completed", outcome)
    return replace_state(state, seq=out.seq), out.events


def _error_text(error: m.McpCallError) -> str:
    if isinstance(error, m.McpToolExecutionError):
        return "\n".join(block.text for block in error.content)
    return error.message


def next_generation(state: ResponseState, *, input_tokens: int = 0) -> ResponseState:
    """Begin the next generation of the same response (no events): a fresh grammar parse,
    `input_tokens` (the new prompt's length) added to usage; output tokens keep adding up."""
    _between_items(state, "next_generation()")
    if type(input_tokens) is not int or input_tokens < 0:
        raise ReducerUsageError(
            f"next_generation(input_tokens=...) takes a non-negative int, got {input_tokens!r}"
        )
    return replace_state(
        state, parse=state.grammar.initial(), input_tokens=state.input_tokens + input_tokens
    )


def approved_call(
    state: ResponseState, approval_request_id: str, server_label: str, name: str, arguments: str
) -> tuple[ResponseState, list[ev.Event]]:
    """Open the MCP call a client approved (its `mcp_approval_response`) as the pending call:
    `output_item.added` (with `approval_request_id`), `response.mcp_call.in_progress`, the
    arguments' delta and done. Then `tool_result` and `next_generation` as for any call."""
    _between_items(state, "approved_call()")
    if state.server_tools.mcp_server(server_label) is None:
        raise ReducerUsageError(
            f"approved_call(): no MCP server {server_label!r} was given to start(server_tools=...)"
        )
    out = Out(state.seq)
    item = open_item(
        out,
        kind="mcp_call",
        output_index=state.next_output_index,
        response_id=state.response.id,
        name=name,
        server_label=server_label,
        approval_request_id=approval_request_id,
    )
    item = end_call(out, append_text(out, item, arguments), state.grammar.vocabulary)
    return replace_state(state, seq=out.seq, call=item), out.events


# -- the loop's calls as values: what a trace records, and replays ------------------------


@attrs.frozen(kw_only=True)
class ListToolsStep:
    """`list_tools(state, server_label, tools, error)` as a value."""

    server_label: str
    tools: tuple[m.McpListToolsTool, ...] = ()
    error: str | None = None


@attrs.frozen(kw_only=True)
class ToolResultStep:
    """`tool_result(state, item_id, output, error=..., outputs=...)` as a value."""

    item_id: str
    output: str | None = None
    error: str | m.McpCallError | None = None
    outputs: tuple[m.CodeInterpreterOutputLogs, ...] | None = None


@attrs.frozen(kw_only=True)
class NextGenerationStep:
    """`next_generation(state, input_tokens=...)` as a value."""

    input_tokens: int = 0


@attrs.frozen(kw_only=True)
class ApprovedCallStep:
    """`approved_call(state, approval_request_id, server_label, name, arguments)` as a value."""

    approval_request_id: str
    server_label: str
    name: str
    arguments: str


LoopStep = ListToolsStep | ToolResultStep | NextGenerationStep | ApprovedCallStep


def apply_loop_step(state: ResponseState, action: LoopStep) -> tuple[ResponseState, list[ev.Event]]:
    """Make the call `action` stands for; a recorded agent run replays through this."""
    if isinstance(action, ListToolsStep):
        return list_tools(state, action.server_label, action.tools, action.error)
    if isinstance(action, ToolResultStep):
        return tool_result(
            state, action.item_id, action.output, error=action.error, outputs=action.outputs
        )
    if isinstance(action, NextGenerationStep):
        return next_generation(state, input_tokens=action.input_tokens), []
    if isinstance(action, ApprovedCallStep):
        return approved_call(
            state, action.approval_request_id, action.server_label, action.name, action.arguments
        )
    raise ReducerUsageError(
        f"apply_loop_step() takes a ListToolsStep, ToolResultStep, NextGenerationStep or "
        f"ApprovedCallStep, got {type(action).__name__}"
    )
