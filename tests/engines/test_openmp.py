"""The engine thread's OpenMP team must not be throttled by the event loop thread's idle one.

Regression: libgomp stops spin-waiting when it manages more threads than there are cores, so
with the main thread's idle team alive, the engine thread's decode steps ran ~40% slower on a
2-core machine (4.5-4.8 s against 3.0 s for the benchmark's 16 requests).
`release_idle_openmp_team` frees the calling thread's team; this checks it really goes away.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or "OpenMP" not in torch.__config__.parallel_info(),
    reason="the team bookkeeping is libgomp's (Linux torch wheels)",
)

# Runs in a fresh interpreter: the test process's own threads would blur the counts.
_PROBE = """
import os, threading, time, torch
from streamfold.engines.native._openmp import release_idle_openmp_team

def tasks():
    return len(os.listdir("/proc/self/task"))

def settle(target):
    deadline = time.monotonic() + 5
    while tasks() != target and time.monotonic() < deadline:
        time.sleep(0.01)
    return tasks()

def probe():
    torch.set_num_threads(2)
    before = tasks()
    big = torch.ones(1 << 20).exp()  # parallel regions: this thread gets a team of 2
    with_team = tasks()
    released = release_idle_openmp_team()
    after = settle(before)
    big.exp()  # torch still works here: libgomp builds a new team
    print(before, with_team, released, after, tasks())

thread = threading.Thread(target=probe)
thread.start()
thread.join()
"""


def test_release_frees_the_calling_threads_team_and_torch_rebuilds_it() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], check=True, capture_output=True, text=True
    ).stdout.split()
    before, with_team, released, after, rebuilt = out
    assert int(with_team) == int(before) + 1  # one worker besides the calling thread
    assert released == "True"
    assert int(after) == int(before)
    assert int(rebuilt) == int(before) + 1
