"""The event log: every response is the sequence of wire events it emitted, and that log is the
source of truth. A response's current state (for `GET /v1/responses/{id}`) is the `response`
of its latest lifecycle event; its stream (for resumption) is the log read after a cursor.

`EventStore` is the small interface a deployment may implement (Redis, Postgres, ...);
`MemoryEventStore` keeps logs in a dict; `SQLiteEventStore` (`_sqlite.py`) in a local SQLite
file, the default, so a restarted server still serves finished responses and their streams.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from operator import itemgetter
from typing import Any, NamedTuple, Protocol, runtime_checkable

import attrs

from streamfold.statemachine import TERMINAL_EVENT_TYPES, Event, StreamfoldError
from streamfold.statemachine._accel import event_rows, last_of_kinds, rows_numbered

from ._conversation_store import MemoryConversations

__all__ = [
    "LIFECYCLE_EVENT_TYPES",
    "RECORD_DATA",
    "RECORD_TYPE",
    "ApprovalStore",
    "EventRecord",
    "EventStore",
    "InputStore",
    "MemoryEventStore",
    "Records",
    "StoreError",
    "StoredResponse",
    "advance",
    "last_lifecycle",
    "records_of",
]

LIFECYCLE_EVENT_TYPES = frozenset(
    {"response.created", "response.queued", "response.in_progress", *TERMINAL_EVENT_TYPES}
)


class StoreError(StreamfoldError):
    """The event log was used out of order (e.g. appending to a response never created)."""


class EventRecord(NamedTuple):
    """One event of a log: its sequence number, wire type, and wire JSON text.

    A named tuple rather than a frozen attrs class: the server makes one per event it sends,
    and a tuple is made in a third of the time (`EventRecord(seq, type, data)`; keywords work
    too), and the stores read a batch's columns at C speed (`map(RECORD_TYPE, records)`).
    """

    sequence_number: int
    type: str
    data: str

    @property
    def lifecycle(self) -> bool:
        return self.type in LIFECYCLE_EVENT_TYPES

    @property
    def terminal(self) -> bool:
        return self.type in TERMINAL_EVENT_TYPES


#: The types that end a stream: a terminal lifecycle event, or `error` (a stream that cannot go
#: on, e.g. a damaged log, says so in-band and stops).
_LAST_TYPES = frozenset({*TERMINAL_EVENT_TYPES, "error"})


class Records(NamedTuple):
    """A batch of one response's events, as the service hands them to a transport (SSE,
    WebSocket), which frames them: the service itself writes no wire format.

    `fresh`: made here just now by `records_of` (one line of JSON each, the API's own event
    types), so a transport may frame them unchecked; records read back from a store are not
    (`fresh=False`) and are checked as they are framed.
    """

    records: list[EventRecord]
    fresh: bool = True

    @property
    def last(self) -> bool:
        """The stream ends with this batch (its terminal event, or an `error`)."""
        return bool(self.records) and self.records[-1].type in _LAST_TYPES


@attrs.frozen(kw_only=True)
class StoredResponse:
    """What `GET /v1/responses/{id}` needs without reading the whole log."""

    id: str
    background: bool
    finished: bool
    last_sequence_number: int
    event: str  # the wire JSON of the latest lifecycle event

    def response(self) -> dict[str, Any]:
        return json.loads(self.event)["response"]  # type: ignore[no-any-return]


@runtime_checkable
class EventStore(Protocol):
    """Append-only logs of wire events, one per response id."""

    async def append(
        self, response_id: str, records: Sequence[EventRecord], *, background: bool = False
    ) -> None:
        """Add events (in sequence order) to the log; the first append creates it."""

    async def read(
        self, response_id: str, after: int = -1, *, limit: int | None = None
    ) -> list[EventRecord]:
        """The events with `sequence_number > after`, in order, at most `limit` of them (a
        page: stored logs are streamed page by page); `[]` for an unknown id. A log that
        cannot be read raises `StoreError`."""

    async def snapshot(self, response_id: str) -> StoredResponse | None:
        """The response's latest lifecycle event, or None for an unknown id."""

    async def delete(self, response_id: str) -> None:
        """Forget a response (no-op for an unknown id)."""

    async def list(self) -> list[str]:
        """Every stored response id, oldest first."""


@runtime_checkable
class InputStore(Protocol):
    """What a store also keeps to serve `previous_response_id`: each stored response's input,
    as JSON text (see `_conversation.py` for its two forms). Both built-in stores do; an
    `EventStore` without these methods serves everything else."""

    async def save_input(self, response_id: str, items: str) -> None:
        """Keep the JSON text of the input `response_id` answered."""

    async def load_input(self, response_id: str) -> str | None:
        """The JSON text saved for `response_id`, or None."""


