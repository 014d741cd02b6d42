"""Keep the engine thread's OpenMP team spinning: free the calling thread's idle team.

torch's CPU ops parallelise with libgomp, and libgomp gives every OS thread that starts a
parallel region its own team of worker threads. Between regions the workers spin for a while
before they sleep, unless libgomp manages more threads than there are cores: then it throttles
spinning to almost nothing, and every parallel region pays a futex wake-up (measured: a
[16, 256] x [256, 256] matmul on 2 threads took 23 us on a thread alone and 75 us on a thread
started after the main thread had used torch). The engine steps in its own thread while the
event loop thread (which loaded the model, or ran anything else on torch) keeps an idle team,
so on a 2-core machine the engine's decode steps ran ~40% slower than the same steps on the
main thread. `omp_pause_resource_all` (OpenMP 5.0) frees the *calling* thread's team; libgomp
builds a new one the next time that thread starts a parallel region, so the caller loses
nothing but a thread start.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable

__all__ = ["release_idle_openmp_team"]

_OMP_PAUSE_SOFT = 1


@functools.cache
def _pause_all() -> Callable[[int], int] | None:
    import torch

    if "OpenMP" not in torch.__config__.parallel_info():
        return None
    # The libgomp torch loaded (wheels bundle their own, under torch/lib or torch.libs);
    # RTLD_NOLOAD so that a libgomp torch does not use is never loaded.
    if not os.path.exists("/proc/self/maps"):  # not Linux: not libgomp either
        return None
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "libgomp" in line}
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD)
        except OSError:
            continue
        pause = getattr(lib, "omp_pause_resource_all", None)
        if pause is not None:
            pause.argtypes, pause.restype = [ctypes.c_int], ctypes.c_int
            return pause  # type: ignore[no-any-return]
    return None


def release_idle_openmp_team() -> bool:
    """Free the calling thread's OpenMP worker team; False where torch does not use libgomp
    (or the libgomp predates OpenMP 5.0) and there is nothing to do."""
    pause = _pause_all()
    return pause is not None and pause(_OMP_PAUSE_SOFT) == 0
