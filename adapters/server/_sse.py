"""The SSE transport: a response's record batches (`Records`, from `ResponseService`) framed as
a `text/event-stream` body, written to the ASGI connection as they come.

Framing lives here, not in the service, so another transport (`_websocket.py`) frames the same
records its own way. A batch the service just made (`Records.fresh`: `records_of`'s one-line
JSON, the API's event types) is framed unchecked, all of it at once by the compiled
`row_frames` (the checked `sse_frame` per event cost 20x more); records read back from a store
go through `sse_frame`, which refuses what SSE cannot carry.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import anyio
from starlette.types import Receive, Scope, Send

from streamfold.statemachine._accel import row_frames
from streamfold.statemachine._sse import sse_frame

from ._store import Records

__all__ = ["EventStreamResponse", "frames"]

log = logging.getLogger("streamfold.server")

_SSE_HEADERS = (
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # proxies must not buffer a live stream
)


def frames(batch: Records) -> bytes:
    """The SSE bytes of one batch: `event: T` + `data: D` + a blank line per record."""
    if batch.fresh:
        return row_frames(batch.records)
    return b"".join([sse_frame(r.type, r.data) for r in batch.records])


class EventStreamResponse:
    """`text/event-stream` of a service's record batches, whose iterator is closed the moment
    the client goes away.

    Starlette's `StreamingResponse` leaves a half-read generator to the garbage collector when
    the client disconnects (uvicorn then drops writes silently), so the engine would keep
    generating for nobody. Here a watcher waits for `http.disconnect` and cancels the stream,
    and the body is closed (shielded) at once, which closes the driver and aborts the engine.
    The batch that ends the stream (`Records.last`) ends the body in the same write (no
    separate one for the chunked encoding's end).
    """

    def __init__(self, body: AsyncIterator[Records]) -> None:
        self.body = body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": list(_SSE_HEADERS)})
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # trio
            loop = None
        if loop is None:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_watch, receive, tg.cancel_scope)
                await self._send_body(send)
                tg.cancel_scope.cancel()
            return
        # On asyncio the watcher is a bare task, stopped by `cancel`: an anyio task group
        # (spawn, cancel, join) cost ~100 us per stream, about 5% of a 100-token stream's CPU.
        with anyio.CancelScope() as body_scope:
            watcher = loop.create_task(_watch(receive, body_scope))
            try:
                await self._send_body(send)
            finally:
                watcher.cancel()

    async def _send_body(self, send: Send) -> None:
        try:
            ended = False
            async for batch in self.body:
                if ended:  # records after the last batch: the body is over, nothing else goes out
                    break
                ended = batch.last
                await send(
                    {"type": "http.response.body", "body": frames(batch), "more_body": not ended}
                )
            if not ended:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            # After its last batch the body runs on to its own end (its cleanup, with no
            # exception thrown in), so a body that finished has nothing left to close: no
            # shielded scope (~4 us) for the usual stream. Any other is closed, shielded.
            if getattr(self.body, "ag_frame", True) is not None:
                with anyio.CancelScope(shield=True):
                    await self.body.aclose()  # type: ignore[attr-defined]


async def _watch(receive: Receive, body_scope: anyio.CancelScope) -> None:
    """Cancel `body_scope` once the client has gone (or its connection failed)."""
    try:
        while (await receive())["type"] != "http.disconnect":
            pass
    except Exception:  # a broken connection: nobody reads the stream any more
        log.debug("the connection of a stream failed; the stream ends", exc_info=True)
    body_scope.cancel()
