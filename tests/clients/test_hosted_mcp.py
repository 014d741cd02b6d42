"""The OpenAI Agents SDK's `HostedMCPTool` against `streamfold serve --mcp-allow` (issue 31):
the server runs the MCP tool loop inside one response, as OpenAI's API does.

The parts are the shipped example's (`examples/mcp_weather/`, docs/agents.md): its MCP server
(the official `mcp` SDK, a subprocess), and its recorded conversation `mcp-weather` (turn 0
calls `weather.forecast`, turn 1 answers; turn 1's trace asserts its prompt holds the tool's
real output, so the answer proves the server ran the tool and fed the model its result).
"""

from __future__ import annotations

import contextlib
import importlib.util
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.ports import free_port

from .conftest import missing

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mcp_weather"
ANSWER = "Tomorrow in Paris: sunny, 21 C."
FORECAST = "Sunny in Paris, 21 C"


@contextlib.contextmanager
def _running(command: list[str], ready: str) -> Iterator[None]:
    process = subprocess.Popen(command, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(ready, timeout=1)
                break
            except httpx.TransportError:
                if process.poll() is not None or time.monotonic() > deadline:
                    process.kill()
                    _, err = process.communicate()
                    raise RuntimeError(f"{command} did not start: {err.decode()}") from None
                time.sleep(0.1)
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        assert process.stderr is not None
        process.stderr.close()


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, str]]:
    """(streamfold's base URL, the MCP server's /mcp URL), each a subprocess."""
    mcp_port, port = free_port(), free_port()
    mcp_url = f"http://127.0.0.1:{mcp_port}"
    serve = [sys.executable, "-m", "streamfold", "serve"]
    serve += ["--traces", str(EXAMPLE / "conversations"), "--mcp-allow", f"{mcp_url}/"]
    serve += ["--port", str(port), "--store", ":memory:", "--log-level", "warning"]
    mcp = [sys.executable, str(EXAMPLE / "server.py"), "--port", str(mcp_port)]
    with _running(mcp, f"{mcp_url}/mcp"), _running(serve, f"http://127.0.0.1:{port}/v1/models"):
        yield f"http://127.0.0.1:{port}/v1", f"{mcp_url}/mcp"


@pytest.fixture
async def agents(served: tuple[str, str], anyio_backend: str) -> AsyncIterator[Any]:
    if importlib.util.find_spec("agents") is None:
        missing("openai-agents", "pip install -e '.[dev]'")
    import agents
    from openai import AsyncOpenAI

    agents.set_tracing_disabled(True)
    url, mcp_url = served
    client = AsyncOpenAI(base_url=url, api_key="unused", max_retries=0)

    def agent(require_approval: str, on_approval_request: Any = None) -> Any:
        hosted = agents.HostedMCPTool(
            tool_config={
                "type": "mcp",
                "server_label": "weather",
                "server_url": mcp_url,
                "require_approval": require_approval,  # type: ignore[typeddict-item]
            },
            on_approval_request=on_approval_request,
        )
        return agents.Agent(
            name="assistant",
            instructions="Answer with the weather server's forecast.",
            model=agents.OpenAIResponsesModel(model="mcp-weather", openai_client=client),
            tools=[hosted],
        )

    yield agents, agent
    await client.close()


def _mcp_items(result: Any) -> list[tuple[str, Any]]:
    return [
        (item.type, item.raw_item)
        for item in result.new_items
        if item.type == "mcp_list_tools_item"
        or (item.type == "tool_call_item" and item.raw_item.type == "mcp_call")
    ]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("streaming", [False, True])
async def test_hosted_mcp_tool_runs_on_the_server(agents: Any, streaming: bool) -> None:
    sdk, agent = agents
    question = "What's the weather in Paris tomorrow?"
    if streaming:
        result = sdk.Runner.run_streamed(agent("never"), question)
        [_ async for _ in result.stream_events()]
    else:
        result = await sdk.Runner.run(agent("never"), question)
    assert result.final_output == ANSWER
    assert len(result.raw_responses) == 1  # the server ran the loop: one response
    [(listed, listing), (called, call)] = _mcp_items(result)
    assert (listed, [tool.name for tool in listing.tools]) == ("mcp_list_tools_item", ["forecast"])
    assert (called, call.name, call.output, call.error) == (
        "tool_call_item",
        "forecast",
        FORECAST,
        None,
    )


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_hosted_mcp_tool_approval_through_the_sdks_hook(agents: Any) -> None:
    """`require_approval: "always"`: the response asks (`mcp_approval_request`); the SDK calls
    `on_approval_request`, sends the approval in a second request, and the server runs the
    call without listing the server's tools again (its first listing is in the context)."""
    sdk, agent = agents
    asked: list[Any] = []

    def approve(request: Any) -> Any:
        asked.append(request.data)
        return {"approve": True}

    result = await sdk.Runner.run(agent("always", approve), "What's the weather in Paris?")
    assert result.final_output == ANSWER
    assert [(r.name, r.arguments) for r in asked] == [("forecast", '{"city": "Paris"}')]
    assert len(result.raw_responses) == 2
    [asking, answering] = [[item.type for item in r.output] for r in result.raw_responses]
    assert asking == ["mcp_list_tools", "reasoning", "mcp_approval_request"]
    assert answering == ["mcp_call", "message"]
    call = result.raw_responses[1].output[0]
    assert (call.output, call.approval_request_id) == (FORECAST, asked[0].id)


def test_the_shipped_conversation_is_what_its_script_writes(tmp_path: Path) -> None:
    """`examples/mcp_weather/conversations/` is written by `make_conversation.py` from its
    harmony text: the two may not drift apart."""
    spec = importlib.util.spec_from_file_location(
        "make_conversation", EXAMPLE / "make_conversation.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.write(tmp_path)
    shipped = EXAMPLE / "conversations" / module.MODEL
    assert sorted(p.name for p in shipped.iterdir()) == ["0.jsonl", "1.jsonl"]
    for name in ("0.jsonl", "1.jsonl"):
        assert (tmp_path / name).read_bytes() == (shipped / name).read_bytes(), name
