"""`ReplaySource`: what a replayed request gives, however it is read (one chunk at a time, or
what is ready in runs of any size), with or without a `max_output_tokens` cut."""

from __future__ import annotations

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamfold.engines import GenerationRequest, ReplaySource, TokenChunk, dump_trace, parse_trace

HEADER = {"grammar": "harmony", "encoding": "o200k_harmony", "response_id": "r", "model": "m"}


@st.composite
def traces(draw: st.DrawFn) -> tuple[list[TokenChunk], str | None]:
    chunks = []
    next_id = 1
    for size in draw(st.lists(st.integers(0, 3), max_size=12)):
        ids = tuple(range(next_id, next_id + size))
        next_id += size
        logprobs = tuple(-0.5 * i for i in ids) if draw(st.booleans()) else None
        chunks.append(TokenChunk(token_ids=ids, logprobs=logprobs))
    return chunks, draw(st.sampled_from(["stop", "length", None]))


@settings(max_examples=200, deadline=None)
@given(
    trace=traces(),
    max_tokens=st.none() | st.integers(0, 40),
    reads=st.lists(st.integers(0, 5), max_size=30),
)
def test_a_replay_gives_the_trace_cut_at_max_tokens_however_it_is_read(
    trace: tuple[list[TokenChunk], str | None], max_tokens: int | None, reads: list[int]
) -> None:
    chunks, finish = trace
    text = dump_trace({**HEADER, "created_at": 1}, chunks, finish)  # type: ignore[arg-type]
    source = ReplaySource(parse_trace(text.splitlines()))
    request = GenerationRequest(request_id="r", prompt_token_ids=(1,), max_output_tokens=max_tokens)

    async def read_all() -> list[TokenChunk]:
        stream = source.generate(request)
        got: list[TokenChunk] = []
        for n in reads:  # runs of ready chunks (0: take nothing), then one by one
            ready = stream.take_ready(n)  # type: ignore[attr-defined]
            assert len(ready) <= n
            got += ready
        got += [chunk async for chunk in stream]
        assert stream.take_ready(3) == []  # type: ignore[attr-defined]
        return got

    got = anyio.run(read_all)
    every = [t for chunk in chunks for t in chunk.token_ids]
    every_logprob = [
        lp for chunk in chunks for lp in chunk.logprobs or [None] * len(chunk.token_ids)
    ]
    cut = max_tokens is not None and max_tokens < len(every)
    kept = every[:max_tokens] if cut else every
    assert [t for chunk in got for t in chunk.token_ids] == kept
    assert [lp for c in got for lp in c.logprobs or [None] * len(c.token_ids)] == every_logprob[
        : len(kept)
    ]
    assert all(chunk.finish_reason is None for chunk in got[:-1])
    if cut:
        assert got[-1].finish_reason == "length"
    else:
        assert got[-1].finish_reason == (finish or "error")
        assert got[-1].token_ids == ()


@pytest.mark.anyio
async def test_a_replay_with_a_delay_holds_nothing_ready() -> None:
    chunks = [TokenChunk(token_ids=(1,)), TokenChunk(token_ids=(2,))]
    text = dump_trace({**HEADER, "created_at": 1}, chunks, "stop")  # type: ignore[arg-type]
    stream = ReplaySource(parse_trace(text.splitlines()), delay=0.001).generate(
        GenerationRequest(request_id="r", prompt_token_ids=(1,))
    )
    assert stream.take_ready(5) == []  # type: ignore[attr-defined]
    got = [chunk async for chunk in stream]
    assert [c.token_ids for c in got] == [(1,), (2,), ()]
