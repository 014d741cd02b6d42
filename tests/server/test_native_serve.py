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
