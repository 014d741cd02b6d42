"""The Responses protocol as typed values, under both the server and the agent loop.

`parse_create_request` reads a `POST /v1/responses` body into a `CreateRequest` strictly
(`RequestError` names the `param` a client got wrong); its input items (`_input.py`, the agent
loop's in `_agent_input.py`) and server-side tool parameters (`_tools.py`) are typed here, as
are the per-kind lists read from the reducer's kinds table (`_kinds.py`). No HTTP stack, no
engine: `streamfold record` and the agent loop read requests with it as the server does.
"""

from ._agent_input import (
    AGENT_INPUT_TYPES,
    AgentInputItem,
    CodeInterpreterCallInput,
    CodeInterpreterLogs,
    McpApprovalRequestInput,
    McpApprovalResponseInput,
    McpCallInput,
    McpListToolsInput,
    WebSearchCallInput,
)
from ._errors import RequestError
from ._input import (
    INPUT_ITEM_TYPES,
    AdditionalToolsInput,
    CustomToolCallInput,
    CustomToolCallOutputInput,
    FunctionCallInput,
    FunctionCallOutputInput,
    InputItem,
    MessageInput,
    ReasoningInput,
    ReasoningPart,
    TextPart,
    ToolSearchCallInput,
    ToolSearchOutputInput,
    input_items,
)
from ._kinds import CARRIED_ITEM_TYPES, INPUT_ITEM_PREFIX
from ._parse import parse_create_request, parse_input_items, parse_item
from ._request import (
    INCLUDABLE,
    LOGPROBS_INCLUDE,
    MAX_TOP_LOGPROBS,
    ClientTool,
    CreateRequest,
    RequestTool,
    ToolChoice,
)
from ._tools import (
    HOSTED_TOOL_TYPES,
    SERVER_TOOL_TYPES,
    AllowedTools,
    AllowedToolsFilter,
    ApprovalFilterParam,
    ApprovalToolNames,
    CodeInterpreterParam,
    Container,
    HostedToolParam,
    McpParam,
    RequireApproval,
    ServerToolParam,
    ToolSearchParam,
    WebSearchParam,
    check_server_tools,
)

__all__ = [
    "AGENT_INPUT_TYPES",
    "CARRIED_ITEM_TYPES",
    "HOSTED_TOOL_TYPES",
    "INCLUDABLE",
    "INPUT_ITEM_PREFIX",
    "INPUT_ITEM_TYPES",
    "LOGPROBS_INCLUDE",
    "MAX_TOP_LOGPROBS",
    "SERVER_TOOL_TYPES",
    "AdditionalToolsInput",
    "AgentInputItem",
    "AllowedTools",
    "AllowedToolsFilter",
    "ApprovalFilterParam",
    "ApprovalToolNames",
    "ClientTool",
    "CodeInterpreterCallInput",
    "CodeInterpreterLogs",
    "CodeInterpreterParam",
    "Container",
    "CreateRequest",
    "CustomToolCallInput",
    "CustomToolCallOutputInput",
    "FunctionCallInput",
    "FunctionCallOutputInput",
    "HostedToolParam",
    "InputItem",
    "McpApprovalRequestInput",
    "McpApprovalResponseInput",
    "McpCallInput",
    "McpListToolsInput",
    "McpParam",
    "MessageInput",
    "ReasoningInput",
    "ReasoningPart",
    "RequestError",
    "RequestTool",
    "RequireApproval",
    "ServerToolParam",
    "TextPart",
    "ToolChoice",
    "ToolSearchCallInput",
    "ToolSearchOutputInput",
    "ToolSearchParam",
    "WebSearchCallInput",
    "WebSearchParam",
    "check_server_tools",
    "input_items",
    "parse_create_request",
    "parse_input_items",
    "parse_item",
]
