"""streamfold.specs: the executable specification of a Responses API event stream.

`check(events)` judges any server's stream against the numbered rules of `specs/README.md`;
`check_bytes(data)` does the same for a recorded stream (SSE or JSON lines).
"""

from ._checker import check
from ._reading import StreamReading, UnreadableStreamError, check_bytes, read_stream
from ._violation import RULES, Violation, format_report

__all__ = [
    "RULES",
    "StreamReading",
    "UnreadableStreamError",
    "Violation",
    "check",
    "check_bytes",
    "format_report",
    "read_stream",
]
