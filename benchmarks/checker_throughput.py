"""Throughput of the conformance checker and the SSE parser on one long stream.

The stream is the hand-built conformant stream of the checker's tests with its message grown to
N two-character deltas, so the per-event cost measured is that of a text delta, the common case.
Run from the repository root: `python benchmarks/checker_throughput.py [N]`.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.specs.wire_streams

from streamfold.specs import check, check_bytes
from streamfold.specs._checker import Checker
from streamfold.statemachine._sse import parse_sse, sse_frame
from tests.specs.wire_streams import good_stream, index_of, renumber


def long_stream(n: int) -> list[dict[str, Any]]:
    events = good_stream()
    first = index_of(events, "response.output_text.delta")
    deltas = [dict(events[first], delta="ab") for _ in range(n)]
    events = events[:first] + deltas + events[index_of(events, "response.output_text.done") :]
    text = "ab" * n
    for ev in events:
        if ev["type"] == "response.output_text.done":
            ev["text"] = text
        elif ev["type"] == "response.content_part.done" and ev["output_index"] == 1:
            ev["part"]["text"] = text
        elif ev["type"] == "response.output_item.done" and ev["output_index"] == 1:
            ev["item"]["content"][0]["text"] = text
    events[-1]["response"]["output"][1]["content"][0]["text"] = text
    return renumber(events)


def median_seconds(fn: Callable[[], object], runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def batched(events: list[dict[str, Any]]) -> object:
    """The path `check_file` takes: the events handed over as one batch."""
    checker = Checker()
    checker.events(events)
    return checker.finish()


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    events = long_stream(n)
    assert check(events) == [] and batched(events) == []
    body = b"".join(sse_frame(ev["type"], json.dumps(ev)) for ev in events)
    t_check = median_seconds(lambda: check(events))
    t_batch = median_seconds(lambda: batched(events))
    t_parse = median_seconds(lambda: parse_sse(body))
    t_all = median_seconds(lambda: check_bytes(body))
    print(f"{len(events)} events, {len(body) / 1e6:.1f} MB of SSE (median of 5 runs)")
    print(f"check(events):      {t_check:.3f} s  {t_check / len(events) * 1e6:.1f} us/event")
    print(f"Checker().events:   {t_batch:.3f} s  {t_batch / len(events) * 1e6:.1f} us/event")
    print(f"parse_sse(body):    {t_parse:.3f} s  {len(body) / t_parse / 1e6:.1f} MB/s")
    print(f"check_bytes(body):  {t_all:.3f} s  (SSE + json.loads + check)")


if __name__ == "__main__":
    main()
