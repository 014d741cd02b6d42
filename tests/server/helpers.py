"""Shared test material for the driver and the server: harmony traces and a conformance check."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio

from streamfold.engines import GenerationRequest, TokenChunk, dump_trace, parse_trace
from streamfold.engines._trace import Trace
from streamfold.engines.vocab import harmony_encoding
from streamfold.statemachine import TERMINAL_EVENT_TYPES, to_wire

GREETING = (
    "<|channel|>analysis<|message|>User greets. Answer briefly.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Hello there, how can I help?<|return|>"
)
WEATHER_CALL = (
    "<|channel|>analysis<|message|>Need the weather tool.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city":"Paris"}<|call|>'
)
LONG_ANSWER = "<|channel|>final<|message|>" + " ".join(f"word{i}" for i in range(60)) + "<|return|>"


def encode(text: str) -> list[int]:
    return list(harmony_encoding().encode(text, allowed_special="all"))


def make_trace(text: str, *, per_chunk: int = 1, finish: str | None = "stop") -> Trace:
    ids = encode(text)
    chunks = [
        TokenChunk(token_ids=tuple(ids[i : i + per_chunk])) for i in range(0, len(ids), per_chunk)
    ]
    header = {
        "grammar": "harmony",
        "encoding": "o200k_harmony",
        "response_id": "resp_trace",
        "model": "trace",
        "created_at": 1,
    }
    return parse_trace(dump_trace(header, chunks, finish).splitlines())  # type: ignore[arg-type]


def write_traces(directory: Path, traces: Mapping[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in traces.items():
        trace = make_trace(text)
        (directory / f"{name}.jsonl").write_text(
            dump_trace(trace.header, trace.chunks, trace.finish_reason), encoding="utf-8"
        )
    return directory


# Fields the SDK's `responses.stream` helper adds to what it parsed (Parsed* models); they are
# not on the wire, so they are taken off before checking what the server sent.
_SDK_ADDED = frozenset({"parsed_arguments", "parsed"})


def _strip_sdk_fields(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_sdk_fields(v) for k, v in value.items() if k not in _SDK_ADDED}
    if isinstance(value, list):
        return [_strip_sdk_fields(v) for v in value]
    return value


def wire(events: Iterable[Any]) -> list[dict[str, Any]]:
    out = []
    for event in events:
        if isinstance(event, Mapping):
            out.append(dict(event))
        elif hasattr(event, "model_dump"):  # an openai SDK event
            # serialize_as_any: the SDK's stream accumulator puts its own subclasses
            # (ParsedResponseOutputMessage) where the event's field names the base union, and
            # pydantic warned once per union member it is not (8 warnings in
            # tests/agent/test_loop_server.py, issue 33); serialised by what they are, the JSON
            # is the same and the warnings are gone.
            dumped = event.model_dump_json(exclude_unset=True, serialize_as_any=True)
            out.append(_strip_sdk_fields(json.loads(dumped)))
        else:
            out.append(to_wire(event))
    return out


def assert_conformant(events: Sequence[Any], *, start: int = 0) -> None:
    """The stream passes `streamfold.specs.check`, or (before it lands) the basic invariants."""
    data = wire(events)
    try:
        from streamfold.specs import check  # type: ignore[attr-defined]
    except ImportError:
        check = None
    if check is not None and start == 0:
        violations = check(data)
        assert not violations, "\n".join(map(str, violations))
        return
    assert [e["sequence_number"] for e in data] == list(range(start, start + len(data)))
    if start == 0:
        assert data[0]["type"] == "response.created"
    assert data[-1]["type"] in TERMINAL_EVENT_TYPES
    assert sum(e["type"] in TERMINAL_EVENT_TYPES for e in data) == 1


class CountingSource:
    """Wraps a source; counts generators that are open right now and chunks produced."""

    def __init__(self, inner: Any, *, delay: float = 0.0, fail_after: int | None = None) -> None:
        self.inner = inner
        self.delay = delay
        self.fail_after = fail_after
        self.open = 0
        self.started = 0
        self.closed = 0
        self.produced = 0

    def generate(self, request: GenerationRequest) -> AsyncIterator[TokenChunk]:
        return self._generate(request)

    async def _generate(self, request: GenerationRequest) -> AsyncIterator[TokenChunk]:
        self.open += 1
        self.started += 1
        try:
            async for chunk in self.inner.generate(request):
                if self.fail_after is not None and self.produced >= self.fail_after:
                    raise ConnectionResetError("engine worker died")
                if self.delay:
                    await anyio.sleep(self.delay)
                self.produced += 1
                yield chunk
        finally:
            self.open -= 1
            self.closed += 1


class ScriptedEngine:
    """The replay engine of a trace directory, instrumented for server tests.

    Counts open generators (a disconnect must leave none), records the requests it was given,
    slows the models named in `delays`, and raises mid-stream for the models in `broken`.
    """

    def __init__(
        self,
        replay: Any,
        *,
        delays: Mapping[str, float] | None = None,
        broken: Iterable[str] = (),
        fail_after: int = 5,
    ) -> None:
        self.replay = replay
        self.delays = dict(delays or {})
        self.broken = set(broken)
        self.fail_after = fail_after
        self.open = 0
        self.started = 0
        self.requests: list[GenerationRequest] = []

    def generate(self, request: GenerationRequest) -> AsyncIterator[TokenChunk]:
        self.requests.append(request)
        return self._generate(request)

    async def _generate(self, request: GenerationRequest) -> AsyncIterator[TokenChunk]:
        self.open += 1
        self.started += 1
        try:
            delay = self.delays.get(request.model, 0.0)
            for produced, chunk in enumerate([c async for c in self.replay.generate(request)]):
                if request.model in self.broken and produced >= self.fail_after:
                    raise ConnectionResetError("engine worker died")
                if delay:
                    await anyio.sleep(delay)
                yield chunk
        finally:
            self.open -= 1

    def engine(self) -> Any:
        from streamfold.adapters.registry import Engine

        return Engine(source=self, grammar=self.replay.grammar)
