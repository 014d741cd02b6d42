"""`streamfold serve --engine vllm|sglang`: clear errors where the engine cannot run, and the
engine built at start-up in a worker thread where it can (`LoadingSource`; the served
behaviour is in `test_engine_loading.py`)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import threading

import anyio
import pytest
import sniffio

from streamfold.adapters import server
from streamfold.adapters.registry import ENGINES, EngineSetupError, LoadingSource
from streamfold.adapters.server import serving_asyncio, tune_gc_for_serving
from streamfold.adapters.server._gc import YOUNG_THRESHOLD
from streamfold.cli import main
from streamfold.engines import GenerationRequest, TokenChunk


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_gpu_engine_that_is_not_installed_is_a_clear_error(
    engine: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if importlib.util.find_spec(engine) is not None:
        pytest.skip(f"{engine} is installed here")
    assert main(["serve", "--engine", engine, "--model", "openai/gpt-oss-20b"]) == 2
    assert f"pip install 'streamfold[{engine}]'" in capsys.readouterr().err


def test_a_gpu_engine_needs_a_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    with pytest.raises(EngineSetupError, match="needs --model"):
        ENGINES["vllm"](argparse.Namespace(model=None, engine_arg=[]))
    with pytest.raises(EngineSetupError, match="KEY=VALUE"):
        ENGINES["sglang"](argparse.Namespace(model="m", engine_arg=["nokey"]))


class _Source:
    def __init__(self) -> None:
        self.closed = 0

    async def generate(self, request: GenerationRequest):  # type: ignore[no-untyped-def]
        yield TokenChunk(token_ids=(1,), finish_reason="stop")

    def close(self) -> None:
        self.closed += 1


REQUEST = GenerationRequest(request_id="r", prompt_token_ids=(1,))


@pytest.mark.anyio
async def test_loading_source_builds_once_in_a_worker_thread() -> None:
    built: list[threading.Thread] = []
    gate = threading.Event()

    def build() -> _Source:
        gate.wait()
        built.append(threading.current_thread())
        return _Source()

    loading = LoadingSource(build, name="stand-in")  # type: ignore[arg-type]
    results: list[list[TokenChunk]] = []

    async def request_early() -> None:
        results.append([c async for c in loading.generate(REQUEST)])

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(loading.load)
        tasks.start_soon(request_early)  # waits for the build, which it does not start again
        await anyio.sleep(0.05)
        assert loading.source is None and results == []
        gate.set()
    assert [c.finish_reason for c in results[0]] == ["stop"]
    assert [c.finish_reason async for c in loading.generate(REQUEST)] == ["stop"]
    assert len(built) == 1 and built[0] is not threading.current_thread()
    loading.close()
    assert loading.source.closed == 1  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_a_failed_load_raises_for_each_caller_and_ends_requests_with_an_error() -> None:
    def build() -> _Source:
        raise RuntimeError("CUDA out of memory")

    loading = LoadingSource(build, name="vllm")  # type: ignore[arg-type]
    chunks = [c async for c in loading.generate(REQUEST)]  # starts the load itself
    assert [(c.finish_reason, c.error) for c in chunks] == [
        ("error", "the vllm engine failed to start: RuntimeError: CUDA out of memory")
    ]
    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        await loading.load()
    loading.close()  # nothing was built: nothing to close


def test_serve_closes_an_engine_that_has_close_when_the_server_stops(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    import uvicorn

    from streamfold.adapters import registry
    from streamfold.adapters.registry import Engine

    closed: list[bool] = []

    class ClosingSource:
        async def generate(self, request: GenerationRequest):  # type: ignore[no-untyped-def]
            yield TokenChunk(finish_reason="stop")

        def close(self) -> None:
            closed.append(True)

    monkeypatch.setitem(
        registry.ENGINES,
        "replay",
        lambda args: Engine(source=ClosingSource(), grammar=lambda model: None),  # type: ignore[arg-type,return-value]
    )
    # uvicorn runs its loop inside `serving_asyncio`, in this thread.
    libraries: list[str | None] = []
    monkeypatch.setattr(
        uvicorn.Server, "run", lambda *a, **k: libraries.append(sniffio.thread_local.name)
    )
    # Serve tunes the collector (process-wide) before it serves: not this test process's.
    tuned: list[bool] = []
    monkeypatch.setattr(server, "tune_gc_for_serving", lambda: tuned.append(True))
    assert main(["serve", "--store", ":memory:", "--port", "0"]) == 0
    assert closed == [True]
    assert tuned == [True]
    assert libraries == ["asyncio"]
    assert sniffio.thread_local.name is None


def test_serving_asyncio_answers_sniffio_at_once_and_restores_it() -> None:
    """Inside, anyio finds asyncio without sniffio's `current_task()` probe (a `getpid`
    system call each time on CPython 3.11); after, sniffio finds no library in this thread."""
    probes: list[bool] = []

    async def main() -> str:
        real = asyncio.current_task
        asyncio.current_task = lambda *a: probes.append(True) or real(*a)  # type: ignore[assignment]
        try:
            with anyio.CancelScope():
                await anyio.sleep(0)
            return sniffio.current_async_library()
        finally:
            asyncio.current_task = real  # type: ignore[assignment]

    with serving_asyncio():
        assert asyncio.run(main()) == "asyncio"
    assert probes == []
    assert sniffio.thread_local.name is None
    with pytest.raises(sniffio.AsyncLibraryNotFoundError):
        sniffio.current_async_library()
    assert asyncio.run(main()) == "asyncio"
    assert probes  # outside, sniffio probes the running task


def test_tune_gc_for_serving_freezes_the_startup_heap_and_raises_the_young_threshold() -> None:
    before = gc.get_threshold()
    try:
        tune_gc_for_serving(preload_vocabulary=False)
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *before[1:])
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
