"""Command-line glue for the engine adapters: `--engine vllm|sglang --model NAME --engine-arg K=V`.

`streamfold.cli` wires these into `serve` and `record`:

    add_engine_arguments(serve_parser)
    ...
    source = engine_source_from_args(args)   # a TokenSource over a real vLLM or SGLang engine

`--engine-arg` passes any engine option through untouched (`AsyncEngineArgs` for vLLM,
`sglang.Engine`'s server args for SGLang): `--engine-arg tensor_parallel_size=2
--engine-arg enforce_eager=true`. A value is read as JSON when it parses as JSON (numbers,
booleans, null, lists) and as a plain string otherwise.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import Any

from streamfold.engines import TokenSource
from streamfold.engines.sglang import build_sglang_engine
from streamfold.engines.vllm import build_vllm_engine

__all__ = [
    "ENGINE_BUILDERS",
    "EngineArgumentError",
    "add_engine_arguments",
    "build_engine_source",
    "engine_source_from_args",
    "parse_engine_args",
]

ENGINE_BUILDERS: dict[str, Callable[..., TokenSource]] = {
    "vllm": build_vllm_engine,
    "sglang": build_sglang_engine,
}


class EngineArgumentError(ValueError):
    """An `--engine`, `--model` or `--engine-arg` value that cannot build an engine."""


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("engine (vLLM or SGLang; needs the engine and a GPU)")
    group.add_argument("--engine", choices=sorted(ENGINE_BUILDERS), help="serving engine")
    group.add_argument("--model", help="model name or path the engine loads")
    group.add_argument(
        "--engine-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="engine option passed through (vLLM AsyncEngineArgs / SGLang server args);"
        " repeatable; VALUE is JSON when it parses, else a string",
    )


def parse_engine_args(pairs: Sequence[str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key.isidentifier():
            raise EngineArgumentError(
                f"--engine-arg {pair!r} is not KEY=VALUE with KEY a Python identifier;"
                " write it like --engine-arg tensor_parallel_size=2"
            )
        try:
            options[key] = json.loads(raw)
        except json.JSONDecodeError:
            options[key] = raw
    return options


def build_engine_source(engine: str, model: str, **options: Any) -> TokenSource:
    builder = ENGINE_BUILDERS.get(engine)
    if builder is None:
        raise EngineArgumentError(
            f"unknown engine {engine!r}; choose one of {', '.join(sorted(ENGINE_BUILDERS))}"
        )
    if not model:
        raise EngineArgumentError(f"--engine {engine} needs --model NAME_OR_PATH")
    return builder(model, **options)


def engine_source_from_args(args: argparse.Namespace) -> TokenSource:
    """The token source `add_engine_arguments`' options describe."""
    if args.engine is None:
        raise EngineArgumentError("no --engine given; pass --engine vllm or --engine sglang")
    return build_engine_source(args.engine, args.model, **parse_engine_args(args.engine_arg))
