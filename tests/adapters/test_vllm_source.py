"""VLLMTokenSource against a faithful AsyncLLM stand-in (tests/adapters/fakes_vllm.py)."""

from __future__ import annotations

import sys
import types
from contextlib import aclosing

import anyio
import pytest

from streamfold.adapters import (
    EngineNotInstalledError,
    VLLMTokenSource,
    build_vllm_engine,
    load_vllm_api,
)
from streamfold.engines import GenerationRequest, SamplingParams, TokenChunk

from . import fakes_vllm
from .fakes_vllm import (
    API,
    API_BEFORE_TOKENS_INPUT,
    EngineDeadError,
    FakeAsyncLLM,
    ModelConfig,
    RequestOutputKind,
    Script,
    StructuredOutputsParams,
    VLLMValidationError,
    ranked_alternatives,
)

pytestmark = pytest.mark.anyio

STEPS = [[200005, 35644], [200008], [3, 4, 5, 6], [200007, 200006], [7], [200002]]


def request(request_id: str = "req-1", **kw: object) -> GenerationRequest:
    return GenerationRequest(request_id=request_id, prompt_token_ids=(1, 2, 3), **kw)  # type: ignore[arg-type]


async def collect(source: VLLMTokenSource, req: GenerationRequest) -> list[TokenChunk]:
    async with aclosing(source.generate(req)) as chunks:
        return [chunk async for chunk in chunks]


def tokens(chunks: list[TokenChunk]) -> list[int]:
    return [t for chunk in chunks for t in chunk.token_ids]


def assert_one_terminal(chunks: list[TokenChunk]) -> None:
    assert chunks[-1].finish_reason is not None
    assert all(c.finish_reason is None and c.token_ids for c in chunks[:-1])


@pytest.mark.parametrize("output_kind", ["delta", "cumulative"])
@pytest.mark.parametrize("reads", [None, [3, 1, 2], [10]])
@pytest.mark.parametrize("stream_interval", [1, 3])
async def test_every_token_passes_once_in_order(
    output_kind: str, reads: list[int] | None, stream_interval: int
) -> None:
    """Multi-token steps, merged outputs (lag) and stream intervals lose or repeat no token
    (peers' bugs #13, #15, #16: only the last token of a multi-token output was streamed)."""
    script = Script(steps=STEPS, stop_reason=200002, reads=reads, stream_interval=stream_interval)
    engine = FakeAsyncLLM({"req-1": script})
    source = VLLMTokenSource(engine, api=API, output_kind=output_kind)  # type: ignore[arg-type]

    chunks = await collect(source, request())

    assert tokens(chunks) == [t for step in STEPS for t in step]
    assert_one_terminal(chunks)
    assert chunks[-1].finish_reason == "stop"
    assert chunks[-1].stop_reason == 200002
    assert engine.abort_calls == []
    assert engine.running == set()


async def test_builds_sampling_params_and_token_prompt() -> None:
    engine = FakeAsyncLLM({"r": Script(steps=[[5]])})
    sampling = SamplingParams(temperature=0.0, top_p=0.9, top_k=40, seed=7, top_logprobs=3)
    req = request("r", sampling=sampling, stop_token_ids=(200002, 200012))

    await collect(VLLMTokenSource(engine, api=API), req)

    params = engine.params["r"]
    # `vllm.inputs.tokens_input`: the rendered input, not the deprecated raw-prompt path.
    assert engine.prompts["r"] == {"type": "token", "prompt_token_ids": [1, 2, 3]}
    assert engine.raw_prompts == []
    assert params.output_kind == RequestOutputKind.DELTA
    # Unset max_output_tokens must not fall back to vLLM's default of 16 tokens.
    assert params.max_tokens is None
    assert (params.temperature, params.top_p, params.top_k, params.seed) == (0.0, 0.9, 40, 7)
    assert params.logprobs == 3
    assert params.stop_token_ids == [200002, 200012]
    assert params.detokenize is False  # streamfold reads token ids, not vLLM's text


