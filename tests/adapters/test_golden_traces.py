"""Every golden trace in `specs/traces/`, played by a stand-in vLLM or SGLang engine (its
recorded chunks as engine steps, and a random re-chunking), through the adapter and the
reducer, gives exactly the events of `streamfold replay` and a conformant stream."""

from __future__ import annotations

import random
from contextlib import aclosing
from pathlib import Path
from typing import Any

import attrs
import pytest

import streamfold.specs
from streamfold.adapters import SGLangTokenSource, VLLMTokenSource, sglang_rid
from streamfold.adapters.driver import stream_events
from streamfold.adapters.grammars import grammar_for, replay_events, response_for
from streamfold.engines import GenerationRequest, Trace, read_trace

from . import fakes_sglang, fakes_vllm

pytestmark = pytest.mark.anyio

TRACES = sorted(
    path
    for path in (Path(streamfold.specs.__file__).parent / "traces").glob("*.jsonl")
    if not path.name.endswith(".golden.jsonl")
)
ENGINES = ["vllm-delta", "vllm-cumulative", "sglang-incremental", "sglang-cumulative"]
SGLANG_FINISH = {
    "stop": {"type": "stop", "matched": 200002},
    "length": {"type": "length", "length": 0},
    "abort": {"type": "abort", "message": "Abort", "status_code": None},
}


def finished_traces() -> list[Any]:
    # A cut-off trace has no finish line: no engine output matches it (the adapters' own
    # "stream ended without finishing" error is tested in test_vllm_source/test_sglang_source).
    # An agent run is several generations with tool results between them: one engine request
    # cannot play it (the server's loop does; tests/test_agent_trace.py replays it).
    return [
        pytest.param(path, id=path.stem)
        for path in TRACES
        if read_trace(path).finish_reason in SGLANG_FINISH and not read_trace(path).loop
    ]


def engine_steps(trace: Trace, chunking: str) -> list[list[int]]:
    if chunking == "recorded":
        return [list(c.token_ids) for c in trace.chunks if c.token_ids]
    rng = random.Random(trace.header["response_id"])
    tokens, steps, i = trace.token_ids, [], 0
    while i < len(tokens):
        n = rng.randint(1, 6)
        steps.append(tokens[i : i + n])
        i += n
    return steps


def source_for(engine: str, trace: Trace, steps: list[list[int]]) -> Any:
    reason = trace.finish_reason
    assert reason is not None
    if engine.startswith("vllm"):
        script = fakes_vllm.Script(steps=steps, finish_reason=reason, reads=[1, 2, 1, 3])
        kind = "cumulative" if engine.endswith("cumulative") else "delta"
        llm = fakes_vllm.FakeAsyncLLM({"req": script})
        return VLLMTokenSource(llm, api=fakes_vllm.API, output_kind=kind)
    manager = fakes_sglang.FakeTokenizerManager(
        incremental_streaming_output=engine.endswith("incremental")
    )
    script_ = fakes_sglang.Script(steps=steps, finish=SGLANG_FINISH[reason], reads=[2, 1, 3])
    return SGLangTokenSource(fakes_sglang.FakeSGLangEngine({sglang_rid("req"): script_}, manager))


async def drive(source: Any, trace: Trace) -> list[Any]:
    """The adapter's chunks through the real anyio driver (`stream_events`)."""
    prompt = tuple(trace.header.get("prompt_token_ids", ()))
    request = GenerationRequest(request_id="req", prompt_token_ids=prompt)
    events = stream_events(
        source,
        request,
        grammar_for(trace.header),
        response_for(trace.header),
        input_tokens=len(prompt),
    )
    async with aclosing(events) as stream:
        return [event async for event in stream]


@pytest.mark.parametrize("path", finished_traces())
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("chunking", ["recorded", "random"])
async def test_trace_through_adapter_replays_exactly(
    path: Path, engine: str, chunking: str
) -> None:
    trace = read_trace(path)
    without_logprobs = attrs.evolve(
        trace, chunks=tuple(attrs.evolve(c, logprobs=None) for c in trace.chunks)
    )

    events = await drive(source_for(engine, trace, engine_steps(trace, chunking)), trace)

    assert events == replay_events(without_logprobs)
    assert streamfold.specs.check(events) == []
