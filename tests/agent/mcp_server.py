"""A real MCP server (the official `mcp` SDK's `MCPServer`, formerly FastMCP) for the tests,
served by uvicorn on 127.0.0.1, over streamable HTTP (`/mcp`) or SSE (`/sse`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import anyio
import attrs

from tests.server.serving import serve


@attrs.define
class McpServerRun:
    url: str  # base: http://127.0.0.1:PORT
    headers_seen: list[dict[str, str]]
    calls: list[str]
    started: list[str]  # calls that began (the slow tool records itself before sleeping)
    listings: list[str] = attrs.Factory(list)  # "begun" and "done" of each slow tools/list

    @property
    def streamable_url(self) -> str:
        return f"{self.url}/mcp"

    @property
    def sse_url(self) -> str:
        return f"{self.url}/sse"


def build_server(run: McpServerRun, list_delay: float = 0.0) -> Any:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations

    class SlowToList(MCPServer):
        """Answers `tools/list` after `list_delay` seconds (a slow or far-away server)."""

        async def list_tools(self) -> Any:
            run.listings.append("begun")
            await anyio.sleep(list_delay)
            run.listings.append("done")
            return await super().list_tools()

    server = SlowToList("demo") if list_delay else MCPServer("demo")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def add(a: int, b: int) -> int:
        """Add two integers."""
        run.calls.append(f"add({a},{b})")
        return a + b

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def weather(city: str) -> str:
        """The weather in a city."""
        run.calls.append(f"weather({city})")
        return f"Sunny in {city}, 21 C"

    @server.tool()
    def explode(reason: str) -> str:
        """Always fails."""
        run.calls.append(f"explode({reason})")
        raise ToolError(f"the tool failed: {reason}")

    @server.tool()
    async def slow(seconds: float) -> str:
        """Sleeps, then answers."""
        run.started.append(f"slow({seconds})")
        await anyio.sleep(seconds)
        run.calls.append(f"slow({seconds})")
        return "woke up"

    return server


def _recording(app: Any, run: McpServerRun) -> Any:
    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            run.headers_seen.append(
                {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            )
        await app(scope, receive, send)

    return wrapped


@contextlib.contextmanager
def running_mcp_server(
    transport: str = "streamable_http", *, list_delay: float = 0.0
) -> Iterator[McpServerRun]:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    run = McpServerRun(url="", headers_seen=[], calls=[], started=[])
    server = build_server(run, list_delay)
    if transport == "sse":
        app = server.sse_app()
    else:
        inner = server.streamable_http_app()
        # The streamable HTTP app runs its session manager in its lifespan.
        app = Starlette(routes=[Mount("/", inner)], lifespan=inner.router.lifespan_context)
    with serve(_recording(app, run)) as url:
        run.url = url
        yield run
