"""An MCP server written to misbehave (issue 29, finding 4), built with the official `mcp`
SDK, against the agent loop over the real socket with the official openai client.

Unbounded, its listings stalled the event loop for most of a minute, made openai-harmony
panic (a 500 in text/plain, a stream with no terminal event), and its answers cost hundreds of
megabytes; now each listing and each call is bounded (`_mcp_limits.py`), and the response
ends as a conformant response whose `mcp_list_tools` or `mcp_call` item says what was refused.
"""

from __future__ import annotations

import contextlib
import gc
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from openai import OpenAI

from streamfold.adapters.agent import (
    McpServerConfig,
    McpTool,
    ToolInfo,
    ToolLimits,
    ToolListError,
    ToolResult,
)
from streamfold.adapters.agent._config import AgentConfig
from streamfold.adapters.server import MemoryEventStore, create_app
from tests.server.serving import serve

from .scripted import ScriptedAgentSource
from .test_loop_server import final, mcp_call


def _server(build: Callable[[Any], None]) -> Any:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("evil")
    build(server)
    return server


def _many_tools(server: Any) -> None:
    for i in range(300):
        server.add_tool(lambda: "ok", name=f"tool_{i}", description="one of many")


def _huge_description(server: Any) -> None:
    server.add_tool(lambda: "ok", name="slow", description="é" * 100_000)


def _panic_word(server: Any) -> None:
    # One 1,000,000-character word: openai-harmony's tokenizer panicked on it.
    server.add_tool(lambda: "ok", name="panic", description="a" * 1_000_000)


def _huge_name(server: Any) -> None:
    server.add_tool(lambda: "ok", name="n" * 100_000, description="a long name")


def _huge_listing(server: Any) -> None:
    # Each tool within the per-tool bounds; together 2 MB of JSON.
    for i in range(120):
        server.add_tool(lambda: "ok", name=f"wide_{i}", description="é" * 4_000)


def _wide_listing(server: Any) -> None:
    # Each tool within the per-tool bounds, under the byte budget; 160,000 characters in all.
    for i in range(40):
        server.add_tool(lambda: "ok", name=f"long_{i}", description="a" * 4_000)


def _huge_output(server: Any) -> None:
    server.add_tool(lambda: "x" * (20 << 20), name="flood", description="20 MB of output")


SERVERS = {
    "many_tools": _many_tools,
    "huge_description": _huge_description,
    "panic_word": _panic_word,
    "huge_name": _huge_name,
    "huge_listing": _huge_listing,
    "wide_listing": _wide_listing,
    "huge_output": _huge_output,
}


@contextlib.contextmanager
def _serving(server: Any) -> Iterator[str]:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    inner = server.streamable_http_app()
    app = Starlette(routes=[Mount("/", inner)], lifespan=inner.router.lifespan_context)
    with serve(app) as url:
        yield f"{url}/mcp"


@contextlib.contextmanager
def _serving_apart(name: str) -> Iterator[str]:
    """`SERVERS[name]` served by a process of its own, whose allocations tracemalloc here does
    not see (a server in this process may still hold the 20 MB body it was sending)."""
    code = (
        "import sys\n"
        "from tests.agent.test_misbehaving_mcp import SERVERS, _server, _serving\n"
        f"with _serving(_server(SERVERS[{name!r}])) as url:\n"
        "    print(url, flush=True)\n"
        "    sys.stdin.read()\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=Path(__file__).parents[2],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://"), f"the MCP server did not start: {url!r}"
        yield url
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def setup() -> Iterator[tuple[OpenAI, dict[str, str]]]:
    source = ScriptedAgentSource(
        {"m": [final("ok")], "flood": [mcp_call("flood", {}, label="evil"), final("ok")]}
    )
    with contextlib.ExitStack() as stack:
        urls = {name: stack.enter_context(_serving(_server(b))) for name, b in SERVERS.items()}
        config = AgentConfig(mcp_allow=("*",), limits=ToolLimits(call_seconds=60))
        app = create_app(source.engine(), store=MemoryEventStore(), agent=config)
        url = stack.enter_context(serve(app))
        yield OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=120), urls


def _tool(url: str) -> dict[str, Any]:
    return {"type": "mcp", "server_label": "evil", "server_url": url, "require_approval": "never"}


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("many_tools", "it lists more than 128 tools"),
        ("huge_description", "has a description longer than 4096 characters"),
        ("panic_word", "has a description longer than 4096 characters"),
        ("huge_name", "a tool name is longer than 128 characters"),
        ("huge_listing", "sent more than 1048576 bytes for its tool listing"),
        ("wide_listing", "pass 65536 characters"),
    ],
)
def test_a_listing_past_its_bounds_fails_as_the_items_error(
    setup: tuple[OpenAI, dict[str, str]], name: str, said: str
) -> None:
    """Issue 29: 10,000 tools were all listed; a 200,000-"é" description stalled the loop
    53 s; a 1,000,000-character word made harmony panic (a text/plain 500); a 100 MB listing
    cost +870 MB."""
    client, urls = setup
    response = client.responses.create(model="m", input="hi", tools=[_tool(urls[name])])
    assert response.status == "completed"
    listing = response.output[0]
    assert listing.type == "mcp_list_tools" and listing.tools == []
    assert listing.error is not None and said in listing.error, listing.error
    # Streamed too: a conformant stream that ends in a terminal event.
    with client.responses.stream(model="m", input="hi", tools=[_tool(urls[name])]) as events:
        types = [event.type for event in events]
    assert types[-1] == "response.completed"


