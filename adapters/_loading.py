"""An engine built at start-up, off the event loop: `LoadingSource`.

vLLM's `AsyncLLM.from_engine_args` and `sglang.Engine(...)` block for the whole model load
(tens of seconds to minutes on a GPU). Built inside the first request, as they once were, the
load stalled the server's event loop for every client, and `GET /health` said ready before any
engine existed. A `LoadingSource` builds its source in a worker thread as soon as `load()` is
called (the server calls it when its lifespan starts: `/health` answers 503 "loading" until it
is done), and requests that arrive meanwhile wait for it without holding the loop. Neither
engine needs the serving loop to be built: each binds its output loop on its first request
(vLLM's output handler, SGLang's `auto_create_handle_loop`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import aclosing

import anyio
import anyio.to_thread

from streamfold.engines import GenerationRequest, TokenChunk, TokenSource

__all__ = ["LoadingSource"]


class LoadingSource:
    """A token source built by `build()` in a worker thread, once.

    `load()` builds it (a second caller waits for the first; a failed build raises, for every
    caller, the error it raised). `generate` streams from it, after waiting for the build if
    it has not finished (and starting it if nobody has: `streamfold record` never calls
    `load`); a failed build ends such a stream with an error chunk that names it. `close()`
    closes the built source, which shuts its engine down.
    """

    def __init__(self, build: Callable[[], TokenSource], *, name: str) -> None:
        self._build = build
        self._name = name
        self._source: TokenSource | None = None
        self._done: anyio.Event | None = None
        self._error: Exception | None = None

    @property
    def source(self) -> TokenSource | None:
        """The built source, or None before the build has finished."""
        return self._source

    async def load(self) -> None:
        if self._source is not None:
            return
        if self._done is not None:
            await self._done.wait()
        else:
            self._done = anyio.Event()
            try:
                # Not abandoned on cancellation: a server stopping mid-load waits for the
                # engine, so that `close()` can shut it down rather than leak its processes.
                self._source = await anyio.to_thread.run_sync(self._build)
            except Exception as exc:
                self._error = exc
            finally:
                self._done.set()
        if self._error is not None:
            raise self._error

    def generate(self, request: GenerationRequest) -> AsyncIterator[TokenChunk]:
        source = self._source
        if source is not None:
            return source.generate(request)
        return self._after_load(request)

    async def _after_load(self, request: GenerationRequest) -> AsyncIterator[TokenChunk]:
        try:
            await self.load()
        except Exception as exc:
            yield TokenChunk(
                finish_reason="error",
                error=f"the {self._name} engine failed to start: {type(exc).__name__}: {exc}",
            )
            return
        assert self._source is not None
        async with aclosing(self._source.generate(request)) as chunks:  # type: ignore[type-var]
            async for chunk in chunks:
                yield chunk

    def close(self) -> None:
        close = getattr(self._source, "close", None)
        if callable(close):
            close()
