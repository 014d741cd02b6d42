"""The table of output-item kinds: everything the reducer knows about one kind, in one row.

`_items.py` opens, grows and closes items by reading a row; `_snapshot.py` and `_recover.py`
read the same rows to rebuild items from events; the compiled hot path (`_speedups.c`) gets its
delta builders from `_items.DELTAS`, which is made from this table. Adding a kind is one row here
plus the grammar's routing to it (see `_grammars/harmony.py`'s `_route`).

An item's events, by column (each progress column is a tuple of event classes that carry only
`item_id` and `output_index`):

| column      | emitted                                                                     |
|-------------|-----------------------------------------------------------------------------|
| `part`      | with `content_part.added` after `output_item.added`, and `.done` at close   |
| `opened`    | right after `output_item.added` (and the part)                              |
| `delta`     | per piece of text; None: the text is collected silently (a search's query)  |
| `done`      | closes the text, carrying it in its `done_field`                            |
| `running`   | once a call is written in full: the server runs the tool now                |
| `completed` | the call succeeded (or, for an item that runs nothing, its text is closed)  |
| `failed`    | the call failed, or the item was cut before it finished                     |

so an item closes with `done`, then `running` + `completed` (or just `failed` when cut), then
`output_item.done`. A call that the server runs itself (`server_tools` at `start`) stops after
`running`: it is *pending* until `tool_result` brings its outcome.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import attrs

from . import _events as ev
from . import _model as m

if TYPE_CHECKING:
    from ._items import OpenItem

__all__ = ["KINDS", "CallKind", "ItemKind", "ItemStatus", "Kind", "Outcome", "kind_of_item"]

ItemKind = Literal[
    "message",
    "reasoning",
    "function_call",
    "custom_tool_call",
    "web_search_call",
    "code_interpreter_call",
    "mcp_call",
    "mcp_list_tools",
    "mcp_approval_request",
    "tool_search_call",
]
#: The kinds of a call the server runs for the model (the agent loop's tools): the reducer
#: makes one from the recipient (`browser.*` a web search, `python` a code interpreter call,
#: anything else an MCP call). The types name the table's rows; a test holds them equal.
CallKind = Literal["web_search_call", "code_interpreter_call", "mcp_call"]
ItemStatus = Literal["in_progress", "completed", "incomplete", "failed"]


@attrs.frozen(kw_only=True)
class Outcome:
    """What a server-side tool call came to (`tool_result`), for its done item."""

    output: str | None = None
    error: m.McpCallError | None = None
    outputs: tuple[m.CodeInterpreterOutputLogs, ...] | None = None
    tools: tuple[m.McpListToolsTool, ...] = ()
    listing_error: str | None = None


Build = Callable[["OpenItem", str, ItemStatus, tuple[m.Logprob, ...], Outcome | None], m.OutputItem]


@attrs.frozen(kw_only=True)
class Kind:
    """One row: a kind of output item (see the module docstring for the columns)."""

    name: str
    prefix: str  # the item id's prefix: `{prefix}_{response}_{output_index}`
    item: type  # the item class as the wire shows it
    build: Build  # the item with its text so far, a status and (for calls) the outcome
    part: type | None = None
    opened: tuple[type, ...] = ()
    delta: type | None = None
    done: type | None = None
    done_field: str = ""
    running: tuple[type, ...] = ()
    completed: tuple[type, ...] = ()
    failed: tuple[type, ...] = ()
    logprobs: bool = False  # its text carries token logprobs (message text only)
    call_id: bool = False  # it has a `call_id` the client answers with (function calls)
    container: bool = False  # it runs in a container with an id (code interpreter)


# -- how each kind's item looks ---------------------------------------------------------------


def _message(
    item: OpenItem, text: str, status: ItemStatus, logprobs: tuple[m.Logprob, ...], _: Any
) -> m.OutputItem:
    content: tuple[m.ResponseOutputText, ...] = (
        () if status == "in_progress" else (m.ResponseOutputText(text=text, logprobs=logprobs),)
    )
    return m.ResponseOutputMessage(
        id=item.item_id,
        status=status,  # type: ignore[arg-type]  # a message is never failed
        content=content,
        phase=item.phase,
    )


def _reasoning(item: OpenItem, text: str, status: ItemStatus, _: Any, __: Any) -> m.OutputItem:
    content: tuple[m.ReasoningText, ...] = (
        () if status == "in_progress" else (m.ReasoningText(text=text),)
    )
    return m.ResponseReasoningItem(id=item.item_id, content=content, status=status)  # type: ignore[arg-type]


def _function_call(item: OpenItem, text: str, status: ItemStatus, _: Any, __: Any) -> m.OutputItem:
    return m.ResponseFunctionToolCall(
        id=item.item_id,
        call_id=item.call_id or "",
        name=item.name or "",
        arguments=text,
        status=status,  # type: ignore[arg-type]
        namespace=item.namespace,
    )


def _custom_tool_call(item: OpenItem, text: str, _: ItemStatus, __: Any, ___: Any) -> m.OutputItem:
    return m.ResponseCustomToolCall(
        id=item.item_id,
        call_id=item.call_id or "",
        name=item.name or "",
        input=text,
        namespace=item.namespace,
    )


def web_search_action(arguments: str, name: str | None) -> m.WebSearchAction:
    """A browser call's arguments as the web search action the API shows."""
    try:
        args = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        args = None
    if not isinstance(args, dict):
        return m.ActionSearch(query=arguments or None)

    def text(key: str) -> str | None:
        value = args.get(key)
        return value if isinstance(value, str) else None

    if name == "open":
        return m.ActionOpenPage(url=text("url") or text("id"))
    if name == "find" and text("pattern") is not None:
        return m.ActionFind(pattern=text("pattern") or "", url=text("url") or "")
    return m.ActionSearch(query=text("query"))


