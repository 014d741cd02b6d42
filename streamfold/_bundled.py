"""The traces and golden streams that ship inside the wheel, found by name (issue 33).

In a clone they are `specs/traces/*.jsonl`; an installed wheel has them as package data of
`streamfold.specs`, so `streamfold replay weather_call` and `streamfold check weather_call`
work anywhere. A path that exists always wins over a bundled name.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["GOLDEN", "TRACE", "bundled_traces", "resolve"]

TRACE = ".jsonl"
GOLDEN = ".golden.jsonl"


def bundled_traces() -> Path:
    """The directory of the bundled traces."""
    # Found without importing streamfold.specs: its package imports the whole checker, which
    # `replay` does not need (benchmarks/bench_cli.py times replay as a whole process).
    spec = importlib.util.find_spec("streamfold.specs")
    assert spec is not None and spec.submodule_search_locations is not None
    return Path(next(iter(spec.submodule_search_locations))) / "traces"


def resolve(arg: str, suffix: str) -> str:
    """`arg` itself when it is a file, `-`, or a path with a directory; else the bundled file
    `arg` or `arg + suffix` (`suffix`: `TRACE` or `GOLDEN`) when one exists; else `arg`, for
    the caller's own "cannot read" error."""
    if arg == "-" or Path(arg).exists() or Path(arg).name != arg:
        return arg
    for name in (arg, arg + suffix):
        candidate = bundled_traces() / name
        if candidate.is_file():
            return str(candidate)
    return arg
