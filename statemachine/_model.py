"""The objects inside Responses events: the Response, its output items, content parts, usage.

Each class mirrors the openai-python model of the same wire `type` (named in its docstring), as
a frozen keyword-only attrs value. Lists are tuples so values stay immutable and hashable.
Fields that the SDK marks optional default to None; the wire converter (`_wire.py`) leaves
those out of the JSON, except on `Response`, whose nulls the API itself sends, and fields with
`NULLABLE` metadata: the API sends those keys even when null (the SDK's request types mark them
`Required[Optional[...]]`), and clients that validate, as the Vercel AI SDK does, require them.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

from ._controls import TextConfig, ToolChoice

__all__ = [
    "ActionFind",
    "ActionOpenPage",
    "ActionSearch",
    "CodeInterpreterOutputLogs",
    "ContentPart",
    "ConversationRef",
    "CustomTool",
    "CustomToolFormat",
    "CustomToolGrammar",
    "CustomToolText",
    "FunctionTool",
    "HttpError",
    "IncompleteDetails",
    "InputTokensDetails",
    "Logprob",
    "LogprobTopLogprob",
    "McpApprovalRequest",
    "McpCall",
    "McpCallError",
    "McpErrorText",
    "McpListTools",
    "McpListToolsTool",
    "McpProtocolError",
    "McpToolExecutionError",
    "NamespaceTool",
    "OutputItem",
    "OutputTokensDetails",
    "ReasoningConfig",
    "ReasoningText",
    "Response",
    "ResponseCodeInterpreterToolCall",
    "ResponseCustomToolCall",
    "ResponseError",
    "ResponseFunctionToolCall",
    "ResponseFunctionWebSearch",
    "ResponseOutputMessage",
    "ResponseOutputRefusal",
    "ResponseOutputText",
    "ResponseReasoningItem",
    "ResponseStatus",
    "ResponseTool",
    "ResponseToolSearchCall",
    "ResponseUsage",
    "SummaryText",
    "TextLogprob",
    "TextTopLogprob",
    "ToolSearchTool",
    "WebSearchAction",
]

#: attrs metadata of a field whose key is always on the wire, as `null` when it has no value
#: (required-but-nullable): `x: T | None = attrs.field(default=None, metadata=NULLABLE)`.
WIRE_NULL = "wire_null"
NULLABLE = {WIRE_NULL: True}


ItemStatus = Literal["in_progress", "completed", "incomplete"]
ResponseStatus = Literal["completed", "failed", "in_progress", "cancelled", "queued", "incomplete"]


# --- content parts -------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class LogprobTopLogprob:
    """openai `response_output_text.LogprobTopLogprob` (inside a content part)."""

    token: str
    bytes: tuple[int, ...]
    logprob: float


@attrs.frozen(kw_only=True)
class Logprob:
    """openai `response_output_text.Logprob`: a token's logprob inside an `output_text` part."""

    token: str
    bytes: tuple[int, ...]
    logprob: float
    top_logprobs: tuple[LogprobTopLogprob, ...] = ()


@attrs.frozen(kw_only=True)
class TextTopLogprob:
    """openai `response_text_delta_event.LogprobTopLogprob`."""

    token: str | None = None
    logprob: float | None = None


@attrs.frozen(kw_only=True)
class TextLogprob:
    """openai `response_text_delta_event.Logprob`: on `output_text.delta`/`.done` events.

    `top_logprobs` is always an array (`[]` when none were asked for): the SDK marks it
    optional, but the API always sends it and the Vercel AI SDK drops a delta without it."""

    token: str
    logprob: float
    top_logprobs: tuple[TextTopLogprob, ...] = ()


@attrs.frozen(kw_only=True)
class ResponseOutputText:
    """openai `ResponseOutputText`, wire type `output_text`."""

    type: Literal["output_text"] = attrs.field(default="output_text", init=False)
    text: str
    annotations: tuple[()] = ()
    logprobs: tuple[Logprob, ...] = ()


@attrs.frozen(kw_only=True)
class ResponseOutputRefusal:
    """openai `ResponseOutputRefusal`, wire type `refusal`."""

    type: Literal["refusal"] = attrs.field(default="refusal", init=False)
    refusal: str


@attrs.frozen(kw_only=True)
class ReasoningText:
    """openai `response_reasoning_item.Content`, wire type `reasoning_text`."""

    type: Literal["reasoning_text"] = attrs.field(default="reasoning_text", init=False)
    text: str


@attrs.frozen(kw_only=True)
class SummaryText:
    """openai `response_reasoning_item.Summary`, wire type `summary_text`."""

    type: Literal["summary_text"] = attrs.field(default="summary_text", init=False)
    text: str


