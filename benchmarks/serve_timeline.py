"""Step timelines of the served engine against the engine core, for `bench_serve.py --step-log`.

The served engine writes one record per step (engines/native/_steplog.py, enabled through
STREAMFOLD_STEP_LOG in the server's environment); the core's steps in the same round are
recorded in this process with the same `StepLog`. Both use `time.perf_counter()`, the
machine's monotonic clock, so the served steps of a batch are those between the client's start
and end of that batch. `decompose` splits served time minus core time into:

- before: from the client's start until the engine thread begins its first step (the client
  sending, the server parsing and rendering; the engine idle);
- after: from the engine's last step's end until the client has every response;
- gaps: time between the engine's steps of the batch (waiting for work, or its loop between
  steps: taking the next commands needs the GIL too), over the core's between its steps;
- cpu: the engine thread's CPU in its steps over the core's (more, smaller steps while requests
  trickle in and the tail they leave; cache and memory interference: the median full-batch
  decode step's CPU, served and core, is printed apart);
- runq: runnable without a CPU (other load);
- blocked: inside a step, neither running nor runnable: waiting for the GIL.
"engine / core" is the engine's own span (first step's start to last step's end) over the
core's time: the served engine without the client and the server around it.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable
from typing import Any

__all__ = ["SUMMARY_HEADER", "decompose", "print_decomposition", "summary_row"]

Record = dict[str, Any]


def _sum(records: list[Record], key: str) -> float:
    return float(sum(r[key] for r in records))


def _full_decode_cpu(records: list[Record], rows: int) -> float | None:
    full = [r["cpu"] for r in records if r["rows"] == rows and r["prefill"] == 0]
    return statistics.median(full) if full else None


def _between(records: list[Record]) -> float:
    """Seconds between consecutive steps: idle, or the thread's own loop between steps."""
    return sum(b["t"] - a["t"] - a["wall"] for a, b in itertools.pairwise(records))


def decompose(
    served: list[Record], start: float, end: float, core: list[Record], concurrency: int
) -> dict[str, float]:
    """Seconds of served minus core time, by cause, for one round (see the module doc)."""
    steps = [r for r in served if start <= r["t"] <= end]
    if not steps or not core:
        return {}
    first, last = steps[0], steps[-1]
    admitted, admit_end, admit_steps = 0, first["t"], 0
    for r in steps:
        admitted += r["admitted"]
        admit_steps += 1
        admit_end = r["t"]
        if admitted >= concurrency:
            break
    core_wall = _sum(core, "wall")
    blocked = sum(r["wall"] - r["cpu"] - r["runq"] for r in steps)
    core_blocked = sum(r["wall"] - r["cpu"] - r["runq"] for r in core)
    s_full, c_full = _full_decode_cpu(steps, concurrency), _full_decode_cpu(core, concurrency)
    span = last["t"] + last["wall"] - first["t"]
    return {
        "served": end - start,
        "core": core_wall,
        "engine": span,
        "steps": len(steps),
        "core_steps": len(core),
        "admit_ms": 1e3 * (admit_end - first["t"]),
        "admit_steps": admit_steps,
        "first_add": (first["first_queued"] or first["t"]) - start,
        "before": first["t"] - start,
        "after": end - (last["t"] + last["wall"]),
        "gaps": _between(steps) - _between(core),
        "cpu": _sum(steps, "cpu") - _sum(core, "cpu"),
        "runq": _sum(steps, "runq") - _sum(core, "runq"),
        "blocked": blocked - core_blocked,
        "full_decode_cpu_ms": 1e3 * (s_full or 0.0),
        "core_full_decode_cpu_ms": 1e3 * (c_full or 0.0),
    }


CAUSES = ("before", "after", "gaps", "cpu", "runq", "blocked")


def print_decomposition(label: str, rounds: list[dict[str, float]]) -> None:
    """One line per round: served / core, and each cause's share of the core's time."""
    for d in rounds:
        if not d:
            print(f"{label}: no steps recorded")
            continue
        core = d["core"]
        parts = ", ".join(f"{c} {d[c] / core:+.1%}" for c in CAUSES)
        rest = (d["served"] - core - sum(d[c] for c in CAUSES)) / core
        print(
            f"{label}: served/core {d['served'] / core:.2f}x = 1 + {parts}, rest {rest:+.1%};"
            f" engine/core {d['engine'] / core:.2f}x; steps {d['steps']:.0f} vs"
            f" {d['core_steps']:.0f}; all admitted after {d['admit_steps']:.0f} steps"
            f" ({d['admit_ms']:.0f} ms); first request reached the engine after"
            f" {1e3 * d['first_add']:.0f} ms; full decode step CPU"
            f" {d['full_decode_cpu_ms']:.1f} vs {d['core_full_decode_cpu_ms']:.1f} ms",
            flush=True,
        )


def summary_row(concurrency: int, mode: str, rounds: list[dict[str, float]]) -> str:
    """A markdown row: medians over rounds of served / core, engine / core and the causes."""
    rounds = [d for d in rounds if d]
    if not rounds:
        return f"| {concurrency} | {mode} | - |"

    def med(f: Callable[[dict[str, float]], float]) -> float:
        return statistics.median(f(d) for d in rounds)

    causes = " | ".join(f"{med(lambda d, c=c: d[c] / d['core']):+.1%}" for c in CAUSES)
    return (
        f"| {concurrency} | {mode} | {med(lambda d: d['served'] / d['core']):.2f}x |"
        f" {med(lambda d: d['engine'] / d['core']):.2f}x | {causes} |"
        f" {med(lambda d: d['steps']):.0f} / {med(lambda d: d['core_steps']):.0f} |"
    )


SUMMARY_HEADER = (
    "| C | served | served / core | engine / core | before | after | gaps | step CPU | runq"
    " | blocked (GIL) | steps served / core |\n"
    "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)
