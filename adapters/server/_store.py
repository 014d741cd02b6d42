"""The event log: every response is the sequence of wire events it emitted, and that log is the
source of truth. A response's current state (for `GET /v1/responses/{id}`) is the `response`
of its latest lifecycle event; its stream (for resumption) is the log read after a cursor.

`EventStore` is the small interface a deployment may implement (Redis, Postgres, ...);
`MemoryEventStore` keeps logs in a dict, `SQLiteEventStore` in a local SQLite file (the
default, so a restarted server still serves finished responses and their streams). SQLite calls
run in a worker thread (`anyio.to_thread`) so the event loop never blocks on disk.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import anyio
import attrs

from streamfold.statemachine import TERMINAL_EVENT_TYPES, StreamfoldError

__all__ = [
    "LIFECYCLE_EVENT_TYPES",
    "EventRecord",
    "EventStore",
    "MemoryEventStore",
    "SQLiteEventStore",
    "StoreError",
    "StoredResponse",
]

LIFECYCLE_EVENT_TYPES = frozenset(
    {"response.created", "response.queued", "response.in_progress", *TERMINAL_EVENT_TYPES}
)


class StoreError(StreamfoldError):
    """The event log was used out of order (e.g. appending to a response never created)."""


@attrs.frozen(kw_only=True)
class EventRecord:
    """One event of a log: its sequence number, wire type, and wire JSON text."""

    sequence_number: int
    type: str
    data: str

    @property
    def lifecycle(self) -> bool:
        return self.type in LIFECYCLE_EVENT_TYPES

    @property
    def terminal(self) -> bool:
        return self.type in TERMINAL_EVENT_TYPES


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

    async def read(self, response_id: str, after: int = -1) -> list[EventRecord]:
        """The events with `sequence_number > after`, in order; `[]` for an unknown id."""

    async def snapshot(self, response_id: str) -> StoredResponse | None:
        """The response's latest lifecycle event, or None for an unknown id."""

    async def delete(self, response_id: str) -> None:
        """Forget a response (no-op for an unknown id)."""

    async def list(self) -> list[str]:
        """Every stored response id, oldest first."""


def _check_order(response_id: str, last: int, records: Sequence[EventRecord]) -> None:
    expected = list(range(last + 1, last + 1 + len(records)))
    if [r.sequence_number for r in records] != expected:
        raise StoreError(
            f"events appended to {response_id} must continue its log at sequence number "
            f"{last + 1} without gaps; got {[r.sequence_number for r in records]}"
        )


def _advance(
    response_id: str, old: StoredResponse | None, records: Sequence[EventRecord], background: bool
) -> StoredResponse:
    """The snapshot after `records`; pure, shared by both stores."""
    last = -1 if old is None else old.last_sequence_number
    _check_order(response_id, last, records)
    if old is not None and old.finished:
        raise StoreError(f"response {response_id} already ended with its terminal event")
    lifecycle = [r for r in records if r.lifecycle]
    if old is None and not lifecycle:
        raise StoreError(f"the log of {response_id} must begin with response.created")
    return StoredResponse(
        id=response_id,
        background=background if old is None else old.background,
        finished=any(r.terminal for r in records),
        last_sequence_number=records[-1].sequence_number if records else last,
        event=lifecycle[-1].data if lifecycle else old.event,  # type: ignore[union-attr]
    )


