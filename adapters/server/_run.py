"""A response being generated, as its followers see it: the in-memory side of a live run.

Every event of a stored run is in the store before it is published here (`LogWriter`), so
memory holds only a window of the latest events, `WINDOW` at most: a follower that falls
behind the window reads the store, page by page, then catches up with memory. A long response
followed by slow clients therefore costs the server a bounded amount of memory.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import attrs

from ._store import EventRecord, last_lifecycle

__all__ = ["CLIENT_LEFT", "WINDOW", "Run"]

CLIENT_LEFT = "the client disconnected before the response finished"

#: Events of a live run kept in memory for its followers (the rest are read from the store).
WINDOW = 2048


@attrs.define(kw_only=True, eq=False)
class Run:
    """A response being generated. Mutable, in memory, one per response.

    `records` holds the events from sequence number `base` on. A run that is not kept (`store:
    false`, or its store failed) has no followers and keeps no records.
    """

    id: str
    background: bool
    keep: bool  # stored: followed from here while it runs
    logged: bool = False  # its events go to the store first (false once the store failed)
    records: list[EventRecord] = attrs.Factory(list)
    base: int = 0  # the sequence number of records[0]
    event: str | None = None  # wire JSON of the latest lifecycle event
    finished: bool = False
    scope: anyio.CancelScope | None = None
    stop_message: str = CLIENT_LEFT
    _changed: anyio.Event | None = None  # made only when someone waits: most runs have no follower
    _ended: anyio.Event | None = None  # made only when someone waits for the end (cancel, delete)

    @property
    def end(self) -> int:
        """The sequence number the next published event will have."""
        return self.base + len(self.records)

    def publish(self, records: Sequence[EventRecord]) -> None:
        if self.keep:
            self.records.extend(records)
            if len(self.records) > WINDOW:  # older events are in the store
                drop = len(self.records) - WINDOW // 2
                del self.records[:drop]
                self.base += drop
        lifecycle = last_lifecycle(records)
        if lifecycle is not None:
            self.event = lifecycle.data
        self._wake()

    def since(self, position: int) -> list[EventRecord]:
        """The events in memory from sequence number `position` (>= `base`) on."""
        return self.records[position - self.base :]

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def changed(self) -> None:
        """Wait for the next `publish` or `finish` (check `records` first: no await between)."""
        if self._changed is None:
            self._changed = anyio.Event()
        await self._changed.wait()

    async def ended(self) -> None:
        """Wait until the run has finished (at once if it has)."""
        if not self.finished:
            if self._ended is None:
                self._ended = anyio.Event()
            await self._ended.wait()

    def finish(self) -> None:
        self.finished = True
        self._wake()
        if self._ended is not None:
            self._ended.set()

    def cancel(self, message: str) -> None:
        self.stop_message = message
        if self.scope is not None:
            self.scope.cancel()
