"""`McpTool` against a real MCP server (the official SDK's) on 127.0.0.1, both transports."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from streamfold.adapters.agent import (
    ApprovalFilter,
    McpServerConfig,
    McpTool,
    ToolLimits,
    ToolListError,
    run_tool,
)

from .mcp_server import McpServerRun

pytestmark = pytest.mark.anyio


def _tool(url: str, **config: Any) -> McpTool:
    return McpTool(McpServerConfig(server_label="demo", server_url=url, **config))


@pytest.mark.parametrize("transport", ["streamable_http", "sse"])
async def test_lists_and_calls_over_both_transports(
    transport: str, mcp_server: McpServerRun, mcp_sse_server: McpServerRun
) -> None:
    run = mcp_server if transport == "streamable_http" else mcp_sse_server
    url = run.streamable_url if transport == "streamable_http" else run.sse_url
    tool = _tool(url, headers={"Authorization": "Bearer s3cret", "X-Tenant": "t1"})
    assert tool.config.transport == transport
    listed = await tool.list_tools()
    assert [t.name for t in listed] == ["add", "weather", "explode", "slow"]
    add = listed[0]
    assert add.description == "Add two integers."
    assert add.input_schema["required"] == ["a", "b"]
    assert add.annotations == {"readOnlyHint": True}
    result = await tool.call("add", json.dumps({"a": 2, "b": 40}))
    assert (result.output, result.error) == ("42", None)
    # The headers went on every request to the server.
    assert run.headers_seen
    assert all(h.get("authorization") == "Bearer s3cret" for h in run.headers_seen[-3:])
    assert all(h.get("x-tenant") == "t1" for h in run.headers_seen[-3:])


async def test_allowed_tools_and_read_only_filter(mcp_server: McpServerRun) -> None:
    tool = _tool(mcp_server.streamable_url, allowed_tools=frozenset({"weather", "explode"}))
    assert [t.name for t in await tool.list_tools()] == ["weather", "explode"]
    # A tool the request did not allow is not called, even when the model names it.
    refused = await tool.call("add", '{"a": 1, "b": 2}')
    assert refused.output is None and "offers no tool 'add'" in (refused.error or "")
    assert "add(1,2)" not in mcp_server.calls
    read_only = _tool(mcp_server.streamable_url, read_only=True)
    assert [t.name for t in await read_only.list_tools()] == ["add", "weather"]


async def test_a_failing_tool_is_an_error_result(mcp_server: McpServerRun) -> None:
    tool = _tool(mcp_server.streamable_url)
    await tool.list_tools()
    result = await tool.call("explode", '{"reason": "no fuel"}')
    assert result.output is None
    assert result.error == "Error executing tool explode: the tool failed: no fuel"
    assert result.text == f"Error: {result.error}"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [("{not json", "not valid JSON"), ("[1, 2]", "must be a JSON object")],
)
async def test_bad_arguments_never_reach_the_server(
    mcp_server: McpServerRun, arguments: str, message: str
) -> None:
    tool = _tool(mcp_server.streamable_url)
    await tool.list_tools()
    before = list(mcp_server.calls)
    result = await tool.call("add", arguments)
    assert message in (result.error or "")
    assert mcp_server.calls == before


async def test_an_unreachable_server_fails_the_listing_with_a_reason() -> None:
    with anyio.fail_after(20):
        tool = McpTool(
            McpServerConfig(server_label="gone", server_url="http://127.0.0.1:9/mcp"),
            connect_seconds=2,
        )
        with pytest.raises(ToolListError, match=r"'gone' \(http://127.0.0.1:9/mcp\): Connect"):
            await tool.list_tools()


async def test_a_call_over_the_time_limit_is_an_error_and_the_server_call_is_dropped(
    mcp_server: McpServerRun,
) -> None:
    tool = _tool(mcp_server.streamable_url)
    await tool.list_tools()
    result = await run_tool(tool, "slow", '{"seconds": 5}', ToolLimits(call_seconds=0.5))
    assert result.error == "the tool call timed out after 0.5 s"


def test_approval_policies() -> None:
    def needs(policy: Any, name: str) -> bool:
        url = "http://h/mcp"
        config = McpServerConfig(server_label="x", server_url=url, require_approval=policy)
        return McpTool(config).needs_approval(name)

    assert needs("always", "add") and not needs("never", "add")
    mixed = ApprovalFilter(always=frozenset({"explode"}), never=frozenset({"add"}))
    assert needs(mixed, "explode") and not needs(mixed, "add")
    assert needs(mixed, "weather")  # named nowhere: the API's safe default asks


async def test_describe_is_a_harmony_namespace(mcp_server: McpServerRun) -> None:
    tool = _tool(mcp_server.streamable_url, allowed_tools=frozenset({"add"}))
    await tool.list_tools()
    namespace = tool.describe()
    assert namespace.name == "demo"
    assert [t.name for t in namespace.tools] == ["add"]
