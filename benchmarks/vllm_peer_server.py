"""The vLLM-style server `bench_server.py` measures streamfold serve against.

`POST /v1/responses` with `"stream": true` replays one trace's tokens, one engine step per
chunk as the trace records them, through `vllm_pipeline.HarmonyEvents` (openai-harmony's parser
and the openai SDK's pydantic events) and sends each event as its own SSE frame, serialised with
`model_dump_json`: how vLLM's OpenAI server streams a response (a Starlette
`StreamingResponse` over an async generator, one body write per event). Like streamfold's
service it yields to the event loop after each engine step, and renders each request's prompt
with openai-harmony; it keeps no event log. Its startup heap is frozen out of the garbage
collector's scans, as vLLM's API server freezes its own.
"""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import AsyncIterator
from pathlib import Path

import anyio.lowlevel
from openai_harmony import Conversation, Message, Role
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from vllm_pipeline import HarmonyEvents, harmony_encoding, sse

__all__ = ["create_peer_app"]


def _chunks(trace: Path) -> list[list[int]]:
    lines = trace.read_text(encoding="utf-8").splitlines()[1:]
    return [json.loads(line)["token_ids"] for line in lines if '"token_ids"' in line]


def create_peer_app(trace: Path) -> Starlette:
    chunks = _chunks(trace)
    harmony_encoding()  # loaded at start, as a server does

    async def events(response_id: str, model: str) -> AsyncIterator[bytes]:
        stream = HarmonyEvents(response_id, model)
        for event in stream.start():
            yield sse(event)
        for chunk in chunks:
            for token in chunk:
                for event in stream.feed(token):
                    yield sse(event)
            await anyio.lowlevel.checkpoint()  # one engine step
        for event in stream.finish():
            yield sse(event)

    async def create(request: Request) -> Response:
        body = json.loads(await request.body())
        if not isinstance(body, dict) or not body.get("stream"):
            return JSONResponse({"error": {"message": "this peer only streams"}}, 400)
        # The prompt is rendered, as vLLM renders it before generating (the replay ignores it).
        conversation = Conversation.from_messages(
            [Message.from_role_and_content(Role.USER, str(body.get("input", "")))]
        )
        harmony_encoding().render_conversation_for_completion(conversation, Role.ASSISTANT)
        return StreamingResponse(
            events("resp_peer", str(body.get("model", "peer"))), media_type="text/event-stream"
        )

    async def missing(request: Request) -> Response:
        return JSONResponse({"error": {"message": "not found"}}, 404)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # As vLLM's API server does in its lifespan: "Mark the startup heap as static so that
        # it's ignored by GC. Reduces pause times of oldest generation collections."
        gc.collect()
        gc.freeze()
        yield

    return Starlette(
        routes=[
            Route("/v1/responses", create, methods=["POST"]),
            Route("/v1/responses/{response_id}", missing, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