class MemoryEventStore:
    """Logs in a dict: for tests, and servers that need nothing to survive a restart."""

    def __init__(self) -> None:
        self._logs: dict[str, list[EventRecord]] = {}
        self._snapshots: dict[str, StoredResponse] = {}

    async def append(
        self, response_id: str, records: Sequence[EventRecord], *, background: bool = False
    ) -> None:
        if not records:
            return
        snapshot = _advance(response_id, self._snapshots.get(response_id), records, background)
        self._logs.setdefault(response_id, []).extend(records)
        self._snapshots[response_id] = snapshot

    async def read(self, response_id: str, after: int = -1) -> list[EventRecord]:
        # Sequence numbers are dense from 0, so the cursor is a list index.
        return self._logs.get(response_id, [])[max(after + 1, 0) :]

    async def snapshot(self, response_id: str) -> StoredResponse | None:
        return self._snapshots.get(response_id)

    async def delete(self, response_id: str) -> None:
        self._logs.pop(response_id, None)
        self._snapshots.pop(response_id, None)

    async def list(self) -> list[str]:
        return list(self._logs)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    background INTEGER NOT NULL,
    finished INTEGER NOT NULL,
    last_sequence_number INTEGER NOT NULL,
    event TEXT NOT NULL,
    created INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    response_id TEXT NOT NULL,
    sequence_number INTEGER NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (response_id, sequence_number)
) WITHOUT ROWID;
"""


class SQLiteEventStore:
    """Logs in one SQLite file (WAL mode), shared by every request of the process."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
            # WAL: readers never wait for the writer; NORMAL: a commit is durable once the
            # WAL is checkpointed, which loses at most the last moments on power loss.
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise StoreError(
                f"cannot open the response store {path}: {exc}; pass --store with a writable "
                "file path"
            ) from exc
        # One connection, used from worker threads one call at a time.
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _snapshot(self, response_id: str) -> StoredResponse | None:
        row = self._db.execute(
            "SELECT background, finished, last_sequence_number, event FROM responses WHERE id=?",
            (response_id,),
        ).fetchone()
        if row is None:
            return None
        return StoredResponse(
            id=response_id,
            background=bool(row[0]),
            finished=bool(row[1]),
            last_sequence_number=row[2],
            event=row[3],
        )

    def _append(self, response_id: str, records: Sequence[EventRecord], background: bool) -> None:
        with self._lock:
            old = self._snapshot(response_id)
            new = _advance(response_id, old, records, background)
            self._db.execute("BEGIN")
            try:
                self._db.executemany(
                    "INSERT INTO events VALUES (?, ?, ?, ?)",
                    [(response_id, r.sequence_number, r.type, r.data) for r in records],
                )
                self._db.execute(
                    "INSERT INTO responses VALUES (?, ?, ?, ?, ?, "
                    "(SELECT COALESCE(MAX(created), 0) + 1 FROM responses)) "
                    "ON CONFLICT(id) DO UPDATE SET finished=excluded.finished, "
                    "last_sequence_number=excluded.last_sequence_number, event=excluded.event",
                    (
                        response_id,
                        new.background,
                        new.finished,
                        new.last_sequence_number,
                        new.event,
                    ),
                )
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _read(self, response_id: str, after: int) -> list[EventRecord]:
        with self._lock:
            rows = self._db.execute(
                "SELECT sequence_number, type, data FROM events "
                "WHERE response_id=? AND sequence_number>? ORDER BY sequence_number",
                (response_id, after),
            ).fetchall()
        return [EventRecord(sequence_number=s, type=t, data=d) for s, t, d in rows]

    def _locked_snapshot(self, response_id: str) -> StoredResponse | None:
        with self._lock:
            return self._snapshot(response_id)

    def _delete(self, response_id: str) -> None:
        with self._lock:
            self._db.execute("BEGIN")
            self._db.execute("DELETE FROM events WHERE response_id=?", (response_id,))
            self._db.execute("DELETE FROM responses WHERE id=?", (response_id,))
            self._db.execute("COMMIT")

    def _list(self) -> list[str]:
        with self._lock:
            rows = self._db.execute("SELECT id FROM responses ORDER BY created").fetchall()
        return [row[0] for row in rows]

    async def append(
        self, response_id: str, records: Sequence[EventRecord], *, background: bool = False
    ) -> None:
        if records:
            await anyio.to_thread.run_sync(self._append, response_id, records, background)

    async def read(self, response_id: str, after: int = -1) -> list[EventRecord]:
        return await anyio.to_thread.run_sync(self._read, response_id, after)

    async def snapshot(self, response_id: str) -> StoredResponse | None:
        return await anyio.to_thread.run_sync(self._locked_snapshot, response_id)

    async def delete(self, response_id: str) -> None:
        await anyio.to_thread.run_sync(self._delete, response_id)

    async def list(self) -> list[str]:
        return await anyio.to_thread.run_sync(self._list)
