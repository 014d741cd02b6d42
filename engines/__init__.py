"""Token sources: the seam (`TokenSource`), trace replay, and (behind the torch extra) the
native gpt-oss engine. Importing this package never imports torch."""

from ._source import (
    FinishReason,
    GenerationRequest,
    SamplingParams,
    TokenChunk,
    TokenSource,
)

__all__ = [
    "FinishReason",
    "GenerationRequest",
    "SamplingParams",
    "TokenChunk",
    "TokenSource",
]
