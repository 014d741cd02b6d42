"""Prompt rendering off the event loop, in worker processes, bounded in number and in time.

openai-harmony renders in Rust while holding the GIL, and its tokenizer is quadratic in the
length of a word: `"x" * 40000` takes 0.7 s, `"é" * 40000` 2.2 s, and all that time no other
Python thread runs (measured: a 1 ms sleeper in another thread woke 2.2 s late). A thread pool
would therefore stall the server just the same, so large prompts go to worker processes:
`render_workers` of them (the bound on concurrent rendering), each killed and replaced when a
render outlives `render_timeout_s`. A huge input can also make the Rust code panic
(`PanicException`, a `BaseException`); that is caught here and becomes a 400 too.

Small bodies (`inline_render_bytes`) are rendered on the loop: their cost is bounded (a word
cannot be longer than the body) and below a worker round trip.
"""

from __future__ import annotations

import os
import subprocess
import sys
from multiprocessing.connection import Connection

import anyio
import anyio.to_thread

from ..formats import ChatFormat
from ..protocol import CreateRequest, RequestError
from ._limits import ServerLimits

__all__ = ["Renderer", "serve_renders"]


def _failure(exc: BaseException) -> RequestError:
    return RequestError(
        f"the input could not be rendered as a prompt ({type(exc).__name__}: {str(exc)[:200]})",
        param="input",
    )


def _render_or_error(
    chat_format: ChatFormat, request: CreateRequest
) -> tuple[int, ...] | RequestError:
    try:
        return chat_format.render(request)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # pyo3's PanicException is a BaseException
        return _failure(exc)


def serve_renders(requests: Connection, results: Connection) -> None:
    """A worker process: render each request it is sent in the chat format it was sent first,
    until its pipe closes."""
    try:
        chat_format: ChatFormat = requests.recv()
    except EOFError:
        return
    chat_format.load()  # load the vocabulary before the first timed render
    results.send("ready")
    while True:
        try:
            request = requests.recv()
        except EOFError:
            return
        results.send(_render_or_error(chat_format, request))


class _Worker:
    """One worker process, started as `python -m` this module: not with multiprocessing's
    spawn, which imports the parent's `__main__` again in the child, so an app that calls
    `uvicorn.run(create_app(...))` at the top of its script would start a second server."""

    def __init__(self, chat_format: ChatFormat) -> None:
        to_child, from_parent = os.pipe()
        to_parent, from_child = os.pipe()
        module = f"{__package__}._render_worker"
        command = [sys.executable, "-m", module, str(to_child), str(from_child)]
        self.process = subprocess.Popen(command, pass_fds=(to_child, from_child))
        os.close(to_child)
        os.close(from_child)
        self.requests = Connection(from_parent, readable=False)
        self.results = Connection(to_parent, writable=False)
        try:
            self.requests.send(chat_format)
            ready = self.results.recv()  # blocks until the vocabulary is loaded
        except (EOFError, BrokenPipeError):
            ready = None
        if ready != "ready":
            self.kill()
            raise RuntimeError("the prompt rendering worker did not start (see its stderr)")

    def alive(self) -> bool:
        return self.process.poll() is None

    def call(self, request: CreateRequest, timeout: float) -> tuple[int, ...] | RequestError | None:
        """The render's result, or None when it timed out (the worker is then killed)."""
        self.requests.send(request)
        if self.results.poll(timeout):
            result: tuple[int, ...] | RequestError = self.results.recv()
            return result
        self.kill()
        return None

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        self.requests.close()
        self.results.close()


class Renderer:
    """Renders prompts in the engine's chat format: inline when small, else in bounded, timed
    worker processes."""

    def __init__(self, limits: ServerLimits, chat_format: ChatFormat) -> None:
        self.limits = limits
        self.chat_format = chat_format
        self._idle: list[_Worker] = []
        self._slots = anyio.Semaphore(limits.render_workers)

    async def render(self, request: CreateRequest, body_bytes: int) -> tuple[int, ...]:
        if body_bytes <= self.limits.inline_render_bytes:
            result = _render_or_error(self.chat_format, request)
        else:
            result = await self._in_worker(request)
        if isinstance(result, RequestError):
            raise result
        if len(result) > self.limits.max_input_tokens:
            raise RequestError(
                f"the prompt is {len(result)} tokens long; this server's limit is "
                f"{self.limits.max_input_tokens} tokens (the model's context)",
                param="input",
                code="context_length_exceeded",
            )
        return result

    async def _in_worker(self, request: CreateRequest) -> tuple[int, ...] | RequestError:
        timeout = self.limits.render_timeout_s
        async with self._slots:
            worker = self._idle.pop() if self._idle else None
            if worker is None or not worker.alive():
                # Starting a worker imports the vocabulary (~1 s), once per worker.
                worker = await anyio.to_thread.run_sync(_Worker, self.chat_format)
            # Not cancellable: a render cannot be stopped half-way but by killing its worker,
            # and its result is waited for at most `timeout` seconds.
            result = await anyio.to_thread.run_sync(worker.call, request, timeout)
            if result is None:
                raise RequestError(
                    f"rendering the input as a prompt took longer than {timeout:g} s and was "
                    "stopped (openai-harmony is slow on very long words); shorten the input",
                    param="input",
                )
            self._idle.append(worker)
            return result

    def close(self) -> None:
        while self._idle:
            self._idle.pop().kill()
