"""Token sources: the seam (`TokenSource`), trace replay, and (behind the torch extra) the
native gpt-oss engine. Importing this package never imports torch."""

from ._source import (
    FinishReason,
    GenerationRequest,
    SamplingParams,
    TokenChunk,
    TokenSource,
)
from ._trace import Trace, TraceFormatError, dump_trace, parse_trace, read_trace, write_trace
from .replay import ReplaySource, TraceDirectorySource, UnknownTraceError

__all__ = [
    "FinishReason",
    "GenerationRequest",
    "ReplaySource",
    "SamplingParams",
    "TokenChunk",
    "TokenSource",
    "Trace",
    "TraceDirectorySource",
    "TraceFormatError",
    "UnknownTraceError",
    "dump_trace",
    "parse_trace",
    "read_trace",
    "write_trace",
]
