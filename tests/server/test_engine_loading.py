"""`streamfold serve --engine vllm|sglang` builds the engine at start-up, off the event loop, and
keeps its own graceful shutdown (issue 35), run as users run it: a server process, with the
stand-in engines of `tests/adapters` (`tests/adapters/standin_serve.py`).

Regressions: the engine was built inside the first request (`LazySource`), which stalled the
event loop for the whole model load while `GET /health` answered ready before any engine
existed; and SGLang's first request installed its own SIGTERM handler on the serving loop,
which then drained and `sys.exit`ed past the server's graceful shutdown.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.ports import free_port

LAUNCHER = Path(__file__).resolve().parents[1] / "adapters" / "standin_serve.py"


@contextmanager
def standin_server(engine: str, gate: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    command = [
        sys.executable,
        str(LAUNCHER),
        str(gate),
        "serve",
        "--engine",
        engine,
        "--model",
        "stand-in",
        "--port",
        str(port),
        "--store",
        ":memory:",
        "--log-level",
        "info",
    ]
    server = subprocess.Popen(command, stderr=subprocess.PIPE, env=dict(os.environ))
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{base}/health", timeout=5)
                break
            except httpx.TransportError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(_stderr(server)) from None
                time.sleep(0.05)
        yield base, server
    finally:
        gate.touch()  # a server stopping mid-load waits for its engine
        if server.poll() is None:
            server.kill()
        server.wait(timeout=30)


def _stderr(server: subprocess.Popen[bytes]) -> str:
    if server.poll() is None:
        server.kill()
        server.wait(timeout=30)
    assert server.stderr is not None
    return server.stderr.read().decode(errors="replace")


def _wait_ready(base: str) -> httpx.Response:
    deadline = time.monotonic() + 60
    while True:
        answer = httpx.get(f"{base}/health", timeout=5)
        if answer.json()["status"] not in ("loading", "warming") or time.monotonic() > deadline:
            return answer
        time.sleep(0.05)


BODY: dict[str, Any] = {"model": "stand-in", "input": "Hello?", "store": False}


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_health_says_loading_until_the_engine_is_built_and_no_request_stalls(
    engine: str, tmp_path: Path
) -> None:
    gate = tmp_path / "loaded"
    with standin_server(engine, gate) as (base, server):
        loading = httpx.get(f"{base}/health", timeout=5)
        assert (loading.status_code, loading.json()) == (503, {"status": "loading"})

        # A request sent during the load waits for the engine, not the loop: /health and
        # other routes keep answering meanwhile.
        early: list[httpx.Response] = []
        sender = threading.Thread(
            target=lambda: early.append(httpx.post(f"{base}/v1/responses", json=BODY, timeout=60))
        )
        sender.start()
        time.sleep(0.3)  # let it reach the server and wait there
        for _ in range(3):
            assert httpx.get(f"{base}/health", timeout=5).json() == {"status": "loading"}
        missing = httpx.get(f"{base}/v1/responses/resp_none", timeout=5)
        assert missing.status_code == 404
        assert early == []

        gate.touch()
        ready = _wait_ready(base)
        assert (ready.status_code, ready.json()) == (200, {"status": "ready"})
        sender.join(timeout=60)
        assert early and early[0].status_code == 200, early
        assert early[0].json()["status"] == "completed"
        assert early[0].json()["output"][-1]["content"][0]["text"] == "$%&"
        later = httpx.post(f"{base}/v1/responses", json=BODY, timeout=60)
        assert later.json()["status"] == "completed"

        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 128 + signal.SIGTERM
        log = _stderr(server)
    assert "stand-in engine: loading in thread MainThread" not in log  # off the event loop
    assert "Application shutdown complete" in log, log
    assert log.count("stand-in engine: shutdown") == 1, log


def test_sigterm_stays_the_servers_after_sglang_served_a_request(tmp_path: Path) -> None:
    gate = tmp_path / "loaded"
    gate.touch()
    with standin_server("sglang", gate) as (base, server):
        assert _wait_ready(base).status_code == 200
        # SGLang's first request is what installs its handlers.
        first = httpx.post(f"{base}/v1/responses", json=BODY, timeout=60)
        assert first.json()["status"] == "completed"

        server.send_signal(signal.SIGTERM)
        # 128 + SIGTERM: the exit of `streamfold serve` after its graceful shutdown.
        assert server.wait(timeout=30) == 128 + signal.SIGTERM
        log = _stderr(server)
    assert "SIGTERM received" not in log, log  # SGLang's handler never ran
    # uvicorn's graceful shutdown ran to its end, then the engine was shut down.
    assert "Application shutdown complete" in log, log
    assert log.count("stand-in engine: shutdown") == 1, log


def test_an_engine_that_fails_to_load_keeps_health_at_503_and_fails_requests() -> None:
    from streamfold.adapters.registry import Engine, LoadingSource
    from streamfold.adapters.server import MemoryEventStore, create_app

    from .serving import serve

    def build() -> Any:
        raise RuntimeError("CUDA out of memory")

    source = LoadingSource(build, name="vllm")
    engine = Engine(source=source, load=source.load)
    with serve(create_app(engine, store=MemoryEventStore())) as base:
        health = _wait_ready(base)  # once it no longer says "loading"
        answer = httpx.post(f"{base}/v1/responses", json=BODY, timeout=60)
    assert (health.status_code, health.json()) == (
        503,
        {"status": "failed", "error": "RuntimeError: CUDA out of memory"},
    )
    assert answer.json()["status"] == "failed"
    assert "the vllm engine failed to start" in answer.json()["error"]["message"]
