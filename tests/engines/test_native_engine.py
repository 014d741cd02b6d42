"""`NativeEngine` as a `TokenSource`: concurrent calls batch, aclose aborts, asyncio and trio."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from streamfold.engines import (
    GenerationRequest,
    ReadyChunks,
    SamplingParams,
    TokenChunk,
    TokenSource,
)
from streamfold.engines.native import engine as engine_module
from streamfold.engines.native._steplog import STEP_LOG_ENV, read_step_log
from streamfold.engines.native.core import EngineCore
from streamfold.engines.native.engine import ENGINE_THREAD_NAME, NativeEngine, PostTokens
from streamfold.engines.native.gptoss.model import GptOssModel


@pytest.fixture(scope="module")
def model(hf_dir: Path) -> GptOssModel:
    return GptOssModel.from_pretrained(hf_dir)


@pytest.fixture
def engine(model: GptOssModel) -> Iterator[NativeEngine]:
    with NativeEngine(EngineCore(model, block_size=4, num_blocks=256)) as native:
        yield native


def _requests(n: int, max_tokens: int = 12) -> list[GenerationRequest]:
    rng = random.Random(n)
    return [
        GenerationRequest(
            request_id=f"q{i}",
            prompt_token_ids=tuple(rng.randrange(512) for _ in range(rng.randint(1, 20))),
            max_output_tokens=max_tokens,
            sampling=SamplingParams(temperature=0.8, seed=i, logprobs=True),
        )
        for i in range(n)
    ]


async def _collect(source: TokenSource, request: GenerationRequest) -> list[TokenChunk]:
    return [chunk async for chunk in source.generate(request)]


async def _run_concurrently(
    source: TokenSource, requests: list[GenerationRequest]
) -> dict[str, list[TokenChunk]]:
    results: dict[str, list[TokenChunk]] = {}

    async def one(request: GenerationRequest) -> None:
        results[request.request_id] = await _collect(source, request)

    async with anyio.create_task_group() as tg:
        for request in requests:
            tg.start_soon(one, request)
    return results


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_concurrent_generate_calls_batch_and_match_the_offline_engine(
    backend: str, model: GptOssModel, engine: NativeEngine
) -> None:
    requests = _requests(12)
    assert isinstance(engine, TokenSource)
    got = anyio.run(_run_concurrently, engine, requests, backend=backend)
    offline = EngineCore(model, block_size=4, num_blocks=256).run_to_completion(requests)
    for request in requests:
        chunks = got[request.request_id]
        assert [c.token_ids for c in chunks] == [c.token_ids for c in offline[request.request_id]]
        assert all(c.logprobs is not None for c in chunks)
        assert chunks[-1].finish_reason == "length"
    assert engine.num_steps < 12 * 12  # steps were shared, not one request at a time
    assert engine.num_free_blocks == 256


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_closing_the_stream_aborts_and_frees_blocks_before_aclose_returns(
    backend: str, engine: NativeEngine
) -> None:
    async def main() -> None:
        request = _requests(1, max_tokens=10_000)[0]
        stream = engine.generate(request)
        seen = [await stream.__anext__() for _ in range(3)]
        assert all(len(c.token_ids) == 1 for c in seen)
        assert engine.num_free_blocks < 256
        await stream.aclose()  # type: ignore[attr-defined]
        assert engine.num_free_blocks == 256
        assert not engine.core.has_work()

    anyio.run(main, backend=backend)


def test_cancelling_a_consumer_aborts_its_request(engine: NativeEngine) -> None:
    async def main() -> None:
        long, short = _requests(2, max_tokens=10_000)
        with anyio.move_on_after(0.5):
            await _collect(engine, long)
        assert engine.num_free_blocks == 256
        quick = GenerationRequest(
            request_id="after", prompt_token_ids=short.prompt_token_ids, max_output_tokens=3
        )
        chunks = await _collect(engine, quick)  # the engine still serves
        assert sum(len(c.token_ids) for c in chunks) == 3

    anyio.run(main)


def test_a_request_that_cannot_run_gets_an_error_chunk(engine: NativeEngine) -> None:
    bad = GenerationRequest(request_id="bad", prompt_token_ids=(10**9,))
    chunks = anyio.run(_collect, engine, bad)
    assert len(chunks) == 1 and chunks[0].finish_reason == "error"


@pytest.mark.skipif(not Path("/proc/thread-self").exists(), reason="OS thread names: Linux")
def test_the_engine_thread_carries_its_name_in_the_os(engine: NativeEngine) -> None:
    # Operators (top -H, ps -L) and bench_serve.py tell the engine's CPU from the event loop's
    # by the OS-level name; Python's Thread.name alone never reaches the kernel.
    async def main() -> None:
        await _collect(engine, _requests(1, max_tokens=2)[0])

    anyio.run(main)
    assert engine._thread is not None and engine._thread.native_id is not None
    comm = Path(f"/proc/self/task/{engine._thread.native_id}/comm").read_text().strip()
    assert comm == ENGINE_THREAD_NAME == engine._thread.name


def test_the_step_log_records_every_step_when_asked(
    model: GptOssModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # bench_serve.py --step-log reads this timeline to split served - core time by cause; its
    # counts must be the engine's own (every request admitted once, every chunk counted once).
    path = tmp_path / "steps.jsonl"
    monkeypatch.setenv(STEP_LOG_ENV, str(path))
    requests = _requests(3, max_tokens=5)
    with NativeEngine(EngineCore(model, block_size=4, num_blocks=256)) as native:
        results = anyio.run(_run_concurrently, native, requests)
        steps = native.num_steps
    records = read_step_log(path)
    assert len(records) == steps
    assert sum(r["admitted"] for r in records) == 3
    assert sum(r["chunks"] for r in records) == sum(len(c) for c in results.values()) == 15
    assert sum(r["prefill"] for r in records) == sum(len(r.prompt_token_ids) for r in requests)
    assert max(r["rows"] for r in records) == 3
    first = records[0]
    assert first["admitted"] >= 1 and first["first_queued"] <= first["t"]
    assert all(r["wall"] >= 0 and r["cpu"] >= 0 and r["runq"] >= 0 for r in records)
    assert all(a["t"] + a["wall"] <= b["t"] for a, b in itertools.pairwise(records))


def test_the_step_log_is_off_by_default(
    model: GptOssModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(STEP_LOG_ENV, raising=False)
    with NativeEngine(EngineCore(model, block_size=4, num_blocks=256)) as native:
        assert native._log is None


def test_take_ready_hands_over_what_the_steps_delivered_and_never_waits(
    model: GptOssModel, engine: NativeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The readiness hint (`ReadyChunks`): chunks the engine thread delivered while nobody read
    them come out of `take_ready` at once, at most `limit`, in order; an empty queue gives []
    without waiting; a finish taken that way needs no abort when the stream closes."""
    aborts: list[str] = []
    abort = engine._abort_after_step
    monkeypatch.setattr(engine, "_abort_after_step", lambda rid: (aborts.append(rid), abort(rid)))
    request = _requests(1, max_tokens=12)[0]
    sizes: list[int] = []

    async def main() -> list[TokenChunk]:
        stream = engine.generate(request)
        assert isinstance(stream, ReadyChunks)
        assert stream.take_ready(4) == []  # not started: nothing delivered
        got = [await stream.__anext__()]
        with anyio.fail_after(60):  # the engine steps on to the end while nothing is read
            while engine.core.has_work():
                await anyio.sleep(0.01)
        await anyio.sleep(0.05)  # let the deliveries (callbacks on this loop) run
        ready = stream.take_ready(3)
        sizes.append(len(ready))
        got += ready
        while got[-1].finish_reason is None:
            more = stream.take_ready(100)
            sizes.append(len(more))
            got += more or [await stream.__anext__()]
        assert stream.take_ready(4) == []  # nothing after the finish
        assert sizes[-1] > 1 and got[-1].finish_reason  # the finish came through the hint
        await stream.aclose()  # type: ignore[attr-defined]
        return got

    got = anyio.run(main)
    assert sizes[0] == 3  # several steps were waiting, and the limit held
    offline = EngineCore(model, block_size=4, num_blocks=256).run_to_completion([request])
    assert [c.token_ids for c in got] == [c.token_ids for c in offline[request.request_id]]
    assert got[-1].finish_reason == "length"
    assert aborts == []
    assert engine.num_free_blocks == 256


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_served_engine_coalesces_into_the_same_events(
    backend: str, engine: NativeEngine
) -> None:
    """Through the driver: a consumer slower than the engine takes several chunks per batch, and
    gets the same events as one chunk per batch (the engine is seeded: both runs make one
    answer)."""
    from streamfold.adapters.driver import Generation
    from streamfold.adapters.grammars import grammar_for
    from streamfold.statemachine import Response, dumps

    request = _requests(1, max_tokens=16)[0]
    response = Response(id="resp_n", created_at=1, model="m", status="in_progress")

    taken: list[int] = []

    class Stream:  # an engine stream, counting what its hint handed over
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __aiter__(self) -> Any:
            return self

        async def __anext__(self) -> TokenChunk:
            chunk: TokenChunk = await self.inner.__anext__()
            # A consumer slower than the engine: two more steps run before it comes back (the
            # random model's tokens may make no event, so the pace is set here, not by time).
            target = engine.num_steps + 2
            with anyio.fail_after(60):
                while engine.num_steps < target and engine.core.has_work():
                    await anyio.sleep(0.002)
            await anyio.sleep(0.01)  # the deliveries (callbacks on this loop) run
            return chunk

        def take_ready(self, limit: int) -> list[TokenChunk]:
            ready: list[TokenChunk] = self.inner.take_ready(limit)
            taken.append(len(ready))
            return ready

        async def aclose(self) -> None:
            await self.inner.aclose()

    class Counted:
        def generate(self, req: GenerationRequest) -> Any:
            return Stream(engine.generate(req))

    async def run(cap: int) -> list[str]:
        generation = Generation(
            Counted(), request, grammar_for({"grammar": "harmony"}), response, max_batch_chunks=cap
        )
        events = []
        async for batch in generation.batches():
            events += [dumps(e) for e in batch]
        return events

    # A first run leaves the prompt's full blocks in the prefix cache, so both runs compared
    # below take the same blocks from it and report the same usage (cached_tokens).
    anyio.run(run, 1, backend=backend)
    taken.clear()
    coalesced = anyio.run(run, 16, backend=backend)
    assert max(taken) > 1 and all(n <= 15 for n in taken), (taken, engine.num_steps)
    taken.clear()
    assert anyio.run(run, 1, backend=backend) == coalesced
    # A cap of one takes nothing ready beside a received chunk: only the opening take, before
    # the first chunk, may hand one over.
    assert len(taken) <= 1 and all(n <= 1 for n in taken), taken


