"""Step timelines of the served engine against the engine core, for `bench_serve.py --step-log`.

The served engine writes one record per step (engines/native/_steplog.py, enabled through
STREAMFOLD_STEP_LOG in the server's environment); the core's steps in the same round are
recorded in this process with the same `StepLog`. Both use `time.perf_counter()`, the
machine's monotonic clock, so the served steps of a batch are those between the client's start
and end of that batch. `decompose` splits served time minus core time into:

- before: from the client's start until the engine thread begins its first step (the client
  sending, the server parsing and rendering; the engine idle);
- after: from the engine's last step's end until the client has every response;
- gaps: the engine thread idle between steps of the batch (waiting for work);
- cpu: the engine thread's extra CPU over the core's, split into "shape" (more, smaller steps
  while requests trickle in, and the tail they leave) and "slower" (full-batch decode steps
  costing more CPU than the core's same steps: cache and memory interference);
- runq: runnable without a CPU (other load);
- blocked: inside a step, neither running nor runnable: waiting for the GIL.
"""

from __future__ import annotations

import statistics
from typing import Any

__all__ = ["decompose", "print_decomposition"]

Record = dict[str, Any]


def _sum(records: list[Record], key: str) -> float:
    return float(sum(r[key] for r in records))


def _full_decode_cpu(records: list[Record], rows: int) -> float | None:
    full = [r["cpu"] for r in records if r["rows"] == rows and r["prefill"] == 0]
    return statistics.median(full) if full else None


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
    served_cpu, core_cpu = _sum(steps, "cpu"), _sum(core, "cpu")
    blocked = sum(r["wall"] - r["cpu"] - r["runq"] for r in steps)
    core_blocked = sum(r["wall"] - r["cpu"] - r["runq"] for r in core)
    # Per-step interference: the same full-batch decode step, served against core.
    s_full, c_full = _full_decode_cpu(steps, concurrency), _full_decode_cpu(core, concurrency)
    slower = 0.0
    if s_full and c_full:
        slower = served_cpu * (1 - c_full / s_full)
    return {
        "first_add": (first["first_queued"] or first["t"]) - start,
        "served": end - start,
        "core": core_wall,
        "steps": len(steps),
        "core_steps": len(core),
        "admit_ms": 1e3 * (admit_end - first["t"]),
        "admit_steps": admit_steps,
        "before": first["t"] - start,
        "after": end - (last["t"] + last["wall"]),
        "gaps": sum(r["gap"] for r in steps[1:]),
        "cpu_shape": served_cpu - core_cpu - slower,
        "cpu_slower": slower,
        "runq": _sum(steps, "runq") - _sum(core, "runq"),
        "blocked": blocked - core_blocked,
        "full_decode_cpu_ms": 1e3 * (s_full or 0.0),
        "core_full_decode_cpu_ms": 1e3 * (c_full or 0.0),
    }


def print_decomposition(label: str, rounds: list[dict[str, float]]) -> None:
    """One line per round: served / core, and each cause's share of the core's time."""
    for d in rounds:
        if not d:
            print(f"{label}: no steps recorded")
            continue
        core = d["core"]
        causes = ("before", "after", "gaps", "cpu_shape", "cpu_slower", "runq", "blocked")
        parts = ", ".join(f"{c} {d[c] / core:+.1%}" for c in causes)
        rest = (d["served"] - core - sum(d[c] for c in causes)) / core
        print(
            f"{label}: served/core {d['served'] / core:.2f}x = 1 + {parts}, rest {rest:+.1%};"
            f" steps {d['steps']:.0f} vs {d['core_steps']:.0f}; all admitted after"
            f" {d['admit_steps']:.0f} steps ({d['admit_ms']:.0f} ms); full decode step CPU"
            f" {d['full_decode_cpu_ms']:.1f} vs {d['core_full_decode_cpu_ms']:.1f} ms;"
            f" first add after {1e3 * d['first_add']:.0f} ms",
            flush=True,
        )
