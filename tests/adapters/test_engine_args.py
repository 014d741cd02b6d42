"""The `--engine/--model/--engine-arg` glue the CLI uses to build engine token sources."""

from __future__ import annotations

import argparse
import importlib.util

import pytest

from streamfold.adapters import EngineNotInstalledError
from streamfold.adapters.engine_args import (
    EngineArgumentError,
    build_engine_source,
    parse_engine_args,
)
from streamfold.cli import _parser


def parse(*argv: str) -> argparse.Namespace:
    """The options as `streamfold serve` parses them (defined once, in streamfold/_options.py)."""
    return _parser().parse_args(["serve", *argv])


def test_engine_args_are_json_when_they_parse_and_strings_otherwise() -> None:
    args = parse(
        "--engine", "vllm", "--model", "openai/gpt-oss-20b",
        "--engine-arg", "tensor-parallel-size=2",
        "--engine-arg", "enforce_eager=true",
        "--engine-arg", "quantization=mxfp4",
        "--engine-arg", "max_model_len=null",
    )  # fmt: skip
    assert parse_engine_args(args.engine_arg) == {
        "tensor_parallel_size": 2,
        "enforce_eager": True,
        "quantization": "mxfp4",
        "max_model_len": None,
    }


@pytest.mark.parametrize("bad", ["tensor_parallel_size", "=2", "2x=3"])
def test_malformed_engine_arg_names_the_fix(bad: str) -> None:
    with pytest.raises(EngineArgumentError, match="KEY=VALUE"):
        parse_engine_args([bad])


def test_unknown_engine_or_missing_model_is_a_typed_error() -> None:
    with pytest.raises(EngineArgumentError, match="choose one of sglang, vllm"):
        build_engine_source("tgi", "m")
    args = parse("--engine", "sglang")
    with pytest.raises(EngineArgumentError, match="needs --model"):
        build_engine_source(args.engine, args.model, **parse_engine_args(args.engine_arg))


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_building_without_the_engine_installed_says_how_to_install(engine: str) -> None:
    if importlib.util.find_spec(engine) is not None:
        pytest.skip(f"{engine} is installed here")
    with pytest.raises(EngineNotInstalledError, match=rf"streamfold\[{engine}\]"):
        args = parse("--engine", engine, "--model", "m")
        build_engine_source(args.engine, args.model, **parse_engine_args(args.engine_arg))
