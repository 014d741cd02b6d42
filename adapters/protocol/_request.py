"""`POST /v1/responses` bodies as typed values, read strictly, with errors that name the field.

No HTTP stack needed: `streamfold record` renders prompts from these too.

The request shapes follow the Responses API (openai-python `response_create_params`): `input` is
a string or a list of items (messages with string or `input_text`/`output_text` content,
`function_call`, `function_call_output`, `reasoning`), tools are function tools. `include`
and `top_logprobs` ask for logprobs. Unknown top-level fields are ignored, as clients send
options this server does not act on (`client_metadata`, ...); a value of the wrong type is refused
with the OpenAI error JSON naming the field in `param`. `previous_response_id` is read here and
resolved by the server against its store (`server/_conversation.py`). Server-side tools
(`mcp`, `web_search_preview`, `code_interpreter`) and the agent loop's input items are typed in
`_tools.py` and `_agent_input.py`; they are read by the same converter (`_parse.py`), so
their errors name the field too; `_checks.py` adds the checks a type cannot say.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import attrs

from streamfold.statemachine import (
    CustomTool,
    FunctionTool,
    NamespaceTool,
    ReasoningConfig,
    TextConfig,
    ToolChoice,
)

from ._input import AdditionalToolsInput, InputItem, ToolSearchOutputInput
from ._tools import HostedToolParam, ServerToolParam, ToolSearchParam

__all__ = [
    "INCLUDABLE",
    "LOGPROBS_INCLUDE",
    "MAX_TOP_LOGPROBS",
    "ClientTool",
    "CreateRequest",
    "RequestTool",
    "ToolChoice",
]


#: The `include` value that asks for logprobs on output text.
LOGPROBS_INCLUDE = "message.output_text.logprobs"
#: Every value the API's `include` takes (openai `ResponseIncludable`); only the logprobs one
#: changes what this server sends, the others name data it has none of or always sends.
INCLUDABLE = frozenset(
    {
        "file_search_call.results",
        "web_search_call.results",
        "web_search_call.action.sources",
        "message.input_image.image_url",
        "computer_call_output.output.image_url",
        "code_interpreter_call.outputs",
        "reasoning.encrypted_content",
        LOGPROBS_INCLUDE,
    }
)
MAX_TOP_LOGPROBS = 20

#: The tools the client runs: the model's calls to them end the response.
ClientTool: TypeAlias = FunctionTool | CustomTool | NamespaceTool
RequestTool: TypeAlias = ClientTool | ServerToolParam | ToolSearchParam | HostedToolParam


_SERVER_TOOLS = ServerToolParam.__args__


@attrs.frozen(kw_only=True)
class CreateRequest:
    """The fields of `POST /v1/responses` this server acts on."""

    model: str
    input: str | tuple[InputItem, ...]
    instructions: str | None = None
    tools: tuple[RequestTool, ...] = ()
    tool_choice: ToolChoice = "auto"
    parallel_tool_calls: bool = True
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    reasoning: ReasoningConfig | None = None
    metadata: dict[str, str] | None = None
    stream: bool | None = None
    background: bool | None = None
    store: bool | None = None
    previous_response_id: str | None = None
    max_tool_calls: int | None = None
    include: tuple[str, ...] = ()
    top_logprobs: int | None = None
    #: What the answer's text must be (`text.format`); None: free text.
    text: TextConfig | None = None
    #: `auto` drops the oldest input items until the prompt fits; `disabled` refuses (400).
    truncation: Literal["auto", "disabled"] | None = None
    # Accepted and echoed on the Response; nothing here acts on them.
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] | None = None

    @property
    def function_tools(self) -> tuple[FunctionTool, ...]:
        """The client-side tools (the model's calls to them end the response)."""
        return tuple(tool for tool in self.tools if isinstance(tool, FunctionTool))

    @property
    def client_tools(self) -> tuple[ClientTool, ...]:
        """The tools the client runs, the request's own and those `additional_tools` and
        `tool_search_output` input items add (harmony lists every tool once, at the start of
        the conversation)."""
        added = (
            tool
            for item in (self.input if isinstance(self.input, tuple) else ())
            if isinstance(item, AdditionalToolsInput | ToolSearchOutputInput)
            for tool in item.tools
        )
        own = (t for t in self.tools if isinstance(t, FunctionTool | CustomTool | NamespaceTool))
        return (*own, *added)

    @property
    def server_tools(self) -> tuple[ServerToolParam, ...]:
        """The tools the server runs for the model (the agent loop's)."""
        return tuple(tool for tool in self.tools if isinstance(tool, _SERVER_TOOLS))

    @property
    def logprobs(self) -> bool:
        """Whether the answer's text carries logprobs (`include` asks for them)."""
        return LOGPROBS_INCLUDE in self.include
