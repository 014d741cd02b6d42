"""SGLangTokenSource against a faithful SGLang Engine stand-in (tests/adapters/fakes_sglang.py)."""

from __future__ import annotations

import logging
import signal
from contextlib import aclosing
from typing import Any

import anyio
import pytest

from streamfold.adapters import (
    EngineNotInstalledError,
    SGLangTokenSource,
    build_sglang_engine,
    sglang_rid,
)
from streamfold.engines import GenerationRequest, SamplingParams, TokenChunk

from .fakes_sglang import (
    FakeServerArgs,
    FakeSGLangEngine,
    FakeTokenizerManager,
    Script,
    check_sampling_params,
    token_logprob,
    top_logprobs,
)

pytestmark = pytest.mark.anyio

STEPS = [[200005, 35644], [200008], [3, 4, 5, 6], [200007, 200006], [7], [200002]]
ALL = [t for step in STEPS for t in step]


def engine_for(
    scripts: dict[str, Script], *, incremental: bool = False, **manager: Any
) -> FakeSGLangEngine:
    return FakeSGLangEngine(
        {sglang_rid(request_id): script for request_id, script in scripts.items()},
        FakeTokenizerManager(incremental_streaming_output=incremental, **manager),
    )


def request(request_id: str = "req-1", **kw: Any) -> GenerationRequest:
    return GenerationRequest(request_id=request_id, prompt_token_ids=(1, 2, 3), **kw)


async def collect(source: SGLangTokenSource, req: GenerationRequest) -> list[TokenChunk]:
    async with aclosing(source.generate(req)) as chunks:
        return [chunk async for chunk in chunks]


def tokens(chunks: list[TokenChunk]) -> list[int]:
    return [t for chunk in chunks for t in chunk.token_ids]


@pytest.mark.parametrize("incremental", [False, True])
@pytest.mark.parametrize("reads", [None, [3, 1, 2], [10]])
async def test_every_token_passes_once_in_order(incremental: bool, reads: list[int] | None) -> None:
    """Cumulative ids (a live list), incremental ids and coalesced dicts each pass every token
    exactly once (smg PR #592: all but the last token of a chunk were dropped)."""
    engine = engine_for({"req-1": Script(steps=STEPS, reads=reads)}, incremental=incremental)

    chunks = await collect(SGLangTokenSource(engine), request())

    assert tokens(chunks) == ALL
    assert chunks[-1].finish_reason == "stop"
    assert chunks[-1].stop_reason == 2
    assert all(c.finish_reason is None and c.token_ids for c in chunks[:-1])
    assert engine.tokenizer_manager.abort_calls == []
    assert engine.tokenizer_manager.scheduler_running == set()


async def test_builds_the_async_generate_call() -> None:
    engine = engine_for({"r": Script(steps=[[5]])})
    sampling = SamplingParams(temperature=0.0, top_p=0.9, seed=7, top_logprobs=2)
    req = request("r", sampling=sampling, stop_token_ids=(200002, 200012))

    await collect(SGLangTokenSource(engine), req)

    call = engine.calls[sglang_rid("r")]
    assert call["input_ids"] == [1, 2, 3]
    assert call["stream"] is True
    assert (call["return_logprob"], call["top_logprobs_num"]) == (True, 2)
    assert call["sampling_params"] == {
        "max_new_tokens": None,  # not SGLang's default of 128
        "temperature": 0.0,
        "top_p": 0.9,
        "top_k": -1,  # SGLang rejects top_k=0
        "stop_token_ids": [200002, 200012],
        "sampling_seed": 7,
    }


async def test_leaves_out_the_seed_and_top_logprobs_when_unset() -> None:
    engine = engine_for({"r": Script(steps=[[5]])})

    await collect(SGLangTokenSource(engine), request("r", max_output_tokens=9))

    call = engine.calls[sglang_rid("r")]
    assert "sampling_seed" not in call["sampling_params"]
    assert "top_logprobs_num" not in call
    assert call["return_logprob"] is False
    assert call["sampling_params"]["max_new_tokens"] == 9


@pytest.mark.parametrize("incremental", [False, True])
@pytest.mark.parametrize("top", [0, 3])
async def test_logprobs_line_up_with_tokens(incremental: bool, top: int) -> None:
    engine = engine_for({"req-1": Script(steps=STEPS, reads=[2, 1, 3])}, incremental=incremental)
    req = request(sampling=SamplingParams(logprobs=True, top_logprobs=top))

    chunks = await collect(SGLangTokenSource(engine), req)

    assert tokens(chunks) == ALL
    assert [lp for c in chunks for lp in c.logprobs or ()] == [
        token_logprob(i, t)[0] for i, t in enumerate(ALL)
    ]
    if top == 0:
        assert all(c.top_logprobs is None for c in chunks)
    else:
        assert [entry for c in chunks for entry in c.top_logprobs or ()] == [
            tuple((tid, lp) for lp, tid, _ in top_logprobs(i, t, top)) for i, t in enumerate(ALL)
        ]


