"""Input items of the agent loop: what a later request sends back (or `previous_response_id`
brings in) of a response that ran tools, and the client's answer to an approval request.

Shapes follow openai-python's `response_input_item_param` (`McpCall`, `McpListTools`,
`McpApprovalRequest`, `McpApprovalResponse`, `ResponseCodeInterpreterToolCallParam`,
`ResponseFunctionWebSearchParam`). Fields this server does not use are accepted and ignored.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import attrs

__all__ = [
    "AGENT_INPUT_TYPES",
    "AgentInputItem",
    "CodeInterpreterCallInput",
    "CodeInterpreterLogs",
    "McpApprovalRequestInput",
    "McpApprovalResponseInput",
    "McpCallInput",
    "McpListToolsInput",
    "WebSearchCallInput",
]


@attrs.frozen(kw_only=True)
class McpCallInput:
    type: Literal["mcp_call"]
    id: str | None = None
    server_label: str
    name: str
    arguments: str
    output: str | None = None
    error: str | None = None
    approval_request_id: str | None = None


@attrs.frozen(kw_only=True)
class McpListToolsInput:
    type: Literal["mcp_list_tools"]
    id: str | None = None
    server_label: str
    tools: tuple[dict[str, object], ...] = ()
    error: str | None = None


@attrs.frozen(kw_only=True)
class McpApprovalRequestInput:
    type: Literal["mcp_approval_request"]
    id: str
    server_label: str
    name: str
    arguments: str


@attrs.frozen(kw_only=True)
class McpApprovalResponseInput:
    """The client's answer to an `mcp_approval_request` (by its id)."""

    type: Literal["mcp_approval_response"]
    id: str | None = None
    approval_request_id: str
    approve: bool
    reason: str | None = None


@attrs.frozen(kw_only=True)
class CodeInterpreterLogs:
    type: Literal["logs", "image"]
    logs: str | None = None
    url: str | None = None


@attrs.frozen(kw_only=True)
class CodeInterpreterCallInput:
    type: Literal["code_interpreter_call"]
    id: str | None = None
    code: str | None = None
    outputs: tuple[CodeInterpreterLogs, ...] | None = None
    container_id: str | None = None

    @property
    def logs(self) -> str:
        return "".join(o.logs or "" for o in self.outputs or () if o.type == "logs")


@attrs.frozen(kw_only=True)
class WebSearchCallInput:
    type: Literal["web_search_call"]
    id: str | None = None
    action: dict[str, object] | None = None


AgentInputItem: TypeAlias = (
    McpCallInput
    | McpListToolsInput
    | McpApprovalRequestInput
    | McpApprovalResponseInput
    | CodeInterpreterCallInput
    | WebSearchCallInput
)
AGENT_INPUT_TYPES: dict[str, type] = {
    "mcp_call": McpCallInput,
    "mcp_list_tools": McpListToolsInput,
    "mcp_approval_request": McpApprovalRequestInput,
    "mcp_approval_response": McpApprovalResponseInput,
    "code_interpreter_call": CodeInterpreterCallInput,
    "web_search_call": WebSearchCallInput,
}