def _web_search(item: OpenItem, text: str, status: ItemStatus, _: Any, __: Any) -> m.OutputItem:
    action = m.ActionSearch() if status == "in_progress" else web_search_action(text, item.name)
    return m.ResponseFunctionWebSearch(id=item.item_id, action=action, status=status)


def _code_interpreter(
    item: OpenItem, text: str, status: ItemStatus, _: Any, outcome: Outcome | None
) -> m.OutputItem:
    return m.ResponseCodeInterpreterToolCall(
        id=item.item_id,
        code=text,
        container_id=item.container_id or "",
        outputs=None if outcome is None else outcome.outputs,
        status=status,
    )


def _mcp_call(
    item: OpenItem, text: str, status: ItemStatus, _: Any, outcome: Outcome | None
) -> m.OutputItem:
    return m.McpCall(
        id=item.item_id,
        name=item.name or "",
        server_label=item.server_label or "",
        arguments=text,
        approval_request_id=item.approval_request_id,
        output=None if outcome is None else outcome.output,
        error=None if outcome is None else outcome.error,
        status=status,
    )


def _mcp_list_tools(
    item: OpenItem, _: str, status: ItemStatus, __: Any, outcome: Outcome | None
) -> m.OutputItem:
    error = None if outcome is None else outcome.listing_error
    if error is None and status in ("incomplete", "failed"):
        error = "the tool listing did not finish"  # cut off: `failed` went out, so say why
    return m.McpListTools(
        id=item.item_id,
        server_label=item.server_label or "",
        tools=() if outcome is None else outcome.tools,
        error=error,
    )


def _mcp_approval_request(
    item: OpenItem, text: str, _: ItemStatus, __: Any, ___: Any
) -> m.OutputItem:
    return m.McpApprovalRequest(
        id=item.item_id,
        name=item.name or "",
        server_label=item.server_label or "",
        arguments=text,
    )


def _tool_search_call(
    item: OpenItem, text: str, status: ItemStatus, _: Any, __: Any
) -> m.OutputItem:
    arguments: Any = {}
    if status != "in_progress" and text.strip():
        try:
            arguments = json.loads(text)
            # A lone surrogate escape (`"\ud83d"`) decodes to a str no UTF-8 wire can carry.
            json.dumps(arguments, ensure_ascii=False).encode("utf-8")
        except (json.JSONDecodeError, UnicodeEncodeError):
            arguments = text  # not JSON (or not text): what the model wrote, as it wrote it
    return m.ResponseToolSearchCall(
        id=item.item_id,
        call_id=item.call_id or "",
        arguments=arguments,
        execution="client",
        # The API's item has no `failed`: a call cut off is incomplete.
        status="incomplete" if status == "failed" else status,
    )


