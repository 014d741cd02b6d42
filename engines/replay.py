"""Replay of recorded traces as a token source: the engine that needs nothing but a file."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio

from ._source import GenerationRequest, TokenChunk
from ._trace import Trace, TraceFormatError, read_trace

__all__ = ["CUT_OFF", "ReplaySource", "TraceDirectorySource", "UnknownTraceError"]

CUT_OFF = "the trace ends without a finish_reason line: the recording was cut off"


class UnknownTraceError(TraceFormatError, LookupError):
    """A request named a trace that the directory does not hold."""


def _replayed(trace: Trace, max_tokens: int | None) -> tuple[list[TokenChunk], int]:
    """The chunks a replay gives, and how many of them come at the engine's pace (`delay`):
    the trace's chunks (cut where `max_tokens` would have stopped the engine, with a `length`
    finish), then its finish chunk, which no step precedes."""
    chunks = trace.chunks
    if max_tokens is not None:
        sent = 0
        for over, cut in enumerate(chunks):
            if sent + len(cut.token_ids) > max_tokens:
                # The engine would have stopped here: cut the chunk and report the limit.
                keep = max_tokens - sent
                logprobs = None if cut.logprobs is None else cut.logprobs[:keep]
                last = TokenChunk(
                    token_ids=cut.token_ids[:keep], logprobs=logprobs, finish_reason="length"
                )
                return [*chunks[:over], last], over + 1
            sent += len(cut.token_ids)
    if trace.finish_reason is None:
        finish = TokenChunk(finish_reason="error", error=CUT_OFF)
    else:
        finish = TokenChunk(finish_reason=trace.finish_reason, error=trace.error)
    return [*chunks, finish], len(chunks)


class _Replay:
    """One replayed request: an async iterator of chunks with the readiness hint
    (`ReadyChunks`). Without a delay the whole trace is already "produced", so `take_ready`
    hands over what is asked (a slice: the server streams every chunk of it); with one, each
    chunk is due only after its delay, so none is ready ahead of its turn."""

    def __init__(self, trace: Trace, delay: float, max_tokens: int | None) -> None:
        self._chunks, self._paced = _replayed(trace, max_tokens)
        self._next = 0
        self._delay = delay

    def __aiter__(self) -> _Replay:
        return self

    async def __anext__(self) -> TokenChunk:
        index = self._next
        if index >= len(self._chunks):
            raise StopAsyncIteration
        self._next = index + 1
        if self._delay and index < self._paced:
            await anyio.sleep(self._delay)
        return self._chunks[index]

    def take_ready(self, limit: int) -> list[TokenChunk]:
        if self._delay:
            return []
        start = self._next
        ready = self._chunks[start : start + max(limit, 0)]
        self._next = start + len(ready)
        return ready

    async def aclose(self) -> None:
        self._next = len(self._chunks)


class ReplaySource:
    """Replays one trace for every request (honouring `max_output_tokens`).

    `delay` seconds pass before each chunk, to stand in for a real engine's pace in tests.
    """

    def __init__(self, trace: Trace, *, delay: float = 0.0) -> None:
        self.trace = trace
        self.delay = delay

    def generate(self, request: GenerationRequest) -> AsyncIterator[TokenChunk]:
        return _Replay(self.trace, self.delay, request.max_output_tokens)


class TraceDirectorySource:
    """Replays `DIR/<model>.jsonl`, where `<model>` is the request's model name."""

    def __init__(self, directory: str | Path, *, delay: float = 0.0) -> None:
        self.directory = Path(directory)
        self.delay = delay
        if not self.directory.is_dir():
            raise TraceFormatError(f"trace directory {self.directory} does not exist")

    def models(self) -> list[str]:
        # Symbolic links are not served: a link could lead anywhere on the machine.
        return sorted(
            p.name.removesuffix(".jsonl")
            for p in self.directory.glob("*.jsonl")
            if not p.name.endswith(".golden.jsonl") and not p.is_symlink()
        )

    def trace_for(self, model: str) -> Trace:
        path = self.directory / f"{model}.jsonl"
        if "/" in model or model.startswith(".") or path.is_symlink() or not path.is_file():
            raise UnknownTraceError(
                f"no trace named {model!r} in {self.directory}; "
                f"available: {', '.join(self.models()) or 'none'}"
            )
        return read_trace(path)

    def generate(self, request: GenerationRequest) -> AsyncIterator[TokenChunk]:
        return _Replay(self.trace_for(request.model), self.delay, request.max_output_tokens)
