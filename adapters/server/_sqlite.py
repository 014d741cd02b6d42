"""The default event store: one SQLite file (stdlib `sqlite3`), in WAL mode.

Appends run on the event loop, synchronously: a commit costs ~0.2 ms (no fsync, see below),
while handing the work to a thread (`anyio.to_thread`) cost far more under load, because every
statement a worker runs hands the GIL back and forth with the busy event loop and each hand-off
can wait a whole switch interval (5 ms). Measured with 200 concurrent streams on 2 CPUs, a write
round in a worker thread took 126 ms on average. The slow part of SQLite, the WAL checkpoint
with its fsync, is taken off the loop: automatic checkpoints are off, and every
`CHECKPOINT_PAGES` pages the writer runs one in a worker thread on a second connection. Reads
(finished responses only; live ones are followed in memory) run in worker threads on that
second connection too, so they never hold up a write.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

import anyio

from ._store import EventRecord, StoredResponse, StoreError, advance

__all__ = ["SQLiteEventStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    background INTEGER NOT NULL,
    finished INTEGER NOT NULL,
    last_sequence_number INTEGER NOT NULL,
    event TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS event_batches (
    response_id TEXT NOT NULL,
    first_sequence_number INTEGER NOT NULL,
    last_sequence_number INTEGER NOT NULL,
    types TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (response_id, first_sequence_number)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS inputs (
    response_id TEXT PRIMARY KEY,
    items TEXT NOT NULL
) WITHOUT ROWID;
"""
# One row per appended batch, not per event (a statement per event meant a GIL hand-off per
# event). Wire JSON never holds a raw newline (json.dumps escapes it), so a batch's types and
# data are stored newline-joined.

# Pages of WAL between two checkpoints (SQLite's own automatic default is 1000).
CHECKPOINT_PAGES = 1000


class SQLiteEventStore:
    """Logs in one SQLite file (WAL mode), shared by every request of the process."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if str(path) == ":memory:":
            raise StoreError("SQLiteEventStore needs a file; use MemoryEventStore for :memory:")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = self._connect()
            # The writer checkpoints on its own schedule, off the event loop (see above).
            self._db.execute("PRAGMA wal_autocheckpoint=0")
            self._db.executescript(_SCHEMA)
            self._reader = self._connect()
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(
                f"cannot open the response store {path}: {exc}; pass --store with a writable "
                "file path"
            ) from exc
        self._read_lock = threading.Lock()  # the reader connection, one thread at a time
        self._wal_pages = 0
        self._checkpointing = False

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        # WAL: readers never wait for the writer. NORMAL: commits skip the fsync (checkpoints
        # do it), so power loss may drop the last moments of the log, never corrupt it.
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        return db

    def close(self) -> None:
        self._db.close()
        with self._read_lock:
            self._reader.close()

    @staticmethod
    def _snapshots(db: sqlite3.Connection, ids: Sequence[str]) -> dict[str, StoredResponse]:
        marks = ",".join("?" * len(ids))
        rows = db.execute(
            "SELECT id, background, finished, last_sequence_number, event FROM responses "
            f"WHERE id IN ({marks})",
            list(ids),
        ).fetchall()
        return {
            row[0]: StoredResponse(
                id=row[0],
                background=bool(row[1]),
                finished=bool(row[2]),
                last_sequence_number=row[3],
                event=row[4],
            )
            for row in rows
        }

    def _write(self, response_id: str, records: Sequence[EventRecord], background: bool) -> None:
        old = self._snapshots(self._db, [response_id]).get(response_id)
        new = advance(response_id, old, records, background)
        self._db.execute("BEGIN")
        try:
            self._db.execute(
                "INSERT INTO event_batches VALUES (?, ?, ?, ?, ?)",
                (
                    response_id,
                    records[0].sequence_number,
                    records[-1].sequence_number,
                    "\n".join(r.type for r in records),
                    "\n".join(r.data for r in records),
                ),
            )
            self._db.execute(
                "INSERT INTO responses VALUES (?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
                "finished=excluded.finished, last_sequence_number=excluded.last_sequence_number, "
                "event=excluded.event",
                (new.id, new.background, new.finished, new.last_sequence_number, new.event),
            )
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _checkpoint(self) -> None:
        with self._read_lock:
            self._reader.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def _read(self, response_id: str, after: int) -> list[EventRecord]:
        with self._read_lock:
            rows = self._reader.execute(
                "SELECT first_sequence_number, types, data FROM event_batches "
                "WHERE response_id=? AND last_sequence_number>? ORDER BY first_sequence_number",
                (response_id, after),
            ).fetchall()
        return [
            EventRecord(sequence_number=first + i, type=t, data=d)
            for first, types, data in rows
            for i, (t, d) in enumerate(zip(types.split("\n"), data.split("\n"), strict=True))
            if first + i > after
        ]

    def _snapshot(self, response_id: str) -> StoredResponse | None:
        with self._read_lock:
            return self._snapshots(self._reader, [response_id]).get(response_id)

    def _list(self) -> list[str]:
        with self._read_lock:
            rows = self._reader.execute("SELECT id FROM responses ORDER BY rowid").fetchall()
        return [row[0] for row in rows]

    async def append(
        self, response_id: str, records: Sequence[EventRecord], *, background: bool = False
    ) -> None:
        if not records:
            return
        try:
            self._write(response_id, records, background)
        except sqlite3.Error as exc:
            raise StoreError(f"writing the response store {self.path} failed: {exc}") from exc
        # A batch is a few KB; a page is 4 KB: count pages roughly, by bytes written.
        self._wal_pages += 1 + sum(len(r.data) for r in records) // 4096
        if self._wal_pages >= CHECKPOINT_PAGES and not self._checkpointing:
            self._wal_pages, self._checkpointing = 0, True
            try:
                await anyio.to_thread.run_sync(self._checkpoint)
            finally:
                self._checkpointing = False

    async def read(self, response_id: str, after: int = -1) -> list[EventRecord]:
        return await anyio.to_thread.run_sync(self._read, response_id, after)

    async def snapshot(self, response_id: str) -> StoredResponse | None:
        return await anyio.to_thread.run_sync(self._snapshot, response_id)

    async def delete(self, response_id: str) -> None:
        self._db.execute("BEGIN")
        self._db.execute("DELETE FROM event_batches WHERE response_id=?", (response_id,))
        self._db.execute("DELETE FROM responses WHERE id=?", (response_id,))
        self._db.execute("DELETE FROM inputs WHERE response_id=?", (response_id,))
        self._db.execute("COMMIT")

    async def save_input(self, response_id: str, items: str) -> None:
        try:
            self._db.execute("INSERT OR REPLACE INTO inputs VALUES (?, ?)", (response_id, items))
        except sqlite3.Error as exc:
            raise StoreError(f"writing the response store {self.path} failed: {exc}") from exc

    def _load_input(self, response_id: str) -> str | None:
        with self._read_lock:
            row = self._reader.execute(
                "SELECT items FROM inputs WHERE response_id=?", (response_id,)
            ).fetchone()
        return None if row is None else str(row[0])

    async def load_input(self, response_id: str) -> str | None:
        return await anyio.to_thread.run_sync(self._load_input, response_id)

    async def list(self) -> list[str]:
        return await anyio.to_thread.run_sync(self._list)
