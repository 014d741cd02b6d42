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
    ToolChoiceAllowed,
    ToolChoiceCustom,
    ToolChoiceFunction,
    ToolChoiceHosted,
    ToolChoiceMcp,
)

from ._request import CreateRequest
from ._schema import strict_schema_problems
from ._tools import McpParam

__all__ = ["control_problems"]

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


def _declares(request: CreateRequest, entry: Mapping[str, object]) -> bool:
    kind = entry.get("type")
    if kind == "function":
        return any(
            isinstance(t, FunctionTool) and t.name == entry.get("name") for t in request.tools
        )
    if kind == "mcp":
        return any(
            isinstance(t, McpParam) and t.server_label == entry.get("server_label")
            for t in request.tools
        )
    return any(getattr(t, "type", None) == kind for t in request.tools)


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
        if not any(isinstance(t, CustomTool) and t.name == choice.name for t in request.tools):
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
