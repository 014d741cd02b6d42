"""A free TCP port on 127.0.0.1 for a test's server (one helper for every suite)."""

from __future__ import annotations

import socket

__all__ = ["free_port"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
