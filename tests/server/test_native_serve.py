"""The native engine end to end: `init-model`, `serve --engine native` driven by the official
openai client over a real socket, and `record` of the same request replaying to the same items."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

pytest.importorskip("torch")

from openai import OpenAI

from streamfold.adapters.grammars import replay_events
from streamfold.adapters.registry import ENGINES, EngineSetupError
from streamfold.adapters.server import MemoryEventStore, create_app
from streamfold.cli import main
from streamfold.engines import read_trace
from streamfold.engines.native.gptoss.init_model import init_model
from streamfold.specs import check, format_report

from .serving import serve

NATIVE = {
    "device": "cpu",
    "dtype": "float32",
    "kv_cache_mb": 8,
    "block_size": 16,
    "max_num_seqs": 8,
    "experts": "dequantize",
    "engine_arg": [],
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_model(tmp_path_factory.mktemp("model") / "tiny", seed=7, dtype="float32")


def _texts(output: list[dict]) -> list[tuple[str, str]]:
    texts = []
    for item in output:
        if item["type"] in ("message", "reasoning"):
            texts.append((item["type"], "".join(c["text"] for c in item.get("content") or [])))
        elif item["type"] == "function_call":
            texts.append((item["type"], item["arguments"]))
        else:
            texts.append((item["type"], ""))
    return texts


def test_serve_native_streams_to_the_openai_client_and_matches_record(
    model_dir: Path, tmp_path: Path
) -> None:
    engine = ENGINES["native"](argparse.Namespace(model=str(model_dir), **NATIVE))
    app = create_app(engine, store=MemoryEventStore())
    with serve(app) as url:
        client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=60)
        stream = client.responses.create(
            model="tiny", input="Say hi", stream=True, temperature=0, max_output_tokens=12
        )
        events = [e.to_dict() for e in stream]
        # Issue 31: `GET /v1/models` lists the native engine's checkpoint (its `--model`).
        assert [m.id for m in client.models.list()] == [str(model_dir)]
    violations = check(events)
    assert not violations, format_report(violations)
    terminal = events[-1]["response"]
    assert terminal["usage"]["output_tokens"] <= 12
    assert terminal["status"] in ("completed", "incomplete")

    trace = tmp_path / "tiny.jsonl"
    assert (
        main(
            [
                "record",
                "--engine",
                "native",
                "--model",
                str(model_dir),
                "--prompt",
                "Say hi",
                "--temperature",
                "0",
                "--max-output-tokens",
                "12",
                "-o",
                str(trace),
            ]
        )
        == 0
    )
    replayed = replay_events(read_trace(trace))
    from streamfold.statemachine import to_wire

    recorded = to_wire(replayed[-1])["response"]
    # Greedy decoding: the server and the recorder made the same tokens, so the same items.
    assert _texts(recorded["output"]) == _texts(terminal["output"])
    assert recorded["usage"]["output_tokens"] == terminal["usage"]["output_tokens"]


def test_serve_native_without_a_model_is_a_clear_error() -> None:
    with pytest.raises(EngineSetupError, match="init-model"):
        ENGINES["native"](argparse.Namespace(model=None, **NATIVE))


def test_a_websocket_warm_up_prefills_so_the_next_create_starts_warm(model_dir: Path) -> None:
    """Issue 32: `generate: false` on a WebSocket prepared the request and computed nothing, so
    the create that followed it prefilled its whole prompt. On the native engine (a prefix
    cache) the warm-up now prefills its prompt: the create that follows it reports that prompt
    in `usage.input_tokens_details.cached_tokens`, where a create without one finds only the
    blocks every prompt shares (harmony's system message)."""
    engine = ENGINES["native"](argparse.Namespace(model=str(model_dir), **NATIVE))
    assert engine.keeps_prefixes
    app = create_app(engine, store=MemoryEventStore())
    create = {"model": "tiny", "temperature": 0, "max_output_tokens": 2, "store": False}

    def usage(events: list[object]) -> tuple[int, int]:
        terminal = events[-1]
        assert terminal.type in ("response.completed", "response.incomplete"), terminal  # type: ignore[attr-defined]
        used = terminal.response.usage  # type: ignore[attr-defined]
        return used.input_tokens, used.input_tokens_details.cached_tokens

    def answer(connection: object, **fields: object) -> list[object]:
        connection.response.create(**create, **fields)  # type: ignore[attr-defined]
        events = []
        for event in connection:  # type: ignore[attr-defined]
            events.append(event)
            if event.type in ("response.completed", "response.incomplete", "error"):
                return events
        raise AssertionError("the connection closed")

    with serve(app) as url:
        client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=120)
        with client.responses.connect() as connection:
            long_a = " ".join(f"alpha{i}" for i in range(120))  # hundreds of tokens
            connection.response.create(**create, instructions=long_a, input="Hi", generate=False)
            warm = [next(iter(connection)) for _ in range(3)]
            assert warm[-1].type == "response.completed"
            # Instructions are not carried over by previous_response_id: a client sends them
            # again with each turn (Codex does), so the prompt starts as the warm-up's did.
            follow = {"instructions": long_a, "previous_response_id": warm[-1].response.id}
            warmed = usage(answer(connection, input="Again", **follow))
            long_b = " ".join(f"bravo{i}" for i in range(120))  # as long, never warmed
            cold = usage(answer(connection, instructions=long_b, input="Hi"))
    # The warm-up's prompt, but for its last partial block and the turn's own tokens, was
    # reused; the cold create reused only the shared head.
    assert cold[1] < 64 < cold[0]
    assert warmed[1] >= cold[1] + 200, (warmed, cold)
