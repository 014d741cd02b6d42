"""The WebSocket transport: `/v1/responses` upgraded, as openai-python's
`client.responses.connect()` opens it, one connection carrying many responses.

Client messages are JSON text: `response.create` with the fields of a `POST /v1/responses`
body (less `stream`, implied, and `background`, refused), optionally `stream_id` (a lane) and
`generate: false` (a warm-up: the request is prepared, its prompt rendered and, on an engine
with a prefix cache, computed into it (`ResponseService.prefill`), and an empty completed
response answers it, whose id a later create may follow, starting warm). Server messages are the
events an SSE stream of the same request carries, the same records (`Records`) from the same
service, each one JSON text message (with `stream_id` added when the create named one), and
`error` messages, `{"type": "error", "status", "error": {"type", "code", "message",
"param"}}`, for a create the server refuses or a message it does not know; the connection
stays open after them. `response.processed` (a client saying it has recorded a response, as
Codex does) is taken silently: the client reads no reply.

Lanes: creates with the same `stream_id` (or none) are answered one after another, in order;
different lanes run side by side. At most `ServerLimits.websocket_max_pending` creates are
queued or running on one connection, all lanes together: past it a create gets an `error`
(429, `too_many_pending_responses`): an HTTP connection holds one request at a time. Lanes are
bounded by the same number: a new lane lets the oldest idle one go (a client may name a new
lane for every create), and a lane named again starts afresh.

A connection remembers its last `RECENT` `store: false` responses (their whole conversation,
within `ServerLimits.websocket_memory_bytes`: `SocketMemory`), so `previous_response_id`
continues them as it continues stored ones: the earlier conversation is put before the new
input. An id neither remembered nor stored is an
`error` with code `previous_response_not_found` (the client then sends its whole context). A
closed socket cancels its running responses, which end `cancelled` in the log, as a foreground
HTTP stream whose client leaves. A connection lasts `ServerLimits.websocket_lifetime_s`: then
what it was asked is answered, an `error` with code `websocket_connection_limit_reached` says
so, and it closes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from typing import Any

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from streamfold.adapters.driver import Generation
from streamfold.statemachine._accel import row_socket_frames

from ..protocol import RequestError
from ._conversation import carried_items
from ._limits import ServerLimits, decode_body
from ._prepare import Prepared
from ._service import ResponseService
from ._socket_memory import SocketMemory
from ._socket_protocol import FRAMES
from ._store import EventRecord, records_of

__all__ = ["RECENT", "responses_socket"]

log = logging.getLogger("streamfold.server")

#: `store: false` responses a connection remembers for `previous_response_id`.
RECENT = 64

Create = tuple[dict[str, Any], bool]  # a create's body, and whether it generates


def socket_error(exc: RequestError, lane: str | None = None) -> dict[str, Any]:
    """A refused request as the WebSocket `error` message (with its create's lane)."""
    error = exc.body()["error"]
    if exc.status == 404 and exc.param == "previous_response_id":
        error["code"] = "previous_response_not_found"
    message = {"type": "error", "status": exc.status, "error": error}
    return message if lane is None else {**message, "stream_id": lane}


class _Endpoint:
    """The `/v1/responses` WebSocket endpoint (see the module docstring), an ASGI app: events
    go out through the server's own `send`, without starlette's wrapper (checks and a
    coroutine more per event): each batch as frames built here, in one write, where the server
    takes them (`streamfold serve`'s protocol, `_socket_protocol.py`), else one message each."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        websocket = WebSocket(scope, receive, send)
        await websocket.accept()
        frames = FRAMES in (scope.get("extensions") or {})
        await _Connection(websocket.app.state.streamfold, websocket, send, frames).serve()


responses_socket = _Endpoint()


class _Connection:
    def __init__(
        self, service: ResponseService, websocket: WebSocket, send: Send, frames: bool
    ) -> None:
        self.service = service
        self.websocket = websocket
        self.send = send
        self.frames = frames  # the server takes built frames (`_socket_protocol.FRAMES`)
        self.lanes: dict[str | None, MemoryObjectSendStream[Create]] = {}
        limits = service.limits
        self.recent = SocketMemory(RECENT, limits.websocket_memory_bytes)
        self.expired = False  # past the connection's lifetime: nothing new is started
        self.busy: set[str | None] = set()  # lanes that have creates to answer
        self.pending = 0  # creates queued or running, all lanes together
        self.idle = anyio.Event()  # set once expired and no lane is busy

    async def serve(self) -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._expire)
            try:
                while True:
                    message = await self.websocket.receive()
                    if message["type"] == "websocket.disconnect":
                        break
                    text = message.get("text")
                    if text is None:
                        text = (message.get("bytes") or b"").decode("utf-8", "replace")
                    await self._take(text, tasks)
            finally:
                # The client has gone: its running responses are cancelled (their logs end).
                tasks.cancel_scope.cancel()

    async def _expire(self) -> None:
        """At the connection's lifetime: what was asked is answered (running responses run to
        their end; creates still queued, or sent from now on, get the error), then the
        connection says `websocket_connection_limit_reached` and closes (1000)."""
        await anyio.sleep(self.service.limits.websocket_lifetime_s)
        self.expired = True
        for queue in self.lanes.values():
            queue.close()  # a lane ends once its queue is answered
        if not self.busy:
            self.idle.set()
        await self.idle.wait()
        try:
            await self._send_json(connection_limit_error(self.service.limits))
            await self.send({"type": "websocket.close", "code": 1000})
        except (WebSocketDisconnect, OSError, RuntimeError):
            log.debug("a WebSocket closed before its lifetime's end was said", exc_info=True)

    async def _take(self, text: str, tasks: TaskGroup) -> None:
        """One client message: a create joins its lane's queue; an acknowledgement is taken
        without a word; anything else is an error."""
        try:
            taken = _create_of(text, self.service.limits)
        except RequestError as exc:
            await self._send_json(socket_error(exc))
            return
        if taken is None:
            return
        lane, create = taken
        if self.expired:  # the connection is closing: nothing new starts
            await self._send_json(socket_error(_limit_reached(self.service.limits), lane))
            return
        if self.pending >= self.service.limits.websocket_max_pending:
            await self._send_json(socket_error(_too_many(self.service.limits), lane))
            return
        queue = self.lanes.get(lane)
        if queue is None:
            self._let_an_idle_lane_go()
            # Unbounded in itself: the creates it may hold are bounded by `pending`.
            queue, queued = anyio.create_memory_object_stream[Create](math.inf)
            self.lanes[lane] = queue
            tasks.start_soon(self._lane, lane, queued, tasks)
        self.busy.add(lane)
        self.pending += 1
        queue.send_nowait(create)

    def _let_an_idle_lane_go(self) -> None:
        """Before a new lane starts: at the bound, the oldest idle lane goes (its task ends
        with its queue). One is idle: fewer than the bound are busy, each holding a create."""
        if len(self.lanes) < self.service.limits.websocket_max_pending:
            return
        for name, queue in self.lanes.items():
            if name not in self.busy:
                del self.lanes[name]
                queue.close()
                return

    async def _lane(
        self, lane: str | None, queued: MemoryObjectReceiveStream[Create], tasks: TaskGroup
    ) -> None:
        async for body, generate in queued:
            try:
                if self.expired:  # queued before the lifetime ended, not started
                    raise _limit_reached(self.service.limits)
                await self._respond(lane, body, generate)
            except RequestError as exc:
                await self._send_json(socket_error(exc, lane))
            except (WebSocketDisconnect, OSError, RuntimeError):
                # The socket is closed (uvicorn refuses sends after the close): nobody reads.
                log.debug("a WebSocket closed while a response was sent", exc_info=True)
                tasks.cancel_scope.cancel()
                return
            except Exception as exc:  # a fault of the server: said, and the connection lives
                log.exception("a WebSocket create failed")
                failed = RequestError(
                    f"The server had an error while processing your request "
                    f"({type(exc).__name__}).",
                    status=500,
                    type="server_error",
                )
                await self._send_json(socket_error(failed, lane))
            finally:
                self.pending -= 1
                if queued.statistics().current_buffer_used == 0:
                    self.busy.discard(lane)
                    if self.expired and not self.busy:
                        self.idle.set()

    async def _respond(self, lane: str | None, body: dict[str, Any], generate: bool) -> None:
        prepared = await self.service.prepare(body, recent=self.recent)
        suffix = "" if lane is None else f', "stream_id": {json.dumps(lane)}}}'
        last: EventRecord | None = None
        if generate:
            async with contextlib.aclosing(self.service.stream(prepared)) as batches:
                async for batch in batches:
                    await self._send_records(batch.records, suffix)
                    last = batch.records[-1] if batch.records else last
        else:  # a warm-up: its prompt prefilled where the engine keeps prefixes, then an
            # empty response opened and completed at once, not logged
            await self.service.prefill(prepared)
            generation = Generation(
                self.service.engine.source,
                prepared.generation,
                prepared.grammar,
                prepared.response,
                clock=self.service.clock,
            )
            records = records_of(generation.close("stop"))
            await self._send_records(records, suffix)
            last = records[-1]
        if last is not None and last.terminal:
            self._remember(prepared, json.loads(last.data)["response"], stored=generate)

    def _remember(self, prepared: Prepared, response: dict[str, Any], *, stored: bool) -> None:
        """Keep a response's conversation when the store does not (`store: false`, or a
        warm-up, which is never logged), within the connection's bounds (`SocketMemory`)."""
        if stored and prepared.request.store is not False:
            return
        items = [*prepared.conversation, *carried_items(response)]
        self.recent.remember(prepared.response.id, items)

    async def _send_records(self, records: list[EventRecord], suffix: str) -> None:
        """One text message per event (with the lane's `stream_id`, when it has one): a batch's
        frames in one write where the server takes frames, else one ASGI message each."""
        send = self.send
        if self.frames:
            await send({"type": FRAMES, "frames": row_socket_frames(records, suffix)})
        elif suffix:
            for record in records:
                await send({"type": "websocket.send", "text": record.data[:-1] + suffix})
        else:
            for record in records:
                await send({"type": "websocket.send", "text": record.data})

    async def _send_json(self, message: dict[str, Any]) -> None:
        await self.send({"type": "websocket.send", "text": json.dumps(message)})


