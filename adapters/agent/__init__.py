"""The agent loop's tools: the `Tool` interface, MCP servers, `python`, the browser.

A response whose request names server-side tools (`mcp`, `web_search_preview`,
`code_interpreter`) runs a tool loop inside that one response (`_loop.py`): the model calls a
tool, the server runs it, the result goes back into the harmony conversation, and the model
generates again, all in one event stream. This package's face is what a deployment configures
(`AgentConfig`) and implements (`Tool`, `BrowserBackend`); the loop itself is wired into the
server. Importing it imports neither the `mcp` SDK nor the server.
"""

from ._browser import BrowserBackend, BrowserTool, Page, SearchResult, StaticBrowserBackend
from ._config import AgentConfig
from ._mcp import ApprovalFilter, McpServerConfig, McpTool, McpToolInfo, ToolListError
from ._python import PythonLimits, PythonTool
from ._sandbox import SandboxUnavailable
from ._tool import (
    ItemKind,
    ListedTool,
    ReusesListing,
    Tool,
    ToolInfo,
    ToolLimits,
    ToolResult,
    run_tool,
)

__all__ = [
    "AgentConfig",
    "ApprovalFilter",
    "BrowserBackend",
    "BrowserTool",
    "ItemKind",
    "ListedTool",
    "McpServerConfig",
    "McpTool",
    "McpToolInfo",
    "Page",
    "PythonLimits",
    "PythonTool",
    "ReusesListing",
    "SandboxUnavailable",
    "SearchResult",
    "StaticBrowserBackend",
    "Tool",
    "ToolInfo",
    "ToolLimits",
    "ToolListError",
    "ToolResult",
    "run_tool",
]
