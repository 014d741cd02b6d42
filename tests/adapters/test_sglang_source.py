"""SGLangTokenSource against a faithful SGLang Engine stand-in (tests/adapters/fakes_sglang.py)."""

from __future__ import annotations

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
    FakeSGLangEngine,
    FakeTokenizerManager,
    Script,
    token_logprob,
    top_logprobs,
)

pytestmark = pytest.mark.anyio

STEPS = [[200005, 35644], [200008], [3, 4, 5, 6], [200007, 200006], [7], [200002]]
ALL = [t for step in STEPS for t in step]


def engine_for(scripts: dict[str, Script], *, incremental: bool = False) -> FakeSGLangEngine:
    return FakeSGLangEngine(
        {sglang_rid(request_id): script for request_id, script in scripts.items()},
        FakeTokenizerManager(incremental_streaming_output=incremental),
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
