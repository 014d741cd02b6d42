"""Write-ahead for the event log: an event is in the store before any client is sent it.

A server killed mid-response (SIGKILL, power loss of the process) must not have shown clients
events its log lacks: the restarted server ends the response after the last logged event, and
a client resuming after the last event it saw would otherwise get events that reuse those
numbers, or nothing and no terminal event at all (issue 14). So every batch of events is
committed before it is published.

One commit per batch per response would cost a transaction each (500 streams: thousands per
second); `LogWriter` commits *groups*: the first writer of a turn of the event loop becomes the
group's leader, lets the other runs of that turn add their batches, and commits them all in
one transaction (`append_many` where the store has it). A group of one costs what a plain
append did. Each batch succeeds or fails on its own: a failing response does not fail the
others in its group.

Cancellation: a group is committed even when the run that leads it is cancelled (the leader
alone is shielded: one cancel scope per group, not per batch), and each batch is published by
the commit itself (`published`), so a run cancelled while it waits leaves nothing half done:
its batch is committed and published, or refused, whether or not it is still there to hear
which. (A run that ends after a cancellation writes its closing events next: they join the
same group, after its batch, or a later one.)

Openings, a few at a time (`room_for_opening`): a client's first event is its response's
opening batch (`response.created`, `response.in_progress`), sent once committed. Requests that
arrive together (clients whose streams ended together, a client fanning out) are prepared one
after another in one turn of the event loop, each running until it writes its opening; the
group's leader, waiting its turn, commits only after the last of them, so every one of them
waits for all the others to be prepared (at 10 streams of `bench_server.py`, 761 of 900
openings joined another's group, most groups held 8-9). A commit per opening would send each
first event after its own preparation, at one more SQLite transaction each (a tenth fewer
events/s, measured). So a group takes `OPENINGS_PER_GROUP` openings: a request about to be
prepared while the gathering group holds that many waits for that group's commit (its
openings' runs, woken first, send their first events before any waiter is prepared), and
the next group takes half of those that waited (at least `OPENINGS_PER_GROUP`): a burst of
B openings is committed in about log2(B) groups, the first ones early. Every wait is for a
group that is gathering, whose leader commits it whatever happens to the others, so none can
wait forever (a store that hangs a commit holds the requests behind it as long as it would
have held their own openings).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import anyio
import anyio.lowlevel
import attrs

from ._store import EventRecord, EventStore, StoreError

__all__ = ["OPENINGS_PER_GROUP", "Batch", "BatchStore", "LogWriter"]

Batch = tuple[str, Sequence[EventRecord], bool]  # response id, its records, background
Published = Callable[[Sequence[EventRecord]], None]

#: Openings a group takes before a request about to be prepared waits for its commit (see the
#: module docstring). Measured with `benchmarks/bench_server.py` on this project's 2-core
#: machine, against one group per turn, same runs: at 10 streams the time to first event p50
#: went from 1.00-1.14x the vLLM-style peer's to 0.87-0.96x (5 rounds; 2: 0.84-0.97, 5:
#: 0.90-1.19) for 3-4% more server CPU per event (two more commits per burst of ten), which
#: response ids that sort by time took back (`_prepare.new_response_id`: in process, 346 µs a
#: request against 344 before both); at 200 streams 0.25-0.37x against 0.32-0.52x, events/s
#: 194k-202k against 186k-198k.
OPENINGS_PER_GROUP = 3


@runtime_checkable
class BatchStore(Protocol):
    """A store that can commit batches of several responses in one transaction."""

    async def append_many(self, batches: Sequence[Batch]) -> list[Exception | None]:
        """Append each batch as `append` would; per batch, the error that refused it, or None."""


@attrs.define(eq=False)
class _Group:
    batches: list[Batch] = attrs.Factory(list)
    published: list[Published | None] = attrs.Factory(list)
    errors: list[Exception | None] = attrs.Factory(list)
    # Made by the first batch that joins the leader's: a group of one wakes nobody.
    done: anyio.Event | None = None
    openings: int = 0  # batches that begin a log (sequence number 0): new responses
    # Made by the first request that waits for room (`room_for_opening`), set after `done`.
    admitted: anyio.Event | None = None
    waiting: int = 0  # requests that waited for this group's commit


class LogWriter:
    """Group commit over an `EventStore` (see the module docstring)."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        # Checked once: isinstance against a runtime-checkable Protocol costs 10-25 us a call.
        self._batch_store = store if isinstance(store, BatchStore) else None
        self._open: _Group | None = None  # the group new batches join
        self._committing = False  # a commit is under way
        self._committed: anyio.Event | None = None  # made by a leader that waits for it to end
        self._room = OPENINGS_PER_GROUP  # the openings a group takes now (`room_for_opening`)

    async def room_for_opening(self) -> None:
        """Call before preparing a new response: returns at once, or, when the group now
        gathering holds the openings it takes, once that group is committed and its runs have
        been woken (see the module docstring)."""
        group = self._open
        while group is not None and group.openings >= self._room:
            if group.admitted is None:
                group.admitted = anyio.Event()
            group.waiting += 1
            await group.admitted.wait()
            group = self._open

    async def write(
        self,
        response_id: str,
        records: Sequence[EventRecord],
        *,
        background: bool,
        published: Published | None = None,
    ) -> None:
        """Return once `records` are committed; raises what the store raised for them.

        `published(records)` is called as soon as they are committed, by whichever task
        commits them: also when this call was cancelled while it waited (see the module
        docstring)."""
        group = self._open
        if group is None:
            group = self._open = _Group()
        index = len(group.batches)
        group.batches.append((response_id, records, background))
        group.published.append(published)
        if records and records[0].sequence_number == 0:
            group.openings += 1
        if index == 0:
            with anyio.CancelScope(shield=True):
                await self._lead(group)
        else:
            if group.done is None:
                group.done = anyio.Event()
            await group.done.wait()
        error = group.errors[index]
        if error is not None:
            raise error

    async def _lead(self, group: _Group) -> None:
        # One commit at a time: while one is under way, this group keeps gathering. (No other
        # leader can start meanwhile: every writer joins this group until it closes below.)
        committing = False
        try:
            while self._committing:
                if self._committed is None:
                    self._committed = anyio.Event()
                await self._committed.wait()
            await anyio.lowlevel.checkpoint()  # the other runs of this turn join
            self._open = None
            committing = self._committing = True
            errors = await self._commit(group.batches)
            if len(errors) != len(group.batches):  # a store bug: publish nothing of it
                raise StoreError(
                    f"{type(self.store).__name__}.append_many answered for {len(errors)} "
                    f"of the {len(group.batches)} batches it was given; it must answer for each"
                )
            group.errors = errors
            for (_, records, _), published, error in zip(
                group.batches, group.published, group.errors, strict=True
            ):
                if published is not None and error is None:
                    published(records)
        except BaseException as exc:  # e.g. a store bug: every waiter learns of it
            if self._open is group:
                self._open = None
            failure = exc if isinstance(exc, Exception) else RuntimeError(str(exc))
            group.errors = [failure] * len(group.batches)
            raise
        finally:
            if committing:
                self._committing = False
                waiting, self._committed = self._committed, None
                if waiting is not None:
                    waiting.set()
            if group.done is not None:  # every batch that joined has made it
                group.done.set()
            if group.admitted is not None:  # after `done`: its runs send before they prepare
                self._room = max(OPENINGS_PER_GROUP, (group.waiting + 1) // 2)
                group.admitted.set()
            else:  # nobody waited: no burst
                self._room = OPENINGS_PER_GROUP

    async def _commit(self, batches: Sequence[Batch]) -> list[Exception | None]:
        if self._batch_store is not None:
            return await self._batch_store.append_many(batches)
        errors: list[Exception | None] = []
        for response_id, records, background in batches:
            try:
                await self.store.append(response_id, records, background=background)
                errors.append(None)
            except Exception as exc:
                errors.append(exc)
        return errors
