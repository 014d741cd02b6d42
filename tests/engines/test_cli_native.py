"""`init-model`, `build_native_engine` and `record_trace`: the engine end to end from the CLI."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import anyio
import pytest

from streamfold._init_model import (
    add_init_model_parser,
    add_native_engine_arguments,
    run_init_model,
)
from streamfold.adapters.registry import native_engine_options
from streamfold.engines import (
    GenerationRequest,
    SamplingParams,
    TokenChunk,
    read_trace,
    record_trace,
)
from streamfold.engines.native import build_native_engine
from streamfold.engines.native.gptoss.config import load_config

HARMONY_PROMPT = (200006, 1428, 200008, 12194, 200007, 200006, 173781)  # <|start|>user...


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("init") / "model"
    parser = argparse.ArgumentParser()
    add_init_model_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["init-model", str(root), "--seed", "3"])
    assert run_init_model(args) == 0
    return root


def test_init_model_writes_a_harmony_sized_checkpoint_of_tens_of_mb(
    tiny_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = load_config(tiny_dir)
    assert config.vocab_size == 201088
    size = (tiny_dir / "model.safetensors").stat().st_size
    assert 1e6 < size < 60e6
    # Over an existing checkpoint: a one-line error naming --force, not a traceback (issue 19).
    assert run_init_model(argparse.Namespace(model_dir=str(tiny_dir), hidden_size=32, layers=2,
                                             experts=4, seed=0, dtype="bfloat16", mxfp4=False,
                                             force=False)) == 2  # fmt: skip
    assert "--force" in capsys.readouterr().err


def _record(model_dir: Path, path: Path, request: GenerationRequest, **options: object) -> str:
    async def main() -> str:
        with build_native_engine(model_dir, **options) as engine:  # type: ignore[arg-type]
            header = {"trace": 1, "grammar": "harmony", "encoding": "o200k_harmony",
                      "response_id": "resp_test", "model": "tiny", "created_at": 1763800000,
                      "request": {"max_output_tokens": request.max_output_tokens}}  # fmt: skip
            return await record_trace(engine, request, path, header)

    return anyio.run(main)


def test_record_trace_writes_header_chunks_and_finish(tiny_dir: Path, tmp_path: Path) -> None:
    request = GenerationRequest(
        request_id="rec",
        prompt_token_ids=HARMONY_PROMPT,
        max_output_tokens=6,
        sampling=SamplingParams(seed=1, logprobs=True),
    )
    trace = tmp_path / "t.jsonl"
    assert _record(tiny_dir, trace, request) in ("length", "stop")
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    header, chunks, last = lines[0], lines[1:-1], lines[-1]
    assert header["prompt_token_ids"] == list(HARMONY_PROMPT)
    assert header["trace"] == 1 and header["request"] == {"max_output_tokens": 6}
    assert list(header)[-1] == "request"
    assert 1 <= len(chunks) <= 6
    for chunk in chunks:
        assert len(chunk["token_ids"]) == len(chunk["logprobs"]) == 1
        assert all(0 <= t < 201088 for t in chunk["token_ids"])
    assert last["finish_reason"] in ("length", "stop")
    parsed = read_trace(trace)  # the project's own trace reader accepts it
    assert parsed.token_ids == [t for c in chunks for t in c["token_ids"]]
    assert parsed.finish_reason == last["finish_reason"]
    # The same seed records the same trace.
    again = tmp_path / "again.jsonl"
    _record(tiny_dir, again, request)
    assert again.read_text() == trace.read_text()


def test_record_trace_of_a_stream_without_finish_is_an_error(tmp_path: Path) -> None:
    class Truncated:
        async def generate(self, request: GenerationRequest):  # type: ignore[no-untyped-def]
            yield TokenChunk(token_ids=(1, 2))

    request = GenerationRequest(request_id="x", prompt_token_ids=(1,))
    path = tmp_path / "cut.jsonl"
    assert anyio.run(record_trace, Truncated(), request, path, {"trace": 1}) == "error"
    assert json.loads(path.read_text().splitlines()[-1])["finish_reason"] == "error"


def test_mxfp4_init_model_runs_with_packed_experts(tmp_path: Path) -> None:
    from streamfold.engines.native.gptoss.init_model import init_model

    root = init_model(tmp_path / "m", vocab_size=1024, mxfp4=True)
    parser = argparse.ArgumentParser()
    add_native_engine_arguments(parser)
    options = native_engine_options(parser.parse_args(["--experts", "mxfp4", "--block-size", "8"]))
    request = GenerationRequest(request_id="m", prompt_token_ids=(1, 2, 3), max_output_tokens=4,
                                sampling=SamplingParams(temperature=0.0))  # fmt: skip
    assert _record(root, tmp_path / "m.jsonl", request, **options) == "length"


def test_no_prefix_cache_turns_the_cache_off() -> None:
    parser = argparse.ArgumentParser()
    add_native_engine_arguments(parser)
    assert native_engine_options(parser.parse_args([]))["prefix_cache"] is True
    options = native_engine_options(parser.parse_args(["--no-prefix-cache"]))
    assert options["prefix_cache"] is False
