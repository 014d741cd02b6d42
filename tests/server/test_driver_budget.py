"""The driver's guarantees whatever a token source does (issue 36): it cuts a generation at
`max_output_tokens` (a source that ignores the budget ends `incomplete`, its excess unstepped
and its stream closed), and a source that raises is logged with its traceback while the client
gets a generic message.

Every test runs under asyncio and trio (anyio's pytest plugin, `anyio_backend` fixture).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamfold.adapters.driver import SOURCE_FAILED, stream_events, stream_sse
from streamfold.adapters.grammars import grammar_for
from streamfold.adapters.registry import Engine
from streamfold.adapters.server import create_app
from streamfold.engines import GenerationRequest, TokenChunk
from streamfold.statemachine import Response

from .helpers import LONG_ANSWER, assert_conformant, encode
from .serving import serve

pytestmark = pytest.mark.anyio

RESPONSE = Response(id="resp_budget", created_at=1, model="m", status="in_progress")
TOKENS = tuple(encode(LONG_ANSWER))  # 124 tokens


class Unbounded:
    """A source that ignores `max_output_tokens`: it sends all of its answer, `per_chunk`
    tokens at a time, and records how far it got and whether it was closed."""

    def __init__(self, per_chunk: int = 1) -> None:
        self.per_chunk = per_chunk
        self.sent = 0
        self.closed = False

    async def generate(self, request: GenerationRequest) -> AsyncIterator[TokenChunk]:
        try:
            for i in range(0, len(TOKENS), self.per_chunk):
                part = TOKENS[i : i + self.per_chunk]
                last = i + self.per_chunk >= len(TOKENS)
                self.sent += len(part)
                yield TokenChunk(token_ids=part, finish_reason="stop" if last else None)
        finally:
            self.closed = True


class _Held:
    """A stream whose chunks are all ready (`take_ready`): the driver steps them in batches,
    the compiled path included."""

    def __init__(self, chunks: list[TokenChunk], source: AllReady) -> None:
        self.chunks = chunks
        self.source = source

    def __aiter__(self) -> _Held:
        return self

    async def __anext__(self) -> TokenChunk:
        if not self.chunks:
            raise StopAsyncIteration
        return self.chunks.pop(0)

    def take_ready(self, limit: int) -> list[TokenChunk]:
        taken, self.chunks = self.chunks[:limit], self.chunks[limit:]
        return taken

    async def aclose(self) -> None:
        self.source.closed = True


class AllReady:
    """A source that ignores the budget and holds all of its chunks ready, cut by `sizes`
    (0-token chunks included)."""

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.closed = False

    def generate(self, request: GenerationRequest) -> _Held:
        chunks, at = [], 0
        for size in self.sizes:
            chunks.append(TokenChunk(token_ids=TOKENS[at : at + size]))
            at += size
        chunks.append(TokenChunk(token_ids=TOKENS[at:], finish_reason="stop", cached_tokens=2))
        return _Held(chunks, self)


def generation(max_output_tokens: int | None) -> GenerationRequest:
    return GenerationRequest(
        request_id="resp_budget", prompt_token_ids=(1, 2), max_output_tokens=max_output_tokens
    )


async def drive(source: Unbounded | AllReady, budget: int | None) -> list:  # type: ignore[type-arg]
    grammar = grammar_for({"grammar": "harmony"})
    events = stream_events(source, generation(budget), grammar, RESPONSE)
    async with contextlib.aclosing(events):
        return [event async for event in events]


@pytest.mark.parametrize("per_chunk", [1, 3, 7, 100])
async def test_a_source_that_ignores_the_budget_is_cut_at_it(per_chunk: int) -> None:
    """Bug: the driver stepped every token the source sent, so `max_output_tokens=16` gave
    `completed` with 66 output tokens."""
    source = Unbounded(per_chunk)
    events = await drive(source, 16)
    last = events[-1]
    assert last.type == "response.incomplete"
    assert last.response.incomplete_details.reason == "max_output_tokens"
    assert last.response.usage.output_tokens == 16
    assert source.closed
    assert_conformant(events)


@settings(max_examples=40, deadline=None)
@given(per_chunk=st.integers(1, 80), budget=st.integers(0, 80))
def test_usage_never_exceeds_the_budget(per_chunk: int, budget: int) -> None:
    import anyio

    events = anyio.run(drive, Unbounded(per_chunk), budget)
    usage = events[-1].response.usage
    assert usage.output_tokens == min(budget, len(TOKENS))
    expected = "response.completed" if budget >= len(TOKENS) else "response.incomplete"
    assert events[-1].type == expected
    assert_conformant(events)


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 5), max_size=40), budget=st.integers(0, 130))
def test_batches_of_ready_chunks_of_any_size_are_cut_at_the_budget(
    sizes: list[int], budget: int
) -> None:
    """The same through the batched path (the compiled `step_ready` on one-token chunks, the
    Python path on the others): no token past the budget, whatever the chunk sizes."""
    import anyio

    source = AllReady(sizes)
    events = anyio.run(drive, source, budget)  # type: ignore[arg-type]
    usage = events[-1].response.usage
    assert usage.output_tokens == min(budget, len(TOKENS))
    # The prefix cache count the source put on its (dropped) last chunk is kept.
    assert usage.input_tokens_details.cached_tokens == 2
    if budget < len(TOKENS):
        assert events[-1].type == "response.incomplete"
    assert_conformant(events)


async def test_the_server_holds_a_source_to_the_budget() -> None:
    source = Unbounded(2)
    app = create_app(Engine(source=source))
    with serve(app) as url:
        body = {"model": "m", "input": "hi", "max_output_tokens": 16}
        async with httpx.AsyncClient(base_url=url) as client:
            reply = await client.post("/v1/responses", json=body)
    answer = reply.json()
    assert answer["status"] == "incomplete", answer
    assert answer["usage"]["output_tokens"] == 16
    assert answer["max_output_tokens"] == 16
    assert source.closed


class Failing:
    async def generate(self, request: GenerationRequest) -> AsyncIterator[TokenChunk]:
        yield TokenChunk(token_ids=TOKENS[:5])
        raise ZeroDivisionError("secret at /srv/model/weights")


async def test_a_failing_source_is_logged_and_the_client_told_nothing_of_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Bug: nothing was logged, and the client got `generation failed: ZeroDivisionError:
    division by zero` (the exception's text can leak internals)."""
    caplog.set_level(logging.ERROR, logger="streamfold.driver")
    grammar = grammar_for({"grammar": "harmony"})
    events = stream_events(Failing(), generation(None), grammar, RESPONSE)
    async with contextlib.aclosing(events):
        got = [event async for event in events]
    assert got[-1].type == "response.failed"
    message = got[-1].response.error.message
    assert message == SOURCE_FAILED
    assert "secret" not in message and "ZeroDivisionError" not in message
    records = [r for r in caplog.records if r.name == "streamfold.driver"]
    assert records, "the source's exception was not logged"
    assert records[0].exc_info is not None and records[0].exc_info[0] is ZeroDivisionError
    assert "resp_budget" in records[0].getMessage()
    assert_conformant(got)


