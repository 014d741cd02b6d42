"""`NativeEngine`: the paged gpt-oss engine as a `TokenSource`, stepping in a background thread.

One thread owns the `EngineCore` and runs steps while any request is in flight, so every
concurrent `generate` call shares the batch. Each call gets an unbounded anyio memory object
stream; after a step the thread posts each event loop its chunks in one thread-safe callback
(asyncio's `call_soon_threadsafe` or trio's `run_sync_soon`) and goes on with the next step.
Closing a `generate` iterator aborts the request and frees its blocks before `aclose` returns
(waiting, off the event loop, for the step in progress to end). The stream offers the
readiness hint (`ReadyChunks.take_ready`): the chunks already delivered to its queue that its
consumer has not taken, so a consumer slower than the steps takes them in one batch.

Threads: the engine thread runs torch with `threads` intra-op threads. A served engine shares
the machine with its own event loop (HTTP, the reducer, SSE) and whatever else runs there, and
an OpenMP team whose threads do not all hold a core stalls at every parallel region until the
descheduled one runs again: on 2 busy cores, 2 engine threads made 19 tok/s where 1 made 152
(see `default_engine_threads`). `warm_up` runs the step shapes of a full batch once, on the
engine thread (glibc keeps one heap per thread), before a server says it is ready.
"""

from __future__ import annotations

import asyncio
import ctypes
import math
import os
import threading
import time
from collections import defaultdict, deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import anyio.to_thread
import torch
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .._source import GenerationRequest, SamplingParams, TokenChunk
from ._openmp import release_idle_openmp_team
from ._steplog import StepLog
from .core import EngineCore

__all__ = ["ENGINE_THREAD_NAME", "EngineClosedError", "NativeEngine", "default_engine_threads"]

#: The engine thread's name, in Python and (Linux) in the OS: what `top -H`, `ps -L` and
#: /proc/PID/task/*/comm show, so an operator or a benchmark can tell the engine's CPU from the
#: event loop's. At most 15 bytes, the kernel's limit.
ENGINE_THREAD_NAME = "streamfold-eng"


