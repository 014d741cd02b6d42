"""Adapter chunk streams through the reducer: real gpt-oss (harmony) completions, cut into
multi-token engine steps that cross message and channel boundaries, give the same events as
the same tokens fed one by one, and a conformant stream.

The anyio driver is not in this branch yet, so `drive` below is the loop it will run: step
every token of every chunk, then finish with the last chunk's reason. Peers' bugs #13-#20 are
all "a multi-token output lost or misplaced tokens"; equality with the one-by-one stream pins
them at the adapter seam.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from contextlib import aclosing
from functools import cache
from typing import Any

import pytest

from streamfold.adapters import SGLangTokenSource, VLLMTokenSource, sglang_rid
from streamfold.engines import GenerationRequest, SamplingParams, TokenChunk
from streamfold.statemachine import HarmonyGrammar, Response, finish, start, step

from . import fakes_sglang, fakes_vllm

pytestmark = pytest.mark.anyio

RESPONSE = Response(
    id="resp_adapters", created_at=1_700_000_000, model="gpt-oss-20b", status="in_progress"
)
TOP = 2
Source = VLLMTokenSource | SGLangTokenSource


@cache
def grammar() -> HarmonyGrammar:
    from streamfold.engines.vocab import load_harmony_vocabulary

    return HarmonyGrammar(vocabulary=load_harmony_vocabulary())


@cache
def completions() -> dict[str, list[int]]:
    """Completion token ids as gpt-oss emits them after the prompt's `<|start|>assistant`."""
    from openai_harmony import Message, Role

    from streamfold.engines.vocab import harmony_encoding

    enc = harmony_encoding()

    def say(channel: str, text: str, recipient: str | None = None) -> list[int]:
        message = Message.from_role_and_content(Role.ASSISTANT, text).with_channel(channel)
        if recipient is not None:
            message = message.with_recipient(recipient).with_content_type("<|constrain|>json")
        return list(enc.render(message))

    analysis = say("analysis", "The user asks about Tokyo's weather; call the tool, then answer.")
    call = say("commentary", '{"city": "Tokyo", "unit": "celsius"}', "functions.get_weather")
    final = say("final", "It is 21°C and sunny in Tokyo today.")
    assert final[-1] == 200007  # <|end|>: the last message of a turn ends in <|return|> instead
    return {
        "reasoning_then_answer": analysis[2:] + final[:-1] + [200002],
        "reasoning_then_tool_call": analysis[2:] + call,  # ends in <|call|> (200012)
    }


def split(tokens: list[int], seed: int) -> list[list[int]]:
    """Engine steps of 1-5 tokens (speculative decoding, stream intervals)."""
    rng = random.Random(seed)
    steps, i = [], 0
    while i < len(tokens):
        n = rng.randint(1, 5)
        steps.append(tokens[i : i + n])
        i += n
    return steps


def request(logprobs: bool) -> GenerationRequest:
    return GenerationRequest(
        request_id="req-1",
        prompt_token_ids=(200006, 1428, 200008),
        sampling=SamplingParams(logprobs=logprobs, top_logprobs=TOP if logprobs else 0),
    )


async def drive(source: Source, req: GenerationRequest) -> tuple[list[Any], TokenChunk]:
    state, events = start(grammar(), RESPONSE, input_tokens=len(req.prompt_token_ids))
    async with aclosing(source.generate(req)) as chunks:
        async for chunk in chunks:
            logprobs = chunk.logprobs or (None,) * len(chunk.token_ids)
            tops = chunk.top_logprobs or (None,) * len(chunk.token_ids)
            for token, logprob, top in zip(chunk.token_ids, logprobs, tops, strict=True):
                state, more = step(state, token, logprob, top)
                events += more
            if chunk.finish_reason is not None:
                state, more = finish(state, chunk.finish_reason, chunk.error)
                return events + more, chunk
    raise AssertionError("the chunk stream ended without a finish_reason")


def one_by_one(
    tokens: list[int],
    reason: str,
    error: str | None,
    logprob_of: Callable[[int, int], tuple[float, tuple[tuple[int, float], ...]]] | None,
) -> list[Any]:
    state, events = start(grammar(), RESPONSE, input_tokens=3)
    for position, token in enumerate(tokens):
        logprob, top = logprob_of(position, token) if logprob_of else (None, None)
        state, more = step(state, token, logprob, top)
        events += more
    state, more = finish(state, reason, error)  # type: ignore[arg-type]
    return events + more


