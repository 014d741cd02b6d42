"""`McpTool` against a real MCP server (the official SDK's) on 127.0.0.1, both transports."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from streamfold.adapters.agent import (
    AgentConfig,
    ApprovalFilter,
    McpServerConfig,
    McpTool,
    ToolInfo,
    ToolLimits,
    ToolListError,
    run_tool,
)
from streamfold.adapters.agent._config import prepare_agent
from streamfold.adapters.agent._mcp import CONNECT_SECONDS
from streamfold.adapters.protocol import parse_create_request

from .mcp_server import McpServerRun, running_mcp_server

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


@pytest.mark.parametrize("transport", ["streamable_http", "sse"])
async def test_the_tls_context_is_built_once_off_the_event_loop(
    transport: str,
    mcp_server: McpServerRun,
    mcp_sse_server: McpServerRun,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each MCP operation (a listing, a call) let httpx2 build a TLS context of its own: the CA
    # certificates loaded again, ~20 ms of CPU on the event loop each time, which was most of
    # what delayed other requests under `bench_abuse.py --agent` (issue 29).
    import httpcore2

    from streamfold.adapters.agent import _mcp_limits

    built: list[threading.Thread] = []
    real = httpcore2.default_ssl_context

    def counted(**kwargs: Any) -> Any:
        built.append(threading.current_thread())
        return real(**kwargs)

    monkeypatch.setattr(httpcore2, "default_ssl_context", counted)
    with contextlib.suppress(AttributeError):  # a fresh cache: the one build happens here
        _mcp_limits._ssl_context.cache_clear()
    run = mcp_server if transport == "streamable_http" else mcp_sse_server
    url = run.streamable_url if transport == "streamable_http" else run.sse_url
    for _ in range(3):
        tool = _tool(url)
        await tool.list_tools()
        assert (await tool.call("add", '{"a": 5, "b": 6}')).output == "11"
    assert len(built) == 1
    assert built[0] is not threading.main_thread()


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


async def test_an_unreachable_server_fails_the_listing_saying_little() -> None:
    # Not the connection error: whether a port is open is the operator's to know (issue 29).
    with anyio.fail_after(20):
        tool = McpTool(
            McpServerConfig(server_label="gone", server_url="http://127.0.0.1:9/mcp"),
            connect_seconds=2,
        )
        with pytest.raises(ToolListError, match=r"'gone': the MCP server could not be reached"):
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


@pytest.fixture(scope="module")
def slow_lister() -> Iterator[McpServerRun]:
    with running_mcp_server(list_delay=3.0) as run:
        yield run


async def test_a_listing_slower_than_the_connect_timeout_fails_and_a_slow_call_does_not(
    slow_lister: McpServerRun,
) -> None:
    """The connect timeout bounds connecting and `tools/list`, not a tool's own time: a
    server whose listing takes 3 s fails with a 1 s connect timeout, and a tool taking 2 s
    answers under it."""
    slow = McpTool(
        McpServerConfig(server_label="demo", server_url=slow_lister.streamable_url),
        connect_seconds=1,
    )
    with anyio.fail_after(20), pytest.raises(ToolListError, match="'demo'"):
        await slow.list_tools()
    slow.tools = (ToolInfo(name="slow", input_schema={}),)
    result = await run_tool(slow, "slow", '{"seconds": 2}', ToolLimits(call_seconds=10))
    assert (result.output, result.error) == ("woke up", None)


def test_the_server_connects_with_the_documented_timeout_not_the_call_limit() -> None:
    """Bug: the server gave each MCP server the 60 s call limit as its connect timeout (a hung
    server held a response that long), where `CONNECT_SECONDS` (10 s) is documented."""
    body = {
        "model": "m",
        "input": "hi",
        "tools": [{"type": "mcp", "server_label": "demo", "server_url": "http://h/mcp"}],
    }
    config = AgentConfig(mcp_allow=("http://h/",), limits=ToolLimits(call_seconds=60))
    run = prepare_agent(parse_create_request(body), config, own=1)
    assert run is not None
    (tool,) = run.mcp
    assert isinstance(tool, McpTool) and tool.connect_seconds == CONNECT_SECONDS == 10
