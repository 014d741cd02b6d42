"""A prompt rendering worker process: `python -m streamfold.adapters.server._render_worker R W`
reads requests from file descriptor R and writes results to W (see `_render.py`)."""

from __future__ import annotations

import sys
from multiprocessing.connection import Connection

from ._render import serve_renders

__all__: list[str] = []

if __name__ == "__main__":
    serve_renders(
        Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False)
    )
