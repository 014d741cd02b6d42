"""Which tool calls the server runs itself: data given at `start`, from the request's tools.

A harmony recipient means a tool call; who answers it depends on what the request offered.
`browser.*` is a web search and `python` a code interpreter the server runs when the request
enabled them; `<server_label>.<tool>` is an MCP call the server runs for an `mcp` request tool
(and, where that server requires approval for the tool, an approval request the client
answers). Any other call keeps its meaning without a loop: function calls end the response for
the client to answer, and an unknown recipient is an `mcp_call` closed as it was written.
"""

from __future__ import annotations

from typing import Literal

import attrs

__all__ = ["NO_SERVER_TOOLS", "McpServer", "ServerTools"]


@attrs.frozen(kw_only=True)
class McpServer:
    """One `{"type": "mcp"}` request tool, as the reducer needs it.

    `require_approval`: "never", "always", or the names of the tools that need approval.
    """

    server_label: str
    require_approval: Literal["always", "never"] | frozenset[str] = "never"

    def needs_approval(self, name: str) -> bool:
        if isinstance(self.require_approval, frozenset):
            return name in self.require_approval
        return self.require_approval == "always"


@attrs.frozen(kw_only=True)
class ServerTools:
    """The tools this response's server runs (the request's tools, never guessed)."""

    browser: bool = False
    python: bool = False
    mcp: tuple[McpServer, ...] = ()

    def __attrs_post_init__(self) -> None:
        labels = [server.server_label for server in self.mcp]
        if len(set(labels)) != len(labels):
            from ._errors import ReducerUsageError

            raise ReducerUsageError(
                f"ServerTools(mcp=...) names a server_label twice ({labels}); "
                "each MCP server needs its own label"
            )

    def __bool__(self) -> bool:
        return self.browser or self.python or bool(self.mcp)

    def mcp_server(self, label: str | None) -> McpServer | None:
        return next((s for s in self.mcp if s.server_label == label), None)

    def runs(self, kind: str, server_label: str | None) -> bool:
        """Whether the server runs a call of this kind (so it waits for `tool_result`)."""
        if kind == "web_search_call":
            return self.browser
        if kind == "code_interpreter_call":
            return self.python
        return kind == "mcp_call" and self.mcp_server(server_label) is not None


#: The default: the server runs nothing, every call is closed as the model wrote it.
NO_SERVER_TOOLS = ServerTools()
