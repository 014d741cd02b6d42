"""The agent loop end to end, offline: a real MCP server, streamfold's server, the openai client.

    pip install -e '.[dev,server,agent]' && python examples/agent_offline.py

The model is a scripted token source playing three recorded gpt-oss generations (a call to the
MCP server's `weather` tool, a call to `add`, then the answer), so no weights and no network
are needed; swap in `--engine native` / vLLM / SGLang for a real model. Everything listens on
127.0.0.1 only, on free ports.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from openai import OpenAI
from starlette.applications import Starlette
from starlette.routing import Mount

from streamfold.adapters.agent import AgentConfig
from streamfold.adapters.registry import Engine
from streamfold.adapters.server import MemoryEventStore, create_app
from streamfold.engines import GenerationRequest, TokenChunk
from streamfold.engines.vocab import harmony_encoding, load_harmony_vocabulary
from streamfold.statemachine import HarmonyGrammar

# 1. An MCP server, built with the official SDK.
# WARNING: the SDK otherwise sets up INFO logging on the root logger (issue 33: 34 lines of
# "HTTP Request: POST ..." on stderr, drowning the example's own output).
tools = MCPServer("demo", log_level="WARNING")


@tools.tool()
def weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}, 21 C"


@tools.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


# 2. The "model": three recorded generations, one per iteration of the loop.
GENERATIONS = [
    "<|channel|>analysis<|message|>I need the weather.<|end|><|start|>assistant"
    '<|channel|>commentary to=demo.weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>',
    '<|channel|>commentary to=demo.add <|constrain|>json<|message|>{"a": 2, "b": 3}<|call|>',
    "<|channel|>final<|message|>It is sunny in Paris, and 2 + 3 = 5.<|return|>",
]


class RecordedModel:
    """A token source: the loop's n-th generation of a response has request id `...-n`."""

    def generate(self, request: GenerationRequest) -> AsyncIterator[TokenChunk]:
        return self._play(request)

    async def _play(self, request: GenerationRequest) -> AsyncIterator[TokenChunk]:
        text = GENERATIONS[int(request.request_id.rsplit("-", 1)[1])]
        ids = harmony_encoding().encode(text, allowed_special="all")
        for i in range(0, len(ids), 4):
            yield TokenChunk(token_ids=tuple(ids[i : i + 4]))
        yield TokenChunk(finish_reason="stop")


@contextlib.contextmanager
def serving(app: Any) -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join()


def main() -> None:
    inner = tools.streamable_http_app()
    mcp_app = Starlette(routes=[Mount("/", inner)], lifespan=inner.router.lifespan_context)
    grammar = HarmonyGrammar(vocabulary=load_harmony_vocabulary())
    engine = Engine(source=RecordedModel(), grammar=lambda model: grammar)
    with serving(mcp_app) as mcp_url:
        # 3. streamfold, allowed to call MCP servers on this machine only.
        app = create_app(engine, store=MemoryEventStore(), agent=AgentConfig(mcp_allow=(mcp_url,)))
        with serving(app) as url:
            client = OpenAI(base_url=f"{url}/v1", api_key="unused")
            stream = client.responses.create(
                model="gpt-oss",
                input="What's the weather in Paris, and what is 2 + 3?",
                tools=[
                    {
                        "type": "mcp",
                        "server_label": "demo",
                        "server_url": f"{mcp_url}/mcp",
                        "require_approval": "never",
                    }
                ],
                stream=True,
            )
            for event in stream:
                print(event.sequence_number, event.type)
                if event.type == "response.completed":
                    for item in event.response.output:
                        print(" ", item.type, getattr(item, "output", "") or "")
                    print(event.response.output_text)


if __name__ == "__main__":
    main()
