"""Python's garbage collector, set for a server process (`streamfold serve`).

Measured on `benchmarks/bench_server.py` (200 streams, 100-token answers, this project's 2-core
machine): with CPython's defaults the collector took about 225 ms of the server's ~1.6 s of CPU
over a run: 290 young collections (36 ms), 26 middle ones (55 ms, 2 ms each: the events and
records of 200 streams in flight are young and alive) and 2 full ones (67 ms each: every object
the process has loaded, the vocabulary and openai-harmony's encoding among them). Most of what
the server makes dies by reference counting at once and never needed the collector.

`tune_gc_for_serving` does two things a Python server commonly does:
- the startup heap is frozen (`gc.freeze`): what is loaded by then is left out of every later
  scan, as vLLM's API server does in its lifespan ("mark the startup heap as static");
- young collections run every `YOUNG_THRESHOLD` net allocations instead of 700, so objects in
  flight for a few milliseconds are not scanned again and again. Cyclic garbage waits longer to
  be freed: at most the threshold's worth of objects (a few MB).
With both, the same run spent about 76 ms in the collector. It is process-wide, so the library
never does it by itself: `streamfold serve` calls it before it serves, and so may a server
that embeds the app (after its own startup).
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG_THRESHOLD", "tune_gc_for_serving"]

#: Net allocations of container objects between two young collections (CPython: 700).
YOUNG_THRESHOLD = 50_000


def tune_gc_for_serving(*, preload_vocabulary: bool = True) -> None:
    """Freeze the startup heap and collect the young generation less often (see the module
    docstring). `preload_vocabulary`: load the o200k_harmony vocabulary and openai-harmony's
    encoding first (every harmony model needs them), so that they are frozen too."""
    if preload_vocabulary:
        from streamfold.engines.vocab import harmony_encoding, load_harmony_vocabulary

        harmony_encoding()
        load_harmony_vocabulary()
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
