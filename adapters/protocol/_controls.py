"""The checks of what a request asks the model to write: `text.format`, `tool_choice` and
strict tools, each refusal naming its `param`.

A constraint the server would enforce wrongly, or not at all, is refused here, before anything
is generated: a `json_schema` name outside the API's pattern, a strict schema outside the
subset strict mode supports (`_schema.py`), a `tool_choice` naming a tool the request does not
declare.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from streamfold.statemachine import (
    CustomTool,
    FormatJsonSchema,
    FunctionTool,
    NamespaceTool,
    ToolChoiceAllowed,
    ToolChoiceCustom,
    ToolChoiceFunction,
    ToolChoiceHosted,
    ToolChoiceMcp,
)

from ._request import CreateRequest
from ._schema import strict_schema_problems
from ._tools import McpParam

__all__ = ["choice_entry", "control_problems"]

#: openai `ResponseFormatTextJSONSchemaConfig.name`: a-z, A-Z, 0-9, underscores and dashes,
#: at most 64 characters.
FORMAT_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _at(prefix: str, path: str) -> str:
    return f"{prefix}.{path}" if path else prefix


def control_problems(request: CreateRequest) -> Iterator[tuple[str, str]]:
    """`(param, message)` for each thing wrong with the request's controls."""
    fmt = request.text.format if request.text is not None else None
    if isinstance(fmt, FormatJsonSchema):
        if not FORMAT_NAME.fullmatch(fmt.name):
            yield (
                "text.format.name",
                f"the format's name must be 1-64 letters, digits, '_' or '-', got {fmt.name!r}",
            )
        if fmt.strict:
            for path, message in strict_schema_problems(fmt.schema):
                yield _at("text.format.schema", path), message
                break
    for i, tool in enumerate(request.tools):
        if isinstance(tool, FunctionTool) and tool.strict and tool.parameters is not None:
            for path, message in strict_schema_problems(tool.parameters):
                yield _at(f"tools[{i}].parameters", path), message
                break
    yield from _choice_problems(request)


def choice_entry(tool: object) -> dict[str, object]:
    """The `tool_choice` entry (in `allowed_tools`' form) that names `tool`: a function or
    custom tool by its name, an MCP server by its label, a hosted tool by its type.

    The one table from tools to the entries that name them: the request's check reads it
    (`_declares`: does the request declare what an entry names?) and so does the decoding shape
    (`structured.shape_for`: which entry names each call the request offers)."""
    if isinstance(tool, FunctionTool | CustomTool):
        return {"type": tool.type, "name": tool.name}
    if isinstance(tool, McpParam):
        return {"type": "mcp", "server_label": tool.server_label}
    return {"type": getattr(tool, "type", None)}


def _declares(request: CreateRequest, entry: Mapping[str, object]) -> bool:
    """Whether `entry` names one of the request's tools (one inside a namespace too): it has
    every key of that tool's `choice_entry`, with the same values (an MCP entry may add the
    `name` of one of the server's tools)."""
    tools = (
        inner
        for tool in request.tools
        for inner in (tool.tools if isinstance(tool, NamespaceTool) else (tool,))
    )
    return any(
        all(entry.get(key) == value for key, value in choice_entry(tool).items()) for tool in tools
    )


def _choice_problems(request: CreateRequest) -> Iterator[tuple[str, str]]:
    choice = request.tool_choice
    if isinstance(choice, ToolChoiceFunction):
        return  # checked with the function tools (`_checks.py`)
    if isinstance(choice, ToolChoiceMcp):
        if not _declares(request, {"type": "mcp", "server_label": choice.server_label}):
            yield (
                "tool_choice.server_label",
                f"tool_choice names MCP server {choice.server_label!r}, which is not in tools",
            )
    elif isinstance(choice, ToolChoiceCustom):
        if not _declares(request, {"type": "custom", "name": choice.name}):
            yield (
                "tool_choice.name",
                f"tool_choice names custom tool {choice.name!r}, not in tools",
            )
    elif isinstance(choice, ToolChoiceHosted):
        if not _declares(request, {"type": choice.type}):
            yield "tool_choice.type", f"tool_choice names {choice.type!r}, which is not in tools"
    elif isinstance(choice, ToolChoiceAllowed):
        if not choice.tools:
            yield "tool_choice.tools", "allowed_tools needs at least one tool"
        for i, entry in enumerate(choice.tools):
            if not _declares(request, entry):
                yield (
                    f"tool_choice.tools[{i}]",
                    f"allowed_tools names {dict(entry)!r}, which is not in tools",
                )