async def test_a_vllm_before_tokens_input_gets_the_raw_token_prompt() -> None:
    engine = FakeAsyncLLM({"r": Script(steps=[[5]])})

    chunks = await collect(VLLMTokenSource(engine, api=API_BEFORE_TOKENS_INPUT), request("r"))

    assert chunks[-1].finish_reason == "stop"
    assert engine.prompts["r"] == {"prompt_token_ids": [1, 2, 3]}
    assert engine.raw_prompts == ["r"]  # works, through vLLM's deprecated path


@pytest.mark.parametrize("has_tokens_input", [True, False])
def test_load_vllm_api_takes_tokens_input_where_vllm_has_it(
    monkeypatch: pytest.MonkeyPatch, has_tokens_input: bool
) -> None:
    vllm = types.ModuleType("vllm")
    vllm.SamplingParams = fakes_vllm.SamplingParams  # type: ignore[attr-defined]
    sampling = types.ModuleType("vllm.sampling_params")
    sampling.RequestOutputKind = RequestOutputKind  # type: ignore[attr-defined]
    inputs = types.ModuleType("vllm.inputs")
    if has_tokens_input:
        inputs.tokens_input = fakes_vllm.tokens_input  # type: ignore[attr-defined]
    for name, module in [
        ("vllm", vllm),
        ("vllm.sampling_params", sampling),
        ("vllm.inputs", inputs),
    ]:
        monkeypatch.setitem(sys.modules, name, module)

    api = load_vllm_api()

    expected = (
        {"type": "token", "prompt_token_ids": [4, 5]}
        if has_tokens_input
        else {"prompt_token_ids": [4, 5]}
    )
    assert api.token_prompt([4, 5]) == expected
    assert api.output_kinds["delta"] is RequestOutputKind.DELTA


async def test_max_output_tokens_past_the_context_is_clamped_to_it() -> None:
    """Regression (issue 35): a max_output_tokens past the context went to the engine as is;
    it is clamped to what the context leaves, so both engines end such a request "length"
    (SGLang refused it outright)."""
    engine = FakeAsyncLLM({"r": Script(steps=STEPS)}, model_config=ModelConfig(max_model_len=8))

    chunks = await collect(VLLMTokenSource(engine, api=API), request("r", max_output_tokens=100))

    assert engine.params["r"].max_tokens == 5  # 8 - 3 prompt tokens
    assert tokens(chunks) == [200005, 35644, 200008, 3, 4]
    assert chunks[-1].finish_reason == "length"


async def test_max_output_tokens_inside_the_context_is_kept() -> None:
    engine = FakeAsyncLLM({"r": Script(steps=STEPS)}, model_config=ModelConfig(max_model_len=8))

    await collect(VLLMTokenSource(engine, api=API), request("r", max_output_tokens=2))

    assert engine.params["r"].max_tokens == 2


