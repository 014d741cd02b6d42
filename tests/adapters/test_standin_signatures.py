"""The stand-ins take exactly the parameters the real engines take (issue 35).

The stand-ins' allow-lists once described older versions, and lacked the structured-output
keys (vLLM `structured_outputs`, SGLang `json_schema`/`regex`/`ebnf`/`structural_tag`,
`require_reasoning`): a request passing constraints would have failed on them with a
`TypeError` the real engines never raise. These tests compare each allow-list with the real
class where the engine is installed (it needs no GPU to be imported), and skip elsewhere. The
lists were written from vLLM 0.33.0 and SGLang 0.5.23 (see each stand-in's docstring); a
newer engine that adds or drops a parameter fails here, which is the point.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect

import pytest

from . import fakes_sglang, fakes_vllm

needs_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="vllm is not installed"
)
needs_sglang = pytest.mark.skipif(
    importlib.util.find_spec("sglang") is None, reason="sglang is not installed"
)


def _public(names: object) -> set[str]:
    return {name for name in names if not name.startswith("_")}  # type: ignore[attr-defined]


@needs_vllm
def test_vllm_sampling_params_keys_match() -> None:
    from vllm import SamplingParams

    assert set(fakes_vllm._SAMPLING_DEFAULTS) == _public(SamplingParams.__struct_fields__)


@needs_vllm
def test_vllm_structured_outputs_params_fields_match() -> None:
    from vllm.sampling_params import StructuredOutputsParams

    real = {f.name for f in dataclasses.fields(StructuredOutputsParams) if f.init}
    fake = {f.name for f in dataclasses.fields(fakes_vllm.StructuredOutputsParams)}
    assert fake == real


@needs_vllm
def test_vllm_generate_keywords_match() -> None:
    from vllm.v1.engine.async_llm import AsyncLLM

    parameters = inspect.signature(AsyncLLM.generate).parameters.values()
    keywords = {p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert keywords == fakes_vllm.GENERATE_KEYWORDS
    assert [p.name for p in parameters][:4] == ["self", "prompt", "sampling_params", "request_id"]


@needs_vllm
def test_vllm_tokens_input_matches() -> None:
    from vllm.inputs import tokens_input

    assert tokens_input([1, 2]) == fakes_vllm.tokens_input([1, 2])


@needs_sglang
def test_sglang_sampling_params_keys_match() -> None:
    from sglang.srt.sampling.sampling_params import SamplingParams

    assert fakes_sglang._SAMPLING_KEYS == set(SamplingParams.__struct_fields__)


@needs_sglang
def test_sglang_async_generate_arguments_match() -> None:
    from sglang import Engine

    parameters = inspect.signature(Engine.async_generate).parameters
    assert fakes_sglang._GENERATE_KEYS == set(parameters) - {"self"}