@pytest.mark.parametrize(
    ("finish", "expected", "stop_reason", "error"),
    [
        ({"type": "stop", "matched": 200012}, "stop", 200012, None),
        ({"type": "stop", "matched": [200002]}, "stop", 200002, None),
        ({"type": "stop", "matched": "</answer>"}, "stop", "</answer>", None),
        ({"type": "length", "length": 12}, "length", None, None),
        ({"type": "abort", "message": "Abort", "status_code": None}, "abort", None, None),
        (
            {"type": "abort", "message": "Input is too long", "status_code": 400},
            "error",
            None,
            "SGLang ended the request: Input is too long (status 400)",
        ),
        ({"type": "weird"}, "error", None, "SGLang ended the request: weird"),
    ],
)
async def test_finish_reasons_map(
    finish: dict[str, Any], expected: str, stop_reason: object, error: str | None
) -> None:
    engine = engine_for({"req-1": Script(steps=STEPS, finish=finish)})

    chunks = await collect(SGLangTokenSource(engine), request())

    assert tokens(chunks) == ALL
    assert (chunks[-1].finish_reason, chunks[-1].stop_reason, chunks[-1].error) == (
        expected,
        stop_reason,
        error,
    )


async def test_closing_early_aborts_before_closing() -> None:
    """Regression: SGLang drops the rid's state when its generator closes, after which
    `abort_request` ignores the rid and the scheduler keeps decoding (a zombie request)."""
    engine = engine_for({"req-1": Script(steps=STEPS)})
    manager = engine.tokenizer_manager

    async with aclosing(SGLangTokenSource(engine).generate(request())) as chunks:
        assert (await chunks.__anext__()).token_ids == (200005, 35644)

    assert manager.abort_calls == [sglang_rid("req-1")]
    assert manager.ignored_aborts == []
    assert manager.scheduler_running == set()
    assert manager.rid_to_state == {}


async def test_aborting_one_request_spares_a_request_whose_id_it_prefixes() -> None:
    """Regression: SGLang's scheduler aborts every rid that *starts with* the aborted rid, so
    aborting "req-1" under its own name would also abort "req-12"."""
    engine = engine_for({"req-1": Script(steps=STEPS), "req-12": Script(steps=STEPS)})
    source = SGLangTokenSource(engine)

    async with aclosing(source.generate(request("req-12"))) as other:
        first = await other.__anext__()
        async with aclosing(source.generate(request("req-1"))) as closed_early:
            await closed_early.__anext__()
        rest = [chunk async for chunk in other]

    assert tokens([first, *rest]) == ALL
    assert rest[-1].finish_reason == "stop"
    assert engine.tokenizer_manager.scheduler_aborted == {sglang_rid("req-1")}


async def test_engine_error_ends_the_stream_with_an_error_chunk() -> None:
    error = RuntimeError("Detokenizer process died")
    engine = engine_for({"req-1": Script(steps=STEPS, fail_after=2, error=error)})

    chunks = await collect(SGLangTokenSource(engine), request())

    assert tokens(chunks) == [200005, 35644, 200008]
    assert (chunks[-1].finish_reason, chunks[-1].error) == (
        "error",
        "SGLang engine failed: RuntimeError: Detokenizer process died",
    )


async def test_rejected_sampling_params_end_the_stream_with_an_error_chunk() -> None:
    engine = engine_for({"req-1": Script(steps=STEPS)})
    source = SGLangTokenSource(engine)
    source.sampling_params = lambda req: {"top_k": 0}  # type: ignore[method-assign]

    chunks = await collect(source, request())

    assert [c.finish_reason for c in chunks] == ["error"]
    assert "top_k must be -1 (disable) or at least 1" in (chunks[0].error or "")


async def test_cancellation_while_waiting_propagates() -> None:
    engine = engine_for({"req-1": Script(steps=STEPS, block_after=1)})
    seen: list[TokenChunk] = []

    with anyio.move_on_after(0.05) as scope:
        async with aclosing(SGLangTokenSource(engine).generate(request())) as chunks:
            async for chunk in chunks:
                seen.append(chunk)

    assert scope.cancelled_caught
    assert [c.token_ids for c in seen] == [(200005, 35644)]  # no error chunk: not a failure
    assert engine.tokenizer_manager.abort_calls == [sglang_rid("req-1")]


