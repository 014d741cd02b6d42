"""A request's input items as typed values: messages, function calls and their outputs,
reasoning, and the agent loop's items (`_agent_input.py`).

Shapes follow openai-python's `response_input_item_param`. `INPUT_ITEM_TYPES` maps each wire
`type` to its class; the converter (`_parse.py`) reads items by it.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import attrs

from streamfold.statemachine import CustomTool, FunctionTool, NamespaceTool

from ._agent_input import AGENT_INPUT_TYPES, AgentInputItem

__all__ = [
    "INPUT_ITEM_TYPES",
    "AdditionalToolsInput",
    "CustomToolCallInput",
    "CustomToolCallOutputInput",
    "FunctionCallInput",
    "FunctionCallOutputInput",
    "InputItem",
    "MessageInput",
    "ReasoningInput",
    "ReasoningPart",
    "TextPart",
    "ToolSearchCallInput",
    "ToolSearchOutputInput",
    "input_items",
]


@attrs.frozen(kw_only=True)
class TextPart:
    """An `input_text` part, or an `output_text` part of an earlier assistant message."""

    type: Literal["input_text", "output_text"]
    text: str


def _joined(value: str | tuple[TextPart, ...]) -> str:
    """A message's content or a call output's text: the string, or its parts' texts joined."""
    return value if isinstance(value, str) else "".join(part.text for part in value)


def _recipient(namespace: str | None, name: str) -> str:
    """The harmony recipient a call of `name` in `namespace` (None: `functions`) is sent to."""
    return f"{namespace or 'functions'}.{name}"


@attrs.frozen(kw_only=True)
class MessageInput:
    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | tuple[TextPart, ...]

    @property
    def text(self) -> str:
        return _joined(self.content)


@attrs.frozen(kw_only=True)
class FunctionCallInput:
    """A call the model made earlier (an item of a previous response's output)."""

    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str
    namespace: str | None = None

    @property
    def recipient(self) -> str:
        """Who the model addressed (`functions.NAME`, or `NAMESPACE.NAME`)."""
        return _recipient(self.namespace, self.name)


@attrs.frozen(kw_only=True)
class CustomToolCallInput:
    """A call of a `custom` tool the model made earlier: `input` is its raw text."""

    type: Literal["custom_tool_call"]
    call_id: str
    name: str
    input: str
    namespace: str | None = None

    @property
    def recipient(self) -> str:
        return _recipient(self.namespace, self.name)


@attrs.frozen(kw_only=True)
class FunctionCallOutputInput:
    """The caller's result for an earlier `function_call`, matched by `call_id`."""

    type: Literal["function_call_output"]
    call_id: str
    output: str | tuple[TextPart, ...]

    @property
    def text(self) -> str:
        return _joined(self.output)


@attrs.frozen(kw_only=True)
class CustomToolCallOutputInput:
    """The caller's result for an earlier `custom_tool_call`, matched by `call_id`."""

    type: Literal["custom_tool_call_output"]
    call_id: str
    output: str | tuple[TextPart, ...]

    @property
    def text(self) -> str:
        return _joined(self.output)


@attrs.frozen(kw_only=True)
class AdditionalToolsInput:
    """`additional_tools`: tools the client makes available from this point of the
    conversation on (Codex sends its namespaces so). harmony has one tool list per
    conversation, so they join the request's own."""

    type: Literal["additional_tools"]
    role: Literal["developer"] = "developer"
    tools: tuple[FunctionTool | CustomTool | NamespaceTool, ...] = ()


@attrs.frozen(kw_only=True)
class ToolSearchCallInput:
    """An earlier `tool_search_call`: the model's call of the client's `tool_search`, its
    `arguments` the JSON value it wrote."""

    type: Literal["tool_search_call"]
    arguments: Any = None
    call_id: str | None = None
    execution: Literal["server", "client"] | None = None


@attrs.frozen(kw_only=True)
class ToolSearchOutputInput:
    """The client's `tool_search_output`: the tools its search loaded. They join the
    conversation's tool list (harmony has one, as for `additional_tools`)."""

    type: Literal["tool_search_output"]
    tools: tuple[FunctionTool | CustomTool | NamespaceTool, ...] = ()
    call_id: str | None = None
    execution: Literal["server", "client"] | None = None


@attrs.frozen(kw_only=True)
class ReasoningPart:
    type: Literal["reasoning_text", "summary_text"]
    text: str


@attrs.frozen(kw_only=True)
class ReasoningInput:
    """A reasoning item of a previous response, passed back in a tool-calling loop."""

    type: Literal["reasoning"]
    content: tuple[ReasoningPart, ...] | None = None
    summary: tuple[ReasoningPart, ...] = ()
    encrypted_content: str | None = None

    @property
    def text(self) -> str:
        return "".join(part.text for part in (self.content or self.summary))


InputItem: TypeAlias = (
    MessageInput
    | FunctionCallInput
    | FunctionCallOutputInput
    | CustomToolCallInput
    | CustomToolCallOutputInput
    | AdditionalToolsInput
    | ToolSearchCallInput
    | ToolSearchOutputInput
    | ReasoningInput
    | AgentInputItem
)
#: Each input item's wire `type` and its class.
INPUT_ITEM_TYPES: dict[str, type] = {
    "message": MessageInput,
    "function_call": FunctionCallInput,
    "function_call_output": FunctionCallOutputInput,
    "custom_tool_call": CustomToolCallInput,
    "custom_tool_call_output": CustomToolCallOutputInput,
    "additional_tools": AdditionalToolsInput,
    "tool_search_call": ToolSearchCallInput,
    "tool_search_output": ToolSearchOutputInput,
    "reasoning": ReasoningInput,
    **AGENT_INPUT_TYPES,
}


def input_items(value: Any) -> list[Any]:
    """A request's wire `input` as a list of items (a string is one user message)."""
    return [{"role": "user", "content": value}] if isinstance(value, str) else list(value)