def test_create_app_with_a_bare_source_says_it_wants_an_engine() -> None:
    """Bug: `create_app(token_source)` failed with `AttributeError: ... no attribute
    'warm_up'` from deep in the readiness code."""
    from streamfold.adapters.registry import NotAnEngineError

    with pytest.raises(NotAnEngineError, match=r"Engine\(source=your_source"):
        create_app(Unbounded())  # type: ignore[arg-type]


async def test_stream_events_stamps_completed_at_with_its_clock() -> None:
    grammar = grammar_for({"grammar": "harmony"})
    events = stream_events(Unbounded(50), generation(None), grammar, RESPONSE, clock=lambda: 1234.5)
    async with contextlib.aclosing(events):
        last = [event async for event in events][-1]
    assert last.type == "response.completed" and last.response.completed_at == 1234


async def test_stream_sse_stamps_completed_at_with_its_clock() -> None:
    """Issue 36, item 4 named both: `stream_sse` takes `clock=` too and hands it on."""
    grammar = grammar_for({"grammar": "harmony"})
    frames = stream_sse(Unbounded(50), generation(None), grammar, RESPONSE, clock=lambda: 1234.5)
    async with contextlib.aclosing(frames):
        last = [frame async for frame in frames][-1].decode()
    head, data = last.strip().split("\n")
    assert head == "event: response.completed"
    assert json.loads(data.removeprefix("data: "))["response"]["completed_at"] == 1234


def test_stream_events_refuses_a_response_that_is_not_in_progress() -> None:
    import attrs

    from streamfold.adapters.driver import DriverUsageError

    grammar = grammar_for({"grammar": "harmony"})
    done = attrs.evolve(RESPONSE, status="completed")
    with pytest.raises(DriverUsageError, match="status='in_progress'"):
        stream_events(Unbounded(), generation(None), grammar, done).__aiter__().asend(None).send(
            None
        )
