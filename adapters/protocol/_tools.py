"""The request's server-side tools as typed values: `mcp`, `web_search_preview`, `code_interpreter`.

Shapes follow openai-python's `response_create_params` tool types. The strict JSON converter of
`_parse.py` structures them (so a wrong type names its field, `tools[1].headers`), and
`check_server_tools` adds the checks a type cannot say, each naming its `param`. Which of them
this server can run (is the python tool enabled? is there a browser backend?) is the server's
decision, made when the response is prepared (`agent/_config.py`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Literal, TypeAlias, TypeGuard, get_args
from urllib.parse import urlparse

import attrs

from streamfold.statemachine import NamespaceTool, ToolSearchTool
from streamfold.statemachine._grammars.chat_tools import FUNCTIONS

__all__ = [
    "HOSTED_TOOL_TYPES",
    "LABEL",
    "RESERVED_LABELS",
    "SERVER_TOOL_TYPES",
    "AllowedTools",
    "AllowedToolsFilter",
    "ApprovalFilterParam",
    "ApprovalToolNames",
    "CodeInterpreterParam",
    "Container",
    "HostedToolParam",
    "McpParam",
    "RequireApproval",
    "ServerToolParam",
    "ToolSearchParam",
    "WebSearchParam",
    "check_server_tools",
    "client_namespace",
]

#: Labels become harmony recipients (`label.tool`): no dots, spaces or control characters.
LABEL = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: Namespaces the model already knows by another meaning.
RESERVED_LABELS = frozenset({"browser", "python", "functions", "assistant", "container"})


def client_namespace(tool: object) -> TypeGuard[NamespaceTool]:
    """Whether `tool` is a namespace named `functions`, harmony's namespace of the client's
    own tools (Codex's code mode offers its tools in one): its tools are the client's, listed
    and named as if sent one by one."""
    return isinstance(tool, NamespaceTool) and tool.name == FUNCTIONS


_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


@attrs.frozen(kw_only=True)
class AllowedToolsFilter:
    tool_names: tuple[str, ...] | None = None
    read_only: bool | None = None


@attrs.frozen(kw_only=True)
class ApprovalToolNames:
    tool_names: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class ApprovalFilterParam:
    always: ApprovalToolNames | None = None
    never: ApprovalToolNames | None = None


AllowedTools: TypeAlias = tuple[str, ...] | AllowedToolsFilter | None
RequireApproval: TypeAlias = Literal["always", "never"] | ApprovalFilterParam | None
Container: TypeAlias = str | dict[str, object] | None


@attrs.frozen(kw_only=True)
class McpParam:
    """`{"type": "mcp", ...}`: a remote MCP server the server calls for the model."""

    type: Literal["mcp"]
    server_label: str
    server_url: str | None = None
    connector_id: str | None = None
    allowed_tools: AllowedTools = None
    headers: dict[str, str] | None = None
    authorization: str | None = None
    require_approval: RequireApproval = None
    server_description: str | None = None


WebSearchType: TypeAlias = Literal[
    "web_search_preview", "web_search_preview_2025_03_11", "web_search", "web_search_2025_08_26"
]


@attrs.frozen(kw_only=True)
class WebSearchParam:
    """`web_search_preview` (and its dated and GA names): the browser tool."""

    type: WebSearchType
    search_context_size: Literal["low", "medium", "high"] | None = None
    user_location: dict[str, object] | None = None


@attrs.frozen(kw_only=True)
class CodeInterpreterParam:
    """`code_interpreter`: the python tool (`container` is accepted and not used: each call
    runs in a fresh process)."""

    type: Literal["code_interpreter"]
    container: Container = None


ServerToolParam: TypeAlias = McpParam | WebSearchParam | CodeInterpreterParam
SERVER_TOOL_TYPES: dict[str, type] = {
    "mcp": McpParam,
    "code_interpreter": CodeInterpreterParam,
    **dict.fromkeys(get_args(WebSearchType), WebSearchParam),
}


#: `{"type": "tool_search"}`: the model searches deferred tools. With `execution: "client"`
#: the model may call it (offered as the function `tool_search`; its call is a
#: `tool_search_call` item the client answers with a `tool_search_output`); a hosted search
#: (`execution: "server"` or none) this server does not run, and leaves out of the prompt.
ToolSearchParam = ToolSearchTool


#: The API's hosted tools that this server never runs: a request may name them (Codex's
#: default configuration does); they are left out of the prompt, or refused where the
#: operator says so (`streamfold serve --refuse-unserved-tools`).
HOSTED_TOOL_TYPES = frozenset(
    {
        "file_search",
        "computer",
        "computer_use_preview",
        "image_generation",
        "local_shell",
        "shell",
        "apply_patch",
    }
)


@attrs.frozen(kw_only=True)
class HostedToolParam:
    """A hosted tool this server has no backend for (`HOSTED_TOOL_TYPES`), kept as it was sent."""

    type: str
    spec: dict[str, object] = attrs.field(factory=dict, eq=False)


# Headers a request may not set on the server's MCP requests: hop-by-hop ones (RFC 9110 7.6.1),
# those that define the target or the framing, and those that speak for the server's identity.
_FORBIDDEN_HEADERS = frozenset(
    {
        "host",
        "cookie",
        "connection",
        "keep-alive",
        "proxy-authorization",
        "proxy-authenticate",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "forwarded",
        "x-forwarded-for",
        "x-forwarded-host",
        "x-forwarded-proto",
        "x-real-ip",
    }
)


def _check_mcp(tool: McpParam, at: str) -> Iterator[tuple[str, str]]:
    if not LABEL.fullmatch(tool.server_label):
        yield (
            f"{at}.server_label",
            "server_label must be 1-64 letters, digits, '_' or '-' (it names the tools to the "
            f"model as label.tool), got {tool.server_label!r}",
        )
    elif tool.server_label in RESERVED_LABELS:
        yield (
            f"{at}.server_label",
            f"server_label {tool.server_label!r} is reserved for a built-in namespace; choose "
            "another",
        )
    if tool.connector_id is not None:
        if tool.server_url is not None:
            yield (f"{at}.server_url", "give server_url or connector_id, not both")
    elif tool.server_url is None:
        yield (f"{at}.server_url", "server_url (or a connector_id) is required for an mcp tool")
    else:
        url = urlparse(tool.server_url)
        if url.scheme not in ("http", "https") or not url.netloc:
            yield (
                f"{at}.server_url",
                f"server_url must be an http:// or https:// URL, got {tool.server_url!r}",
            )
        elif "@" in url.netloc:
            yield (
                f"{at}.server_url",
                "server_url must not carry userinfo (user:password@); send credentials in "
                "`authorization` or `headers`",
            )
    for name, value in (tool.headers or {}).items():
        if not _HEADER_NAME.fullmatch(name):
            yield (f"{at}.headers", f"{name!r} is not a valid HTTP header name")
        elif name.lower() in _FORBIDDEN_HEADERS:
            yield (
                f"{at}.headers",
                f"header {name!r} is set by the server's HTTP client, not by a request (hop-by-hop "
                "and host- or origin-defining headers are refused)",
            )
        elif any(c in value for c in "\r\n\0"):
            yield (f"{at}.headers", f"the value of header {name!r} holds a line break")


def check_server_tools(tools: Sequence[object]) -> Iterator[tuple[str, str]]:
    """`(param, message)` for each problem of the request's server-side tools (`tools` is the
    request's whole list, so params name the right position)."""
    labels: dict[str, int] = {}
    kinds: dict[str, int] = {}
    for i, tool in enumerate(tools):
        at = f"tools[{i}]"
        if isinstance(tool, McpParam):
            yield from _check_mcp(tool, at)
            if tool.server_label in labels:
                yield (
                    f"{at}.server_label",
                    f"server_label {tool.server_label!r} is used by "
                    f"tools[{labels[tool.server_label]}] too; each MCP server needs its own label",
                )
            labels.setdefault(tool.server_label, i)
        elif isinstance(tool, WebSearchParam | CodeInterpreterParam):
            kind = "browser" if isinstance(tool, WebSearchParam) else "python"
            if kind in kinds:
                yield (f"{at}.type", f"a {tool.type} tool is given twice (tools[{kinds[kind]}])")
            kinds.setdefault(kind, i)
