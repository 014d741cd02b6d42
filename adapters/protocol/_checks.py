"""The checks of a typed request that its types cannot say, each naming its `param`."""

from __future__ import annotations

import math
from collections.abc import Iterator

from streamfold.engines.guidance import validate_grammar
from streamfold.statemachine import CustomTool, FunctionTool, NamespaceTool, ToolChoiceFunction

from ._controls import control_problems
from ._errors import RequestError
from ._input import (
    AdditionalToolsInput,
    CustomToolCallInput,
    CustomToolCallOutputInput,
    FunctionCallInput,
    FunctionCallOutputInput,
    InputItem,
    ToolSearchOutputInput,
)
from ._kinds import ANSWERS
from ._request import INCLUDABLE, MAX_TOP_LOGPROBS, CreateRequest
from ._tools import LABEL, RESERVED_LABELS, McpParam, check_server_tools, client_namespace

__all__ = ["check_request"]


def check_request(request: CreateRequest, earlier: tuple[InputItem, ...] = ()) -> None:
    if request.previous_response_id == "":
        raise RequestError("previous_response_id must not be empty", param="previous_response_id")
    if not request.model:
        raise RequestError("model must not be empty", param="model")
    if request.temperature is not None and not (0 <= request.temperature <= 2):
        raise RequestError(
            f"temperature must be between 0 and 2, got {request.temperature}", param="temperature"
        )
    if (request.top_p is not None and not (0 < request.top_p <= 1)) or (
        request.top_p is not None and math.isnan(request.top_p)
    ):
        raise RequestError(f"top_p must be in (0, 1], got {request.top_p}", param="top_p")
    if request.max_output_tokens is not None and request.max_output_tokens < 1:
        raise RequestError(
            f"max_output_tokens must be at least 1, got {request.max_output_tokens}",
            param="max_output_tokens",
        )
    for i, value in enumerate(request.include):
        if value not in INCLUDABLE:
            raise RequestError(
                f"include[{i}] must be one of {', '.join(sorted(INCLUDABLE))}; got {value!r}",
                param=f"include[{i}]",
            )
    if request.top_logprobs is not None and not 0 <= request.top_logprobs <= MAX_TOP_LOGPROBS:
        raise RequestError(
            f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}, got {request.top_logprobs}",
            param="top_logprobs",
        )
    if request.background and request.store is False:
        raise RequestError(
            "background responses must be stored (they are polled and resumed later); drop "
            "store: false or background: true",
            param="store",
        )
    if request.max_tool_calls is not None and request.max_tool_calls < 1:
        raise RequestError(
            f"max_tool_calls must be at least 1, got {request.max_tool_calls}",
            param="max_tool_calls",
        )
    for param, message in check_server_tools(request.tools):
        raise RequestError(message, param=param)
    for param, message in client_tool_problems(request):
        raise RequestError(message, param=param)
    names = [tool.name for tool in request.function_tools]
    if (
        isinstance(request.tool_choice, ToolChoiceFunction)
        and request.tool_choice.name not in names
    ):
        raise RequestError(
            f"tool_choice names function {request.tool_choice.name!r}, which is not in tools",
            param="tool_choice.name",
        )
    for param, message in control_problems(request):
        raise RequestError(message, param=param)
    if isinstance(request.input, tuple):
        calls = {
            item.call_id
            for item in earlier
            if isinstance(item, FunctionCallInput | CustomToolCallInput)
        }
        for i, item in enumerate(request.input):
            if isinstance(item, FunctionCallInput | CustomToolCallInput):
                calls.add(item.call_id)
            elif (
                isinstance(item, FunctionCallOutputInput | CustomToolCallOutputInput)
                and item.call_id not in calls
            ):
                call = ANSWERS[item.type].call
                raise RequestError(
                    f"no {call} with call_id {item.call_id!r} comes before this output; "
                    f"send the model's {call} item before its {item.type}",
                    param=f"input[{i}].call_id",
                )


def _grammar_problem(tool: CustomTool) -> str | None:
    """Why a custom tool's grammar does not compile (llguidance reads Lark; a regex becomes
    the one rule `start: /REGEX/`), or None."""
    fmt = tool.format
    if fmt is None or fmt.type != "grammar":
        return None
    if fmt.syntax == "regex":
        return validate_grammar("start: /" + fmt.definition.replace("/", "\\/") + "/")
    return validate_grammar(fmt.definition)


def _tool_problems(
    tools: Iterator[tuple[str, object]], labels: set[str]
) -> Iterator[tuple[str, str]]:
    """Names unique among the client's tools and namespaces; custom grammars that compile.
    A namespace named `functions` is harmony's namespace of the client's own tools (Codex's
    code mode offers its tools in one): its tools are named among those."""
    seen: dict[str, str] = {}
    for at, tool in _in_functions(tools):
        if not isinstance(tool, FunctionTool | CustomTool | NamespaceTool):
            continue
        if not tool.name or tool.name in seen:
            yield f"{at}.name", f"tool names must be non-empty and unique, got {tool.name!r}"
            continue
        seen[tool.name] = at
        if isinstance(tool, CustomTool):
            problem = _grammar_problem(tool)
            if problem is not None:
                yield (
                    f"{at}.format.definition",
                    f"the {tool.format.syntax} grammar of custom tool {tool.name!r} does not "  # type: ignore[union-attr]
                    f"compile: {problem}",
                )
        elif isinstance(tool, NamespaceTool):
            if not LABEL.fullmatch(tool.name) or tool.name in RESERVED_LABELS | labels:
                yield (
                    f"{at}.name",
                    "a namespace's name must be 1-64 letters, digits, '_' or '-', and not a "
                    f"built-in namespace or an MCP server's label (the model calls its tools as "
                    f"name.tool), got {tool.name!r}",
                )
            yield from _tool_problems(
                ((f"{at}.tools[{j}]", inner) for j, inner in enumerate(tool.tools)), set()
            )


def _in_functions(tools: Iterator[tuple[str, object]]) -> Iterator[tuple[str, object]]:
    """`tools`, with those of a namespace named `functions` in its place."""
    for at, tool in tools:
        if client_namespace(tool):
            yield from ((f"{at}.tools[{j}]", inner) for j, inner in enumerate(tool.tools))
        else:
            yield at, tool


def client_tool_problems(request: CreateRequest) -> Iterator[tuple[str, str]]:
    """`(param, message)` for the client's tools: the request's, then each `additional_tools`
    item's (all are listed to the model together, so names are unique across them)."""
    labels = {tool.server_label for tool in request.tools if isinstance(tool, McpParam)}
    tools: list[tuple[str, object]] = [(f"tools[{i}]", t) for i, t in enumerate(request.tools)]
    for i, item in enumerate(request.input if isinstance(request.input, tuple) else ()):
        if isinstance(item, AdditionalToolsInput | ToolSearchOutputInput):
            tools += [(f"input[{i}].tools[{j}]", t) for j, t in enumerate(item.tools)]
    yield from _tool_problems(iter(tools), labels)
