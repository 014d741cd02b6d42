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


async def _replay(trace: Trace, delay: float, max_tokens: int | None) -> AsyncIterator[TokenChunk]:
    sent = 0
    for chunk in trace.chunks:
        if delay:
            await anyio.sleep(delay)
        if max_tokens is not None and sent + len(chunk.token_ids) > max_tokens:
            # The engine would have stopped here: cut the chunk and report the limit.
            keep = max_tokens - sent
            logprobs = None if chunk.logprobs is None else chunk.logprobs[:keep]
            yield TokenChunk(
                token_ids=chunk.token_ids[:keep], logprobs=logprobs, finish_reason="length"
            )
            return
        sent += len(chunk.token_ids)
        yield chunk
    if trace.finish_reason is None:
        yield TokenChunk(finish_reason="error", error=CUT_OFF)
    else:
        yield TokenChunk(finish_reason=trace.finish_reason, error=trace.error)


class ReplaySource:
    """Replays one trace for every request (honouring `max_output_tokens`).

    `delay` seconds pass before each chunk, to stand in for a real engine's pace in tests.
    """

    def __init__(self, trace: Trace, *, delay: float = 0.0) -> None:
        self.trace = trace
        self.delay = delay

    def generate(self, request: GenerationRequest) -> AsyncIterator[TokenChunk]:
        return _replay(self.trace, self.delay, request.max_output_tokens)


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
        return _replay(self.trace_for(request.model), self.delay, request.max_output_tokens)
