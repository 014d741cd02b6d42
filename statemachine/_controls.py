"""What a request asks the model to write, as the Response echoes it: `text` (its format) and
the forms of `tool_choice` beyond a plain string (openai-python `ResponseTextConfig`,
`ResponseFormatText*`, `ToolChoiceAllowed`, `ToolChoiceMcp`, `ToolChoiceTypes`,
`ToolChoiceCustom`). The server reads them from a request (`adapters/protocol`) and enforces them
(`adapters/structured`); the reducer only carries them on the Response."""

from __future__ import annotations

from typing import Literal, get_args

import attrs

__all__ = [
    "HOSTED_CHOICES",
    "TEXT_FORMAT_CLASSES",
    "TOOL_CHOICE_CLASSES",
    "FormatJsonObject",
    "FormatJsonSchema",
    "FormatText",
    "HostedChoice",
    "TextConfig",
    "TextFormat",
    "ToolChoice",
    "ToolChoiceAllowed",
    "ToolChoiceCustom",
    "ToolChoiceFunction",
    "ToolChoiceHosted",
    "ToolChoiceMcp",
]


@attrs.frozen(kw_only=True)
class FormatText:
    """openai `ResponseFormatText`: free text."""

    type: Literal["text"] = attrs.field(default="text", init=False)


@attrs.frozen(kw_only=True)
class FormatJsonObject:
    """openai `ResponseFormatJSONObject`: any JSON object."""

    type: Literal["json_object"] = attrs.field(default="json_object", init=False)


@attrs.frozen(kw_only=True)
class FormatJsonSchema:
    """openai `ResponseFormatTextJSONSchemaConfig`: JSON following `schema`."""

    type: Literal["json_schema"] = attrs.field(default="json_schema", init=False)
    name: str
    schema: dict[str, object]
    description: str | None = None
    strict: bool | None = None


TextFormat = FormatText | FormatJsonObject | FormatJsonSchema
#: The class of each `text.format`, by its `type`.
TEXT_FORMAT_CLASSES: dict[str, type] = {
    "text": FormatText,
    "json_object": FormatJsonObject,
    "json_schema": FormatJsonSchema,
}


@attrs.frozen(kw_only=True)
class TextConfig:
    """openai `ResponseTextConfig`."""

    format: TextFormat = FormatText()
    verbosity: Literal["low", "medium", "high"] | None = None


@attrs.frozen(kw_only=True)
class ToolChoiceAllowed:
    """openai `ToolChoiceAllowed`: only these tools, `auto` or `required`."""

    type: Literal["allowed_tools"] = attrs.field(default="allowed_tools", init=False)
    mode: Literal["auto", "required"]
    tools: tuple[dict[str, object], ...]


@attrs.frozen(kw_only=True)
class ToolChoiceMcp:
    """openai `ToolChoiceMcp`: a tool (or any tool) of one MCP server."""

    type: Literal["mcp"] = attrs.field(default="mcp", init=False)
    server_label: str
    name: str | None = None


@attrs.frozen(kw_only=True)
class ToolChoiceCustom:
    """openai `ToolChoiceCustom`: one custom tool."""

    type: Literal["custom"] = attrs.field(default="custom", init=False)
    name: str


#: Hosted tool types `tool_choice` may name (openai `ToolChoiceTypes`).
HostedChoice = Literal[
    "file_search",
    "web_search_preview",
    "web_search_preview_2025_03_11",
    "computer",
    "computer_use",
    "computer_use_preview",
    "image_generation",
    "code_interpreter",
    # openai `ToolChoiceApplyPatch` and `ToolChoiceShell`: the same `{type}` form.
    "apply_patch",
    "shell",
]
HOSTED_CHOICES: tuple[str, ...] = get_args(HostedChoice)


@attrs.frozen(kw_only=True)
class ToolChoiceHosted:
    """openai `ToolChoiceTypes`: the model must use this hosted tool."""

    type: HostedChoice


@attrs.frozen(kw_only=True)
class ToolChoiceFunction:
    """openai `ToolChoiceFunction`: the model must call this function."""

    type: Literal["function"] = attrs.field(default="function", init=False)
    name: str


#: Every form of `tool_choice` (openai `response_create_params.ToolChoice`).
ToolChoice = (
    Literal["auto", "none", "required"]
    | ToolChoiceFunction
    | ToolChoiceAllowed
    | ToolChoiceMcp
    | ToolChoiceCustom
    | ToolChoiceHosted
)
#: The class of each object form, by its `type`.
TOOL_CHOICE_CLASSES: dict[str, type] = {
    "function": ToolChoiceFunction,
    "allowed_tools": ToolChoiceAllowed,
    "mcp": ToolChoiceMcp,
    "custom": ToolChoiceCustom,
    **dict.fromkeys(HOSTED_CHOICES, ToolChoiceHosted),
}
