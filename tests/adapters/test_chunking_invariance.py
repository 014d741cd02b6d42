"""However an engine batches tokens into outputs, the chunk stream carries each token once, in
order, with its own logprob: random step sizes, consumer lag, stream intervals and output modes."""

from __future__ import annotations

from contextlib import aclosing

import anyio
from hypothesis import given, settings
from hypothesis import strategies as st

from streamfold.adapters import SGLangTokenSource, VLLMTokenSource, sglang_rid
from streamfold.engines import GenerationRequest, SamplingParams, TokenChunk

from . import fakes_sglang, fakes_vllm

steps = st.lists(st.lists(st.integers(0, 200_000), min_size=1, max_size=5), min_size=1, max_size=12)
reads = st.none() | st.lists(st.integers(1, 4), max_size=12)
REQUEST = GenerationRequest(
    request_id="req-1",
    prompt_token_ids=(1, 2),
    sampling=SamplingParams(logprobs=True, top_logprobs=1),
)


async def collect(source: VLLMTokenSource | SGLangTokenSource) -> list[TokenChunk]:
    async with aclosing(source.generate(REQUEST)) as chunks:
        return [chunk async for chunk in chunks]


def check(chunks: list[TokenChunk], expected: list[int], logprob_of: object) -> None:
    ids = [t for c in chunks for t in c.token_ids]
    assert ids == expected
    assert [lp for c in chunks for lp in c.logprobs or ()] == [
        logprob_of(i, t)  # type: ignore[operator]
        for i, t in enumerate(ids)
    ]
    assert chunks[-1].finish_reason == "stop"
    assert all(c.finish_reason is None and c.token_ids for c in chunks[:-1])


@settings(max_examples=60, deadline=None)
@given(
    steps=steps,
    reads=reads,
    interval=st.integers(1, 4),
    kind=st.sampled_from(["delta", "cumulative"]),
    flat=st.booleans(),
)
def test_vllm(
    steps: list[list[int]], reads: list[int] | None, interval: int, kind: str, flat: bool
) -> None:
    script = fakes_vllm.Script(
        steps=steps, reads=reads, stream_interval=interval, flat_logprobs=flat
    )
    engine = fakes_vllm.FakeAsyncLLM({"req-1": script})
    source = VLLMTokenSource(engine, api=fakes_vllm.API, output_kind=kind)  # type: ignore[arg-type]

    chunks = anyio.run(collect, source)

    check(
        chunks,
        [t for step in steps for t in step],
        lambda i, t: dict(fakes_vllm.ranked_alternatives(i, t, 1))[t],
    )


@settings(max_examples=60, deadline=None)
@given(steps=steps, reads=reads, incremental=st.booleans())
def test_sglang(steps: list[list[int]], reads: list[int] | None, incremental: bool) -> None:
    engine = fakes_sglang.FakeSGLangEngine(
        {sglang_rid("req-1"): fakes_sglang.Script(steps=steps, reads=reads)},
        fakes_sglang.FakeTokenizerManager(incremental_streaming_output=incremental),
    )

    chunks = anyio.run(collect, SGLangTokenSource(engine))

    check(
        chunks,
        [t for step in steps for t in step],
        lambda i, t: fakes_sglang.token_logprob(i, t)[0],
    )
