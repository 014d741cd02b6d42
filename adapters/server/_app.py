"""The ASGI app: `/v1/responses` routes over a `ResponseService`, as a mountable Starlette app.

HTTP concerns only: status codes, the OpenAI error JSON, and noticing when a client has gone;
streams are framed by the SSE transport (`_sse.py`). Every decision about a response is the
service's.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute

from ..agent._config import AgentConfig
from ..protocol import RequestError
from ..registry import Engine, require_engine
from ._conversation_routes import conversation_routes
from ._conversations import Conversations
from ._guard import Guard, OwnedStore
from ._input_items import DEFAULT_LIMIT
from ._limits import MAX_SAFE_INTEGER, ServerLimits, body_within, decode_body, shown
from ._models import list_models, retrieve_model
from ._prepare import Prepared, new_response_id
from ._readiness import Readiness, health
from ._reasoning_keys import ReasoningKeys
from ._service import ResponseService, ServiceNotRunningError
from ._sse import EventStreamResponse
from ._store import EventStore, MemoryEventStore
from ._websocket import responses_socket

__all__ = ["create_app"]

log = logging.getLogger("streamfold.server")


#: How often a non-streaming request checks that its client is still there.
_DISCONNECT_POLL_S = 0.2


def _error(exc: RequestError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


async def _body(request: Request, limits: ServerLimits) -> bytes:
    """The raw body, within the size limit (413) and the time limit (408)."""
    return await body_within(dict(request.headers), request.stream(), limits)


def _service(request: Request) -> ResponseService:
    return request.app.state.streamfold  # type: ignore[no-any-return]


async def create_response(request: Request) -> Any:
    service = _service(request)
    raw = await _body(request, service.limits)
    prepared = await service.prepare(decode_body(raw), body_bytes=len(raw))
    if prepared.request.background:
        run = await service.start_background(prepared)
        if prepared.request.stream:
            return EventStreamResponse(service.follow(run.id, run=run))
        return JSONResponse(service.current(run))  # the run may have ended (and left) already
    if prepared.request.stream:
        return EventStreamResponse(service.stream(prepared))
    return JSONResponse(await _complete_while_connected(request, service, prepared))


async def _complete_while_connected(
    request: Request, service: ResponseService, prepared: Prepared
) -> Any:
    """A non-streaming response, cancelled (and its engine work aborted) if the client leaves.

    Nothing else reads from the connection while the response is generated, so a watcher
    polls for the disconnect; cancelling `complete` closes the source, which aborts the engine.
    """
    result: Any = None
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            while not await request.is_disconnected():
                await anyio.sleep(_DISCONNECT_POLL_S)
            group.cancel_scope.cancel()

        group.start_soon(watch)
        result = await service.complete(prepared)
        group.cancel_scope.cancel()
    return result


def _starting_after(request: Request) -> int:
    raw = request.query_params.get("starting_after")
    if raw is None:
        return -1
    try:
        value = int(raw) if len(raw) <= 20 else -2
    except ValueError:
        value = -2
    if not -1 <= value <= MAX_SAFE_INTEGER:
        raise RequestError(
            f"starting_after must be a sequence number (an integer from 0 to 2^53), got "
            f"{shown(raw)!r}",
            param="starting_after",
        )
    return value


async def retrieve_response(request: Request) -> Any:
    service = _service(request)
    response_id = request.path_params["response_id"]
    stream = request.query_params.get("stream", "false").lower()
    if stream not in ("true", "false"):
        raise RequestError(f"stream must be true or false, got {stream!r}", param="stream")
    after = _starting_after(request)
    response = await service.lookup(response_id)  # 404 before any byte is sent
    if stream == "true":
        return EventStreamResponse(service.follow(response_id, after))
    return JSONResponse(response)


async def cancel_response(request: Request) -> Any:
    return JSONResponse(await _service(request).cancel(request.path_params["response_id"]))


async def list_input_items(request: Request) -> Any:
    query = request.query_params
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise RequestError(f"order must be asc or desc, got {order!r}", param="order")
    try:
        limit = int(query.get("limit", DEFAULT_LIMIT))
    except ValueError:
        raise RequestError(
            f"limit must be an integer, got {query.get('limit')!r}", param="limit"
        ) from None
    page = await _service(request).list_input_items(
        request.path_params["response_id"],
        after=query.get("after"),
        limit=limit,
        order=order,  # type: ignore[arg-type]
    )
    return JSONResponse(page)


async def delete_response(request: Request) -> Any:
    return JSONResponse(await _service(request).delete(request.path_params["response_id"]))


async def _request_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestError)
    return _error(exc)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    return _error(RequestError(str(exc.detail), status=exc.status_code))


async def _not_running(request: Request, exc: Exception) -> JSONResponse:
    return _error(RequestError(str(exc), status=503, type="server_error"))


async def _server_error(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return _error(
        RequestError(
            f"The server had an error while processing your request ({type(exc).__name__}).",
            status=500,
            type="server_error",
        )
    )


def create_app(
    engine: Engine,
    *,
    store: EventStore | None = None,
    agent: AgentConfig | None = None,
    limits: ServerLimits | None = None,
    api_keys: Sequence[str] = (),
    allowed_hosts: Sequence[str] = (),
    reasoning_keys: ReasoningKeys | None = None,
) -> Starlette:
    """The Responses API as a Starlette app (routes under `/v1`, and `GET /health`: 200 when
    ready, 503 while the engine warms up; see `_readiness`), ready for uvicorn.

    `store` defaults to an in-memory log. `agent` says which server-side tools requests may use
    (MCP server URLs, python, the browser); by default none. `limits` bounds what one request
    may cost (body size, input, prompt tokens, rendering time: `ServerLimits`); the header
    timeout needs the HTTP protocol of `uvicorn_http(limits)` too. To mount it in your own app,
    give the outer app its lifespan so background responses have somewhere to run:
    `Starlette(routes=[Mount("/llm", app)], lifespan=app.router.lifespan_context)`.

    `api_keys`: when given, a request needs `Authorization: Bearer <one of them>` (else 401),
    and a response is visible to the key that made it only. Every request must name this
    server in `Host` (the address it came in on, or one of `allowed_hosts`), and a POST body
    must be `application/json` (see `_guard.py`).

    `reasoning_keys` seal and open reasoning items' `encrypted_content` (default:
    `ReasoningKeys.from_environment()`, see `_reasoning_keys.py`).
    """
    require_engine(engine)  # a bare token source: say how to wrap it (not an AttributeError)
    owned = None
    store = store if store is not None else MemoryEventStore()
    if api_keys:  # each key sees its own responses only (`_guard.py`)
        owned = OwnedStore(store, new_response_id)
        service = ResponseService(
            engine,
            owned,
            new_id=owned.owned_id,
            agent=agent,
            limits=limits,
            reasoning_keys=reasoning_keys,
        )
    else:
        service = ResponseService(
            engine, store, agent=agent, limits=limits, reasoning_keys=reasoning_keys
        )
    readiness = Readiness.for_service(service)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with service.running(), anyio.create_task_group() as warming:
            # In the background, so that `GET /health` can answer 503 while it runs.
            warming.start_soon(readiness.run, service)
            yield
            warming.cancel_scope.cancel()

    app = Starlette(
        routes=[
            Route("/v1/responses", create_response, methods=["POST"]),
            WebSocketRoute("/v1/responses", responses_socket),
            Route("/v1/responses/{response_id}", retrieve_response, methods=["GET"]),
            Route("/v1/responses/{response_id}", delete_response, methods=["DELETE"]),
            Route("/v1/responses/{response_id}/input_items", list_input_items, methods=["GET"]),
            Route("/v1/responses/{response_id}/cancel", cancel_response, methods=["POST"]),
            *conversation_routes(),
            Route("/v1/models", list_models, methods=["GET"]),
            Route("/v1/models/{model_id:path}", retrieve_model, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
        ],
        exception_handlers={
            RequestError: _request_error,
            HTTPException: _http_error,
            ServiceNotRunningError: _not_running,
            Exception: _server_error,
        },
        lifespan=lifespan,
        # Keys, the Host a request names, JSON bodies: checked before any route (`_guard.py`).
        middleware=[Middleware(Guard, api_keys=api_keys, allowed_hosts=allowed_hosts, store=owned)],
    )
    app.state.streamfold = service
    app.state.conversations = Conversations(service.store, service.clock)
    app.state.readiness = readiness
    return app