MessageContent = ResponseOutputText | ResponseOutputRefusal
ContentPart = ResponseOutputText | ResponseOutputRefusal | ReasoningText


# --- output items --------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ResponseOutputMessage:
    """openai `ResponseOutputMessage`, wire type `message`."""

    type: Literal["message"] = attrs.field(default="message", init=False)
    id: str
    role: Literal["assistant"] = "assistant"
    status: ItemStatus
    content: tuple[MessageContent, ...] = ()
    phase: Literal["commentary", "final_answer"] | None = None


@attrs.frozen(kw_only=True)
class ResponseReasoningItem:
    """openai `ResponseReasoningItem`, wire type `reasoning`."""

    type: Literal["reasoning"] = attrs.field(default="reasoning", init=False)
    id: str
    summary: tuple[SummaryText, ...] = ()
    content: tuple[ReasoningText, ...] | None = None
    encrypted_content: str | None = None
    status: ItemStatus | None = None


@attrs.frozen(kw_only=True)
class ResponseFunctionToolCall:
    """openai `ResponseFunctionToolCall`, wire type `function_call`."""

    type: Literal["function_call"] = attrs.field(default="function_call", init=False)
    id: str
    call_id: str
    name: str
    arguments: str
    status: ItemStatus | None = None
    #: The namespace tool it belongs to (`{"type": "namespace"}`); None for a plain function.
    namespace: str | None = None


@attrs.frozen(kw_only=True)
class ResponseCustomToolCall:
    """openai `ResponseCustomToolCall`, wire type `custom_tool_call`: a call of a `custom` tool,
    whose `input` is the raw text the model wrote (no JSON). The SDK model has no `status`."""

    type: Literal["custom_tool_call"] = attrs.field(default="custom_tool_call", init=False)
    id: str
    call_id: str
    name: str
    input: str
    namespace: str | None = None


@attrs.frozen(kw_only=True)
class ResponseToolSearchCall:
    """openai `ResponseToolSearchCall`, wire type `tool_search_call`: the model's call of a
    client-executed `tool_search` tool. `arguments` is the JSON the model wrote, read as a
    value (the text itself where it is not JSON); the client answers with a
    `tool_search_output` item naming `call_id`."""

    type: Literal["tool_search_call"] = attrs.field(default="tool_search_call", init=False)
    id: str
    call_id: str
    arguments: Any
    execution: Literal["server", "client"] = "client"
    status: ItemStatus


@attrs.frozen(kw_only=True)
class ActionSearch:
    """openai `response_function_web_search.ActionSearch`."""

    type: Literal["search"] = attrs.field(default="search", init=False)
    query: str | None = None
    queries: tuple[str, ...] | None = None


@attrs.frozen(kw_only=True)
class ActionOpenPage:
    """openai `response_function_web_search.ActionOpenPage`."""

    type: Literal["open_page"] = attrs.field(default="open_page", init=False)
    url: str | None = None


@attrs.frozen(kw_only=True)
class ActionFind:
    """openai `response_function_web_search.ActionFind`."""

    type: Literal["find_in_page"] = attrs.field(default="find_in_page", init=False)
    pattern: str
    url: str


WebSearchAction = ActionSearch | ActionOpenPage | ActionFind


@attrs.frozen(kw_only=True)
class ResponseFunctionWebSearch:
    """openai `ResponseFunctionWebSearch`, wire type `web_search_call` (gpt-oss `browser.*`)."""

    type: Literal["web_search_call"] = attrs.field(default="web_search_call", init=False)
    id: str
    action: WebSearchAction
    status: Literal["in_progress", "searching", "completed", "failed", "incomplete"]


@attrs.frozen(kw_only=True)
class CodeInterpreterOutputLogs:
    """openai `response_code_interpreter_tool_call.OutputLogs`."""

    type: Literal["logs"] = attrs.field(default="logs", init=False)
    logs: str


@attrs.frozen(kw_only=True)
class ResponseCodeInterpreterToolCall:
    """openai `ResponseCodeInterpreterToolCall`, wire type `code_interpreter_call` (`python`)."""

    type: Literal["code_interpreter_call"] = attrs.field(
        default="code_interpreter_call", init=False
    )
    id: str
    code: str | None
    container_id: str
    # The API always sends `outputs`, null until the code ran; strict clients (the Vercel AI
    # SDK's zod schemas) reject an item without the key, so it is kept as null on the wire.
    outputs: tuple[CodeInterpreterOutputLogs, ...] | None = attrs.field(
        default=None, metadata=NULLABLE
    )
    status: Literal["in_progress", "completed", "incomplete", "interpreting", "failed"]


