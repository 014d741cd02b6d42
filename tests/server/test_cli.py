"""`streamfold serve` as users run it: a subprocess on the bundled traces."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from streamfold.adapters.registry import bundled_traces_dir
from streamfold.cli import main
from tests.ports import free_port

from .helpers import assert_conformant


@pytest.mark.skipif(
    not (bundled_traces_dir() / "weather_call.jsonl").is_file(), reason="no bundled traces"
)
def test_streamfold_serve_on_the_bundled_traces(tmp_path: Path) -> None:
    port = free_port()
    store = tmp_path / "responses.sqlite3"
    command = [
        sys.executable,
        "-m",
        "streamfold",
        "serve",
        "--port",
        str(port),
        "--store",
        str(store),
    ]
    server = subprocess.Popen(command, stderr=subprocess.PIPE, env=dict(os.environ))
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/v1/responses/resp_x", timeout=1)
                break
            except httpx.TransportError:
                assert server.poll() is None, server.stderr.read().decode()  # type: ignore[union-attr]
                assert time.monotonic() < deadline, "streamfold serve did not start in 30 s"
                time.sleep(0.1)
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
        events = list(client.responses.create(model="weather_call", input="Weather?", stream=True))
        assert_conformant(events)
        assert any(item.type == "function_call" for item in events[-1].response.output)
        reply = httpx.post(
            f"http://127.0.0.1:{port}/v1/responses", json={"model": "hello.golden", "input": "x"}
        )
        assert reply.status_code == 404 and reply.json()["error"]["param"] == "model"
    finally:
        server.terminate()
        server.wait(timeout=15)
    assert store.is_file()


def test_serve_with_a_missing_trace_directory_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--traces", str(tmp_path / "nope"), "--store", ":memory:"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_serve_parser_defaults() -> None:
    from streamfold.cli import _parser

    args = _parser().parse_args(["serve"])
    assert (args.engine, args.host, args.port, args.store) == ("replay", "127.0.0.1", 8000, None)
    assert json.dumps(str(args.traces)) == json.dumps("None")
