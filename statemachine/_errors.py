"""The package's exceptions. Bad model output is never an exception (it becomes a conformant
terminal event); these are for callers who misuse the API or hand in malformed data."""

from __future__ import annotations

__all__ = [
    "ReducerUsageError",
    "StreamfoldError",
    "VocabularyError",
    "WireFormatError",
]


class StreamfoldError(Exception):
    """Base class of every error streamfold raises on purpose."""


class WireFormatError(StreamfoldError, ValueError):
    """Wire JSON that is not a valid event or object; the message names the field path."""


class ReducerUsageError(StreamfoldError):
    """The reducer was called out of order or with an input it cannot accept."""


class VocabularyError(StreamfoldError):
    """A token vocabulary could not be found or loaded; the message says how to provide it."""
