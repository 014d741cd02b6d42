"""A request's controls as a `Shape`: `text.format`, `tool_choice` and its tools' strictness.

| `tool_choice`                 | the completion ends with                                  |
|-------------------------------|-----------------------------------------------------------|
| `none`                        | the answer (no call)                                      |
| `auto`                        | the answer, or a call to any tool of the request          |
| `required`                    | a call to any tool of the request (never a bare answer)   |
| `{type: function, name}`      | a call to that function                                   |
| `{type: allowed_tools, ...}`  | a call to one of those (or the answer, in `auto` mode)    |
| `{type: mcp, server_label}`   | a call to that MCP server's tool (or any of its tools)    |
| hosted (`web_search_preview`) | a call to the built-in tool (`browser.*`, `python`)       |

The answer is free text, or JSON following `text.format` (`json_object`: any object). A call's
input follows its tool's `parameters` when the tool is `strict`, and is free otherwise. With
`parallel_tool_calls` (the default) the completion may end with several calls, each any of
those allowed (a named function, called again and again); with `false`, with one. In the
server's own tool loop, a generation after a call the server ran is `auto` (`after_call`):
forcing another call would never let the loop end (smg relaxes it the same way).

A request that constrains nothing (`auto`, free text, no strict tool) has no shape worth
enforcing: `shape_for` returns the free shape and the format adds no grammar.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import attrs

from streamfold.statemachine import (
    CustomTool,
    CustomToolGrammar,
    FormatJsonObject,
    FormatJsonSchema,
    FunctionTool,
    NamespaceTool,
    ToolChoiceAllowed,
    ToolChoiceCustom,
    ToolChoiceFunction,
    ToolChoiceHosted,
    ToolChoiceMcp,
    ToolSearchTool,
)
from streamfold.statemachine._grammars.chat_tools import FUNCTIONS, TOOL_SEARCH

from ..protocol import CreateRequest, RequestError
from ..protocol._controls import choice_entry
from ..protocol._tools import CodeInterpreterParam, McpParam, WebSearchParam
from ._shape import Body, Call, JsonBody, LarkBody, RegexBody, Shape, TextBody

__all__ = ["check_bodies", "shape_for"]

_OBJECT: dict[str, Any] = {"type": "object"}
_BROWSER = ("browser.search", "browser.open", "browser.find")


def _enforced(fmt: FormatJsonSchema) -> Any:
    """The schema a `json_schema` format is enforced by. A strict one as it is (what it asks
    beyond the strict subset is refused before, `protocol._controls`); a non-strict one
    leniently (llguidance's `lenient`: the keywords it implements are held, others such as
    `uniqueItems` or an unknown `format` left free), as the API takes any schema there. The
    schema's own `x-guidance` stands."""
    schema: Any = fmt.schema
    if fmt.strict or not isinstance(schema, dict):
        return schema
    own = schema.get("x-guidance")
    return {**schema, "x-guidance": {"lenient": True, **(own if isinstance(own, dict) else {})}}


def _answer(request: CreateRequest) -> Body:
    fmt = request.text.format if request.text is not None else None
    if isinstance(fmt, FormatJsonSchema):
        return JsonBody(schema=_enforced(fmt))
    if isinstance(fmt, FormatJsonObject):
        return JsonBody(schema=_OBJECT)
    return TextBody()


def _custom_body(tool: CustomTool) -> Body:
    fmt = tool.format
    if isinstance(fmt, CustomToolGrammar):
        if fmt.syntax == "lark":
            return LarkBody(definition=fmt.definition)
        return RegexBody(pattern=fmt.definition)
    return TextBody()


def _tool_calls(tool: Any, space: str = "functions") -> Iterator[tuple[Call, dict[str, Any]]]:
    """Each call a tool offers, with the `tool_choice` entries that name it."""
    entry = choice_entry(tool)  # the one table of which entry names which tool
    if isinstance(tool, FunctionTool):
        body: Body = JsonBody(schema=tool.parameters or _OBJECT) if tool.strict else TextBody()
        yield Call(recipient=f"{space}.{tool.name}", body=body), entry
    elif isinstance(tool, CustomTool):
        yield Call(recipient=f"{space}.{tool.name}", body=_custom_body(tool)), entry
    elif isinstance(tool, NamespaceTool):
        for inner in tool.tools:
            yield from _tool_calls(inner, tool.name)
    elif isinstance(tool, McpParam):
        yield Call(recipient=f"{tool.server_label}.", any_name=True, body=TextBody()), entry
    elif isinstance(tool, WebSearchParam):
        for recipient in _BROWSER:
            yield Call(recipient=recipient, channel="analysis"), entry
    elif isinstance(tool, CodeInterpreterParam):
        yield Call(recipient="python", channel="analysis", body=TextBody()), entry
    elif isinstance(tool, ToolSearchTool) and tool.execution == "client":
        # Offered as the function `tool_search` (formats/_harmony_prompt.py).
        yield Call(recipient=f"{FUNCTIONS}.{TOOL_SEARCH}", body=TextBody()), entry