def connection_limit_error(limits: ServerLimits) -> dict[str, Any]:
    """The message a connection sends at the end of its lifetime, before it closes."""
    return socket_error(_limit_reached(limits))


def _limit_reached(limits: ServerLimits) -> RequestError:
    lifetime = limits.websocket_lifetime_s
    said = f"{lifetime / 60:g} minutes" if lifetime >= 60 else f"{lifetime:g} seconds"
    return RequestError(
        f"Responses websocket connection limit reached ({said}). Create a new websocket "
        "connection to continue.",
        code="websocket_connection_limit_reached",
    )


def _too_many(limits: ServerLimits) -> RequestError:
    most = limits.websocket_max_pending
    return RequestError(
        f"this connection already has {most} responses queued or running, this server's "
        "limit; send it when one has ended, or open another connection",
        status=429,
        code="too_many_pending_responses",
    )


def _create_of(text: str, limits: ServerLimits) -> tuple[str | None, Create] | None:
    """A client message as a create (its lane, body and `generate`), None for a
    `response.processed` acknowledgement, or a `RequestError`."""
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) > limits.max_body_bytes:
        raise RequestError(
            f"the message is larger than this server's limit of {limits.max_body_bytes} bytes",
            status=413,
            code="request_too_large",
        )
    message = decode_body(raw)
    kind = message.get("type") if isinstance(message, dict) else None
    if kind == "response.processed":
        # Codex sends `{"type": "response.processed", "response_id"}` once it has recorded a
        # response (its `send_response_processed`, behind a feature flag) and reads no reply:
        # whatever it reads next it takes for its next create's events, so an answer here
        # would fail that turn. Nothing of the response is let go (its next create may name
        # it as `previous_response_id`).
        if not isinstance(message.get("response_id"), str):
            raise RequestError(
                "response.processed needs response_id, the id of the response it "
                "acknowledges (a string)",
                param="response_id",
            )
        log.debug("response.processed: %s", message["response_id"][:80])
        return None
    if kind != "response.create":
        raise RequestError(
            f"unknown message type {json.dumps(kind)[:80]}: this server takes response.create",
            param="type",
            code="unknown_event",
        )
    body = {k: v for k, v in message.items() if k not in ("type", "stream_id", "generate")}
    lane = message.get("stream_id")
    if lane is not None and not isinstance(lane, str):
        raise RequestError("stream_id must be a string", param="stream_id")
    generate = message.get("generate", True)
    if not isinstance(generate, bool):
        raise RequestError("generate must be true or false", param="generate")
    if body.pop("background", None):
        raise RequestError(
            "background responses are not served over a WebSocket; create them with "
            "POST /v1/responses",
            param="background",
        )
    body.pop("stream", None)  # every response on a socket streams
    return lane, (body, generate)
