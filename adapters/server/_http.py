"""uvicorn's HTTP protocols with a header timeout, which uvicorn itself lacks.

uvicorn closes idle keep-alive connections (`timeout_keep_alive`) but waits forever for a
request whose headers are half-sent: its keep-alive timer is cancelled by the first byte, and
nothing else is armed until the request is whole (measured: a connection that sent
`POST / HTTP/1.1\\r\\n` stayed open 90 s, and as long as the client liked). Each such socket
holds a file descriptor and a protocol object, so a client can open thousands. Here a timer is
armed when a connection opens and whenever it waits for a new request's headers, and the
connection is closed when they are not all in by then. (Both parsers bound the headers' size:
h11 by `h11_max_incomplete_event_size`, 16 KiB by default; httptools by llhttp's limit.)

Both of uvicorn's parsers get the same timer: httptools (C, with uvloop what vLLM serves on)
costs the server less CPU per request and per streamed write than h11 (pure Python), so
`streamfold serve` uses it when it is installed (the `server` extra installs it).
"""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any, Literal

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["Parser", "uvicorn_http"]

Parser = Literal["auto", "httptools", "h11"]


class _HeaderTimer:
    """The timer both protocols share; the protocol says when it waits for headers."""

    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    header_timeout_s: float
    _header_timer: asyncio.TimerHandle | None = None

    def _waiting_for_headers(self) -> bool:
        raise NotImplementedError

    def _check(self) -> None:
        """After the protocol has taken new bytes (or at the start): run the clock while the
        request line and headers are not all in (armed again here for a keep-alive connection,
        whose first byte stopped uvicorn's idle timer); stop it once they are."""
        if self._waiting_for_headers() and not self.transport.is_closing():
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_late)
        else:
            self._disarm()

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self._waiting_for_headers() and not self.transport.is_closing():
            self.transport.close()


def _h11(header_timeout_s: float) -> type[asyncio.Protocol]:
    class HeaderTimeoutH11Protocol(_HeaderTimer, H11Protocol):
        def _waiting_for_headers(self) -> bool:
            # IDLE: no request under way (a new one's bytes may be half in); h11 parses no
            # next request while a response is being sent.
            return self.conn.their_state is h11.IDLE

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._check()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._check()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    HeaderTimeoutH11Protocol.header_timeout_s = header_timeout_s
    return HeaderTimeoutH11Protocol


def _httptools(header_timeout_s: float) -> type[asyncio.Protocol]:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class HeaderTimeoutHttpToolsProtocol(_HeaderTimer, HttpToolsProtocol):
        _reading_headers = False  # between a request's first byte and its last header

        def _waiting_for_headers(self) -> bool:
            # A request being answered is not waiting, even when the client has pipelined the
            # start of the next one (uvicorn answers that one later); a connection with no
            # request yet is, and so is one reading the next request's headers.
            if self.cycle is not None and not self.cycle.response_complete:
                return False
            return self.cycle is None or self._reading_headers

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._check()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.parser is not None:  # None once the connection is lost
                self._check()

        def on_message_begin(self) -> None:
            self._reading_headers = True
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            self._reading_headers = False
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    HeaderTimeoutHttpToolsProtocol.header_timeout_s = header_timeout_s
    return HeaderTimeoutHttpToolsProtocol


def has_httptools() -> bool:
    return importlib.util.find_spec("httptools") is not None


def uvicorn_http(header_timeout_s: float, parser: Parser = "auto") -> type[asyncio.Protocol]:
    """The protocol class to pass as `uvicorn.Config(http=...)` (or `uvicorn.run(http=...)`).

    `parser`: uvicorn's `httptools` or `h11` protocol; `auto` (the default) takes httptools
    when it is installed, as uvicorn itself does."""
    if parser == "httptools" or (parser == "auto" and has_httptools()):
        return _httptools(header_timeout_s)
    if parser not in ("auto", "h11"):
        raise ValueError(f"parser must be auto, httptools or h11, got {parser!r}")
    return _h11(header_timeout_s)
