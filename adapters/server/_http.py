"""uvicorn's h11 protocol with a header timeout, which uvicorn itself lacks.

uvicorn closes idle keep-alive connections (`timeout_keep_alive`) but waits forever for a
request whose headers are half-sent: its keep-alive timer is cancelled by the first byte, and
nothing else is armed until the request is whole (measured: a connection that sent
`POST / HTTP/1.1\\r\\n` stayed open 90 s, and as long as the client liked). Each such socket
holds a file descriptor and a protocol object, so a client can open thousands. Here a timer is
armed when a connection opens and whenever it waits for a new request's headers, and the
connection is closed when they are not all in by then. (h11 already bounds their size:
`h11_max_incomplete_event_size`, 16 KiB by default.)
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["uvicorn_http"]


def uvicorn_http(header_timeout_s: float) -> type[asyncio.Protocol]:
    """The protocol class to pass as `uvicorn.Config(http=...)` (or `uvicorn.run(http=...)`)."""

    class HeaderTimeoutH11Protocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            # Still no whole request line and headers: the clock keeps running (armed again
            # here for a keep-alive connection, whose first byte stopped the idle timer).
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                if self._header_timer is None:
                    self._arm()
            else:
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._header_timer = self.loop.call_later(header_timeout_s, self._headers_late)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_late(self) -> None:
            self._header_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return HeaderTimeoutH11Protocol
