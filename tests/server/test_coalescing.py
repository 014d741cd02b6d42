"""Coalescing: chunks a source already holds (`ReadyChunks.take_ready`) go out in one batch.

The driver steps every chunk the source has ready into the batch of the chunk it just received,
up to `max_batch_chunks`; it never waits to fill a batch and never takes a chunk the source has
not produced. The events, and the server's SSE bytes, are the same as one chunk per batch.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from streamfold.adapters.driver import MAX_BATCH_CHUNKS, Generation, fold
from streamfold.adapters.grammars import grammar_for
from streamfold.adapters.registry import Engine, ReplayEngine
from streamfold.adapters.server import MemoryEventStore
from streamfold.adapters.server._service import ResponseService
from streamfold.adapters.server._sse import EventStreamResponse, frames
from streamfold.adapters.server._store import EventRecord, Records
from streamfold.adapters.server._turns import LoopTurns
from streamfold.engines import (
    GenerationRequest,
    ReadyChunks,
    ReplaySource,
    SamplingParams,
    TokenChunk,
    dump_trace,
    read_trace,
)
from streamfold.engines.replay import CUT_OFF
from streamfold.statemachine import Event, Response, dumps, loads, sse_event

from .helpers import (
    GREETING,
    LONG_ANSWER,
    WEATHER_CALL,
    assert_conformant,
    encode,
    make_trace,
    write_traces,
)

pytestmark = pytest.mark.anyio

RESPONSE = Response(id="resp_trace", created_at=1, model="trace", status="in_progress")
TEXT_TOKENS = len(encode(LONG_ANSWER)) - 4  # less the header's three and <|return|>
# Longer than two batches at the default cap: the cap, not the answer's end, cuts its batches.
LONGER_ANSWER = (
    "<|channel|>final<|message|>"
    + " ".join(f"word{i}" for i in range(2 * MAX_BATCH_CHUNKS))
    + "<|return|>"
)


def _plain_harmony(path: Path) -> bool:
    """A trace of token chunks only (agent traces replay their loop steps, not one source)."""
    trace = read_trace(path)
    return trace.header.get("grammar") == "harmony" and all(
        isinstance(c, TokenChunk) for c in trace.entries
    )


GOLDENS = [
    p
    for p in sorted((Path(__file__).resolve().parents[2] / "specs" / "traces").glob("*.jsonl"))
    if not p.name.endswith(".golden.jsonl") and _plain_harmony(p)
]


def request() -> GenerationRequest:
    return GenerationRequest(request_id="resp_trace", prompt_token_ids=(1, 2, 3))


def grammar():  # type: ignore[no-untyped-def]
    return grammar_for({"grammar": "harmony"})


class Counted:
    """A chunk stream that counts what its consumer took, and how (hint or not)."""

    def __init__(self, inner: AsyncIterator[TokenChunk], *, hint: bool) -> None:
        self.inner = inner
        self.received = 0  # chunks handed over by __anext__
        self.taken: list[int] = []  # chunks handed over by each take_ready call
        if hint:
            self.take_ready = self._take_ready

    @property
    def produced(self) -> int:
        return self.received + sum(self.taken)

    def __aiter__(self) -> Counted:
        return self

    async def __anext__(self) -> TokenChunk:
        chunk = await self.inner.__anext__()
        self.received += 1
        return chunk

    def _take_ready(self, limit: int) -> list[TokenChunk]:
        ready = self.inner.take_ready(limit)  # type: ignore[attr-defined]
        self.taken.append(len(ready))
        return ready  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        await self.inner.aclose()  # type: ignore[attr-defined]


class CountedSource:
    def __init__(self, inner: Any, *, hint: bool = True) -> None:
        self.inner, self.hint = inner, hint
        self.streams: list[Counted] = []

    def generate(self, req: GenerationRequest) -> AsyncIterator[TokenChunk]:
        stream = Counted(self.inner.generate(req), hint=self.hint)
        self.streams.append(stream)
        return stream


async def batches_of(source: Any, **kwargs: Any) -> list[list[Event]]:
    generation = Generation(source, request(), grammar(), RESPONSE, **kwargs)
    async with contextlib.aclosing(generation.batches()) as batches:
        return [batch async for batch in batches]


def deltas(batch: list[Event]) -> int:
    return sum(e.type == "response.output_text.delta" for e in batch)


def test_replay_streams_offer_the_readiness_hint() -> None:
    stream = ReplaySource(make_trace(GREETING)).generate(request())
    assert isinstance(stream, ReadyChunks)


@pytest.mark.parametrize("cap", [1, 2, 5, MAX_BATCH_CHUNKS])
async def test_ready_chunks_share_a_batch_never_more_than_the_cap(cap: int) -> None:
    # LONGER_ANSWER: one token per chunk, each text token one delta.
    source = CountedSource(ReplaySource(make_trace(LONGER_ANSWER)))
    text_tokens = len(encode(LONGER_ANSWER)) - 4
    assert text_tokens > 2 * cap
    batches = await batches_of(source, max_batch_chunks=cap)
    stream = source.streams[0]
    per_batch = [deltas(b) for b in batches]
    # Each take hands over up to `cap - 1` chunks, beside the chunk just received: several
    # chunks per batch (up to the cap), and never more; the opening events are a batch alone.
    assert all(1 + n <= cap for n in stream.taken), stream.taken
    assert cap == 1 or stream.taken[0] == cap - 1, stream.taken
    assert deltas(batches[0]) == 0 and batches[0][0].type == "response.created"
    assert max(per_batch) <= cap, per_batch
    assert sum(per_batch) == text_tokens
    text_batches = [b for b in batches[1:-1] if deltas(b)]
    assert len(text_batches) <= math.ceil(sum(per_batch) / cap) + 1
    assert_conformant([e for b in batches for e in b])


async def test_a_source_without_the_hint_gives_one_chunk_per_batch() -> None:
    source = CountedSource(ReplaySource(make_trace(LONG_ANSWER)), hint=False)
    batches = await batches_of(source)
    assert [deltas(b) for b in batches if deltas(b)] == [1] * TEXT_TOKENS
    assert source.streams[0].taken == []


async def test_replay_with_a_delay_has_nothing_ready_ahead_of_its_pace() -> None:
    source = CountedSource(ReplaySource(make_trace(LONG_ANSWER), delay=0.0001))
    batches = await batches_of(source)
    assert [deltas(b) for b in batches if deltas(b)] == [1] * TEXT_TOKENS
    assert set(source.streams[0].taken) == {0}


class QueueSource:
    """An engine's per-request queue: chunks arrive when the test puts them; `take_ready`
    takes what is there now and nothing more (what the native engine's stream does)."""

    def __init__(self) -> None:
        self.send, self.receive = anyio.create_memory_object_stream[TokenChunk](math.inf)

    def generate(self, req: GenerationRequest) -> AsyncIterator[TokenChunk]:
        return self

    def __aiter__(self) -> QueueSource:
        return self

    async def __anext__(self) -> TokenChunk:
        try:
            return await self.receive.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    def take_ready(self, limit: int) -> list[TokenChunk]:
        ready: list[TokenChunk] = []
        while len(ready) < limit:
            try:
                ready.append(self.receive.receive_nowait())
            except (anyio.WouldBlock, anyio.EndOfStream):
                break
        return ready

    async def aclose(self) -> None:
        self.receive.close()


async def test_a_batch_is_what_is_ready_now_the_driver_never_waits_to_fill_it() -> None:
    source = QueueSource()
    header = [TokenChunk(token_ids=(t,)) for t in encode("<|channel|>final<|message|>")]
    words = [TokenChunk(token_ids=(t,)) for t in encode(" one two three four five six seven")]
    generation = Generation(source, request(), grammar(), RESPONSE)
    async with contextlib.aclosing(generation.batches()) as batches:
        started = await batches.__anext__()
        assert started[0].type == "response.created"
        for chunk in [*header, *words[:3]]:
            source.send.send_nowait(chunk)
        with anyio.fail_after(5):  # the queue holds no more: the batch must come without them
            first = await batches.__anext__()
        assert deltas(first) == 3
        for chunk in words[3:]:
            source.send.send_nowait(chunk)
        second = await batches.__anext__()
        assert deltas(second) == len(words) - 3
        source.send.send_nowait(TokenChunk(finish_reason="stop"))
        rest = [batch async for batch in batches]
    assert rest[-1][-1].type == "response.completed"
    assert_conformant([*started, *first, *second, *[e for b in rest for e in b]])


async def test_the_opening_events_go_out_alone_even_when_chunks_are_held() -> None:
    """Issue 28: a client's first event waited for a whole batch (the opening events shared it
    with up to `MAX_BATCH_CHUNKS` chunks the source already held, and a whole replayed answer
    came in one batch), so at 10 streams the first event came later than from a server that
    sends each event alone. `response.created` and `.in_progress` are a batch of their own."""
    source = QueueSource()
    for t in encode("<|channel|>final<|message|> one two three"):
        source.send.send_nowait(TokenChunk(token_ids=(t,)))
    generation = Generation(source, request(), grammar(), RESPONSE)
    async with contextlib.aclosing(generation.batches()) as batches:
        first = await batches.__anext__()
        with anyio.fail_after(5):  # the source holds no more chunks than these
            second = await batches.__anext__()
    assert [e.type for e in first] == ["response.created", "response.in_progress"]
    assert deltas(second) == 3
    whole = await batches_of(ReplaySource(make_trace(GREETING)))
    assert len(whole) == 2 and whole[-1][-1].type == "response.completed", whole
    assert_conformant([e for b in whole for e in b])


async def test_a_slow_consumer_holds_at_most_one_capped_batch() -> None:
    """Backpressure with coalescing: the source is read a batch at a time, so while a slow
    consumer holds a batch, the source is at most one cap (plus the header chunks, which make
    no event, and the finish) ahead of what it consumed before."""
    source = CountedSource(ReplaySource(make_trace(LONG_ANSWER)))
    generation = Generation(source, request(), grammar(), RESPONSE, max_batch_chunks=4)
    header_chunks = len(encode("<|channel|>final<|message|>"))
    consumed, ahead = 0, []
    async with contextlib.aclosing(generation.batches()) as batches:
        async for batch in batches:
            produced = source.streams[0].produced if source.streams else 0
            ahead.append(produced - consumed)
            consumed += deltas(batch)
            await anyio.sleep(0.001)  # a slow client
    assert consumed == TEXT_TOKENS
    assert max(ahead) <= header_chunks + 4 + 1, ahead
    # A full batch's lead, and no more, all through the 120-token stream:
    assert set(ahead[2:-1]) == {header_chunks + 4}, ahead


@pytest.mark.parametrize("cap", [1, 3, MAX_BATCH_CHUNKS])
@pytest.mark.parametrize("path", GOLDENS, ids=lambda p: p.stem)
async def test_golden_traces_give_the_same_events_coalesced_or_not(path: Path, cap: int) -> None:
    trace = read_trace(path)
    response = Response(id="resp_g", created_at=1, model="m", status="in_progress")
    reason, message = (
        (trace.finish_reason, trace.error) if trace.finish_reason else ("error", CUT_OFF)
    )
    expected = [dumps(e) for e in fold(grammar(), response, trace.chunks, reason, message)]
    generation = Generation(
        ReplaySource(trace), request(), grammar(), response, input_tokens=0, max_batch_chunks=cap
    )
    async with contextlib.aclosing(generation.batches()) as batches:
        got = [dumps(e) async for batch in batches for e in batch]
    assert got == expected


def test_the_cap_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_batch_chunks"):
        Generation(
            ReplaySource(make_trace(GREETING)), request(), grammar(), RESPONSE, max_batch_chunks=0
        )


def _without_hint(engine: Engine) -> Engine:
    class Plain:
        async def generate(self, req: GenerationRequest) -> AsyncIterator[TokenChunk]:
            stream = engine.source.generate(req)
            try:
                async for chunk in stream:
                    yield chunk
            finally:
                await stream.aclose()  # type: ignore[attr-defined]

    return Engine(source=Plain(), grammar=engine.grammar)


async def _served(engine: Engine, model: str) -> list[bytes]:
    service = ResponseService(
        engine, MemoryEventStore(), new_id=lambda: "resp_fixed", clock=lambda: 1_700_000_000.0
    )
    try:
        prepared = await service.prepare({"model": model, "input": "hi", "stream": True})
        return [frames(batch) async for batch in service.stream(prepared)]
    finally:
        service.renderer.close()


@pytest.mark.parametrize("model", ["greeting", "weather_call", "long"])
async def test_the_server_sends_the_same_sse_bytes_in_fewer_writes(
    model: str, tmp_path: Path
) -> None:
    directory = write_traces(
        tmp_path, {"greeting": GREETING, "weather_call": WEATHER_CALL, "long": LONG_ANSWER}
    )
    engine = ReplayEngine(directory).engine()
    coalesced = await _served(engine, model)
    one_each = await _served(_without_hint(engine), model)
    assert b"".join(coalesced) == b"".join(one_each)
    assert len(coalesced) < len(one_each)
    # And they are the events' SSE frames, as the driver's `stream_sse` (and `replay --format
    # sse`) write them.
    frames = [f + b"\n\n" for f in b"".join(coalesced).split(b"\n\n")[:-1]]
    assert frames == [sse_event(loads(f.split(b"data: ", 1)[1].strip())) for f in frames]


async def test_ready_chunks_of_a_replay_lose_their_logprobs_unless_asked(tmp_path: Path) -> None:
    """The replay engine drops a trace's logprobs when the request asks for none: on the
    chunks it hands over through the hint too."""
    ids = encode(LONG_ANSWER)
    chunks = [TokenChunk(token_ids=(t,), logprobs=(-0.5,)) for t in ids]
    header = {"grammar": "harmony", "encoding": "o200k_harmony", "response_id": "resp_lp"}
    header |= {"model": "lp", "created_at": 1}
    (tmp_path / "lp.jsonl").write_text(dump_trace(header, chunks, "stop"), encoding="utf-8")
    engine = ReplayEngine(tmp_path)
    for asked, expected in ((False, None), (True, (-0.5,))):
        req = GenerationRequest(
            request_id="r", prompt_token_ids=(1,), model="lp",
            sampling=SamplingParams(logprobs=asked),
        )  # fmt: skip
        stream = engine.generate(req)
        first = await stream.__anext__()
        ready = stream.take_ready(1000)  # type: ignore[attr-defined]
        assert len(ready) == len(ids)  # the rest, and the finish chunk
        assert {c.logprobs for c in [first, *ready[:-1]]} == {expected}
        await stream.aclose()  # type: ignore[attr-defined]


async def _sent(body: AsyncIterator[Records]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        await anyio.sleep_forever()
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    await EventStreamResponse(body)({"type": "http"}, receive, send)
    return messages


async def test_the_terminal_batch_ends_the_body_in_the_same_write(tmp_path: Path) -> None:
    directory = write_traces(tmp_path, {"greeting": GREETING})
    service = ResponseService(ReplayEngine(directory).engine(), MemoryEventStore())
    try:
        prepared = await service.prepare({"model": "greeting", "input": "hi", "stream": True})
        messages = await _sent(service.stream(prepared))
    finally:
        service.renderer.close()
    bodies = messages[1:]
    assert [m["more_body"] for m in bodies] == [True] * (len(bodies) - 1) + [False]
    assert b"event: response.completed\n" in bodies[-1]["body"]  # not an empty end of its own


async def test_a_body_without_a_marked_end_still_gets_its_end() -> None:
    async def body() -> AsyncIterator[Records]:
        yield Records([EventRecord(0, "x", "{}")])

    messages = await _sent(body())
    assert [(m.get("body"), m.get("more_body")) for m in messages[1:]] == [
        (b"event: x\ndata: {}\n\n", True),
        (b"", False),
    ]


async def test_followers_of_a_stored_log_get_its_end_with_the_last_page(tmp_path: Path) -> None:
    directory = write_traces(tmp_path, {"long": LONG_ANSWER})
    service = ResponseService(ReplayEngine(directory).engine(), MemoryEventStore())
    try:
        prepared = await service.prepare({"model": "long", "input": "hi", "stream": True})
        streamed = b"".join([m["body"] for m in (await _sent(service.stream(prepared)))[1:]])
        messages = await _sent(service.follow(prepared.response.id))
    finally:
        service.renderer.close()
    bodies = messages[1:]
    assert b"".join(m["body"] for m in bodies) == streamed
    assert bodies[-1]["more_body"] is False and bodies[-1]["body"]


class _CountingEngine:
    """A token source over a replay, counting the chunks its streams handed over (both ways),
    forwarding the readiness hint, and noticing when a stream is closed."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.produced = 0
        self.closed = 0

    def generate(self, req: GenerationRequest) -> AsyncIterator[TokenChunk]:
        return _CountingStream(self, self.inner.generate(req))


class _CountingStream:
    def __init__(self, engine: _CountingEngine, inner: Any) -> None:
        self.engine, self.inner = engine, inner

    def __aiter__(self) -> _CountingStream:
        return self

    async def __anext__(self) -> TokenChunk:
        chunk: TokenChunk = await self.inner.__anext__()
        self.engine.produced += 1
        return chunk

    def take_ready(self, limit: int) -> list[TokenChunk]:
        ready: list[TokenChunk] = self.inner.take_ready(limit)
        self.engine.produced += len(ready)
        return ready

    async def aclose(self) -> None:
        self.engine.closed += 1
        await self.inner.aclose()


async def test_a_blocked_socket_stops_the_source_with_every_chunk_ready(tmp_path: Path) -> None:
    """Backpressure with coalescing, at the server's edge: when the socket takes no more (the
    ASGI `send` blocks, as uvicorn's does once its write buffer is full and the client reads
    nothing), no more chunks are taken from a source that has its whole trace ready than the
    batches already sent and one more; and a client that then leaves closes the source."""
    words = 5_000
    ids = [*encode("<|channel|>final<|message|>"), *encode(" a") * words, *encode("<|return|>")]
    header = {"grammar": "harmony", "encoding": "o200k_harmony", "response_id": "resp_big"}
    header |= {"model": "big", "created_at": 1}
    chunks = [TokenChunk(token_ids=(t,)) for t in ids]
    (tmp_path / "big.jsonl").write_text(dump_trace(header, chunks, "stop"), encoding="utf-8")
    replay = ReplayEngine(tmp_path)
    engine = _CountingEngine(replay)
    service = ResponseService(Engine(source=engine, grammar=replay.grammar), MemoryEventStore())
    bodies: list[bytes] = []

    async def receive() -> dict[str, Any]:
        await anyio.sleep_forever()
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            if len(bodies) == 3:  # the socket is full from here on
                await anyio.sleep_forever()
            bodies.append(message["body"])

    try:
        prepared = await service.prepare({"model": "big", "input": "hi", "stream": True})
        with anyio.move_on_after(0.5):  # the client gives up
            await EventStreamResponse(service.stream(prepared))({"type": "http"}, receive, send)
    finally:
        service.renderer.close()
    # Sent: the opening events and two coalesced batches; taken: those and the
    # blocked one.
    assert engine.produced <= 4 * MAX_BATCH_CHUNKS, engine.produced
    assert engine.closed == 1
    stored = await service.store.read(prepared.response.id, -1)
    assert stored[-1].type == "response.failed"  # ended cancelled, after what was sent


async def test_held_chunks_wait_for_before_held_once_after_the_opening() -> None:
    """Issue 28 (time to first event at 10 streams): a new stream whose source already held
    its answer stepped all of it in the turn after its opening, so the requests that arrived
    meanwhile waited behind it to be accepted. The driver awaits `before_held` once, after the
    opening events went out and before any held chunk is stepped."""
    source = CountedSource(ReplaySource(make_trace(LONG_ANSWER)))
    seen: list[tuple[int, int]] = []
    generation: Generation | None = None

    async def before_held() -> None:
        assert generation is not None and generation.state is not None
        # The opening is out, the held chunks are taken but none is stepped yet.
        seen.append((len(consumed), generation.state.output_tokens))

    consumed: list[list[Event]] = []
    generation = Generation(source, request(), grammar(), RESPONSE, before_held=before_held)
    async with contextlib.aclosing(generation.batches()) as batches:
        async for batch in batches:
            consumed.append(batch)
    assert seen == [(1, 0)]
    assert [e.type for e in consumed[0]] == ["response.created", "response.in_progress"]
    assert_conformant([e for b in consumed for e in b])


async def test_before_held_is_not_awaited_when_nothing_is_held() -> None:
    """A source without the hint (or with one chunk at a time) has nothing held: no wait."""
    calls: list[None] = []

    async def before_held() -> None:
        calls.append(None)

    plain = CountedSource(ReplaySource(make_trace(LONG_ANSWER)), hint=False)
    paced = ReplaySource(make_trace(GREETING), delay=0.0001)
    for source in (plain, paced):
        whole = await batches_of(source, before_held=before_held)
        assert_conformant([e for b in whole for e in b])
    assert calls == []


async def test_loop_turns_wait_that_many_turns_of_a_busy_loop() -> None:
    """`LoopTurns.after(n)` returns after n turns of the loop (each turn every ready task
    steps once), however many tasks wait at once."""
    turns = LoopTurns(idle_turn_s=0.0)  # every turn counts as busy
    counted = 0
    stop = anyio.Event()

    async def count() -> None:
        nonlocal counted
        while not stop.is_set():
            counted += 1
            await anyio.lowlevel.checkpoint()

    async def wait(n: int, out: list[int]) -> None:
        await turns.after(n)
        out.append(counted)

    ends: list[int] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(count)
        await anyio.lowlevel.checkpoint()
        start = counted
        for n in (3, 12, 12):
            tg.start_soon(wait, n, ends)
        with anyio.fail_after(5):
            while len(ends) < 3:
                await anyio.lowlevel.checkpoint()
        stop.set()
    assert sorted(ends) == ends  # each in its turn
    assert 3 <= ends[0] - start <= 5 and all(11 <= e - start <= 14 for e in ends[1:]), (start, ends)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # trio's fallback: plain checkpoints
async def test_loop_turns_on_an_idle_loop_end_at_once() -> None:
    """With nothing else to run, a turn is a few microseconds and the wait ends (no spinning
    through the count): an idle server loses nothing."""
    turns = LoopTurns()
    counted = 0

    async def count() -> None:
        nonlocal counted
        while True:
            counted += 1
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(count)
        with anyio.fail_after(5):
            await turns.after(100_000)
        tg.cancel_scope.cancel()
    assert counted < 1_000
