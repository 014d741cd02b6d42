"""Embed streamfold in your own FastAPI app (docs/embedding.md).

A custom token source (your engine: here a scripted harmony answer, 1-3 tokens a chunk, with
pauses), streamed as the Responses API two ways: from your own endpoint (`POST /chat`, through
`stream_sse`), and through streamfold's whole server mounted under `/llm` (`create_app`, with
its lifespan). Then the same stream under trio, and the hypothesis strategies against your own
endpoint, every stream held to the conformance checker.

    .venv/bin/python examples/embed_fastapi.py             # serve on 127.0.0.1:8000
    .venv/bin/python examples/embed_fastapi.py --self-test # start on a free port, check, stop

Needs the `server` extra and `fastapi` (`pip install fastapi`).
"""

from __future__ import annotations

import json
import random
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from streamfold.adapters.driver import stream_events, stream_sse
from streamfold.adapters.formats import HARMONY
from streamfold.adapters.protocol import parse_create_request
from streamfold.adapters.registry import Engine
from streamfold.adapters.server import create_app
from streamfold.engines import GenerationRequest, TokenChunk
from streamfold.engines.vocab import harmony_encoding
from streamfold.specs import check
from streamfold.statemachine import Response

ANSWER = (
    "<|channel|>analysis<|message|>The user says hello. Answer warmly.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Hello! How can I help you today?<|return|>"
)


class ScriptedSource:
    """A `TokenSource`: every request gets `tokens` (a harmony completion), 1-3 tokens a chunk.

    What a source should do, shown: stop at `request.max_output_tokens` (finish "length"; the
    driver would cut there anyway), and abort in `finally`, shielded, since a consumer that
    goes away cancels the task the source runs in."""

    def __init__(self, text: str = ANSWER) -> None:
        self.tokens = tuple(harmony_encoding().encode(text, allowed_special="all"))
        self.aborted = 0

    async def generate(self, request: GenerationRequest) -> AsyncIterator[TokenChunk]:
        budget = request.max_output_tokens
        tokens = self.tokens if budget is None else self.tokens[:budget]
        cut = len(tokens) < len(self.tokens)
        pace = random.Random(request.request_id)
        sent = 0
        try:
            while sent < len(tokens):
                await anyio.sleep(0.001)  # an engine step
                part = tokens[sent : sent + pace.randint(1, 3)]
                sent += len(part)
                last = sent == len(tokens)
                reason = ("length" if cut else "stop") if last else None
                yield TokenChunk(token_ids=part, finish_reason=reason)
        finally:
            if sent < len(tokens):
                with anyio.CancelScope(shield=True):
                    await anyio.sleep(0)  # where your engine's abort(request_id) is awaited
                    self.aborted += 1


GRAMMAR = HARMONY.grammar()  # the reducer's reading of gpt-oss output


def build_app(source: ScriptedSource) -> FastAPI:
    # streamfold's own server (POST /llm/v1/responses, GET /llm/health, ...) for this engine.
    responses = create_app(Engine(source=source, grammar=lambda model: GRAMMAR))
    # Its lifespan starts the service (background responses run there): give it to the app.
    app = FastAPI(lifespan=responses.router.lifespan_context)
    app.mount("/llm", responses)

    @app.post("/chat")
    async def chat(http: Request) -> StreamingResponse:
        """Your own endpoint: your request shape, streamfold's event stream."""
        body = await http.json()
        request = parse_create_request({"model": "scripted", "input": body["message"]})
        response_id = f"resp_{random.getrandbits(64):016x}"
        budget = body.get("max_output_tokens")
        generation = GenerationRequest(
            request_id=response_id,
            prompt_token_ids=HARMONY.render(request),
            max_output_tokens=budget,
            stop_token_ids=HARMONY.stop_token_ids(),
        )
        response = Response(
            id=response_id,
            created_at=int(time.time()),
            model="scripted",
            status="in_progress",
            max_output_tokens=budget,
        )
        body_bytes = stream_sse(source, generation, GRAMMAR, response, clock=time.time)
        return StreamingResponse(body_bytes, media_type="text/event-stream")

    return app


def sse_events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


def post_stream(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    reply = httpx.post(url, json=body, timeout=30)
    reply.raise_for_status()
    return sse_events(reply.text)


async def under_trio(source: ScriptedSource) -> list[Any]:
    """The driver is anyio: the same stream runs under trio (to serve the app under trio,
    run it with hypercorn: `hypercorn --worker-class trio module:app`)."""
    request = GenerationRequest(request_id="resp_trio", prompt_token_ids=(1, 2, 3))
    response = Response(id="resp_trio", created_at=0, model="scripted", status="in_progress")
    events = stream_events(source, request, GRAMMAR, response)
    return [event async for event in events]


def self_test() -> None:
    source = ScriptedSource()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    config = uvicorn.Config(build_app(source), log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        own = post_stream(f"{url}/chat", {"message": "Hi!"})
        assert check(own) == [] and own[-1]["type"] == "response.completed", own[-1]
        assert own[-1]["response"]["completed_at"] is not None
        cut = post_stream(f"{url}/chat", {"message": "Hi!", "max_output_tokens": 5})
        assert check(cut) == [] and cut[-1]["type"] == "response.incomplete"
        mounted = post_stream(
            f"{url}/llm/v1/responses", {"model": "scripted", "input": "Hi!", "stream": True}
        )
        assert check(mounted) == [] and mounted[-1]["type"] == "response.completed"
        print(f"own endpoint: {len(own)} events, mounted server: {len(mounted)} events: conformant")

        trio_events = anyio.run(under_trio, source, backend="trio")
        assert check(trio_events) == [] and trio_events[-1].type == "response.completed"
        print(f"under trio: {len(trio_events)} events: conformant")

        # The hypothesis strategies against your own endpoint: any gpt-oss completion, any
        # chunking, any budget gives a conformant stream.
        from hypothesis import given, settings
        from hypothesis import strategies as st

        from streamfold.specs.strategies import harmony_completions

        @settings(max_examples=15, deadline=None)
        @given(completion=harmony_completions(), budget=st.none() | st.integers(1, 40))
        def endpoint_is_conformant(completion: Any, budget: int | None) -> None:
            source.tokens = completion.tokens
            events = post_stream(f"{url}/chat", {"message": "x", "max_output_tokens": budget})
            assert check(events) == [], check(events)

        endpoint_is_conformant()
        print("hypothesis: 15 completions against /chat: conformant")
    finally:
        server.should_exit = True
        thread.join(timeout=10)


if __name__ == "__main__":
    if "--self-test" in sys.argv:
        self_test()
    else:
        uvicorn.run(build_app(ScriptedSource()), host="127.0.0.1", port=8000)