@attrs.frozen(kw_only=True)
class McpProtocolError:
    """openai `mcp_tool_call_error.McpProtocolError`: the MCP server answered with an error."""

    type: Literal["mcp_protocol_error"] = attrs.field(default="mcp_protocol_error", init=False)
    code: int
    message: str


@attrs.frozen(kw_only=True)
class McpErrorText:
    """MCP's `TextContent`: one text block of a tool's error result."""

    type: Literal["text"] = attrs.field(default="text", init=False)
    text: str


@attrs.frozen(kw_only=True)
class McpToolExecutionError:
    """openai `mcp_tool_call_error.McpToolExecutionError`: the tool ran and failed; `content`
    is what it said (MCP `CallToolResult.content` with `isError`)."""

    type: Literal["mcp_tool_execution_error"] = attrs.field(
        default="mcp_tool_execution_error", init=False
    )
    content: tuple[McpErrorText, ...] = ()


@attrs.frozen(kw_only=True)
class HttpError:
    """openai `mcp_tool_call_error.HTTPError`: the MCP server could not be reached."""

    type: Literal["http_error"] = attrs.field(default="http_error", init=False)
    code: int
    message: str


McpCallError = McpProtocolError | McpToolExecutionError | HttpError


@attrs.frozen(kw_only=True)
class McpCall:
    """openai `response_output_item.McpCall`, wire type `mcp_call` (other gpt-oss recipients)."""

    type: Literal["mcp_call"] = attrs.field(default="mcp_call", init=False)
    id: str
    name: str
    server_label: str
    arguments: str
    # The API sends these three keys on every mcp_call, null until they have a value (issue 31).
    approval_request_id: str | None = attrs.field(default=None, metadata=NULLABLE)
    error: McpCallError | None = attrs.field(default=None, metadata=NULLABLE)
    output: str | None = attrs.field(default=None, metadata=NULLABLE)
    status: Literal["in_progress", "completed", "incomplete", "calling", "failed"] | None = None


@attrs.frozen(kw_only=True)
class McpListToolsTool:
    """openai `response_output_item.McpListToolsTool`: one tool an MCP server offers."""

    name: str
    input_schema: dict[str, object] = attrs.field(factory=dict)
    description: str | None = None
    annotations: dict[str, object] | None = None


@attrs.frozen(kw_only=True)
class McpListTools:
    """openai `response_output_item.McpListTools`, wire type `mcp_list_tools`."""

    type: Literal["mcp_list_tools"] = attrs.field(default="mcp_list_tools", init=False)
    id: str
    server_label: str
    tools: tuple[McpListToolsTool, ...] = ()
    error: str | None = attrs.field(default=None, metadata=NULLABLE)  # always sent, as the API


@attrs.frozen(kw_only=True)
class McpApprovalRequest:
    """openai `response_output_item.McpApprovalRequest`, wire type `mcp_approval_request`: an
    MCP call that waits for the client's `mcp_approval_response` before it runs."""

    type: Literal["mcp_approval_request"] = attrs.field(default="mcp_approval_request", init=False)
    id: str
    arguments: str
    name: str
    server_label: str


OutputItem = (
    ResponseOutputMessage
    | ResponseReasoningItem
    | ResponseFunctionToolCall
    | ResponseCustomToolCall
    | ResponseFunctionWebSearch
    | ResponseCodeInterpreterToolCall
    | McpCall
    | McpListTools
    | McpApprovalRequest
    | ResponseToolSearchCall
)


# --- the response --------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class InputTokensDetails:
    cached_tokens: int = 0
    cache_write_tokens: int = 0


@attrs.frozen(kw_only=True)
class OutputTokensDetails:
    reasoning_tokens: int = 0


@attrs.frozen(kw_only=True)
class ResponseUsage:
    """openai `ResponseUsage`. `cache_write_tokens` is required since openai 3.54."""

    input_tokens: int
    input_tokens_details: InputTokensDetails = InputTokensDetails()
    output_tokens: int
    output_tokens_details: OutputTokensDetails = OutputTokensDetails()
    total_tokens: int


@attrs.frozen(kw_only=True)
class ResponseError:
    """openai `ResponseError`: why a response failed.

    `type` and `param` are optional in the SDK model but sent by the API (the shape of its error
    JSON); the Vercel AI SDK rejects a failed response whose error has no `type`."""

    code: Literal["server_error", "rate_limit_exceeded", "invalid_prompt"] = "server_error"
    message: str
    type: str = "server_error"
    param: str | None = attrs.field(default=None, metadata=NULLABLE)