#: A record's fields, for `map` over a batch (C speed: the server logs every event it sends).
RECORD_TYPE = itemgetter(1)
RECORD_DATA = itemgetter(2)


def records_of(events: Sequence[Event]) -> list[EventRecord]:
    """The log records of events, each with `dumps`'s text (`event_rows`: compiled, and the
    plain events' text with it)."""
    return event_rows(events, EventRecord)


def last_lifecycle(records: Sequence[EventRecord]) -> EventRecord | None:
    """The batch's last lifecycle event (most batches, all deltas, have none)."""
    last = last_of_kinds(records, LIFECYCLE_EVENT_TYPES)
    return None if last < 0 else records[last]


def advance(
    response_id: str, old: StoredResponse | None, records: Sequence[EventRecord], background: bool
) -> StoredResponse:
    """The snapshot after `records`; pure, shared by both stores. (The server calls it for
    every batch it logs: the batch is scanned in C where the extension is built.)"""
    last = -1 if old is None else old.last_sequence_number
    if not rows_numbered(records, last + 1):
        raise StoreError(
            f"events appended to {response_id} must continue its log at sequence number "
            f"{last + 1} without gaps; got {[r.sequence_number for r in records]}"
        )
    lifecycle = last_lifecycle(records)
    finished = lifecycle is not None and last_of_kinds(records, TERMINAL_EVENT_TYPES) >= 0
    if old is not None and old.finished:
        raise StoreError(f"response {response_id} already ended with its terminal event")
    if old is None and lifecycle is None:
        raise StoreError(f"the log of {response_id} must begin with response.created")
    return StoredResponse(
        id=response_id,
        background=background if old is None else old.background,
        finished=finished,
        last_sequence_number=last + len(records),
        event=lifecycle.data if lifecycle is not None else old.event,  # type: ignore[union-attr]
    )


@runtime_checkable
class ApprovalStore(Protocol):
    """A store that records which response answered each approval request, so that one
    approval runs one call, however many times a client forks the conversation that asked."""

    async def claim_approval(self, approval_id: str, response_id: str) -> str | None:
        """Record that `response_id` answers `approval_id`: None the first time, else the
        response that answered it first."""


class MemoryEventStore(MemoryConversations):
    """Logs in a dict: for tests, and servers that need nothing to survive a restart."""

    def __init__(self) -> None:
        super().__init__()
        self._logs: dict[str, list[EventRecord]] = {}
        self._snapshots: dict[str, StoredResponse] = {}
        self._inputs: dict[str, str] = {}
        self._approvals: dict[str, str] = {}
        self._owners: dict[str, str] = {}

    async def set_owner(self, response_id: str, key_hash: str) -> None:
        self._owners[response_id] = key_hash

    async def owner_of(self, response_id: str) -> str | None:
        return self._owners.get(response_id)

    async def claim_approval(self, approval_id: str, response_id: str) -> str | None:
        first = self._approvals.setdefault(approval_id, response_id)
        return None if first == response_id else first

    async def append(
        self, response_id: str, records: Sequence[EventRecord], *, background: bool = False
    ) -> None:
        if not records:
            return
        snapshot = advance(response_id, self._snapshots.get(response_id), records, background)
        self._logs.setdefault(response_id, []).extend(records)
        self._snapshots[response_id] = snapshot
        if snapshot.finished:
            self._response_ended(response_id, snapshot.event)

    async def read(
        self, response_id: str, after: int = -1, *, limit: int | None = None
    ) -> list[EventRecord]:
        # Sequence numbers are dense from 0, so the cursor is a list index.
        start = max(after + 1, 0)
        return self._logs.get(response_id, [])[start : None if limit is None else start + limit]

    async def snapshot(self, response_id: str) -> StoredResponse | None:
        return self._snapshots.get(response_id)

    async def delete(self, response_id: str) -> None:
        self._logs.pop(response_id, None)
        self._snapshots.pop(response_id, None)
        self._inputs.pop(response_id, None)
        self._owners.pop(response_id, None)
        self._response_deleted(response_id)

    async def save_input(self, response_id: str, items: str) -> None:
        self._inputs[response_id] = items

    async def load_input(self, response_id: str) -> str | None:
        return self._inputs.get(response_id)

    async def list(self) -> list[str]:
        return list(self._logs)