def vllm_logprob(position: int, token: int) -> tuple[float, tuple[tuple[int, float], ...]]:
    ranked = fakes_vllm.ranked_alternatives(position, token, TOP)
    return dict(ranked)[token], tuple(ranked[:TOP])


def sglang_logprob(position: int, token: int) -> tuple[float, tuple[tuple[int, float], ...]]:
    top = fakes_sglang.top_logprobs(position, token, TOP)
    return fakes_sglang.token_logprob(position, token)[0], tuple((t, lp) for lp, t, _ in top)


# How each engine is told to end: (vLLM finish_reason, SGLang finish dict, kept tokens).
ENDINGS: dict[str, tuple[str, dict[str, Any], Callable[[list[int]], list[int]]]] = {
    "stop": ("stop", {"type": "stop", "matched": None}, lambda t: t),
    "length": ("length", {"type": "length", "length": 23}, lambda t: t[:23]),
    "abort": (
        "abort",
        {"type": "abort", "message": "Abort", "status_code": None},
        lambda t: t[:31],
    ),
}


def build(
    engine: str, steps: list[list[int]], ending: str, seed: int, **fail: Any
) -> tuple[Source, Callable[..., Any]]:
    vllm_reason, sglang_finish, _ = ENDINGS[ending]
    reads = [random.Random(seed + 1).randint(1, 3) for _ in steps]
    if engine.startswith("vllm"):
        script = fakes_vllm.Script(steps=steps, finish_reason=vllm_reason, reads=reads, **fail)
        kind = "cumulative" if engine.endswith("cumulative") else "delta"
        source = VLLMTokenSource(
            fakes_vllm.FakeAsyncLLM({"req-1": script}), api=fakes_vllm.API, output_kind=kind
        )
        return source, vllm_logprob
    manager = fakes_sglang.FakeTokenizerManager(
        incremental_streaming_output=engine.endswith("incremental")
    )
    sglang_script = fakes_sglang.Script(steps=steps, finish=sglang_finish, reads=reads, **fail)
    engine_ = fakes_sglang.FakeSGLangEngine({sglang_rid("req-1"): sglang_script}, manager)
    return SGLangTokenSource(engine_), sglang_logprob


ENGINES = ["vllm-delta", "vllm-cumulative", "sglang-incremental", "sglang-cumulative"]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("completion", ["reasoning_then_answer", "reasoning_then_tool_call"])
@pytest.mark.parametrize("ending", ["stop", "length", "abort"])
@pytest.mark.parametrize("logprobs", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
async def test_chunked_engine_output_gives_the_one_by_one_events(
    engine: str, completion: str, ending: str, logprobs: bool, seed: int
) -> None:
    tokens = ENDINGS[ending][2](completions()[completion])
    source, logprob_of = build(engine, split(tokens, seed), ending, seed)

    events, last = await drive(source, request(logprobs))

    assert last.finish_reason == ending
    expected = one_by_one(tokens, ending, last.error, logprob_of if logprobs else None)
    assert events == expected


@pytest.mark.parametrize("engine", ENGINES)
async def test_engine_failure_mid_stream_gives_a_failed_response(engine: str) -> None:
    tokens = completions()["reasoning_then_answer"]
    error = RuntimeError("CUDA error: an illegal memory access was encountered")
    source, _ = build(engine, split(tokens, 7), "stop", 7, fail_after=5, error=error)

    events, last = await drive(source, request(False))

    assert last.finish_reason == "error" and "illegal memory access" in (last.error or "")
    assert events[-1].type == "response.failed"
    sent = events[-1].response.usage.output_tokens  # what the chunks carried before the error
    assert 0 < sent < len(tokens)
    assert events == one_by_one(tokens[:sent], "error", last.error, None)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("ending", ["stop", "length", "abort", "error"])
async def test_driven_streams_are_conformant(engine: str, ending: str) -> None:
    import streamfold.specs

    check = getattr(streamfold.specs, "check", None)
    if check is None:
        pytest.skip("the conformance checker (streamfold.specs.check) is not merged yet")
    tokens = completions()["reasoning_then_tool_call"]
    fail: dict[str, Any] = {}
    if ending == "error":
        fail = {"fail_after": 4, "error": RuntimeError("engine core died")}
    else:
        tokens = ENDINGS[ending][2](tokens)
    source, _ = build(engine, split(tokens, 3), "stop" if ending == "error" else ending, 3, **fail)

    events, last = await drive(source, request(True))

    assert last.finish_reason == ending
    assert check(events) == []
