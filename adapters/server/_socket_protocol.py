"""uvicorn's WebSocket protocol (the sans-IO one over `websockets`) with one ASGI extension,
`streamfold.websocket.frames`: the app hands it WebSocket frames it has built, any number in
one bytes object, and they go out in one transport write.

Through plain ASGI each event is one `websocket.send` message: uvicorn builds its frame with
`websockets`' frame object (~10 us of Python) and writes it, one `send` system call per event.
A response's batch of events is ready at once (`Records`), as it is for SSE, where it costs one
write; here it then costs one write too (`_websocket.py` builds the frames in C,
`row_socket_frames`). Frames are final, unmasked text frames, one message per event, as the
protocol allows any number of frames in one write. They are never compressed: a connection
that negotiated permessage-deflate may still send a message uncompressed (RFC 7692 6: the
RSV1 bit says which), and the client's decompressor state is not touched by it.

The extension is declared in the scope (`scope["extensions"]`), as ASGI extensions are; an app
served by another protocol (wsproto, another server) does not find it and sends one message
per event.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.utils import ClientDisconnected
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

__all__ = ["FRAMES", "SocketFramesProtocol"]

#: The ASGI extension (and the type of its send message, whose `frames` are bytes).
FRAMES = "streamfold.websocket.frames"


class SocketFramesProtocol(WebSocketsSansIOProtocol):
    """`WebSocketsSansIOProtocol` that also takes `{"type": FRAMES, "frames": bytes}`. Pass it as
    `uvicorn.Config(ws=SocketFramesProtocol)`; `streamfold serve` does."""

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        if not self.close_sent:  # the handshake is going ahead: the app gets a scope
            self.scope["extensions"][FRAMES] = {}

    async def send(self, message: Any) -> None:
        if message["type"] != FRAMES:
            await super().send(message)
            return
        await self.writable.wait()  # the transport's flow control, as every send waits
        if self.disconnected or self.close_sent or self.transport.is_closing():
            raise ClientDisconnected()
        if not self.handshake_complete or self.initial_response is not None:
            raise RuntimeError(f"{FRAMES!r} before 'websocket.accept'")
        self.transport.write(message["frames"])