def default_engine_threads() -> int:
    """Intra-op threads for a served engine on CPU: every usable core but one.

    The spare core is the event loop's (and the client's, on one machine). With all cores in
    the team, any other runnable thread deschedules a team member, and the whole team waits
    at the next barrier: measured on 2 loaded cores, the engine core alone made 19 tok/s with
    2 threads and 152 tok/s with 1 (`EngineCore.run_to_completion`, 16 requests x 32 tokens).
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


def _name_os_thread(name: str) -> None:
    """Give the calling thread `name` in the OS too (Python's names stay inside Python)."""
    try:
        # The process's own symbols include libc's (no find_library: it runs ldconfig).
        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME: Linux only
    except (OSError, AttributeError, TypeError):
        pass  # not Linux, or no libc found: the name is a convenience, nothing depends on it


class EngineClosedError(RuntimeError):
    """`generate` was called on a `NativeEngine` after `close()`."""


class _Sink:
    """Where one request's chunks go: its stream, and how to run code on its event loop."""

    __slots__ = ("post", "send")

    def __init__(self, send: MemoryObjectSendStream[TokenChunk], post: Callable[..., object]):
        self.send, self.post = send, post


def _poster() -> Callable[..., object]:
    """A thread-safe, non-blocking "run this soon on the current event loop" for asyncio or
    trio. `anyio.from_thread.run_sync` would do, but it blocks the engine thread until the loop
    has run the callback, and on a busy 2-core machine that wait cost more than the step."""
    try:
        return asyncio.get_running_loop().call_soon_threadsafe
    except RuntimeError:  # not asyncio: anyio's only other backend is trio
        import trio

        return trio.lowlevel.current_trio_token().run_sync_soon


def _deliver(items: list[tuple[_Sink, TokenChunk]]) -> None:
    for sink, chunk in items:
        try:
            sink.send.send_nowait(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the consumer left; its abort is on the way
        if chunk.finish_reason is not None:
            sink.send.close()


class _Held:
    """What one request's stream shares with its generator: the chunks delivered and not yet
    taken (`receive`, while the stream is open), and whether the finish was among those taken."""

    __slots__ = ("finished", "receive")

    def __init__(self) -> None:
        self.receive: MemoryObjectReceiveStream[TokenChunk] | None = None
        self.finished = False


class _RequestStream:
    """A request's chunk stream: `_generate` (an async generator, so an abandoned stream is
    still closed, and its request aborted, by the event loop's finalizer) plus the readiness
    hint, which takes what the engine thread has already delivered to this request's queue and
    never waits for a step."""

    __slots__ = ("_chunks", "_held")

    def __init__(self, chunks: AsyncGenerator[TokenChunk, None], held: _Held) -> None:
        self._chunks, self._held = chunks, held

    def __aiter__(self) -> _RequestStream:
        return self

    def __anext__(self) -> Awaitable[TokenChunk]:
        return self._chunks.__anext__()

    def take_ready(self, limit: int) -> list[TokenChunk]:
        ready: list[TokenChunk] = []
        held = self._held
        while held.receive is not None and not held.finished and len(ready) < limit:
            try:
                chunk = held.receive.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                break
            ready.append(chunk)
            held.finished = chunk.finish_reason is not None
        return ready

    async def aclose(self) -> None:
        await self._chunks.aclose()


class NativeEngine:
    """A `TokenSource` over an `EngineCore`. Use as a context manager, or call `close()`."""

    def __init__(self, core: EngineCore, *, threads: int | None = None) -> None:
        """`threads`: torch intra-op threads of the engine thread (None: the creator's)."""
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        self.core = core
        self._step_lock = threading.Lock()  # held by the engine thread for a whole step
        self._wake = threading.Condition()
        self._commands: deque[tuple[str, Any]] = deque()
        self._sinks: dict[str, _Sink] = {}
        self._closed = False
        self._thread: threading.Thread | None = None
        self.num_steps = 0
        self._log = StepLog.from_env()  # a per-step timeline, for profiling (None: off)
        # torch's intra-op thread count is per OS thread: carry the creator's setting over.
        self.threads = torch.get_num_threads() if threads is None else threads

    def __enter__(self) -> NativeEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def num_free_blocks(self) -> int:
        return self.core.blocks.num_free

    def close(self) -> None:
        """Stop the engine thread; requests still in flight end with `finish_reason="abort"`."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def generate(self, request: GenerationRequest) -> AsyncIterator[TokenChunk]:
        """The request's chunks as the engine's steps make them; the stream's `take_ready`
        (`ReadyChunks`) hands over those already delivered that its consumer has not taken."""
        held = _Held()
        return _RequestStream(self._generate(request, held), held)

    async def _generate(
        self, request: GenerationRequest, held: _Held
    ) -> AsyncGenerator[TokenChunk, None]:
        if self._closed:
            raise EngineClosedError("this NativeEngine is closed; build a new one")
        # This (event loop) thread's idle OpenMP team would make libgomp throttle the engine
        # thread's team (see _openmp); free it each time, as torch work here rebuilds it.
        release_idle_openmp_team()
        send, receive = anyio.create_memory_object_stream[TokenChunk](math.inf)
        sink = _Sink(send, _poster())
        self._command("add", (request, sink))
        held.receive = receive
        try:
            async with receive:
                async for chunk in receive:
                    held.finished = chunk.finish_reason is not None
                    yield chunk
                    if held.finished:
                        return
        finally:
            held.receive = None
            if not held.finished:
                # Wait (in a worker thread, shielded from cancellation) for any running step
                # to end, so the blocks are free when aclose() returns.
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(self._abort_after_step, request.request_id)

    async def warm_up(self) -> float:
        """Run the shapes of a full batch once (a full prefill step, a full decode step) on the
        engine thread; returns the seconds it took.

        The first steps at a new size pay for allocations (and page faults) that later ones
        reuse; a server calls this before it reports ready, so its first clients do not.
        """
        started = time.perf_counter()
        scheduler = self.core.scheduler
        seqs = scheduler.max_num_seqs
        length = max(1, min(scheduler.max_num_batched_tokens // seqs, self.core.max_model_len - 2))
        vocab = self.core.model.config.vocab_size
        prompt = tuple(i % vocab for i in range(length))

        async def one(i: int) -> None:
            request = GenerationRequest(
                request_id=f"streamfold-warm-up-{i}",
                prompt_token_ids=prompt,
                max_output_tokens=2,
                sampling=SamplingParams(temperature=0.0),
            )
            async for _ in self.generate(request):
                pass

        async with anyio.create_task_group() as group:
            for i in range(seqs):
                group.start_soon(one, i)
        return time.perf_counter() - started

    def _abort_after_step(self, request_id: str) -> None:
        with self._step_lock:
            self._abort_now(request_id)
        self._command("abort", request_id)  # in case the add is still queued

    def abort(self, request_id: str) -> None:
        """Abort `request_id` and free its blocks now if no step is running, else after it."""
        if self._step_lock.acquire(blocking=False):
            try:
                told = self._abort_now(request_id)
            finally:
                self._step_lock.release()
            _deliver(told)  # we are on the requester's event loop
        # Also queue it: the add may still be waiting in the command queue.
        self._command("abort", request_id)

    def _abort_now(self, request_id: str) -> list[tuple[_Sink, TokenChunk]]:
        """Free the request's blocks; returns the `abort` chunk its consumer should get."""
        self.core.abort(request_id)
        sink = self._sinks.pop(request_id, None)
        return [] if sink is None else [(sink, TokenChunk(finish_reason="abort"))]

    def _command(self, kind: str, payload: Any) -> None:
        with self._wake:
            self._commands.append((kind, payload))
            if self._log is not None:
                self._log.queued()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name=ENGINE_THREAD_NAME, daemon=True
                )
                self._thread.start()
            self._wake.notify()

    def _loop(self) -> None:
        _name_os_thread(ENGINE_THREAD_NAME)
        torch.set_num_threads(self.threads)
        log = self._log
        while True:
            with self._wake:
                if log is not None and not (self._commands or self.core.has_work()):
                    log.idle()
                while not (self._commands or self.core.has_work() or self._closed):
                    self._wake.wait()
                if self._closed:
                    break
                commands = list(self._commands)
                self._commands.clear()
                if log is not None:
                    log.begin()
            out: list[tuple[_Sink, TokenChunk]] = []
            with self._step_lock:
                for kind, payload in commands:
                    if kind == "add":
                        out.extend(self._add(*payload))
                    else:
                        out.extend(self._abort_now(payload))
                out.extend(self._step())
            self._send(out)
            if log is not None:
                adds = sum(kind == "add" for kind, _ in commands)
                log.end(admitted=adds, rows=self.core.last_rows,
                        prefill=self.core.last_prefill_tokens, chunks=len(out))  # fmt: skip
        if log is not None:
            log.flush()
        self._shutdown()

    def _add(self, request: GenerationRequest, sink: _Sink) -> list[tuple[_Sink, TokenChunk]]:
        try:
            refused = self.core.add_request(request)
        except ValueError as exc:
            refused = TokenChunk(finish_reason="error", error=str(exc))
        if refused is not None:
            return [(sink, refused)]
        self._sinks[request.request_id] = sink
        return []

    def _step(self) -> list[tuple[_Sink, TokenChunk]]:
        try:
            results = self.core.step()
        except Exception as exc:  # a bug or device failure: fail every request, keep serving
            error = f"engine step failed: {type(exc).__name__}: {exc}"
            failed = []
            for request_id in list(self._sinks):
                failed.append(
                    (self._sinks.pop(request_id), TokenChunk(finish_reason="error", error=error))
                )
                self.core.abort(request_id)
            return failed
        self.num_steps += 1
        out = []
        for request_id, chunk in results:
            sink = self._sinks.get(request_id)
            if sink is None:
                continue
            if chunk.finish_reason is not None:
                del self._sinks[request_id]
            out.append((sink, chunk))
        return out

    def _send(self, out: list[tuple[_Sink, TokenChunk]]) -> None:
        by_loop: dict[object, list[tuple[_Sink, TokenChunk]]] = defaultdict(list)
        for sink, chunk in out:
            by_loop[getattr(sink.post, "__self__", sink.post)].append((sink, chunk))
        for items in by_loop.values():
            try:
                items[0][0].post(_deliver, items)
            except RuntimeError:  # loop closed (asyncio) or trio.RunFinishedError
                gone = {id(sink) for sink, _ in items}
                with self._step_lock:
                    for request_id, sink in list(self._sinks.items()):
                        if id(sink) in gone:
                            self._abort_now(request_id)

    def _shutdown(self) -> None:
        with self._wake:  # adds that never reached the core get their answer too
            queued = [payload[1] for kind, payload in self._commands if kind == "add"]
            self._commands.clear()
        with self._step_lock:
            leftovers = list(self._sinks.values())
            for request_id in list(self._sinks):
                self.core.abort(request_id)
            self._sinks.clear()
        self._send([(sink, TokenChunk(finish_reason="abort")) for sink in leftovers + queued])
