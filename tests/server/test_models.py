"""Issue 31: `GET /v1/models` was a 404; clients and UIs use it to discover models. Replay
lists its traces and conversation directories, in openai's `Model` shape, read with the SDK."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest
from openai import OpenAI

from streamfold.adapters.registry import ReplayEngine
from streamfold.adapters.server import MemoryEventStore, create_app
from tests.clients.conftest import write_client_traces
from tests.server.serving import serve


def test_replay_lists_its_traces_and_conversations(tmp_path: Path) -> None:
    engine = ReplayEngine(write_client_traces(tmp_path)).engine()
    with serve(create_app(engine, store=MemoryEventStore())) as url:
        client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=30)
        models = list(client.models.list())
        assert [m.id for m in models] == [
            "broken",
            "chat",
            "codex_shell",
            "gpt-5.5",  # Codex's apply_patch conversation (tests/clients/conftest.py)
            "gpt-5.6-sol",  # Codex's code-mode conversation (the same)
            "output_text",
            "output_tool",
            "weather",
        ]
        assert {(m.object, m.owned_by) for m in models} == {("model", "streamfold")}
        weather = client.models.retrieve("weather")
        assert weather.id == "weather" and weather.created == models[0].created
        with pytest.raises(openai.NotFoundError) as caught:
            client.models.retrieve("gpt-5")
        assert caught.value.body["code"] == "model_not_found"  # type: ignore[index]


def test_a_turn_can_require_what_its_prompt_holds(tmp_path: Path) -> None:
    """`prompt_contains` in a trace header: the replay fails the response when the request's
    prompt lacks a text (how the Codex test proves a client sent its reasoning back)."""
    from tests.clients.conftest import _write

    _write(
        tmp_path / "strict" / "0.jsonl",
        "<|channel|>final<|message|>ok<|return|>",
        prompt_contains=("magic word",),
    )
    assert "prompt_contains" in (tmp_path / "strict" / "0.jsonl").read_text()
    engine = ReplayEngine(tmp_path).engine()
    with serve(create_app(engine, store=MemoryEventStore())) as url:
        client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=30)
        assert client.responses.create(model="strict", input="the magic word").output_text == "ok"
        failed = client.responses.create(model="strict", input="hello")
        assert failed.status == "failed" and failed.error is not None
        assert "magic word" in failed.error.message