def test_a_tool_output_is_cut_as_it_streams(setup: tuple[OpenAI, dict[str, str]]) -> None:
    """Issue 29: one 100 MB tool output cost +1 GB of memory, read whole before the cap."""
    client, urls = setup
    response = client.responses.create(
        model="flood", input="hi", tools=[_tool(urls["huge_output"])]
    )
    call = response.output[1]
    assert call.type == "mcp_call"
    assert call.error is not None
    assert "sent more than 1048576 bytes for one tool call" in str(call.error)
    assert response.status == "completed"


class _PanickingConnector:
    """A deployment's connector whose tool text makes openai-harmony panic when rendered."""

    kind = "mcp_call"

    def __init__(self, label: str) -> None:
        self.namespace = label

    async def list_tools(self) -> tuple[ToolInfo, ...]:
        return (ToolInfo(name="panic", description="a" * 1_000_000),)

    def needs_approval(self, name: str) -> bool:
        return False

    def describe(self) -> Any:
        import openai_harmony as h

        tool = h.ToolDescription.new("panic", "a" * 1_000_000)
        return h.ToolNamespaceConfig(name=self.namespace, description="x", tools=[tool])

    async def call(self, name: str | None, arguments: str) -> ToolResult:
        return ToolResult(output="ok")


def test_a_render_panic_fails_the_response_with_its_cause() -> None:
    """Issue 29: openai-harmony's PanicException (a BaseException) in the loop made the plain
    answer a text/plain 500, left the stream without a terminal event, and stored a background
    response as "the client disconnected"."""
    source = ScriptedAgentSource({"m": [final("ok")]})
    config = AgentConfig(connectors={"panics": _PanickingConnector})
    app = create_app(source.engine(), store=MemoryEventStore(), agent=config)
    tool = {"type": "mcp", "server_label": "evil", "connector_id": "panics"}
    with serve(app) as url:
        client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=60)
        response = client.responses.create(model="m", input="hi", tools=[tool])  # type: ignore[list-item]
        assert response.status == "failed" and response.error is not None
        assert "PanicException" in response.error.message
        with client.responses.stream(model="m", input="hi", tools=[tool]) as events:  # type: ignore[list-item]
            types = [event.type for event in events]
        assert types[-1] == "response.failed"
        background = client.responses.create(
            model="m",
            input="hi",
            tools=[tool],  # type: ignore[list-item]
            background=True,
        )
        for _ in range(200):
            stored = client.responses.retrieve(background.id)
            if stored.status not in ("queued", "in_progress"):
                break
            time.sleep(0.05)
        assert stored.status == "failed" and stored.error is not None
        assert "PanicException" in stored.error.message


@pytest.mark.parametrize("name", ["huge_listing", "huge_output"])
def test_a_failed_operation_leaves_what_it_read_to_no_garbage_cycle(name: str) -> None:
    """Issue 29 (`bench_abuse.py --agent`): a failed MCP operation's exception groups,
    tracebacks and frames form reference cycles, and the frames held what it had read (up to
    its 1 MiB budget) until the cyclic collector ran; with `tune_gc_for_serving`'s rarer young
    collections a server asked again and again for an over-budget listing grew by ~280 MB.
    The frames are cleared once the failure has become its error (8 failures, the collector
    off: 3.2-3.5 MB held before, 0.6-0.8 MB after). The server runs in a process of its own:
    served from this one, it failed 2 runs in 5 (and CI once) with the 20 MB body Starlette was
    still sending counted as held."""
    with _serving_apart(name) as url:
        _fail_eight_times(McpTool(McpServerConfig(server_label="evil", server_url=url)), name)


def _fail_eight_times(tool: McpTool, name: str) -> None:
    async def fail() -> None:
        if name == "huge_listing":
            with pytest.raises(ToolListError, match="more than 1048576 bytes"):
                await tool.list_tools()
        else:
            await tool.list_tools()
            assert "more than 1048576 bytes" in ((await tool.call("flood", "{}")).error or "")

    anyio.run(fail)  # imports and first-use caches: not garbage
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(8):
            anyio.run(fail)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        gc.enable()
    assert held < 2 << 20, f"{held} bytes held by 8 failed operations"
