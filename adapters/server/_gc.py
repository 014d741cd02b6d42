"""Process settings for a server (`streamfold serve`): Python's garbage collector, and which async
library the serving thread runs.

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

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["YOUNG_THRESHOLD", "serving_asyncio", "tune_gc_for_serving"]

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


@contextlib.contextmanager
def serving_asyncio() -> Iterator[None]:
    """Within: this thread runs an asyncio event loop (uvicorn's), and sniffio says so at once.

    anyio asks sniffio which library runs for every cancel scope, event and checkpoint, and
    sniffio finds asyncio by calling `asyncio.current_task()`, which on CPython 3.11 makes a
    `getpid` system call each time: about 10 such questions per streamed response, ~0.5 µs
    each, against ~0.08 µs with the answer set (sniffio's own `thread_local.name`, which a
    library running its loop in a thread sets for that thread). Only for a thread that runs
    nothing but an asyncio loop while inside, as `streamfold serve`'s does; restored after."""
    try:
        import sniffio  # anyio asks it where it is installed (anyio does not require it)
    except ImportError:
        yield
        return
    before = sniffio.thread_local.name
    sniffio.thread_local.name = "asyncio"
    try:
        yield
    finally:
        sniffio.thread_local.name = before
