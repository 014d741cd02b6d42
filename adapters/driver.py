"""The anyio driver: pulls token chunks from a `TokenSource`, steps the reducer one token at a
time, and hands the events on. It makes no protocol decision; `start`/`step`/`finish` do.
The loop over one chunk's tokens (`step_chunk`) and the synchronous driver over chunks at hand
(`fold`) are `_stepping.py`'s, re-exported here; this module owns pulling chunks from a live
source: batching, the budget, cancellation and faults.

Backpressure: everything here is a pull-based async generator. The source's next chunk is only
requested when the consumer asks for the next event batch, so a slow consumer (a slow HTTP
client behind a flow-controlled socket) slows the engine down, and at most one batch is held
in memory per stream. No queue sits between the two, so nothing can grow without bound.

Coalescing: a source whose stream has the readiness hint (`ReadyChunks.take_ready`) may hold
chunks it has already produced when the consumer comes back for more (the consumer, e.g. a
busy server writing to 200 sockets, was slower than the source). Those are stepped together
with the chunk just received into one batch, up to `MAX_BATCH_CHUNKS` chunks, so the server
logs, frames and writes them once. Nothing waits to fill a batch (a batch is what is ready
now), nothing is read ahead of the source, and the cap keeps one stream from holding the
event loop (or memory) for long. A source without the hint gives one chunk per batch.

Held chunks: a source that already holds several chunks when the opening events have gone out
(replay without a delay, or an engine that got ahead of a busy server) would have them stepped
at once. A caller that schedules many responses on one event loop can have that first batch
wait (`before_held`, awaited once, before the chunks are stepped): a server lets the requests
that arrived meanwhile open first (`adapters/server/_turns.py`).

Cancellation: when the consumer goes away (it closes the iterator, its task is cancelled, a
timeout fires), the source's async generator is closed (`aclose()`), which runs its `finally`
block, where an engine aborts the request. The close is shielded from the cancellation that
caused it (with a time limit), because a cancelled scope would otherwise cancel the engine's
own abort call half-way and leak the request. (A cancellation that lands while the source
itself is awaiting the engine runs the source's `finally` inside the cancelled scope; a source
whose abort awaits must shield that await itself.)

Faults: a source that raises mid-stream ends the response with `response.failed` (via
`finish(state, "error", ...)`) after the events already produced. The exception, with its
traceback, is logged on the `streamfold.driver` logger (with the request id); the client gets
the generic `SOURCE_FAILED` message, never the exception's text (it can name paths, hosts or
memory addresses). streamfold's own typed errors (a token outside the vocabulary) say what to
fix and are sent as they are. A source that stops without a finish reason ends the same way, with
`NO_FINISH`.

Budget: the driver holds a generation to `GenerationRequest.max_output_tokens` whatever the
source does. A token past the budget is not stepped: the generation ends there with finish
`length` (`response.incomplete`, reason `max_output_tokens`) and the source is closed (its
`finally` aborts the engine). A source should still stop at the budget itself (an engine
that cannot be told a budget burns work the driver then throws away), and at the request's
`stop_token_ids`; the driver does not cut at stop ids (the grammar reads them).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable

import anyio
import attrs

from streamfold.engines import GenerationRequest, TokenChunk, TokenSource
from streamfold.statemachine import (
    Event,
    LoopStep,
    Response,
    ResponseState,
    ServerTools,
    StreamfoldError,
    apply_loop_step,
    finish,
    sse_event,
    start,
    step,
)
from streamfold.statemachine._accel import step_ready
from streamfold.statemachine._grammar import FinishReason, Grammar
from streamfold.statemachine._servertools import NO_SERVER_TOOLS
from streamfold.statemachine._sse import sse_frame

# The one chunk-to-step loop, synchronous (`fold`, `step_chunk`: re-exported from here).
from ._stepping import fold, step_chunk, step_tokens

__all__ = [
    "ABORT_GRACE_SECONDS",
    "MAX_BATCH_CHUNKS",
    "NO_FINISH",
    "SOURCE_FAILED",
    "DriverUsageError",
    "Generation",
    "close_source",
    "fold",
    "sse_frame",
    "step_chunk",
    "stream_events",
    "stream_sse",
]

# How long a source's `finally` (the engine abort) may take once its consumer has gone.
ABORT_GRACE_SECONDS = 5.0

NO_FINISH = "the token source stopped without a finish reason"
#: What a client is told when the token source raised (the exception is logged, not sent).
SOURCE_FAILED = "generation failed: the token source raised an error (see the server log)"

log = logging.getLogger("streamfold.driver")


class DriverUsageError(StreamfoldError, ValueError):
    """The driver was called in a way it cannot serve; the message says what to pass."""


#: The most source chunks one event batch holds when the source has several ready (the cap on
#: coalescing, see the module docstring): a bound on how long one stream keeps the loop, and
#: on the bytes one batch holds. When it was set at 64, 64 one-token chunks were about 1 ms of
#: the server's CPU; with the compiled stepper, stepping 64 takes 24 us and 128 take 46 us,
#: their log records and SSE included (median, 100-token replay), and 128 chunks' SSE is about
#: 28 KB, under half of the transport's 64 KiB high-water mark. A batch costs one log commit and one
#: write whatever its size: with 10 streams of 100 tokens (SQLite log, in process), 128 took
#: 11-12% less CPU per request than 64. (At 200 streams, 64 had taken 20% less than 16, and 4
#: 40% more.)
MAX_BATCH_CHUNKS = 128


async def close_source(chunks: AsyncIterator[TokenChunk]) -> None:
    """Close a source's stream (its `finally` aborts the engine), shielded and time-limited:
    the consumer may be gone or cancelled (see the module docstring)."""
    aclose = getattr(chunks, "aclose", None)
    if aclose is None:
        return
    with anyio.move_on_after(ABORT_GRACE_SECONDS, shield=True):
        await aclose()


class Generation:
    """One response being generated: a source, a request, and the reducer state between chunks.

    `batches()` yields the events of `start`, then one list per source chunk (the events of all
    its tokens), or per run of up to `max_batch_chunks` chunks that the source had ready at
    once (see the module docstring), then those of `finish`. The events of `start` are a batch
    of their own, whatever the source holds already. A consumer that records batches
    whole never stores half a step. When the consumer stops early, `close(reason, message)`
    still gives the terminal events (e.g. to write a `cancelled` response to a log); it
    returns `[]` once the response is finished.

    A response that spans several generations (the agent loop, `adapters/agent/_loop.py`)
    drives the same object step by step instead of `batches()`: `open(server_tools)` (the
    events of `start`), then per generation `generate(request)`, which runs that generation to
    its finish or to the server-side call it leaves pending (`end` then says how it ended and
    `taken` holds its chunks as the reducer took them), `apply(step)` for each `LoopStep`
    between generations, and `close(reason, message)` at the end.
    """

    def __init__(
        self,
        source: TokenSource,
        request: GenerationRequest,
        grammar: Grammar,
        response: Response,
        *,
        input_tokens: int | None = None,
        clock: Callable[[], float] | None = None,
        max_batch_chunks: int = MAX_BATCH_CHUNKS,
        restore_stop: frozenset[int] = frozenset(),
        before_held: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        if max_batch_chunks < 1:
            raise ValueError(f"max_batch_chunks must be at least 1, got {max_batch_chunks}")
        self.source = source
        self.max_batch_chunks = max_batch_chunks
        # Awaited once, after the opening events, when the source already holds several chunks
        # (see "Held chunks" in the module docstring); a server passes its scheduling here.
        self.before_held = before_held
        # Stamps `completed_at` on a completed response (the reducer reads no clock).
        self.clock = clock
        self.request = request
        self.grammar = grammar
        self.response = response
        self.input_tokens = len(request.prompt_token_ids) if input_tokens is None else input_tokens
        # Stop ids an engine may leave out of its output (naming them in `stop_reason`) that
        # the reducer must see: a server-side call ends at `<|call|>`.
        self.restore_stop = restore_stop
        self.state: ResponseState | None = None
        # With server tools (`open(server_tools)`): each generation's chunks as the reducer
        # took them (a generation stops at a pending call, so a chunk may be cut there).
        self.taken: list[TokenChunk] | None = None
        #: How the last `generate` ended: its finish reason and message.
        self.end: tuple[FinishReason, str | None] = ("error", NO_FINISH)
        # The response's output token count this generation may reach (None: no budget).
        self._limit: int | None = None
        #: Prompt tokens the source took from its prefix cache, over every generation (each
        #: reports its count on its last chunk; `finish` puts the sum in the usage).
        self.cached_tokens = 0

    @property
    def finished(self) -> bool:
        return self.state is not None and self.state.finished

    def _start(self) -> list[Event]:
        return self.open()

    def open(self, server_tools: ServerTools = NO_SERVER_TOOLS) -> list[Event]:
        """`start` the response (`response.created`, `response.in_progress`); with
        `server_tools`, a generation ends where a call to one of them is pending."""
        self.state, events = start(
            self.grammar, self.response, input_tokens=self.input_tokens, server_tools=server_tools
        )
        self.taken = [] if server_tools else None
        return events

    def apply(self, loop_step: LoopStep) -> list[Event]:
        """One step of the agent loop between generations (`apply_loop_step`)."""
        assert self.state is not None  # opened
        self.state, events = apply_loop_step(self.state, loop_step)
        return events

    def close(self, reason: FinishReason, message: str | None = None) -> list[Event]:
        """Finish the response now (if it is not finished) and return its closing events."""
        events = [] if self.state is not None else self._start()
        if self.state is None or self.state.finished:
            return events
        completed_at = None if self.clock is None else int(self.clock())
        self.state, closing = finish(
            self.state, reason, message, completed_at=completed_at, cached_tokens=self.cached_tokens
        )
        return events + closing

    def batches(self) -> AsyncGenerator[list[Event], None]:
        """The events, one list per source chunk or run of ready chunks (see the class
        docstring)."""
        return self._run(None)

    def generate(self, request: GenerationRequest) -> AsyncGenerator[list[Event], None]:
        """One generation of an opened response, from its state now: its events, batched as
        `batches()`'s, until the source finishes or a server-side call is pending; then `end`
        says how it ended (the response is not finished: the caller `close`s it)."""
        return self._run(request)

    async def _run(self, request: GenerationRequest | None) -> AsyncGenerator[list[Event], None]:
        """A whole response when `request` is None (`batches`), else one generation."""
        whole = request is None
        pending = self._start() if whole else []
        if self.taken is not None:
            self.taken = []
        reason: FinishReason = "error"
        message: str | None = NO_FINISH
        chunks: AsyncIterator[TokenChunk] | None = None
        asked = self.request if request is None else request
        assert self.state is not None  # opened
        budget = asked.max_output_tokens
        # The response's output tokens at which this generation is cut (see "Budget" above).
        self._limit = None if budget is None else self.state.output_tokens + budget
        try:
            chunks = self.source.generate(asked)
            take: Callable[[int], list[TokenChunk]] | None = getattr(chunks, "take_ready", None)
            # The opening events go out alone, first, even when the source already holds
            # chunks (replay; an engine whose consumer lags): a client's first event then waits
            # for one small commit and write, not for a batch of up to the cap (at 10 streams
            # that batch had the first event 2x later than a server sending each event alone).
            # A later generation of a response takes what the source holds at once.
            end = None
            if pending:
                batch, pending = pending, []
                yield batch
            elif take is not None:
                end = self._step_all(take(self.max_batch_chunks), pending)
            if end is None:
                if pending:
                    batch, pending = pending, []
                    yield batch
                more = self.max_batch_chunks - 1
                held = self.before_held if whole else None
                async for first in chunks:
                    ready = [first]
                    if take is not None and more and first.finish_reason is None:
                        ready += take(more)
                    if held is not None:  # the first batch after the opening events
                        if len(ready) > 1:
                            await held()
                        held = None
                    end = self._step_all(ready, pending)
                    if end is not None:
                        break
                    if pending:
                        batch, pending = pending, []
                        yield batch
            if end is not None:
                reason, message = end
        except StreamfoldError as exc:  # misuse streamfold names (a token outside the vocabulary)
            log.exception("request %s failed", asked.request_id)
            reason, message = "error", f"generation failed: {type(exc).__name__}: {exc}"
        except Exception:  # the engine failed: report it in-band, keep what was sent
            log.exception("the token source of request %s raised", asked.request_id)
            reason, message = "error", SOURCE_FAILED
        finally:
            if chunks is not None:
                await close_source(chunks)
        self.end = (reason, message)
        if whole:
            yield pending + self.close(reason, message)
        elif pending:
            yield pending

    def _step_all(
        self, ready: list[TokenChunk], pending: list[Event]
    ) -> tuple[FinishReason, str | None] | None:
        """Step `ready` chunks, adding their events to `pending`; the finish reason and message
        once a chunk finishes (chunks after it are not stepped) or a server-side call is
        pending (`"stop"`), else None. A token `step` refuses raises, after its chunk's
        earlier events were added."""
        state = self.state
        assert state is not None  # set by _start
        # The budget (see "Budget" above) without a look at every chunk on the fast path:
        # chunks of at most one token each fit while there are no more of them than the room.
        # Past that, or at the first chunk of several tokens, the rest is counted (and cut
        # where it goes past the budget) once.
        limit = self._limit
        counted = limit is None
        if limit is not None and len(ready) > limit - state.output_tokens:
            ready, counted = _within(ready, limit - state.output_tokens), True
        taken = self.taken
        if step_ready is not None and type(ready) is not list:
            ready = list(ready)
        try:
            i, end = 0, len(ready)
            while i < end:
                if step_ready is not None:  # the run of plain text tokens from here, in C
                    first = i
                    state, i = step_ready(state, ready, i, pending)
                    if taken is not None and i > first:
                        taken += ready[first:i]  # text: no call ends in these
                    if i == end:
                        break
                if not counted and len(ready[i].token_ids) > 1:
                    assert limit is not None  # counted otherwise
                    ready = ready[:i] + _within(ready[i:], limit - state.output_tokens)
                    end, counted = len(ready), True
                chunk = ready[i]
                i += 1
                # Only a last chunk carries it, and a last chunk never takes the C path above.
                self.cached_tokens += chunk.cached_tokens
                if taken is not None:  # a generation that may end in a server-side call
                    state, over = self._step_to_call(state, chunk, pending, taken)
                    if over:
                        return "stop", None
                else:
                    ids = chunk.token_ids
                    if len(ids) == 1 and chunk.logprobs is None and chunk.top_logprobs is None:
                        # An engine's usual chunk, one plain token: `step_chunk`'s loop for it,
                        # inline, as in `fold` (a call and a list less per token).
                        state, produced = step(state, ids[0])
                        pending += produced
                    else:
                        state, produced, error = step_chunk(state, chunk)
                        pending += produced
                        if error is not None:
                            raise error
                if chunk.finish_reason is not None:
                    return chunk.finish_reason, chunk.error
            return None
        finally:
            self.state = state

    def _step_to_call(
        self,
        state: ResponseState,
        chunk: TokenChunk,
        pending: list[Event],
        taken: list[TokenChunk],
    ) -> tuple[ResponseState, bool]:
        """Step `chunk` until a server-side call is pending (True: the generation is over;
        the reducer takes no token while a call is pending, and closing the source stops an
        engine that went on, as it does after a call ended by `<|end|>`). The chunk, as far as
        it was stepped, goes into `taken`."""
        parts = [chunk]
        stop = chunk.stop_reason
        if chunk.finish_reason == "stop" and isinstance(stop, int) and stop in self.restore_stop:
            # An engine that leaves its stop token out of the output (it names it in
            # stop_reason): the reducer needs that `<|call|>` to see the call end.
            last = chunk.token_ids[-1:] or (taken[-1].token_ids[-1:] if taken else ())
            if last != (stop,):
                parts.append(TokenChunk(token_ids=(stop,)))
        for part in parts:
            state, produced, error, stepped = step_tokens(state, part, until_call=True)
            pending += produced
            if stepped:
                taken.append(part if stepped == len(part.token_ids) else _head(part, stepped))
            if error is not None:
                raise error
            if state.call is not None:
                return state, True
        return state, False


def _within(ready: list[TokenChunk], room: int) -> list[TokenChunk]:
    """The chunks of `ready` up to `room` tokens, the last cut there and finishing `length`
    (the chunks after it dropped; the prefix cache count a dropped last chunk carried is kept
    on the cut one)."""
    kept: list[TokenChunk] = []
    for at, chunk in enumerate(ready):
        count = len(chunk.token_ids)
        if count > room:
            cached = sum(c.cached_tokens for c in ready[at:])
            cut = attrs.evolve(_head(chunk, room), finish_reason="length", cached_tokens=cached)
            kept.append(cut)
            return kept
        kept.append(chunk)
        room -= count
    return kept


def _head(chunk: TokenChunk, count: int) -> TokenChunk:
    """The first `count` tokens of `chunk`, with their logprobs."""
    logprobs, tops = chunk.logprobs, chunk.top_logprobs
    return TokenChunk(
        token_ids=chunk.token_ids[:count],
        logprobs=None if logprobs is None else logprobs[:count],
        top_logprobs=None if tops is None else tops[:count],
    )


async def stream_events(
    source: TokenSource,
    request: GenerationRequest,
    grammar: Grammar,
    response: Response,
    *,
    input_tokens: int | None = None,
    clock: Callable[[], float] | None = None,
) -> AsyncGenerator[Event, None]:
    """Drive `source` through the reducer and yield every event, ending with the terminal one.

    `response` gives the response's identity and echoed settings (id, model, created_at,
    tools, `max_output_tokens`, ...) with `status="in_progress"` (what `start` makes of it;
    another status raises `DriverUsageError`); its output, usage and error come from the
    tokens. `clock` (e.g. `time.time`) stamps `completed_at` on a completed response; None
    leaves it null. `request.max_output_tokens` is held whatever the source does (see the
    module docstring).

    Close the iterator (or cancel its consumer) to abort the generation: use
    `contextlib.aclosing(stream_events(...))` so that happens at once rather than at garbage
    collection.
    """
    if response.status != "in_progress":
        raise DriverUsageError(
            f"stream_events() takes a Response with status='in_progress', got "
            f"{response.status!r}: the stream starts the response (response.created, "
            "response.in_progress) and its terminal event sets the final status"
        )
    generation = Generation(
        source, request, grammar, response, input_tokens=input_tokens, clock=clock
    )
    async with contextlib.aclosing(generation.batches()) as batches:
        async for batch in batches:
            for event in batch:
                yield event


async def stream_sse(
    source: TokenSource,
    request: GenerationRequest,
    grammar: Grammar,
    response: Response,
    *,
    input_tokens: int | None = None,
    clock: Callable[[], float] | None = None,
) -> AsyncGenerator[bytes, None]:
    """`stream_events` (same arguments), framed as the `text/event-stream` body of a
    Responses API stream."""
    events = stream_events(
        source, request, grammar, response, input_tokens=input_tokens, clock=clock
    )
    async with contextlib.aclosing(events):
        async for event in events:
            yield sse_event(event)  # compiled for deltas where the extension is built
