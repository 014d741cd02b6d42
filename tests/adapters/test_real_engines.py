"""The adapters against real vLLM and SGLang engines; runs only where one is installed and a
CUDA GPU is present, and is skipped everywhere else.

The machine may be offline, so by default the engines serve a tiny random Llama written to a
temporary directory and run without a tokenizer (`skip_tokenizer_init=True`). Set
`STREAMFOLD_TEST_MODEL` to a local model directory or a cached hub name to use a real model.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("the real-engine tests need a CUDA GPU", allow_module_level=True)
HAVE_VLLM = importlib.util.find_spec("vllm") is not None
HAVE_SGLANG = importlib.util.find_spec("sglang") is not None
if not (HAVE_VLLM or HAVE_SGLANG):
    pytest.skip("neither vllm nor sglang is installed", allow_module_level=True)

import anyio  # noqa: E402

from streamfold.adapters import SGLangTokenSource, VLLMTokenSource  # noqa: E402
from streamfold.engines import GenerationRequest, SamplingParams, TokenChunk  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.gpu, pytest.mark.slow]

MAX_TOKENS = 24


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # both engines are asyncio-only


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, bool]]:
    """(model path or name, whether it comes without a tokenizer)."""
    if name := os.environ.get("STREAMFOLD_TEST_MODEL"):
        yield name, False
        return
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(0)
    path = Path(tmp_path_factory.mktemp("tiny-llama"))
    transformers.LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(path)
    yield str(path), True


def greedy(request_id: str, **kw: Any) -> GenerationRequest:
    return GenerationRequest(
        request_id=request_id,
        prompt_token_ids=(1, 17, 42, 99, 7),
        max_output_tokens=MAX_TOKENS,
        sampling=SamplingParams(temperature=0.0, logprobs=True, top_logprobs=2),
        **kw,
    )


async def collect(chunks: AsyncIterator[TokenChunk]) -> list[TokenChunk]:
    async with aclosing(chunks) as stream:  # type: ignore[type-var]
        return [chunk async for chunk in stream]


def check_stream(chunks: list[TokenChunk]) -> list[int]:
    ids = [t for c in chunks for t in c.token_ids]
    assert chunks[-1].finish_reason in ("stop", "length"), chunks[-1]
    assert all(c.finish_reason is None for c in chunks[:-1])
    assert 0 < len(ids) <= MAX_TOKENS
    if chunks[-1].finish_reason == "length":
        assert len(ids) == MAX_TOKENS
    assert sum(len(c.logprobs or ()) for c in chunks) == len(ids)
    assert all(len(top) == 2 for c in chunks for top in c.top_logprobs or ())
    return ids


def assert_reaches_the_context(chunks: list[TokenChunk]) -> None:
    """A 3-token prompt with max_output_tokens=10_000 on a 256-token context: "length" at the
    context, or "stop" before it if the random model emits its EOS."""
    count = sum(len(c.token_ids) for c in chunks)
    assert chunks[-1].finish_reason in ("stop", "length"), chunks[-1]
    assert count == 256 - 3 if chunks[-1].finish_reason == "length" else count < 256 - 3


@pytest.mark.skipif(not HAVE_VLLM, reason="vllm is not installed")
async def test_vllm_streams_delta_and_cumulative_alike_and_aborts(model: tuple[str, bool]) -> None:
    from vllm import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    name, no_tokenizer = model
    engine = AsyncLLM.from_engine_args(
        AsyncEngineArgs(
            model=name,
            skip_tokenizer_init=no_tokenizer,
            enforce_eager=True,
            gpu_memory_utilization=0.3,
            max_model_len=256,
        )
    )
    try:
        delta = check_stream(await collect(VLLMTokenSource(engine).generate(greedy("d"))))
        cumulative_source = VLLMTokenSource(engine, output_kind="cumulative")
        cumulative = check_stream(await collect(cumulative_source.generate(greedy("c"))))
        assert delta == cumulative  # greedy: same tokens however they are streamed

        async with aclosing(VLLMTokenSource(engine).generate(greedy("x"))) as early:
            await early.__anext__()
        assert engine.output_processor.get_num_unfinished_requests() == 0

        # Past the context: clamped, so it streams to the context and ends "length".
        past = GenerationRequest(
            request_id="past", prompt_token_ids=(1, 17, 42), max_output_tokens=10_000
        )
        chunks = await collect(VLLMTokenSource(engine).generate(past))
        assert_reaches_the_context(chunks)
    finally:
        VLLMTokenSource(engine).close()


@pytest.mark.skipif(not HAVE_SGLANG, reason="sglang is not installed")
async def test_sglang_streams_and_aborts(model: tuple[str, bool]) -> None:
    import sglang

    name, no_tokenizer = model
    engine = sglang.Engine(
        model_path=name,
        skip_tokenizer_init=no_tokenizer,
        mem_fraction_static=0.3,
        context_length=256,
    )
    try:
        source = SGLangTokenSource(engine)
        first = check_stream(await collect(source.generate(greedy("a"))))
        again = check_stream(await collect(source.generate(greedy("b"))))
        assert first == again

        async with aclosing(source.generate(greedy("x"))) as early:
            await early.__anext__()
        # SGLang keeps an aborted request's state until its scheduler answers the abort.
        with anyio.fail_after(30):
            while engine.tokenizer_manager.rid_to_state:
                await anyio.sleep(0.05)
    finally:
        source.close()


@pytest.mark.skipif(not HAVE_SGLANG, reason="sglang is not installed")
async def test_sglang_clamps_seeds_warns_and_leaves_sigterm(
    model: tuple[str, bool], caplog: pytest.LogCaptureFixture
) -> None:
    import sglang

    name, no_tokenizer = model
    engine = sglang.Engine(
        model_path=name,
        skip_tokenizer_init=no_tokenizer,
        mem_fraction_static=0.3,
        context_length=256,
    )
    source = SGLangTokenSource(engine)

    def servers_handler(signum: int, frame: object) -> None:
        raise AssertionError("not called")

    before = signal.signal(signal.SIGTERM, servers_handler)
    try:
        past = GenerationRequest(
            request_id="past",
            prompt_token_ids=(1, 17, 42),
            max_output_tokens=10_000,
            sampling=SamplingParams(seed=3),
        )
        with caplog.at_level(logging.WARNING, logger="streamfold.adapters"):
            chunks = await collect(source.generate(past))
        # SGLang refused such a request with a ValueError; clamped, it streams.
        assert_reaches_the_context(chunks)
        assert any("enable_deterministic_inference" in r.getMessage() for r in caplog.records)
        assert signal.getsignal(signal.SIGTERM) is servers_handler
    finally:
        signal.signal(signal.SIGTERM, before)
        source.close()
