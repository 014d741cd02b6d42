"""The default event store: one SQLite file (stdlib `sqlite3`), in WAL mode.

Appends run on the event loop, synchronously: a commit costs ~0.2 ms (no fsync, see below),
while handing the work to a thread (`anyio.to_thread`) cost far more under load, because every
statement a worker runs hands the GIL back and forth with the busy event loop and each hand-off
can wait a whole switch interval (5 ms). Measured with 200 concurrent streams on 2 CPUs, a write
round in a worker thread took 126 ms on average. The slow part of SQLite, the WAL checkpoint
with its fsync, is taken off the loop: automatic checkpoints are off, and every
`CHECKPOINT_PAGES` pages the writer runs one in a worker thread on a second connection. Reads
(finished responses only; live ones are followed in memory) run in worker threads on that
second connection too, so they never hold up a write: they are `_sqlite_reads.py`'s (mixed in);
this module opens the file and owns every write.

The tables (`_sqlite_schema.py`) are laid out so that one group commit of many responses
touches few pages, and the writer keeps what it needs of each unfinished response in memory:
a batch costs two rows in two `executemany` statements, and no read.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

import anyio

from ._conversation_store import ItemRow
from ._logwriter import Batch
from ._sqlite_conversations import SQLiteConversations
from ._sqlite_reads import Known as _Known
from ._sqlite_reads import SQLiteReads
from ._sqlite_schema import open_layout
from ._store import (
    RECORD_DATA,
    RECORD_TYPE,
    EventRecord,
    StoreError,
    advance,
    last_lifecycle,
)

__all__ = ["SQLiteEventStore", "StoreLockedError"]

log = logging.getLogger("streamfold.server")

# Pages of WAL between two checkpoints. The commit that runs one holds every other response's
# next write until it ends (the log writer commits one group at a time; a checkpoint running
# beside the writes never copies the whole WAL, which then grows without bound): at SQLite's
# own default of 1000 that was 10-12 ms of held writes each time, the server's time to first
# event p99 under an open-loop load (15.9-18.9 ms at 400 streams/s); at 250, 2.5-3 ms each,
# four times as often, and a p99 of 5.7-7.0 ms, with events/s and CPU per event unchanged
# within the runs' spread (`benchmarks/bench_server.py --rates`, docs/benchmarks.md).
CHECKPOINT_PAGES = 250


class StoreLockedError(StoreError):
    """Another server (process) holds the store: one store belongs to one server."""


def _lock(path: Path) -> int:
    """Hold `PATH.lock` (flock, released by the kernel when the process dies, even by SIGKILL).

    Two servers on one store would each end the other's running responses as interrupted at
    start-up and interleave sequence numbers (issue 19): the second must refuse to start."""
    lock_path = path.with_name(path.name + ".lock")
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        raise StoreLockedError(
            f"the response store {path} is in use by another server (pid {holder}); stop that "
            "server, or pass --store with another file"
        ) from None
    except OSError:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


class SQLiteEventStore(SQLiteReads, SQLiteConversations):
    """Logs in one SQLite file (WAL mode), shared by every request of the process.

    The store is locked to this object (a `PATH.lock` file beside it) until `close()`; a second
    `SQLiteEventStore` on the same file, in this process or another, raises `StoreLockedError`.
    `lock=False` opens it without the lock, to read it while its server runs (never serve from
    such a store: its server owns the logs).
    """

    def __init__(self, path: str | Path, *, lock: bool = True) -> None:
        self.path = Path(path)
        if str(path) == ":memory:":
            raise StoreError("SQLiteEventStore needs a file; use MemoryEventStore for :memory:")
        self._lock_fd: int | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if lock:
                self._lock_fd = _lock(self.path)
            self._db = self._connect()
            # The writer checkpoints on its own schedule, off the event loop (see above).
            self._db.execute("PRAGMA wal_autocheckpoint=0")
            open_layout(self._db, upgrade=lock)
            self._reader = self._connect()
            row = self._db.execute("SELECT MAX(number) FROM responses").fetchone()
        except StoreLockedError:
            raise
        except StoreError as exc:  # a layout it cannot read
            self._unlock()
            self._close_connections()
            raise StoreError(f"cannot open the response store {path}: {exc}") from exc
        except (OSError, sqlite3.Error) as exc:
            self._unlock()
            self._close_connections()
            raise StoreError(
                f"cannot open the response store {path}: {exc}; pass --store with a writable "
                "file path"
            ) from exc
        self._next_number = (row[0] or 0) + 1  # this store alone writes (its lock)
        self._read_lock = threading.Lock()  # the reader connection, one thread at a time
        self._wal_pages = 0
        self._written = 0  # characters of event data inserted since the last `_wrote`
        self._checkpointing = False
        # What `advance` needs of each response being written and not yet ended, and its number
        # (see `_advance`).
        self._unfinished: dict[str, _Known] = {}
        # Inputs saved and not yet written: they go in with the next write's transaction (the
        # server appends a response's first events right after saving its input), not in one
        # transaction each, a WAL page write per response (`save_input`).
        self._inputs: dict[str, str] = {}
        # Responses bound to a conversation, until their terminal event is written.
        self._bound: dict[str, tuple[str, list[ItemRow]]] = {}

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        # WAL: readers never wait for the writer. NORMAL: commits skip the fsync (checkpoints
        # do it), so power loss may drop the last moments of the log, never corrupt it.
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        return db

    def _write_inputs(self) -> None:
        """The inputs saved since the last write (see `__init__`), in the transaction under way
        (or in one of their own)."""
        if self._inputs:
            self._db.executemany(
                "INSERT OR REPLACE INTO inputs VALUES (?, ?)", list(self._inputs.items())
            )

    def close(self) -> None:
        if self._inputs:
            try:
                self._write_inputs()
            except sqlite3.Error as exc:
                log.error(
                    "the response store %s lost %d inputs: %s", self.path, len(self._inputs), exc
                )
            self._inputs.clear()
        self._db.close()
        with self._read_lock:
            self._reader.close()
        self._unlock()

    def _close_connections(self) -> None:
        for name in ("_db", "_reader"):
            db = getattr(self, name, None)
            if db is not None:
                db.close()

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _write(self, response_id: str, records: Sequence[EventRecord], background: bool) -> None:
        self._write_many([(response_id, records, background)], fail=True)

    def _write_many(
        self, batches: Sequence[Batch], *, fail: bool = False
    ) -> list[Exception | None]:
        """One transaction for every batch; a batch the store refuses fails alone (`fail`:
        raise its error instead).

        The common case is two `executemany` (batches rows, and the `responses` rows of the
        batches that change a response's lifecycle); only when SQLite refuses one of them is
        the transaction rolled back and redone batch by batch, each in a savepoint."""
        errors: list[Exception | None] = []
        planned: list[tuple[Batch, _Known]] = []
        latest: dict[str, _Known] = {}  # a response may have two batches here
        for batch in batches:  # refused out-of-order appends cost no statement
            try:
                known = self._advance(*batch, latest.get(batch[0]))
                planned.append((batch, known))
                latest[batch[0]] = known
                errors.append(None)
            except StoreError as exc:
                if fail:
                    raise
                errors.append(exc)
        if not planned:
            return errors
        self._db.execute("BEGIN")
        try:
            try:
                self._write_inputs()
                self._insert(planned)
                written = [known for _, known in planned]
            except (sqlite3.Error, ValueError, OverflowError) as exc:
                self._db.execute("ROLLBACK")
                if fail:
                    raise self._refusal(planned[0][0], exc) from exc
                self._db.execute("BEGIN")
                self._write_inputs()  # outside the savepoints: a refused batch keeps them
                written = self._insert_each(planned, errors)
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        self._inputs.clear()
        for number, new in written:  # only what is committed is known to be there
            if new.finished:
                self._unfinished.pop(new.id, None)
                self._bound.pop(new.id, None)
            else:
                self._unfinished[new.id] = number, new
        return errors

    def _insert_each(
        self, planned: list[tuple[Batch, _Known]], errors: list[Exception | None]
    ) -> list[_Known]:
        """The slow path: each batch in a savepoint, so one refused batch spares the rest."""
        written = []
        failed: set[str] = set()
        slots = [i for i, error in enumerate(errors) if error is None]
        for slot, (batch, new) in zip(slots, planned, strict=True):
            self._db.execute("SAVEPOINT batch")
            try:
                if batch[0] in failed:  # its earlier batch here was refused: this one has a gap
                    raise StoreError(f"an earlier batch of {batch[0]} could not be written")
                self._insert([(batch, new)])
            except (StoreError, sqlite3.Error, ValueError, OverflowError) as exc:
                self._db.execute("ROLLBACK TO batch")
                errors[slot] = self._refusal(batch, exc)
                failed.add(batch[0])
            else:
                written.append(new)
            self._db.execute("RELEASE batch")
        return written

    def _refusal(self, batch: Batch, exc: Exception) -> Exception:
        """The error for a batch SQLite refused. A log's first batch (sequence number 0) was
        taken for a new response without reading the store (`_advance`): when the id is
        taken, the error is what reading it would have said."""
        if isinstance(exc, sqlite3.IntegrityError) and batch[1][0].sequence_number == 0:
            stored = self._stored(self._db, batch[0])
            if stored is not None:
                try:
                    advance(batch[0], stored[1], batch[1], batch[2])
                except StoreError as refused:
                    return refused
        return self._error(exc)

    def _error(self, exc: Exception) -> Exception:
        if isinstance(exc, StoreError):
            return exc
        return StoreError(f"writing the response store {self.path} failed: {exc}")

    def _advance(
        self,
        response_id: str,
        records: Sequence[EventRecord],
        background: bool,
        known: _Known | None = None,
    ) -> _Known:
        # The snapshot of a response this store is writing is in memory: no read per batch. A
        # batch that begins a log (sequence number 0) is a new response's: no read either (if
        # the id is taken after all, the insert fails on it and `_refusal` reads it then).
        if known is None:
            known = self._unfinished.get(response_id)
        if known is None and records[0].sequence_number != 0:
            known = self._stored(self._db, response_id)
        if known is None:  # a new response: the next number (skipped if its batch fails)
            number, old = self._next_number, None
            self._next_number += 1
        else:
            number, old = known
        return number, advance(response_id, old, records, background)

    def _insert(self, planned: Sequence[tuple[Batch, _Known]]) -> None:
        rows = [
            (
                number,
                records[0].sequence_number,
                records[-1].sequence_number,
                "\n".join(map(RECORD_TYPE, records)),
                "\n".join(map(RECORD_DATA, records)),
            )
            for (_, records, _), (number, _) in planned
        ]
        self._db.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?)", rows)
        self._written += sum(len(row[4]) for row in rows)  # for the checkpoint's schedule
        # A response's row changes when its lifecycle does (created, in progress, its end),
        # not with every batch of deltas: most commits then touch no `responses` page at all.
        self._db.executemany(
            "INSERT INTO responses VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(number) DO UPDATE SET "
            "finished=excluded.finished, last_sequence_number=excluded.last_sequence_number, "
            "event=excluded.event",
            [
                (number, new.id, new.background, new.finished, new.last_sequence_number, new.event)
                for (_, records, _), (number, new) in planned
                if last_lifecycle(records) is not None
            ],
        )
        if self._bound:  # a response bound to a conversation appends to it as it ends
            for _, (_, new) in planned:
                if new.finished and new.id in self._bound:
                    self.append_ended(new.id, new.event)

    def _checkpoint(self) -> None:
        with self._read_lock:
            self._reader.execute("PRAGMA wal_checkpoint(PASSIVE)")

    async def append(
        self, response_id: str, records: Sequence[EventRecord], *, background: bool = False
    ) -> None:
        if not records:
            return
        try:
            self._write(response_id, records, background)
        except (sqlite3.Error, ValueError, OverflowError) as exc:
            raise self._error(exc) from exc
        await self._wrote()

    async def append_many(self, batches: Sequence[Batch]) -> list[Exception | None]:
        """Every batch in one transaction (`LogWriter`'s group commit)."""
        batches = [batch for batch in batches if batch[1]]
        if not batches:
            return []
        try:
            errors = self._write_many(batches)
        except (sqlite3.Error, ValueError, OverflowError) as exc:  # the commit itself failed
            return [self._error(exc)] * len(batches)
        await self._wrote()
        return errors

    async def _wrote(self) -> None:
        # A batch is a few KB; a page is 4 KB: count pages roughly, by the characters of event
        # data the inserts since the last call wrote.
        self._wal_pages += 1 + self._written // 4096
        self._written = 0
        if self._wal_pages >= CHECKPOINT_PAGES and not self._checkpointing:
            self._wal_pages, self._checkpointing = 0, True
            try:
                await anyio.to_thread.run_sync(self._checkpoint)
            finally:
                self._checkpointing = False

    async def delete(self, response_id: str) -> None:
        self._db.execute("BEGIN")
        self._db.execute(
            "DELETE FROM events WHERE response=(SELECT number FROM responses WHERE id=?)",
            (response_id,),
        )
        self._db.execute("DELETE FROM responses WHERE id=?", (response_id,))
        self._db.execute("DELETE FROM inputs WHERE response_id=?", (response_id,))
        self._db.execute("DELETE FROM owners WHERE response_id=?", (response_id,))
        self._db.execute("COMMIT")
        self._unfinished.pop(response_id, None)
        self._inputs.pop(response_id, None)
        self._bound.pop(response_id, None)

    async def claim_approval(self, approval_id: str, response_id: str) -> str | None:
        # One autocommit statement on the loop, as `delete`: atomic, and small.
        try:
            self._db.execute(
                "INSERT OR IGNORE INTO approvals VALUES (?, ?)", (approval_id, response_id)
            )
            row = self._db.execute(
                "SELECT response_id FROM approvals WHERE approval_id=?", (approval_id,)
            ).fetchone()
        except sqlite3.Error as exc:
            raise StoreError(f"writing the response store {self.path} failed: {exc}") from exc
        first = str(row[0])
        return None if first == response_id else first

    async def set_owner(self, response_id: str, key_hash: str) -> None:
        """Record the hash of the API key `response_id` was made with (see `_guard.py`)."""
        try:
            self._db.execute("INSERT OR REPLACE INTO owners VALUES (?, ?)", (response_id, key_hash))
        except sqlite3.Error as exc:
            raise StoreError(f"writing the response store {self.path} failed: {exc}") from exc

    async def save_input(self, response_id: str, items: str) -> None:
        """Kept, and written with the next write's transaction (see `__init__`); what would
        make that write fail is refused here."""
        if not isinstance(items, str):
            raise StoreError(f"an input is JSON text, got {type(items).__name__}")
        try:
            items.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise StoreError(f"writing the response store {self.path} failed: {exc}") from exc
        self._inputs[response_id] = items

    def _load_input(self, response_id: str) -> str | None:
        with self._read_lock:
            row = self._reader.execute(
                "SELECT items FROM inputs WHERE response_id=?", (response_id,)
            ).fetchone()
        return None if row is None else str(row[0])

    async def load_input(self, response_id: str) -> str | None:
        if response_id in self._inputs:
            return self._inputs[response_id]
        return await anyio.to_thread.run_sync(self._load_input, response_id)
