"""vLLM and SGLang by name, with the options `--engine vllm|sglang --model NAME --engine-arg K=V`
give them (the flags themselves are defined in `streamfold/_options.py`).

`--engine-arg` passes any engine option through untouched (`AsyncEngineArgs` for vLLM,
`sglang.Engine`'s server args for SGLang): `--engine-arg tensor_parallel_size=2
--engine-arg enforce_eager=true`. A value is read as JSON when it parses as JSON (numbers,
booleans, null, lists) and as a plain string otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from streamfold.engines import TokenSource
from streamfold.engines.sglang import build_sglang_engine
from streamfold.engines.vllm import build_vllm_engine

__all__ = [
    "ENGINE_BUILDERS",
    "EngineArgumentError",
    "build_engine_source",
    "parse_engine_args",
]

ENGINE_BUILDERS: dict[str, Callable[..., TokenSource]] = {
    "vllm": build_vllm_engine,
    "sglang": build_sglang_engine,
}


class EngineArgumentError(ValueError):
    """An `--engine`, `--model` or `--engine-arg` value that cannot build an engine."""


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
