"""Engines the server can run, by name: a token source plus the grammar for a model name.

`streamfold serve --engine NAME` looks NAME up in `ENGINES`; each entry builds an `Engine` from
the parsed command line. `replay` (the default) replays recorded traces, so the server works on
a fresh machine with nothing else. The native and vLLM engines register here when they land:

    ENGINES["vllm"] = lambda args: Engine(source=..., grammar=lambda model: harmony_grammar())
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import AsyncIterator, Callable
from importlib import resources
from pathlib import Path

import attrs

from streamfold.engines import (
    GenerationRequest,
    ReplaySource,
    TokenChunk,
    TokenSource,
    TraceDirectorySource,
    TraceFormatError,
)
from streamfold.statemachine import StreamfoldError
from streamfold.statemachine._reducer import Grammar

__all__ = [
    "ENGINES",
    "Engine",
    "EngineFactory",
    "ReplayEngine",
    "UnknownModelError",
    "bundled_traces_dir",
    "replay_engine",
]


class UnknownModelError(StreamfoldError, LookupError):
    """A request named a model the engine does not serve; the message lists what it serves."""


@attrs.frozen(kw_only=True)
class Engine:
    """What the server needs from an engine: a source, and the grammar for a model name
    (`grammar(model)` raises `UnknownModelError` for a model it does not serve)."""

    source: TokenSource
    grammar: Callable[[str], Grammar]


EngineFactory = Callable[[argparse.Namespace], Engine]


def bundled_traces_dir() -> Path:
    """The traces shipped in `streamfold.specs` (`specs/traces/`)."""
    return Path(str(resources.files("streamfold.specs").joinpath("traces")))


class ReplayEngine:
    """Replays `DIR/<model>.jsonl` for a request whose model is `<model>`.

    Traces are read once and kept; `delay` seconds pass before each chunk, to stand in for a
    real engine's pace.
    """

    def __init__(self, directory: str | Path, *, delay: float = 0.0) -> None:
        self.directory = TraceDirectorySource(directory, delay=delay)  # checks the directory
        self.delay = delay

    @functools.cache  # noqa: B019 - one engine per server; traces are few and small
    def _source(self, model: str) -> tuple[ReplaySource, Grammar]:
        from streamfold.replay import grammar_for

        served = self.directory.models()
        if model not in served:  # also keeps `x.golden` (expected events, not a trace) out
            raise UnknownModelError(
                f"the model {model!r} does not exist: this replay server serves the traces in "
                f"{self.directory.directory} ({', '.join(served) or 'none'})"
            )
        try:
            trace = self.directory.trace_for(model)
            grammar = grammar_for(trace.header, self.directory.directory)
        except TraceFormatError as exc:
            raise UnknownModelError(
                f"the trace of model {model!r} cannot be replayed: {exc}"
            ) from exc
        return ReplaySource(trace, delay=self.delay), grammar

    def grammar(self, model: str) -> Grammar:
        return self._source(model)[1]

    def generate(self, request: GenerationRequest) -> AsyncIterator[TokenChunk]:
        return self._source(request.model)[0].generate(request)

    def engine(self) -> Engine:
        return Engine(source=self, grammar=self.grammar)


def replay_engine(args: argparse.Namespace) -> Engine:
    directory = getattr(args, "traces", None) or bundled_traces_dir()
    return ReplayEngine(directory, delay=getattr(args, "replay_delay", 0.0)).engine()


ENGINES: dict[str, EngineFactory] = {"replay": replay_engine}