def _named(choice: Any, entry: dict[str, Any]) -> bool:
    if isinstance(choice, ToolChoiceFunction):
        return entry == {"type": "function", "name": choice.name}
    if isinstance(choice, ToolChoiceMcp):
        return entry == {"type": "mcp", "server_label": choice.server_label}
    if isinstance(choice, ToolChoiceHosted):
        hosted = {"web_search_preview_2025_03_11": "web_search_preview"}.get(
            choice.type, choice.type
        )
        return entry.get("type") in (choice.type, hosted)
    if isinstance(choice, ToolChoiceCustom):
        return entry == {"type": "custom", "name": choice.name}
    return False


def _mcp_named(call: Call, choice: Any) -> Call:
    # `{type: mcp, server_label, name}` names one of the server's tools.
    if isinstance(choice, ToolChoiceMcp) and choice.name:
        return attrs.evolve(call, recipient=f"{choice.server_label}.{choice.name}", any_name=False)
    return call


def _searches(request: CreateRequest) -> list[ToolSearchTool]:
    return [tool for tool in request.tools if isinstance(tool, ToolSearchTool)]


def shape_for(request: CreateRequest, *, after_call: bool = False) -> Shape:
    """The shape `request` asks for (see the module docstring); not yet budgeted."""
    shape = _chosen(request, after_call)
    return attrs.evolve(shape, parallel_calls=request.parallel_tool_calls)


def _chosen(request: CreateRequest, after_call: bool) -> Shape:
    answer = _answer(request)
    offered = [
        pair
        for tool in (*request.client_tools, *request.server_tools, *_searches(request))
        for pair in _tool_calls(tool)
    ]
    calls = tuple(call for call, _ in offered)
    choice = request.tool_choice
    if (
        after_call
        and choice != "none"
        and not (isinstance(choice, ToolChoiceAllowed) and choice.mode == "auto")
    ):
        choice = "auto"
    if choice == "none":
        return Shape(answer=answer, calls=())
    if choice == "auto":
        # Nothing to enforce unless the answer or a call's input is held to something; once
        # something is, calls are held to the tools the request declares.
        strict = any(not isinstance(call.body, TextBody) for call in calls)
        free = isinstance(answer, TextBody) and not strict
        return Shape(answer=answer, calls=None if free else calls)
    if choice == "required":
        return _callable(Shape(answer=None, calls=calls))
    if isinstance(choice, ToolChoiceAllowed):
        allowed = tuple(call for call, entry in offered if entry in choice.tools)
        return _callable(Shape(answer=answer if choice.mode == "auto" else None, calls=allowed))
    named = tuple(_mcp_named(call, choice) for call, entry in offered if _named(choice, entry))
    return _callable(Shape(answer=None, calls=named))


def _callable(shape: Shape) -> Shape:
    """`shape`, unless it forces a call and offers none: `required` with no tools, or a
    `tool_choice` naming only tools the server left out of the prompt (hosted tools it does
    not run, `agent._config.served_tools`). A 400 naming `tool_choice`, never a grammar that
    allows nothing."""
    if shape.answer is None and not shape.calls:
        raise RequestError(
            "tool_choice asks for a tool call, but the request offers the model no tool it "
            "allows (none in tools, or only hosted tools this server does not run, which are "
            "left out of the prompt)",
            param="tool_choice",
        )
    return shape


def check_bodies(request: CreateRequest) -> None:
    """Refuse (400, naming the param) a user schema llguidance cannot compile (a `pattern`
    in a syntax its regex engine lacks, say; for a non-strict format, only what even its
    lenient reading cannot): found before anything is generated."""
    from streamfold.engines.guidance import validate_grammar

    fmt = request.text.format if request.text is not None else None
    checks: list[tuple[str, Any]] = []
    if isinstance(fmt, FormatJsonSchema):
        checks.append(("text.format.schema", _enforced(fmt)))
    for i, tool in enumerate(request.tools):
        if isinstance(tool, FunctionTool) and tool.strict and tool.parameters is not None:
            checks.append((f"tools[{i}].parameters", tool.parameters))
    for param, schema in checks:
        problem = validate_grammar("start: %json " + json.dumps(schema))
        if problem is not None:
            raise RequestError(f"the schema cannot be enforced: {problem}", param=param)