@pytest.mark.parametrize(
    ("post_tokens", "inside"),
    [("unembedding", [True] * 5 + [False]), ("step_end", [False] * 6)],
)
def test_a_step_posts_the_previous_steps_tokens_from_inside_the_step(
    model: GptOssModel, monkeypatch: pytest.MonkeyPatch, post_tokens: PostTokens, inside: list[bool]
) -> None:
    # Issue 18 (64 streams): tokens posted between steps set the event loop's Python against
    # the next step's layers, which wait for the GIL at each of their small torch calls. With
    # "unembedding" the engine posts them from the next step (at its unembedding, see
    # EngineCore.step), holding the step lock then; the last chunk, with no next step, is
    # posted when the engine idles. "step_end" posts each step's tokens after the step.
    native = NativeEngine(EngineCore(model, block_size=4, num_blocks=256), post_tokens=post_tokens)
    seen: list[bool] = []
    real = engine_module._poster

    def recording_poster() -> Callable[..., object]:
        post = real()

        def recorded(*args: object) -> object:
            seen.append(native._step_lock.locked())
            return post(*args)

        return recorded

    monkeypatch.setattr(engine_module, "_poster", recording_poster)
    with native:
        chunks = anyio.run(_collect, native, _requests(1, max_tokens=6)[0])
    assert len(chunks) == 6 and chunks[-1].finish_reason == "length"
    assert seen == inside


def test_auto_posting_measures_where_the_unembedding_starts(engine: NativeEngine) -> None:
    assert engine.post_tokens == "auto"
    anyio.run(_collect, engine, _requests(1, max_tokens=3)[0])
    assert 0.0 < engine._unembedding_share < 1.0
    with pytest.raises(ValueError, match="post_tokens"):
        NativeEngine(engine.core, post_tokens="later")  # type: ignore[arg-type]
