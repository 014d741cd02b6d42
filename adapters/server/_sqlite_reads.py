"""The SQLite store's reads: what `read`, `snapshot`, `list`, `owner_of` and `damaged` answer.

Contract: a read runs on the store's second connection (`_reader`), under `_read_lock` (one
thread at a time), never on the writer's, so it cannot hold up a write; `read`, `snapshot`,
`list` and `damaged` run in a worker thread (`owner_of`, one small row, on the event loop). A
log is read back as it was written, one `events` row per batch, a page at a time (`_read`);
one that cannot be read (a gap, a damaged row, a SQLite error) raises `StoreError` naming the
response and the file. `damaged()` names the responses whose logs cannot be read, so a server
can start on a damaged file and serve the rest. `_stored` is the one reading of a response's
`responses` row, which the writer (`_sqlite.py`) also runs on its own connection.

Mixed into `SQLiteEventStore` (`_sqlite.py`), which opens the connections and owns every write.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import anyio

from ._store import EventRecord, StoredResponse, StoreError

__all__ = ["Known", "SQLiteReads"]

Known = tuple[int, StoredResponse]  # a response's number, and its snapshot


class SQLiteReads:
    """Mixed into `SQLiteEventStore`, whose reader connection and lock it uses."""

    path: Path
    _reader: sqlite3.Connection
    _read_lock: threading.Lock

    @staticmethod
    def _stored(db: sqlite3.Connection, response_id: str) -> Known | None:
        row = db.execute(
            "SELECT number, background, finished, event FROM responses WHERE id=?",
            (response_id,),
        ).fetchone()
        if row is None:
            return None
        # The row changes with the response's lifecycle only; its last event is the last batch's.
        last = db.execute(
            "SELECT last_sequence_number FROM events WHERE response=? "
            "ORDER BY first_sequence_number DESC LIMIT 1",
            (row[0],),
        ).fetchone()
        return row[0], StoredResponse(
            id=response_id,
            background=bool(row[1]),
            finished=bool(row[2]),
            last_sequence_number=-1 if last is None else last[0],
            event=row[3],
        )

    def _read(self, response_id: str, after: int, limit: int | None) -> list[EventRecord]:
        # Each row holds at least one event: `limit` rows hold at least `limit` events. A row
        # holds a whole batch (up to `MAX_BATCH_CHUNKS` coalesced chunks' events), so rows are
        # read one at a time and reading stops once the page is full: fetching `limit` rows
        # would hold that many times the page in memory for each follower's read.
        records: list[EventRecord] = []
        with self._read_lock:
            cursor = self._reader.execute(
                "SELECT first_sequence_number, types, data FROM events WHERE response="
                "(SELECT number FROM responses WHERE id=?) AND last_sequence_number>? "
                "ORDER BY first_sequence_number LIMIT ?",
                (response_id, after, -1 if limit is None else limit),
            )
            try:
                for first, types, data in cursor:
                    records += [
                        EventRecord(first + i, t, d)
                        for i, (t, d) in enumerate(
                            zip(types.split("\n"), data.split("\n"), strict=True)
                        )
                        if first + i > after
                    ]
                    if limit is not None and len(records) >= limit:
                        break
            except (ValueError, TypeError, AttributeError) as exc:
                raise StoreError(
                    f"the log of {response_id} in {self.path} is damaged: {exc}"
                ) from exc
            finally:
                cursor.close()
        expected = after + 1 if after >= 0 else 0
        if records and records[0].sequence_number != expected:
            raise StoreError(f"the log of {response_id} in {self.path} is damaged: it has a gap")
        return records if limit is None else records[:limit]

    def _snapshot(self, response_id: str) -> StoredResponse | None:
        with self._read_lock:
            known = self._stored(self._reader, response_id)
        return None if known is None else known[1]

    def _list(self) -> list[str]:
        with self._read_lock:
            rows = self._reader.execute("SELECT id FROM responses ORDER BY number").fetchall()
        return [row[0] for row in rows]

    async def read(
        self, response_id: str, after: int = -1, *, limit: int | None = None
    ) -> list[EventRecord]:
        try:
            return await anyio.to_thread.run_sync(self._read, response_id, after, limit)
        except sqlite3.Error as exc:
            raise StoreError(f"the log of {response_id} in {self.path} is damaged: {exc}") from exc

    async def snapshot(self, response_id: str) -> StoredResponse | None:
        try:
            return await anyio.to_thread.run_sync(self._snapshot, response_id)
        except sqlite3.Error as exc:
            raise StoreError(
                f"the response {response_id} in {self.path} is damaged: {exc}"
            ) from exc

    async def owner_of(self, response_id: str) -> str | None:
        with self._read_lock:
            row = self._reader.execute(
                "SELECT key_hash FROM owners WHERE response_id=?", (response_id,)
            ).fetchone()
        return None if row is None else str(row[0])

    async def damaged(self) -> list[str]:
        """The responses whose logs cannot be read (none when `PRAGMA quick_check` passes);
        `StoreError` when not even the list of responses can be read.

        The server calls this at start-up, to say which responses a damaged file lost and
        keep serving the rest."""
        return await anyio.to_thread.run_sync(self._damaged)

    def _damaged(self) -> list[str]:
        try:
            with self._read_lock:
                verdict = self._reader.execute("PRAGMA quick_check").fetchall()
        except sqlite3.Error:  # too damaged to check: look at every response
            verdict = []
        if verdict == [("ok",)]:
            return []
        try:
            ids = self._list()
        except sqlite3.Error as exc:
            raise StoreError(f"the index of responses in {self.path} is damaged: {exc}") from exc
        damaged = []
        for response_id in ids:
            try:
                self._snapshot(response_id)
                self._read(response_id, -1, None)
            except (sqlite3.Error, StoreError):
                damaged.append(response_id)
        return damaged

    async def list(self) -> list[str]:
        return await anyio.to_thread.run_sync(self._list)