# -- the table --------------------------------------------------------------------------------

_ROWS = (
    Kind(
        name="message",
        prefix="msg",
        item=m.ResponseOutputMessage,
        build=_message,
        part=m.ResponseOutputText,
        delta=ev.ResponseTextDeltaEvent,
        done=ev.ResponseTextDoneEvent,
        done_field="text",
        logprobs=True,
    ),
    Kind(
        name="reasoning",
        prefix="rs",
        item=m.ResponseReasoningItem,
        build=_reasoning,
        part=m.ReasoningText,
        delta=ev.ResponseReasoningTextDeltaEvent,
        done=ev.ResponseReasoningTextDoneEvent,
        done_field="text",
    ),
    Kind(
        name="function_call",
        prefix="fc",
        item=m.ResponseFunctionToolCall,
        build=_function_call,
        delta=ev.ResponseFunctionCallArgumentsDeltaEvent,
        done=ev.ResponseFunctionCallArgumentsDoneEvent,
        done_field="arguments",
        call_id=True,
    ),
    Kind(
        name="custom_tool_call",
        prefix="ctc",
        item=m.ResponseCustomToolCall,
        build=_custom_tool_call,
        delta=ev.ResponseCustomToolCallInputDeltaEvent,
        done=ev.ResponseCustomToolCallInputDoneEvent,
        done_field="input",
        call_id=True,
    ),
    Kind(
        name="web_search_call",
        prefix="ws",
        item=m.ResponseFunctionWebSearch,
        build=_web_search,
        opened=(ev.ResponseWebSearchCallInProgressEvent,),
        running=(ev.ResponseWebSearchCallSearchingEvent,),
        completed=(ev.ResponseWebSearchCallCompletedEvent,),
    ),
    Kind(
        name="code_interpreter_call",
        prefix="ci",
        item=m.ResponseCodeInterpreterToolCall,
        build=_code_interpreter,
        opened=(ev.ResponseCodeInterpreterCallInProgressEvent,),
        delta=ev.ResponseCodeInterpreterCallCodeDeltaEvent,
        done=ev.ResponseCodeInterpreterCallCodeDoneEvent,
        done_field="code",
        running=(ev.ResponseCodeInterpreterCallInterpretingEvent,),
        completed=(ev.ResponseCodeInterpreterCallCompletedEvent,),
        container=True,
    ),
    Kind(
        name="mcp_call",
        prefix="mcp",
        item=m.McpCall,
        build=_mcp_call,
        opened=(ev.ResponseMcpCallInProgressEvent,),
        delta=ev.ResponseMcpCallArgumentsDeltaEvent,
        done=ev.ResponseMcpCallArgumentsDoneEvent,
        done_field="arguments",
        completed=(ev.ResponseMcpCallCompletedEvent,),
        failed=(ev.ResponseMcpCallFailedEvent,),
    ),
    Kind(
        name="mcp_list_tools",
        prefix="mcpl",
        item=m.McpListTools,
        build=_mcp_list_tools,
        opened=(ev.ResponseMcpListToolsInProgressEvent,),
        completed=(ev.ResponseMcpListToolsCompletedEvent,),
        failed=(ev.ResponseMcpListToolsFailedEvent,),
    ),
    Kind(
        name="mcp_approval_request",
        prefix="mcpr",
        item=m.McpApprovalRequest,
        build=_mcp_approval_request,
    ),
    Kind(
        name="tool_search_call",
        prefix="tsc",
        item=m.ResponseToolSearchCall,
        build=_tool_search_call,
        call_id=True,
    ),
)

#: kind name -> its row.
KINDS: dict[str, Kind] = {row.name: row for row in _ROWS}
_BY_ITEM: dict[type, Kind] = {row.item: row for row in _ROWS}


def kind_of_item(item: object) -> Kind | None:
    """The row of an output item's class, or None for an item the reducer never makes."""
    return _BY_ITEM.get(type(item))
