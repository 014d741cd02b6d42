"""A per-step timeline of an engine thread, for finding where a served engine's time goes.

Off unless `STREAMFOLD_STEP_LOG=PATH` is set in the environment (then `NativeEngine` appends
one JSON line per step to PATH) or a benchmark builds a `StepLog` itself for the engine core.
Each line says, for one step: when it started (`time.perf_counter()`, the system's monotonic
clock, comparable across processes on one machine), how long the thread waited for work
before it (`gap`), its wall and thread CPU time, the time it was runnable without a CPU
(`runq`, from /proc/thread-self/schedstat: other load), what it did (requests admitted, rows,
prefill tokens, chunks handed to the event loop), and when the first command it took was
queued. Wall minus CPU minus runq is time the thread was blocked: inside a step that is the
GIL (or the step lock).
Records are kept in memory and written when the thread goes idle, off the step's path.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

__all__ = ["STEP_LOG_ENV", "StepLog", "read_step_log"]

STEP_LOG_ENV = "STREAMFOLD_STEP_LOG"


def _run_delay() -> float:
    """Seconds this thread has been runnable but not running (0.0 where Linux's schedstat is
    missing)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


class StepLog:
    """Collects step records of one thread; `flush()` appends them to `path` as JSON lines."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.records: list[dict[str, Any]] = []
        self._idle_since: float | None = None
        self._queued: list[float] = []  # when the commands not yet taken were queued
        self._start = self._cpu = self._runq = 0.0
        self._taken: list[float] = []

    @classmethod
    def from_env(cls) -> StepLog | None:
        path = os.environ.get(STEP_LOG_ENV)
        return cls(path) if path else None

    def idle(self) -> None:
        """The thread is about to wait for work: write what it has, and start the gap clock."""
        self.flush()
        self._idle_since = time.perf_counter()

    def queued(self) -> None:
        """A command was queued for the thread (call under the queue's lock)."""
        self._queued.append(time.perf_counter())

    def begin(self) -> None:
        """A step starts with the commands queued so far (call under the queue's lock)."""
        self._taken, self._queued = self._queued, []
        self._start = time.perf_counter()
        self._cpu = time.thread_time()
        self._runq = _run_delay()

    def end(self, **counts: int) -> None:
        """Close the step begun last; `counts` (rows, tokens, ...) go into its record."""
        now = time.perf_counter()
        record: dict[str, Any] = {
            "t": self._start,
            "gap": 0.0 if self._idle_since is None else self._start - self._idle_since,
            "wall": now - self._start,
            "cpu": time.thread_time() - self._cpu,
            "runq": _run_delay() - self._runq,
            # when its first command was queued, and the commands' summed wait to be taken
            "first_queued": min(self._taken, default=None),
            "queue_wait": sum(self._start - t for t in self._taken),
        }
        record.update(counts)
        self.records.append(record)
        self._idle_since = None

    def flush(self) -> None:
        if not self.records:
            return
        with open(self.path, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in self.records)
        self.records.clear()


def read_step_log(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