def test_the_stand_in_takes_structured_outputs_as_vllm_does() -> None:
    json_only = StructuredOutputsParams(json={"type": "object"})
    params = fakes_vllm.SamplingParams(structured_outputs=json_only, max_tokens=None)
    assert params.structured_outputs is json_only
    for kwargs in ({}, {"regex": "a+", "grammar": "root ::= 'a'"}):
        with pytest.raises(VLLMValidationError, match="one kind of structured outputs"):
            StructuredOutputsParams(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        fakes_vllm.SamplingParams(guided_decoding=json_only)  # removed from vLLM


def test_close_shuts_the_engine_down() -> None:
    engine = FakeAsyncLLM({})
    VLLMTokenSource(engine, api=API).close()
    assert engine.shutdown_calls == 1


async def test_logprobs_off_and_sampled_only() -> None:
    engine = FakeAsyncLLM({"a": Script(steps=[[5]]), "b": Script(steps=[[5, 6]])})
    source = VLLMTokenSource(engine, api=API)
    plain = await collect(source, request("a", max_output_tokens=4))
    sampled = await collect(source, request("b", sampling=SamplingParams(logprobs=True)))

    assert engine.params["a"].logprobs is None and engine.params["a"].max_tokens == 4
    assert plain[-1].logprobs is None and plain[-1].top_logprobs is None
    assert engine.params["b"].logprobs == 0
    assert sampled[-1].logprobs == tuple(
        dict(ranked_alternatives(i, t, 0))[t] for i, t in enumerate([5, 6])
    )
    assert sampled[-1].top_logprobs is None


@pytest.mark.parametrize("output_kind", ["delta", "cumulative"])
@pytest.mark.parametrize("flat", [False, True])
@pytest.mark.parametrize("finish_reason", ["stop", "abort"])
async def test_logprobs_line_up_with_tokens(
    output_kind: str, flat: bool, finish_reason: str
) -> None:
    """Each token gets its own logprob and top-k, also where vLLM's abort output (no tokens;
    before 0.33 it carried the whole list, `logprobs[-0:]`) is merged into a lagging DELTA
    output."""
    script = Script(
        steps=STEPS, finish_reason=finish_reason, reads=[2, 1, 3, 1], flat_logprobs=flat
    )
    engine = FakeAsyncLLM({"req-1": script})
    source = VLLMTokenSource(engine, api=API, output_kind=output_kind)  # type: ignore[arg-type]
    req = request(sampling=SamplingParams(logprobs=True, top_logprobs=2))

    chunks = await collect(source, req)

    ids = tokens(chunks)
    assert ids == [t for step in STEPS for t in step]
    assert chunks[-1].finish_reason == finish_reason
    logprobs = [lp for c in chunks for lp in c.logprobs or ()]
    top = [entry for c in chunks for entry in c.top_logprobs or ()]
    ranked = [ranked_alternatives(i, t, 2) for i, t in enumerate(ids)]
    assert logprobs == [dict(r)[t] for r, t in zip(ranked, ids, strict=True)]
    assert top == [tuple(r[:2]) for r in ranked]
    # At odd positions the sampled token ranks below the top-2 and must not be listed.
    assert ids[1] not in dict(top[1])


@pytest.mark.parametrize(
    ("reason", "stop_reason", "expected", "error_mentions"),
    [
        ("stop", 200012, "stop", None),
        ("stop", "</answer>", "stop", None),
        ("stop", None, "stop", None),
        ("length", None, "length", None),
        ("abort", None, "abort", None),
        ("error", None, "error", "'error'"),
        ("repetition", None, "error", "'repetition'"),
    ],
)
async def test_finish_reasons_map(
    reason: str, stop_reason: int | str | None, expected: str, error_mentions: str | None
) -> None:
    script = Script(steps=STEPS, finish_reason=reason, stop_reason=stop_reason)
    engine = FakeAsyncLLM({"req-1": script})

    chunks = await collect(VLLMTokenSource(engine, api=API), request())

    last = chunks[-1]
    assert last.finish_reason == expected
    assert last.stop_reason == (stop_reason if reason == "stop" else None)
    assert tokens(chunks) == [t for step in STEPS for t in step]
    if error_mentions is None:
        assert last.error is None
    else:
        assert last.error is not None and error_mentions in last.error


async def test_closing_early_aborts_the_request() -> None:
    engine = FakeAsyncLLM({"req-1": Script(steps=STEPS)})
    source = VLLMTokenSource(engine, api=API)

    async with aclosing(source.generate(request())) as chunks:
        first = await chunks.__anext__()
        assert first.token_ids == (200005, 35644)
        assert engine.running == {"req-1"}

    assert ("req-1", False) in engine.abort_calls
    assert engine.running == set()


async def test_cancellation_while_waiting_propagates_and_frees_the_request() -> None:
    engine = FakeAsyncLLM({"req-1": Script(steps=STEPS, block_after=1)})
    source = VLLMTokenSource(engine, api=API)
    seen: list[TokenChunk] = []

    with anyio.move_on_after(0.05) as scope:
        async with aclosing(source.generate(request())) as chunks:
            async for chunk in chunks:
                seen.append(chunk)

    assert scope.cancelled_caught
    assert [c.token_ids for c in seen] == [(200005, 35644)]  # no error chunk: not a failure
    assert engine.running == set()
    assert ("req-1", False) in engine.abort_calls


async def test_engine_error_ends_the_stream_with_an_error_chunk() -> None:
    error = RuntimeError("CUDA error: an illegal memory access was encountered")
    engine = FakeAsyncLLM({"req-1": Script(steps=STEPS, fail_after=2, error=error)})

    chunks = await collect(VLLMTokenSource(engine, api=API), request())

    assert tokens(chunks) == [200005, 35644, 200008]  # what was generated is kept
    last = chunks[-1]
    assert (last.finish_reason, last.token_ids) == ("error", ())
    assert last.error is not None
    assert "EngineGenerateError" in last.error and "illegal memory access" in last.error
    # vLLM aborted the request itself; the adapter adds no abort of its own.
    assert engine.abort_calls == [("req-1", True)]
    assert engine.running == set()


async def test_dead_engine_ends_the_stream_with_an_error_chunk() -> None:
    engine = FakeAsyncLLM(
        {"req-1": Script(steps=STEPS, fail_after=0, error=EngineDeadError("engine core died"))}
    )

    chunks = await collect(VLLMTokenSource(engine, api=API), request())

    assert len(chunks) == 1
    assert chunks[0].finish_reason == "error"
    assert chunks[0].error == "vLLM engine failed: EngineDeadError: engine core died"


async def test_stream_that_ends_without_finishing_is_an_error() -> None:
    engine = FakeAsyncLLM({"req-1": Script(steps=STEPS, finish_reason=None)})  # type: ignore[arg-type]

    chunks = await collect(VLLMTokenSource(engine, api=API), request())

    assert tokens(chunks) == [t for step in STEPS for t in step]
    assert chunks[-1].finish_reason == "error"
    assert "without a finished RequestOutput" in (chunks[-1].error or "")


def test_rejects_final_only_output_kind() -> None:
    with pytest.raises(ValueError, match="FINAL_ONLY"):
        VLLMTokenSource(FakeAsyncLLM({}), api=API, output_kind="final_only")  # type: ignore[arg-type]


def test_build_without_vllm_names_the_install() -> None:
    try:
        import vllm  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("vLLM is installed here")
    with pytest.raises(EngineNotInstalledError, match=r"pip install 'streamfold\[vllm\]'"):
        build_vllm_engine("openai/gpt-oss-20b")
    with pytest.raises(EngineNotInstalledError):
        VLLMTokenSource(FakeAsyncLLM({}))


async def test_a_requests_grammar_goes_to_vllm_as_structured_outputs() -> None:
    """Structured outputs (issue 30): the request's grammar reaches vLLM's structured outputs
    as an llguidance grammar (the guidance backend reads Lark), from the first token."""
    from streamfold.engines import DecodingConstraint

    engine = FakeAsyncLLM({"r": Script(steps=[[5]]), "q": Script(steps=[[5]])})
    grammar = 'start: "x"'
    await collect(
        VLLMTokenSource(engine, api=API), request("r", decoding=DecodingConstraint(grammar=grammar))
    )
    constraint = engine.params["r"].structured_outputs
    assert isinstance(constraint, StructuredOutputsParams) and constraint.grammar == grammar
    await collect(VLLMTokenSource(engine, api=API), request("q"))
    assert engine.params["q"].structured_outputs is None


@pytest.mark.parametrize("output_kind", ["delta", "cumulative"])
@pytest.mark.parametrize(("reported", "expected"), [(48, 48), (0, 0), (None, 0)])
async def test_prefix_cache_hits_reach_the_last_chunk(
    output_kind: str, reported: int | None, expected: int
) -> None:
    """`RequestOutput.num_cached_tokens` becomes the last chunk's `cached_tokens`, hence
    `usage.input_tokens_details.cached_tokens` (issue 31: it was always 0 on vLLM)."""
    engine = FakeAsyncLLM({"req-1": Script(steps=STEPS, num_cached_tokens=reported)})
    source = VLLMTokenSource(engine, api=API, output_kind=output_kind)  # type: ignore[arg-type]

    chunks = await collect(source, request())

    assert chunks[-1].cached_tokens == expected
    assert all(chunk.cached_tokens == 0 for chunk in chunks[:-1])
