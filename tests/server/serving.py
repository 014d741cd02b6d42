"""Run a real uvicorn server on 127.0.0.1 (a free port) in a background thread, for tests."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

from streamfold.adapters.server import Parser, SocketFramesProtocol, uvicorn_http


@contextlib.contextmanager
def serve(
    app: Any,
    *,
    header_timeout_s: float = 10.0,
    parser: Parser = "auto",
    ws: Any = SocketFramesProtocol,
) -> Iterator[str]:
    """Serve `app` until the block ends; yields the base URL (`http://127.0.0.1:PORT`).

    Served as `streamfold serve` serves it: with the header timeout of `uvicorn_http` (and its
    HTTP parser, unless `parser` names one), and its WebSocket protocol (unless `ws` names
    another of uvicorn's, such as `"websockets-sansio"`)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=5,
        http=uvicorn_http(header_timeout_s, parser),
        ws=ws,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start within 10 s")
        time.sleep(0.005)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()
