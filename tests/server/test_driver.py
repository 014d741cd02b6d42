"""The anyio driver: chunk splitting, backpressure, abort on consumer exit, in-band failures.

Every test runs under asyncio and trio (anyio's pytest plugin, `anyio_backend` fixture).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator

import anyio
import pytest

from streamfold.adapters.driver import SOURCE_FAILED, Generation, stream_events, stream_sse
from streamfold.adapters.grammars import grammar_for, replay_events
from streamfold.engines import (
    GenerationRequest,
    ReplaySource,
    TokenChunk,
    dump_trace,
    parse_trace,
)
from streamfold.statemachine import Response, dumps

from .helpers import GREETING, LONG_ANSWER, CountingSource, assert_conformant, encode, make_trace

pytestmark = pytest.mark.anyio

RESPONSE = Response(id="resp_trace", created_at=1, model="trace", status="in_progress")


def request(max_output_tokens: int | None = None) -> GenerationRequest:
    return GenerationRequest(
        request_id="resp_trace", prompt_token_ids=(1, 2, 3), max_output_tokens=max_output_tokens
    )


def grammar():  # type: ignore[no-untyped-def]
    return grammar_for({"grammar": "harmony"})


async def collect(source, req=None) -> list:  # type: ignore[no-untyped-def]
    events = stream_events(source, req or request(), grammar(), RESPONSE, input_tokens=0)
    async with contextlib.aclosing(events):
        return [event async for event in events]


@pytest.mark.parametrize("per_chunk", [1, 3, 1000])
async def test_events_match_token_by_token_replay_whatever_the_chunking(per_chunk: int) -> None:
    trace = make_trace(GREETING, per_chunk=per_chunk)
    events = await collect(ReplaySource(trace))
    expected = replay_events(make_trace(GREETING, per_chunk=1))
    assert [dumps(e) for e in events] == [dumps(e) for e in expected]
    assert events[-1].type == "response.completed"
    assert_conformant(events)


async def test_logprobs_and_top_logprobs_reach_step_per_token() -> None:
    ids = encode("<|channel|>final<|message|>Hi you<|return|>")
    alternatives = tuple(((ids[0], -0.5),) for _ in ids)
    chunk = TokenChunk(
        token_ids=tuple(ids),
        logprobs=tuple(-0.1 * (i + 1) for i in range(len(ids))),
        top_logprobs=alternatives,
        finish_reason="stop",
    )

    class OneChunk:
        async def generate(self, req: GenerationRequest) -> AsyncIterator[TokenChunk]:
            yield chunk

    events = await collect(OneChunk())
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert deltas, "the final channel gave no text deltas"
    logprobs = [lp.logprob for e in deltas for lp in e.logprobs]
    # Text tokens sit after the 3 header tokens; each carries its own logprob, in order.
    assert logprobs == pytest.approx([-0.1 * (i + 1) for i in range(3, 3 + len(logprobs))])
    assert all(lp.top_logprobs for e in deltas for lp in e.logprobs)
    assert_conformant(events)


async def test_length_finish_gives_response_incomplete() -> None:
    events = await collect(ReplaySource(make_trace(LONG_ANSWER)), request(max_output_tokens=10))
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.usage.output_tokens == 10
    assert_conformant(events)


async def test_source_that_raises_ends_in_response_failed_after_the_events_sent() -> None:
    source = CountingSource(ReplaySource(make_trace(LONG_ANSWER)), fail_after=8)
    events = await collect(source)
    assert events[-1].type == "response.failed"
    message = events[-1].response.error.message
    assert message == SOURCE_FAILED  # the exception is logged, not sent (issue 36)
    # The 8 chunks sent before the fault are kept: their text is in the failed response.
    assert sum(e.type == "response.output_text.delta" for e in events) >= 5
    assert source.open == 0
    assert_conformant(events)


async def test_source_that_raises_before_its_first_chunk_fails_in_band() -> None:
    class Broken:
        def generate(self, req: GenerationRequest) -> AsyncIterator[TokenChunk]:
            raise RuntimeError("no such model loaded")

    events = await collect(Broken())
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.failed",
    ]
    assert events[-1].response.error.message == SOURCE_FAILED


async def test_source_without_finish_reason_fails() -> None:
    class Truncated:
        async def generate(self, req: GenerationRequest) -> AsyncIterator[TokenChunk]:
            yield TokenChunk(token_ids=tuple(encode("<|channel|>final<|message|>Hi")))

    events = await collect(Truncated())
    assert events[-1].type == "response.failed"
    assert "without a finish reason" in events[-1].response.error.message
    assert_conformant(events)


async def test_slow_consumer_slows_the_source() -> None:
    """Backpressure: the source runs a bounded number of chunks ahead of the consumer.

    A pull-based driver asks for a chunk only when the consumer asks for events; chunks that
    make no event (the `<|channel|>final<|message|>` header tokens) are pulled through
    without a batch, so the lead is those header chunks plus nothing, not the whole stream.
    """
    source = CountingSource(ReplaySource(make_trace(LONG_ANSWER)))
    ahead = []
    generation = Generation(source, request(), grammar(), RESPONSE)
    consumed = 0
    async with contextlib.aclosing(generation.batches()) as batches:
        async for batch in batches:
            if batch and batch[0].type != "response.created":
                consumed += 1
            ahead.append(source.produced - consumed)
            await anyio.sleep(0.001)  # a slow client
    assert consumed > 50
    header_chunks = len(encode("<|channel|>final<|message|>"))
    assert max(ahead) <= header_chunks - 1, ahead
    assert ahead[-1] <= header_chunks - 1  # it does not grow over a 60-word stream


@pytest.mark.parametrize("how", ["aclose", "cancel", "timeout"])
async def test_consumer_going_away_closes_the_source(how: str) -> None:
    source = CountingSource(ReplaySource(make_trace(LONG_ANSWER), delay=0.002))
    events = stream_events(source, request(), grammar(), RESPONSE)
    seen = []
    if how == "aclose":
        async for event in events:
            seen.append(event)
            if len(seen) == 10:
                break
        await events.aclose()  # type: ignore[attr-defined]
    elif how == "cancel":
        async with anyio.create_task_group() as tg:

            async def consume() -> None:
                async with contextlib.aclosing(events):
                    async for event in events:
                        seen.append(event)
                        if len(seen) == 10:
                            tg.cancel_scope.cancel()

            tg.start_soon(consume)
    else:
        with anyio.move_on_after(0.05):
            async with contextlib.aclosing(events):
                async for event in events:
                    seen.append(event)
    assert seen and seen[-1].type not in ("response.completed", "response.failed")
    assert source.started == 1 and source.closed == 1 and source.open == 0


async def test_source_abort_runs_even_though_its_consumer_was_cancelled() -> None:
    """The engine's abort in the source's `finally` awaits; the consumer's cancelled scope must
    not cancel it half-way (the driver shields the source's `aclose`).

    The cancellation lands in the consumer (a slow client write), while the source sits at its
    `yield`: the server's case. Without the shield, the abort's `await` is cancelled on asyncio.
    """
    aborted = anyio.Event()

    class Engine:
        async def generate(self, req: GenerationRequest) -> AsyncIterator[TokenChunk]:
            try:
                yield TokenChunk(token_ids=tuple(encode("<|channel|>final<|message|>")))
                while True:
                    yield TokenChunk(token_ids=tuple(encode(" hi")))
            finally:
                await anyio.sleep(0.01)  # e.g. `await engine.abort(request_id)`
                aborted.set()

    with anyio.move_on_after(0.03):
        async with contextlib.aclosing(
            stream_events(Engine(), request(), grammar(), RESPONSE)
        ) as ev:
            async for event in ev:
                if event.type == "response.output_text.delta":
                    await anyio.sleep(1)  # the consumer is slow; the timeout fires here
    assert aborted.is_set()


async def test_close_after_an_early_exit_gives_a_cancelled_terminal_event() -> None:
    # Small batches: the consumer leaves after its first batches, before the answer's end.
    generation = Generation(
        ReplaySource(make_trace(LONG_ANSWER)), request(), grammar(), RESPONSE, max_batch_chunks=4
    )
    sent = []
    async with contextlib.aclosing(generation.batches()) as batches:
        async for batch in batches:
            sent.extend(batch)
            if len(sent) > 12:
                break
    closing = generation.close("abort")
    assert closing[-1].type == "response.failed" and closing[-1].response.status == "cancelled"
    assert_conformant(sent + closing)
    assert generation.close("abort") == []


async def test_stream_sse_frames_each_event() -> None:
    body = b""
    frames = stream_sse(ReplaySource(make_trace(GREETING)), request(), grammar(), RESPONSE)
    async with contextlib.aclosing(frames):
        async for frame in frames:
            body += frame
    blocks = body.decode().split("\n\n")
    assert blocks[-1] == ""
    parsed = []
    for block in blocks[:-1]:
        event_line, data_line = block.split("\n")
        data = json.loads(data_line.removeprefix("data: "))
        assert event_line == f"event: {data['type']}"
        parsed.append(data)
    assert parsed[-1]["type"] == "response.completed"
    assert_conformant(parsed)


@pytest.mark.parametrize("ready", [False, True], ids=["one-by-one", "all-ready"])
async def test_bad_token_in_a_chunk_of_its_own_fails_in_band_keeping_the_text_before_it(
    ready: bool,
) -> None:
    """The driver steps a one-token chunk inline (no `step_chunk`): a token `step` refuses
    there must still end the response failed, after every event of the tokens before it and
    nothing after it, whether the chunks come one by one or all ready at once."""
    ids = [*encode("<|channel|>final<|message|>Hello there"), 10**9, *encode(" more")]
    header = {"grammar": "harmony", "encoding": "o200k_harmony", "response_id": "resp_bad"}
    header |= {"model": "m", "created_at": 1}
    chunks = [TokenChunk(token_ids=(t,)) for t in ids]
    trace = parse_trace(dump_trace(header, chunks, "stop").splitlines())  # type: ignore[arg-type]

    class OneByOne:
        async def generate(self, req: GenerationRequest) -> AsyncIterator[TokenChunk]:
            for chunk in chunks:
                yield chunk

    events = await collect(ReplaySource(trace) if ready else OneByOne())
    assert events[-1].type == "response.failed"
    assert "ReducerUsageError" in events[-1].response.error.message
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Hello there"
    assert_conformant(events)


async def test_bad_token_mid_chunk_fails_in_band_without_losing_the_tokens_before_it() -> None:
    """Regression: events of the chunk's earlier tokens were dropped when a later token of the
    same chunk made `step` raise, leaving a gap in the sequence numbers before the terminal."""
    good = encode("<|channel|>final<|message|>Hello there")

    class BadToken:
        async def generate(self, req: GenerationRequest) -> AsyncIterator[TokenChunk]:
            yield TokenChunk(token_ids=(*good, 10**9))

    events = await collect(BadToken())
    assert events[-1].type == "response.failed"
    assert "ReducerUsageError" in events[-1].response.error.message
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Hello there"
    assert_conformant(events)


async def test_the_last_chunks_cached_tokens_reach_the_usage() -> None:
    """A source's prefix-cache hit (`TokenChunk.cached_tokens`, on its last chunk) is the
    response's `usage.input_tokens_details.cached_tokens`; 0 when the source says nothing."""
    ids = encode("<|channel|>final<|message|>Hi<|return|>")

    class Cached:
        async def generate(self, req: GenerationRequest) -> AsyncIterator[TokenChunk]:
            for token in ids[:-1]:
                yield TokenChunk(token_ids=(token,))
            yield TokenChunk(token_ids=(ids[-1],), finish_reason="stop", cached_tokens=2)

    events = await collect(Cached())
    assert events[-1].type == "response.completed"
    assert events[-1].response.usage.input_tokens_details.cached_tokens == 2
    assert_conformant(events)
    plain = await collect(ReplaySource(make_trace(GREETING)))
    assert plain[-1].response.usage.input_tokens_details.cached_tokens == 0
