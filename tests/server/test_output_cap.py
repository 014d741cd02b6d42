"""Issue 13, item 6: `--engine native` had no default `max_output_tokens`, so a random-weight
model ran to 65k tokens. An engine may now cap requests that set none; native's default is
`NATIVE_MAX_OUTPUT_TOKENS` (`--default-max-output-tokens` changes it, 0 removes it)."""

from __future__ import annotations

import argparse
import types
from collections.abc import Iterator
from typing import Any

import attrs
import openai
import pytest

from streamfold.adapters import registry
from streamfold.adapters.registry import NATIVE_MAX_OUTPUT_TOKENS, EngineSetupError, ReplayEngine
from streamfold.adapters.server import create_app
from streamfold.cli import _parser

from .helpers import LONG_ANSWER, write_traces
from .serving import serve


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    traces = write_traces(tmp_path_factory.mktemp("cap"), {"long": LONG_ANSWER})
    engine = attrs.evolve(ReplayEngine(traces).engine(), max_output_tokens=8)
    with serve(create_app(engine)) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)


def test_the_engine_cap_applies_to_a_request_without_one(capped: openai.OpenAI) -> None:
    response = capped.responses.create(model="long", input="go")
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.max_output_tokens == 8
    assert response.usage is not None and response.usage.output_tokens == 8


def test_a_request_keeps_its_own_max_output_tokens(capped: openai.OpenAI) -> None:
    response = capped.responses.create(model="long", input="go", max_output_tokens=500)
    assert response.status == "completed" and response.max_output_tokens == 500


def _native(monkeypatch: pytest.MonkeyPatch, *argv: str) -> Any:
    pytest.importorskip("torch")
    import streamfold.engines.native as native

    engine = types.SimpleNamespace(warm_up=lambda: None)
    monkeypatch.setattr(native, "build_native_engine", lambda model, **options: engine)
    args = _parser().parse_args(["serve", "--engine", "native", "--model", "m", *argv])
    assert isinstance(args, argparse.Namespace)
    return registry.native_engine(args)


def test_native_keeps_prefixes_unless_told_not_to(monkeypatch: pytest.MonkeyPatch) -> None:
    """A warm-up prefills only where the engine keeps prefixes (`--no-prefix-cache` off)."""
    assert _native(monkeypatch).keeps_prefixes is True
    assert _native(monkeypatch, "--no-prefix-cache").keeps_prefixes is False


def test_native_caps_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _native(monkeypatch).max_output_tokens == NATIVE_MAX_OUTPUT_TOKENS
    assert _native(monkeypatch, "--default-max-output-tokens", "64").max_output_tokens == 64
    assert _native(monkeypatch, "--default-max-output-tokens", "0").max_output_tokens is None
    with pytest.raises(EngineSetupError, match="default-max-output-tokens"):
        _native(monkeypatch, "--default-max-output-tokens", "-1")


def test_serve_help_names_the_cap(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args(["serve", "--help"])
    assert f"(default {NATIVE_MAX_OUTPUT_TOKENS}; 0: no cap)" in " ".join(
        capsys.readouterr().out.split()
    )