SEEDS_LOG = "streamfold.adapters"


async def test_a_seed_the_engine_ignores_is_warned_about_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Regression (issue 35): SGLang reads `sampling_seed` only when started with
    `enable_deterministic_inference`; a seeded request was silently not reproducible."""
    engine = engine_for({name: Script(steps=[[5]]) for name in ("a", "b", "c")})
    source = SGLangTokenSource(engine)
    seeded = SamplingParams(seed=7)

    with caplog.at_level(logging.WARNING, logger=SEEDS_LOG):
        await collect(source, request("a"))
        assert caplog.records == []  # no seed, nothing to say
        await collect(source, request("b", sampling=seeded))
        await collect(source, request("c", sampling=seeded))

    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, warnings
    assert "enable_deterministic_inference" in warnings[0]
    assert engine.calls[sglang_rid("b")]["sampling_params"]["sampling_seed"] == 7


async def test_a_deterministic_engine_takes_seeds_without_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = engine_for({"a": Script(steps=[[5]])})
    engine.server_args = FakeServerArgs(enable_deterministic_inference=True)

    with caplog.at_level(logging.WARNING, logger=SEEDS_LOG):
        await collect(SGLangTokenSource(engine), request("a", sampling=SamplingParams(seed=7)))

    assert caplog.records == []


async def test_max_output_tokens_past_the_context_is_clamped_to_it() -> None:
    """Regression (issue 35): SGLang refuses `prompt + max_new_tokens > context_len` with a
    ValueError before any token (the response failed), where vLLM streams and ends "length";
    the adapter clamps max_new_tokens to what the context leaves, so both end "length"."""
    engine = engine_for({"r": Script(steps=STEPS)}, context_len=8)

    chunks = await collect(SGLangTokenSource(engine), request("r", max_output_tokens=100))

    assert engine.calls[sglang_rid("r")]["sampling_params"]["max_new_tokens"] == 5
    assert tokens(chunks) == [200005, 35644, 200008, 3, 4]
    assert (chunks[-1].finish_reason, chunks[-1].error) == ("length", None)


async def test_the_stand_in_refuses_max_new_tokens_past_the_context_as_sglang_does() -> None:
    engine = engine_for({"r": Script(steps=STEPS)}, context_len=8)
    stream = await engine.async_generate(
        input_ids=[1, 2, 3], sampling_params={"max_new_tokens": 6}, stream=True, rid="r"
    )
    with pytest.raises(ValueError, match="exceeds the model's maximum context length of 8"):
        await stream.__anext__()
    assert engine.tokenizer_manager.rid_to_state == {}


@pytest.mark.parametrize("reads", [None, [2, 2]])
@pytest.mark.parametrize("logprobs", [False, True])
async def test_an_abort_from_the_waiting_queue_ends_as_an_abort(
    reads: list[int] | None, logprobs: bool
) -> None:
    """Regression (issue 35): under incremental streaming, SGLang's echo of an abort it made
    itself (a retracted request that timed out, `abort_all`) re-sends the last token with the
    full count; the reader called it "neither cumulative nor incremental" and ended "error"."""
    engine = engine_for(
        {"req-1": Script(steps=STEPS, waiting_abort_after=3, reads=reads)}, incremental=True
    )
    sampling = SamplingParams(logprobs=logprobs, top_logprobs=2 if logprobs else 0)

    chunks = await collect(SGLangTokenSource(engine), request(sampling=sampling))

    sent = [t for step in STEPS[:3] for t in step]
    assert tokens(chunks) == sent
    assert (chunks[-1].finish_reason, chunks[-1].error) == ("abort", None)
    if logprobs:
        assert [lp for c in chunks for lp in c.logprobs or ()] == [
            token_logprob(i, t)[0] for i, t in enumerate(sent)
        ]


async def test_an_abort_from_the_waiting_queue_ends_as_an_abort_when_cumulative() -> None:
    engine = engine_for({"req-1": Script(steps=STEPS, waiting_abort_after=3)})

    chunks = await collect(SGLangTokenSource(engine), request())

    assert tokens(chunks) == [t for step in STEPS[:3] for t in step]
    assert chunks[-1].finish_reason == "abort"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # SGLang installs them on asyncio
async def test_sglang_does_not_take_over_sigterm() -> None:
    """Regression (issue 35): SGLang's first request installs its own SIGTERM handler on the
    serving loop (`auto_create_handle_loop`), replacing the server's graceful shutdown. The
    adapter puts the server's back; SGLang keeps SIGQUIT, its children's crash signal."""
    engine = engine_for({"a": Script(steps=[[5]]), "b": Script(steps=[[6]])})
    source = SGLangTokenSource(engine)

    def servers_handler(signum: int, frame: object) -> None:
        raise AssertionError("not called")

    before_term = signal.signal(signal.SIGTERM, servers_handler)
    before_quit = signal.getsignal(signal.SIGQUIT)
    try:
        await collect(source, request("a"))
        await collect(source, request("b"))
        assert engine.tokenizer_manager.handler_threads == ["main"]  # SGLang did install them
        assert signal.getsignal(signal.SIGTERM) is servers_handler
        assert signal.getsignal(signal.SIGQUIT) is not before_quit  # SGLang's, on the loop
    finally:
        import asyncio

        asyncio.get_running_loop().remove_signal_handler(signal.SIGQUIT)
        signal.signal(signal.SIGQUIT, before_quit)
        signal.signal(signal.SIGTERM, before_term)


def test_the_stand_in_takes_sglang_constraints_one_at_a_time() -> None:
    for key in ("json_schema", "regex", "ebnf", "structural_tag"):
        check_sampling_params({key: "x"})
    with pytest.raises(ValueError, match="Only one of json_schema, regex, ebnf"):
        check_sampling_params({"regex": "a+", "ebnf": "root ::= 'a'"})
    with pytest.raises(TypeError):
        check_sampling_params({"guided_json": "{}"})


def test_close_shuts_the_engine_down() -> None:
    engine = engine_for({})
    SGLangTokenSource(engine).close()
    assert engine.shutdown_calls == 1


def test_rids_are_prefix_free() -> None:
    ids = ["req-1", "req-12", "", "1:", "a:b", "12:req-1", "req-1x"]
    rids = [sglang_rid(i) for i in ids]
    assert len(set(rids)) == len(ids)
    assert not any(a != b and b.startswith(a) for a in rids for b in rids)


def test_build_without_sglang_names_the_install() -> None:
    try:
        import sglang  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("SGLang is installed here")
    with pytest.raises(EngineNotInstalledError, match=r"pip install 'streamfold\[sglang\]'"):
        build_sglang_engine("openai/gpt-oss-20b")


@pytest.mark.parametrize(
    ("given", "expected"), [({}, "llguidance"), ({"grammar_backend": "xgrammar"}, "xgrammar")]
)
def test_the_engine_is_built_with_the_llguidance_grammar_backend(
    monkeypatch: pytest.MonkeyPatch, given: dict[str, Any], expected: str
) -> None:
    """Issue 30, item 4. Bug pinned: `streamfold serve --engine sglang` built
    `sglang.Engine` with SGLang's default grammar backend (xgrammar), which cannot read the
    llguidance Lark the server sends as `ebnf` (token references, `%json`), so a constrained
    request could not be enforced on an engine marked as enforcing. Now llguidance unless the
    operator names another backend (`--engine-arg grammar_backend=...`)."""
    import sys
    import types

    seen: dict[str, Any] = {}

    def engine(**server_args: Any) -> FakeSGLangEngine:
        seen.update(server_args)
        return FakeSGLangEngine({})

    monkeypatch.setitem(sys.modules, "sglang", types.SimpleNamespace(Engine=engine))
    build_sglang_engine("openai/gpt-oss-20b", **given)
    assert seen == {"model_path": "openai/gpt-oss-20b", "grammar_backend": expected}


async def test_a_requests_grammar_goes_to_sglang_as_ebnf_from_the_first_token() -> None:
    """Structured outputs (issue 30): the grammar goes as `ebnf` (llguidance Lark under
    `--grammar-backend llguidance`), marked as describing the reasoning too."""
    from streamfold.engines import DecodingConstraint

    engine = engine_for({"r": Script(steps=[[5]])})
    await collect(
        SGLangTokenSource(engine), request("r", decoding=DecodingConstraint(grammar='start: "x"'))
    )
    params = engine.calls[sglang_rid("r")]["sampling_params"]
    assert params["ebnf"] == 'start: "x"'
    assert params["custom_params"] == {"__sglang_reasoning_in_grammar": True}


@pytest.mark.parametrize("incremental", [False, True])
async def test_radix_cache_hits_reach_the_last_chunk(incremental: bool) -> None:
    """`meta_info["cached_tokens"]` becomes the last chunk's `cached_tokens`, hence
    `usage.input_tokens_details.cached_tokens` (issue 31: it was always 0 on SGLang)."""
    engine = engine_for({"req-1": Script(steps=STEPS, cached_tokens=64)}, incremental=incremental)

    chunks = await collect(SGLangTokenSource(engine), request())

    assert tokens(chunks) == ALL
    assert chunks[-1].cached_tokens == 64
    assert all(chunk.cached_tokens == 0 for chunk in chunks[:-1])
