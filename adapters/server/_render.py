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

The agent loop's prompts come through here too (`Renderer.prompts`, the agent's `Prompts`):
the first with the server tools' descriptions (an MCP server's, sized as part of the job), and
each continuation after a call (the tool's output, which may be large). Every prompt, however
far the loop has grown it, is held to `max_input_tokens`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import anyio
import anyio.to_thread
import attrs

from ..formats import ChatFormat, continuation
from ..protocol import CreateRequest, RequestError
from ._limits import ServerLimits

__all__ = ["AgentPrompts", "Renderer", "serve_renders"]


def _failure(exc: BaseException) -> RequestError:
    return RequestError(
        f"the input could not be rendered as a prompt ({type(exc).__name__}: {str(exc)[:200]})",
        param="input",
    )


@attrs.frozen
class _Prompt:
    """A render job: a request's prompt (with the agent loop's tools and messages after it)."""

    request: CreateRequest
    namespaces: tuple[Any, ...] = ()
    after: tuple[Any, ...] = ()

    def render(self, chat_format: ChatFormat) -> tuple[int, ...]:
        return chat_format.render(self.request, self.namespaces, self.after)


@attrs.frozen
class _Continuation:
    """A render job: what follows a call in the agent loop (the tool's harmony message)."""

    message: Any

    def render(self, chat_format: ChatFormat) -> tuple[int, ...]:
        return continuation(self.message)


_Job = _Prompt | _Continuation


def _render_or_error(chat_format: ChatFormat, job: _Job) -> tuple[int, ...] | RequestError:
    try:
        return job.render(chat_format)
    except (KeyboardInterrupt, SystemExit):
        raise
    except RequestError as exc:  # the format refused the request itself: its own param
        return exc
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
            job = requests.recv()
        except EOFError:
            return
        results.send(_render_or_error(chat_format, job))


class _Worker:
    """One worker process, started as `python -m` this module: not with multiprocessing's
    spawn, which imports the parent's `__main__` again in the child, so an app that calls
    `uvicorn.run(create_app(...))` at the top of its script would start a second server."""

    def __init__(self, chat_format: ChatFormat) -> None:
        self.chat_format = chat_format
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

    def call(self, job: _Job, timeout: float) -> tuple[int, ...] | RequestError | None:
        """The render's result, or None when it timed out (the worker is then killed)."""
        self.requests.send(job)
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
    """Renders prompts in the engine's chat format (or a model's own, `render(chat_format=)`):
    inline when small, else in bounded, timed worker processes, each rendering one format."""

    def __init__(self, limits: ServerLimits, chat_format: ChatFormat) -> None:
        self.limits = limits
        self.chat_format = chat_format
        self._idle: list[_Worker] = []
        self._slots = anyio.Semaphore(limits.render_workers)

    async def render(
        self, request: CreateRequest, body_bytes: int, chat_format: ChatFormat | None = None
    ) -> tuple[int, ...]:
        """A request's prompt, in `chat_format` (None: the renderer's); raises `RequestError`
        (400) when it cannot be rendered in time or is longer than `max_input_tokens`."""
        return await self._render(_Prompt(request), body_bytes, chat_format=chat_format)

    def prompts(
        self, request: CreateRequest, body_bytes: int, chat_format: ChatFormat | None = None
    ) -> AgentPrompts:
        """The agent loop's prompts for `request` (whose body is `body_bytes` long), in
        `chat_format` (None: the renderer's)."""
        return AgentPrompts(
            renderer=self, request=request, body_bytes=body_bytes, chat_format=chat_format
        )

    async def _render(
        self, job: _Job, size: int, before: int = 0, chat_format: ChatFormat | None = None
    ) -> tuple[int, ...]:
        """`job` rendered inline when `size` (its bytes, about) is small, else in a worker;
        `before`: the tokens of the prompt it extends (the limit counts them too)."""
        chat_format = self.chat_format if chat_format is None else chat_format
        if size <= self.limits.inline_render_bytes:
            result = _render_or_error(chat_format, job)
        else:
            result = await self._in_worker(job, chat_format)
        if isinstance(result, RequestError):
            raise result
        if before + len(result) > self.limits.max_input_tokens:
            raise RequestError(
                f"the prompt is {before + len(result)} tokens long; this server's limit is "
                f"{self.limits.max_input_tokens} tokens (the model's context)",
                param="input",
                code="context_length_exceeded",
            )
        return result

    async def _in_worker(
        self, job: _Job, chat_format: ChatFormat
    ) -> tuple[int, ...] | RequestError:
        timeout = self.limits.render_timeout_s
        async with self._slots:
            worker = self._idle_worker(chat_format)
            if worker is None or not worker.alive():
                # Starting a worker imports the vocabulary (~1 s), once per worker.
                worker = await anyio.to_thread.run_sync(_Worker, chat_format)
            # Not cancellable: a render cannot be stopped half-way but by killing its worker,
            # and its result is waited for at most `timeout` seconds.
            result = await anyio.to_thread.run_sync(worker.call, job, timeout)
            if result is None:
                raise RequestError(
                    f"rendering the input as a prompt took longer than {timeout:g} s and was "
                    "stopped (openai-harmony is slow on very long words); shorten the input",
                    param="input",
                )
            self._idle.append(worker)
            return result

    def _idle_worker(self, chat_format: ChatFormat) -> _Worker | None:
        """An idle worker of `chat_format` (the latest one idle), or None."""
        for i in range(len(self._idle) - 1, -1, -1):
            if self._idle[i].chat_format is chat_format:
                return self._idle.pop(i)
        return None

    def close(self) -> None:
        while self._idle:
            self._idle.pop().kill()


def _size(messages: Sequence[Any]) -> int:
    """About the bytes openai-harmony reads of these pydantic values (what a word's length,
    and so the render's cost, is bounded by)."""
    return sum(len(message.model_dump_json()) for message in messages)


@attrs.frozen
class AgentPrompts:
    """The agent loop's `Prompts`, rendered as a plain request's prompt is (`Renderer`)."""

    renderer: Renderer
    request: CreateRequest
    body_bytes: int
    chat_format: ChatFormat | None = None

    async def prompt(self, namespaces: Sequence[Any], after: Sequence[Any]) -> tuple[int, ...]:
        job = _Prompt(self.request, tuple(namespaces), tuple(after))
        size = self.body_bytes + _size(namespaces) + _size(after)
        return await self.renderer._render(job, size, chat_format=self.chat_format)

    async def continuation(self, message: Any, prompt_tokens: int) -> tuple[int, ...]:
        job = _Continuation(message)
        size = _size([message])
        return await self.renderer._render(job, size, prompt_tokens, self.chat_format)
