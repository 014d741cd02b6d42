"""`GET /health` and the engine's warm-up, over a real socket (issue 18).

A served native engine used to meet its first clients cold (its first batch ran at a fraction
of the later ones' speed) and gave a supervisor nothing to poll. Now the app warms the engine
in the background as its lifespan starts and answers `GET /health` 503 until that is done,
200 after.
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("torch")

import attrs
import torch

from streamfold.adapters.registry import ENGINES, Engine
from streamfold.adapters.server import MemoryEventStore, create_app
from streamfold.engines.native import build_native_engine
from streamfold.engines.native.engine import default_engine_threads
from streamfold.engines.native.gptoss.init_model import init_model

from .serving import serve

NATIVE = {
    "device": "cpu",
    "dtype": "float32",
    "kv_cache_mb": 8,
    "block_size": 16,
    "max_num_seqs": 4,
    "experts": "dequantize",
    "threads": None,
    "engine_arg": [],
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_model(tmp_path_factory.mktemp("model") / "tiny", seed=3, dtype="float32")


def _health(url: str) -> httpx.Response:
    return httpx.get(f"{url}/health", timeout=30)


def _wait_ready(url: str, seconds: float = 120) -> httpx.Response:
    deadline = time.monotonic() + seconds
    while True:
        answer = _health(url)
        if answer.status_code != 503 or answer.json()["status"] != "warming":
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"still warming after {seconds} s")
        time.sleep(0.05)


def test_health_is_503_while_the_engine_warms_and_200_once_warm(model_dir: Path) -> None:
    engine = ENGINES["native"](argparse.Namespace(model=str(model_dir), **NATIVE))
    gate = threading.Event()
    warmed: list[float] = []

    async def gated_warm_up() -> None:
        import anyio.to_thread

        await anyio.to_thread.run_sync(gate.wait)
        assert engine.warm_up is not None
        warmed.append(float(await engine.warm_up()))  # type: ignore[arg-type]

    app = create_app(attrs.evolve(engine, warm_up=gated_warm_up), store=MemoryEventStore())
    try:
        with serve(app) as url:
            warming = _health(url)
            assert warming.status_code == 503
            assert warming.json() == {"status": "warming"}
            gate.set()
            ready = _wait_ready(url)
            assert ready.status_code == 200, ready.text
            assert ready.json()["status"] == "ready"
            assert ready.json()["warm_up_seconds"] > 0
            assert warmed and warmed[0] > 0
            # The warm-up's requests are gone: every KV block is free again.
            source = engine.source
            assert source.num_free_blocks == source.core.blocks.num_blocks  # type: ignore[attr-defined]
    finally:
        gate.set()
        engine.source.close()  # type: ignore[attr-defined]


def test_a_failed_warm_up_keeps_health_at_503_with_the_error(model_dir: Path) -> None:
    engine = ENGINES["native"](argparse.Namespace(model=str(model_dir), **NATIVE))

    async def broken_warm_up() -> None:
        raise RuntimeError("the device fell over")

    app = create_app(attrs.evolve(engine, warm_up=broken_warm_up), store=MemoryEventStore())
    try:
        with serve(app) as url:
            answer = _wait_ready(url)
            assert answer.status_code == 503
            assert answer.json() == {
                "status": "failed",
                "error": "RuntimeError: the device fell over",
            }
    finally:
        engine.source.close()  # type: ignore[attr-defined]


def test_an_engine_without_warm_up_is_ready_at_once(trace_dir: Path) -> None:
    engine = ENGINES["replay"](argparse.Namespace(traces=trace_dir, replay_delay=0.0))
    assert isinstance(engine, Engine) and engine.warm_up is None
    with serve(create_app(engine)) as url:
        answer = _health(url)
    assert answer.status_code == 200
    assert answer.json() == {"status": "ready"}


def test_the_served_engine_leaves_a_core_to_the_event_loop(model_dir: Path) -> None:
    """Regression (issue 18): the engine thread ran with every core in its OpenMP team, which
    stalled whenever the event loop or another process took a core (19 against 152 tok/s)."""
    cores = len(__import__("os").sched_getaffinity(0))
    assert default_engine_threads() == max(1, cores - 1)
    seen: list[int] = []
    with build_native_engine(model_dir, kv_cache_mb=8, max_num_seqs=4) as engine:
        assert engine.threads == default_engine_threads()
        original = engine.core.step

        def spy(*args: object) -> list:  # type: ignore[type-arg]
            seen.append(torch.get_num_threads())
            return original(*args)  # type: ignore[arg-type]

        engine.core.step = spy  # type: ignore[method-assign]
        import anyio

        anyio.run(engine.warm_up)
    assert seen and set(seen) == {default_engine_threads()}
    with build_native_engine(model_dir, kv_cache_mb=8, max_num_seqs=4, threads=3) as engine:
        assert engine.threads == 3
    with pytest.raises(ValueError, match="at least 1"):
        build_native_engine(model_dir, kv_cache_mb=8, threads=0)
