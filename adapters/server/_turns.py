"""Openings first: a new stream's held chunks wait a few turns of the event loop.

The server's time to first event under load is set by how its one event loop is shared. A new
request's way to its first event (`response.created`) is a few turns of the loop: the
connection is accepted, its request read, then prepared, opened and logged, and the first
write goes out. Every turn runs the step of every other ready task, and the loop polls its
sockets (accepting, reading) only between turns.

A stream whose source already holds its chunks when its opening events have gone out (replay
without a delay, an engine ahead of a busy server) steps up to `MAX_BATCH_CHUNKS` of them in
one step: its records, its log commit and its write. When several such streams opened in the
same turns, the turns that follow are long, and the requests that arrive meanwhile wait for
them at every step of their way: measured with `benchmarks/bench_server.py` at 10 streams of
100-token answers, half of streamfold's time to first event went by before the loop accepted
the connection (about 5 ms of 8), against about 1.5 ms for the vLLM-style peer, which steps
one chunk per turn and stream.

So the driver (`Generation.before_held`) awaits `LoopTurns.after(OPENING_TURNS)` before such a
stream's first batch: the loop goes round that many times, polling its sockets each time, and
the requests that arrived meanwhile are accepted, read and opened before that bulk is
stepped. A turn in which nothing else is ready is a few microseconds, so an idle server
loses nothing. One suspension per stream, whatever the count (`after` is one future, resolved
by one callback per turn while anyone waits). The batching (one commit and one write for a
run of ready chunks) is unchanged, so the CPU per event is too.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

import anyio.lowlevel

__all__ = ["OPENING_TURNS", "LoopTurns"]

#: Turns of the loop a stream's held chunks wait after its opening events: more than a new
#: request's way to its first write takes (accepted, read, opened and logged, written: about
#: 4). Measured at 10 streams of `bench_server.py` (this project's loaded 2-core machine, time
#: to first event from the client's connect, p50 of 3 rounds): 7.7-9.5 ms with none, 3.3-5.5
#: with 4 or 8, 3.1-3.9 with 12 or 16; the vLLM-style peer 3.0-3.6 in the same runs.
OPENING_TURNS = 16

#: A turn shorter than this did nothing but wait (no request being read or opened takes so
#: little): the loop is idle, and whoever waits goes at once rather than spin the loop.
IDLE_TURN_S = 50e-6


class LoopTurns:
    """Waits of a number of event-loop turns, each task suspended once."""

    def __init__(self, *, idle_turn_s: float = IDLE_TURN_S) -> None:
        self.idle_turn_s = idle_turn_s
        self._turn = 0
        self._waiting: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._last = 0.0  # when the last turn ended (its `_tick` ran)

    async def after(self, turns: int) -> None:
        """Return once the loop has gone round `turns` times (on asyncio, with one suspension;
        elsewhere by checkpoints)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # trio: no callbacks by turn to hang on
            for _ in range(turns):
                await anyio.lowlevel.checkpoint()
            return
        if loop is not self._loop:  # first use, or a new loop (what waited on the old is gone)
            self._loop, self._turn, self._waiting = loop, 0, deque()
        waiter = loop.create_future()
        if not self._waiting:
            self._last = time.perf_counter()
            loop.call_soon(self._tick)
        # Deadlines only grow (`_turn` does), so the queue stays in order.
        self._waiting.append((self._turn + turns, waiter))
        await waiter

    def _tick(self) -> None:
        """One turn of the loop: wake whoever's wait is over (everyone, after a turn with
        nothing else to do); come again while anyone waits."""
        now = time.perf_counter()
        idle, self._last = now - self._last < self.idle_turn_s, now
        self._turn += 1
        waiting = self._waiting
        while waiting and (idle or waiting[0][0] <= self._turn):
            waiter = waiting.popleft()[1]
            if not waiter.done():  # a cancelled waiter is dropped
                waiter.set_result(None)
        if waiting:
            assert self._loop is not None
            self._loop.call_soon(self._tick)