@attrs.frozen(kw_only=True)
class IncompleteDetails:
    reason: Literal["max_output_tokens", "max_messages", "content_filter"] | None = None


@attrs.frozen(kw_only=True)
class FunctionTool:
    """openai `FunctionTool`: a tool the request declares."""

    type: Literal["function"] = attrs.field(default="function", init=False)
    name: str
    parameters: dict[str, object] | None = attrs.field(default=None, metadata=NULLABLE)
    strict: bool | None = attrs.field(default=None, metadata=NULLABLE)
    description: str | None = None


@attrs.frozen(kw_only=True)
class CustomToolText:
    """openai `CustomToolInputFormat` `Text`: any text."""

    type: Literal["text"] = attrs.field(default="text", init=False)


@attrs.frozen(kw_only=True)
class CustomToolGrammar:
    """openai `CustomToolInputFormat` `Grammar`: text in a Lark grammar's or a regex's language."""

    type: Literal["grammar"] = attrs.field(default="grammar", init=False)
    syntax: Literal["lark", "regex"]
    definition: str


CustomToolFormat = CustomToolText | CustomToolGrammar


@attrs.frozen(kw_only=True)
class CustomTool:
    """openai `CustomTool`: a tool whose input is free text (or text of a grammar), not JSON."""

    type: Literal["custom"] = attrs.field(default="custom", init=False)
    name: str
    description: str | None = None
    format: CustomToolFormat | None = None


@attrs.frozen(kw_only=True)
class NamespaceTool:
    """openai `NamespaceTool`: function and custom tools grouped under a name, as harmony groups
    tools (`namespace NAME { ... }`); the model calls them as `NAME.tool`."""

    type: Literal["namespace"] = attrs.field(default="namespace", init=False)
    name: str
    description: str = ""
    tools: tuple[FunctionTool | CustomTool, ...] = ()


@attrs.frozen(kw_only=True)
class ToolSearchTool:
    """openai `ToolSearchTool`: the model searches deferred tools. With `execution: "client"`
    the model may call it (a `tool_search_call` item) and the client runs the search; any
    other execution is a hosted search this server does not run."""

    type: Literal["tool_search"] = attrs.field(default="tool_search", init=False)
    execution: Literal["server", "client"] | None = None
    description: str | None = None
    parameters: dict[str, object] | None = None


#: A tool as the Response echoes it: the client-side tools the model may call, and any other
#: tool of the request (hosted, MCP) as the JSON object it was sent as.
ResponseTool = FunctionTool | CustomTool | NamespaceTool | ToolSearchTool | dict[str, object]


ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


@attrs.frozen(kw_only=True)
class ReasoningConfig:
    """openai `Reasoning`. gpt-oss has three efforts; the chat format maps the others onto
    them (`none`/`minimal` low, `xhigh`/`max` high). `context: all_turns` keeps the
    reasoning of earlier turns in the prompt, which harmony otherwise drops after an answer."""

    effort: ReasoningEffort | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    context: Literal["auto", "current_turn", "all_turns"] | None = None


@attrs.frozen(kw_only=True)
class ConversationRef:
    """openai `Response.conversation`: the conversation a response reads and adds to."""

    id: str


@attrs.frozen(kw_only=True)
class Response:
    """openai `Response`: carried whole by every lifecycle event."""

    id: str
    object: Literal["response"] = attrs.field(default="response", init=False)
    created_at: int
    model: str
    status: ResponseStatus
    output: tuple[OutputItem, ...] = ()
    parallel_tool_calls: bool = True
    tool_choice: ToolChoice = "auto"
    tools: tuple[ResponseTool, ...] = ()
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    usage: ResponseUsage | None = None
    instructions: str | None = None
    metadata: dict[str, str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    reasoning: ReasoningConfig | None = None
    background: bool | None = None
    previous_response_id: str | None = None
    completed_at: int | None = None
    # What else the request asked, echoed as the API echoes it (openai `Response`).
    text: TextConfig = attrs.field(factory=TextConfig)
    store: bool = True
    max_tool_calls: int | None = None
    top_logprobs: int = 0
    truncation: Literal["auto", "disabled"] = "disabled"
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] = "default"
    prompt_cache_key: str | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    safety_identifier: str | None = None
    user: str | None = None
    # Last: the one field left out when None (`_wire._omitted`), which cattrs' reference path
    # writes after the others; the generated writer writes fields in this order.
    conversation: ConversationRef | None = None
