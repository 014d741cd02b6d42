"""`NativeEngine`: the paged gpt-oss engine as a `TokenSource`, stepping in a background thread.

One thread owns the `EngineCore` and runs steps while any request is in flight, so every
concurrent `generate` call shares the batch. Each call gets an unbounded anyio memory object
stream; the thread posts each event loop a step's chunks in one thread-safe callback
(asyncio's `call_soon_threadsafe` or trio's `run_sync_soon`), after the step or from inside
the next one, where that step holds no GIL for longest (`post_tokens`).
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
import functools
import math
import os
import threading
import time
from collections import defaultdict, deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, Literal

import anyio
import anyio.to_thread
import attrs
import torch
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .._source import DecodingConstraint, GenerationRequest, SamplingParams, TokenChunk
from ..guidance import ConstraintError, Guidance, GuidanceConstraint, guidance_for
from ._openmp import release_idle_openmp_team
from ._steplog import StepLog
from .core import EngineCore

__all__ = [
    "ENGINE_THREAD_NAME",
    "EngineClosedError",
    "NativeEngine",
    "PostTokens",
    "default_engine_threads",
]

PostTokens = Literal["auto", "unembedding", "step_end"]

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


def _compile(grammar: str) -> tuple[Guidance, GuidanceConstraint]:
    """llguidance over o200k_harmony, gpt-oss's tokens (the first call builds it, ~0.6 s),
    and a request's grammar compiled by it as its logits constraint."""
    from streamfold.engines.vocab import load_harmony_vocabulary

    guidance = guidance_for(load_harmony_vocabulary())
    return guidance, GuidanceConstraint(guidance.matcher(grammar))


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

    def __init__(
        self, core: EngineCore, *, threads: int | None = None, post_tokens: PostTokens = "auto"
    ) -> None:
        """`threads`: torch intra-op threads of the engine thread (None: the creator's).

        `post_tokens`: when the engine thread hands a step's tokens to the event loops.
        "step_end": right after the step. "unembedding": from inside the next step, right
        before its unembedding matmul (`EngineCore.step`'s `handoff`), or at once when no next
        step follows. The event loop's Python (reducer, SSE, store) then runs beside that
        matmul and the sampling after it, which hold no GIL, instead of against the start of
        the next step, whose many small torch calls (a small model's layers on CPU) each wait
        for the GIL while the loop holds it; each token is posted later by that much. "auto"
        (default): "unembedding" when the last step spent more than half its time from its
        unembedding on (a small model with a large vocabulary: bench_serve's tiny gpt-oss at
        64 streams, where it took the engine's GIL waits from ~3% of its time to ~0.3%), else
        "step_end" (a large model on CPU, where most of a step is its layers, and a token would
        wait most of a step for nothing). Not measured on a GPU."""
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        if post_tokens not in ("auto", "unembedding", "step_end"):
            raise ValueError(f"post_tokens must be auto, unembedding or step_end: {post_tokens!r}")
        self.post_tokens = post_tokens
        self._unembedding_share = 0.0  # of the last step's time, from its unembedding on
        self.core = core
        self._step_lock = threading.Lock()  # held by the engine thread for a whole step
        self._wake = threading.Condition()
        self._commands: deque[tuple[str, Any]] = deque()
        self._sinks: dict[str, _Sink] = {}
        self._closed = False
        self._thread: threading.Thread | None = None
        self.num_steps = 0
        self._guidance: Guidance | None = None  # set by the first constrained request
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
        if request.decoding is not None and request.constraint is None:
            try:
                constraint = await self._constraint(request.decoding)
            except ConstraintError as exc:
                yield TokenChunk(finish_reason="error", error=str(exc))
                return
            request = attrs.evolve(request, constraint=constraint)
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

    async def _constraint(self, decoding: DecodingConstraint) -> GuidanceConstraint:
        """The request's matcher. A grammar compiled before is copied here, on the event loop
        (microseconds), so the request is added with those that came with it; a new one
        compiles (1-5 ms; the vocabulary's tokenizer, once, ~0.6 s) in a worker thread, so
        neither the event loop nor the engine's steps wait for it. (Every request through a
        worker thread arrived a step after free ones sent with it: 16 requests of a repeated
        schema took a step more, the first with a prefill in it.)"""
        if self._guidance is not None:
            found = self._guidance.cached_matcher(decoding.grammar)
            if found is not None:
                return GuidanceConstraint(found)
        self._guidance, constraint = await anyio.to_thread.run_sync(_compile, decoding.grammar)
        return constraint

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
        # The last step's chunks, not yet posted (see `post_tokens`).
        pending: list[tuple[_Sink, TokenChunk]] = []
        while True:
            with self._wake:
                idle = not (self._commands or self.core.has_work())
            if idle and pending:  # no next step to carry them: post them now
                self._send(pending)
                pending = []
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
            handed = len(pending)
            if pending and not self._post_at_unembedding():
                self._send(pending)
                pending = []
            out: list[tuple[_Sink, TokenChunk]] = []
            gone: set[int] = set()  # sinks whose event loop is gone
            mark: list[float] = []  # when the step reached its unembedding
            handoff = functools.partial(self._at_unembedding, pending, gone, mark)
            start = time.perf_counter()
            with self._step_lock:
                for kind, payload in commands:
                    if kind == "add":
                        out.extend(self._add(*payload))
                    else:
                        out.extend(self._abort_now(payload))
                out.extend(self._step(handoff))
            if mark:
                end = time.perf_counter()
                self._unembedding_share = (end - mark[0]) / max(end - start, 1e-9)
            elif pending:  # no forward ran (or it failed before the unembedding)
                gone.update(self._post(pending))
            if gone:
                self._drop(gone)
            if log is not None:
                adds = sum(kind == "add" for kind, _ in commands)
                log.end(admitted=adds, rows=self.core.last_rows,
                        prefill=self.core.last_prefill_tokens, chunks=len(out),
                        handed=handed if pending else 0)  # fmt: skip
            pending = out
        self._send(pending)
        if log is not None:
            log.flush()
        self._shutdown()

    def _post_at_unembedding(self) -> bool:
        if self.post_tokens == "auto":
            return self._unembedding_share > 0.5
        return self.post_tokens == "unembedding"

    def _at_unembedding(
        self, chunks: list[tuple[_Sink, TokenChunk]], gone: set[int], mark: list[float]
    ) -> None:
        """`EngineCore.step`'s handoff: note the time; post `chunks` (the last step's)."""
        mark.append(time.perf_counter())
        if chunks:
            gone.update(self._post(chunks))

    def _add(self, request: GenerationRequest, sink: _Sink) -> list[tuple[_Sink, TokenChunk]]:
        try:
            refused = self.core.add_request(request)
        except ValueError as exc:
            refused = TokenChunk(finish_reason="error", error=str(exc))
        if refused is not None:
            return [(sink, refused)]
        self._sinks[request.request_id] = sink
        return []

    def _step(self, handoff: Callable[[], object] | None) -> list[tuple[_Sink, TokenChunk]]:
        try:
            results = self.core.step(handoff)
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

    def _post(self, out: list[tuple[_Sink, TokenChunk]]) -> set[int]:
        """Post each event loop its chunks, in one callback; returns the ids of the sinks whose
        loop is gone (closed), for `_drop`. Takes no lock: it runs inside a step too."""
        by_loop: dict[object, list[tuple[_Sink, TokenChunk]]] = defaultdict(list)
        for sink, chunk in out:
            by_loop[getattr(sink.post, "__self__", sink.post)].append((sink, chunk))
        gone: set[int] = set()
        for items in by_loop.values():
            try:
                items[0][0].post(_deliver, items)
            except RuntimeError:  # loop closed (asyncio) or trio.RunFinishedError
                gone.update(id(sink) for sink, _ in items)
        return gone

    def _drop(self, gone: set[int]) -> None:
        """Abort the requests whose sinks are in `gone`: nobody can hear them any more."""
        with self._step_lock:
            for request_id, sink in list(self._sinks.items()):
                if id(sink) in gone:
                    self._abort_now(request_id)

    def _send(self, out: list[tuple[_Sink, TokenChunk]]) -> None:
        gone = self._post(out)
        if gone:
            self._drop(gone)

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
