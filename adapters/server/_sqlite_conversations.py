"""The SQLite store's half of the Conversations API (`_conversation_store.py`).

Writes run on the event loop on the writer connection, as the store's other small writes do
(`claim_approval`); reads run in a worker thread on the reader connection. The items a
response binds (`bind_conversation`) are appended by `append_ended` inside the transaction
that writes the response's terminal event (`SQLiteEventStore._insert`).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

import anyio

from ._conversation_store import ItemPage, ItemRow, StoredConversation, ended_items
from ._store import StoreError

__all__ = ["SQLiteConversations"]

_APPEND = (
    "INSERT OR IGNORE INTO conversation_items SELECT ?1, (SELECT COALESCE(MAX(position), 0) + 1 "
    "FROM conversation_items WHERE conversation_id=?1), ?2, ?3 "
    "WHERE EXISTS (SELECT 1 FROM conversations WHERE id=?1)"
)


class SQLiteConversations:
    """Mixed into `SQLiteEventStore`, whose connections and lock it uses."""

    path: Path
    _db: sqlite3.Connection
    _reader: sqlite3.Connection
    _read_lock: threading.Lock
    _bound: dict[str, tuple[str, list[ItemRow]]]

    def _failed(self, exc: sqlite3.Error) -> StoreError:
        return StoreError(f"the conversations in the response store {self.path} failed: {exc}")

    @contextlib.contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """One transaction on the writer connection, committed whole or rolled back; a SQLite
        failure becomes a `StoreError` naming the store."""
        try:
            self._db.execute("BEGIN")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise self._failed(exc) from exc

    async def create_conversation(
        self, conversation: StoredConversation, items: Sequence[ItemRow]
    ) -> None:
        with self._writing() as db:
            db.execute(
                "INSERT INTO conversations VALUES (?, ?, ?, ?)",
                (
                    conversation.id,
                    conversation.created_at,
                    json.dumps(conversation.metadata),
                    conversation.owner,
                ),
            )
            db.executemany(
                "INSERT INTO conversation_items VALUES (?, ?, ?, ?)",
                [(conversation.id, i, item_id, text) for i, (item_id, text) in enumerate(items, 1)],
            )

    def _get(self, conversation_id: str) -> StoredConversation | None:
        with self._read_lock:
            row = self._reader.execute(
                "SELECT created_at, metadata, owner FROM conversations WHERE id=?",
                (conversation_id,),
            ).fetchone()
        if row is None:
            return None
        return StoredConversation(
            id=conversation_id, created_at=row[0], metadata=json.loads(row[1]), owner=row[2]
        )

    async def get_conversation(self, conversation_id: str) -> StoredConversation | None:
        try:
            return await anyio.to_thread.run_sync(self._get, conversation_id)
        except sqlite3.Error as exc:
            raise self._failed(exc) from exc

    async def update_conversation(
        self, conversation_id: str, metadata: dict[str, str]
    ) -> StoredConversation | None:
        try:
            self._db.execute(
                "UPDATE conversations SET metadata=? WHERE id=?",
                (json.dumps(metadata), conversation_id),
            )
        except sqlite3.Error as exc:
            raise self._failed(exc) from exc
        return await self.get_conversation(conversation_id)

    async def delete_conversation(self, conversation_id: str) -> bool:
        with self._writing() as db:
            db.execute("DELETE FROM conversation_items WHERE conversation_id=?", (conversation_id,))
            deleted = db.execute(
                "DELETE FROM conversations WHERE id=?", (conversation_id,)
            ).rowcount
        return deleted > 0

    async def add_conversation_items(
        self, conversation_id: str, items: Sequence[ItemRow]
    ) -> list[str]:
        with self._writing() as db:
            marks = ",".join("?" * len(items))
            taken = [
                row[0]
                for row in db.execute(
                    f"SELECT item_id FROM conversation_items WHERE conversation_id=? "
                    f"AND item_id IN ({marks})",
                    (conversation_id, *(item_id for item_id, _ in items)),
                )
            ]
            if not taken:
                db.executemany(
                    _APPEND, [(conversation_id, item_id, text) for item_id, text in items]
                )
        return taken

    def _page(
        self, conversation_id: str, after: str | None, limit: int, order: Literal["asc", "desc"]
    ) -> ItemPage | None:
        with self._read_lock:
            bound = 0 if order == "asc" else 2**62
            if after is not None:
                row = self._reader.execute(
                    "SELECT position FROM conversation_items WHERE conversation_id=? AND item_id=?",
                    (conversation_id, after),
                ).fetchone()
                if row is None:
                    return None
                bound = row[0]
            compare, direction = (">", "ASC") if order == "asc" else ("<", "DESC")
            rows = self._reader.execute(
                f"SELECT data FROM conversation_items WHERE conversation_id=? "
                f"AND position {compare} ? ORDER BY position {direction} LIMIT ?",
                (conversation_id, bound, limit + 1),
            ).fetchall()
        return ItemPage(items=[row[0] for row in rows[:limit]], has_more=len(rows) > limit)

    async def conversation_items(
        self,
        conversation_id: str,
        *,
        after: str | None,
        limit: int,
        order: Literal["asc", "desc"],
    ) -> ItemPage | None:
        try:
            return await anyio.to_thread.run_sync(self._page, conversation_id, after, limit, order)
        except sqlite3.Error as exc:
            raise self._failed(exc) from exc

    def _item(self, conversation_id: str, item_id: str) -> str | None:
        with self._read_lock:
            row = self._reader.execute(
                "SELECT data FROM conversation_items WHERE conversation_id=? AND item_id=?",
                (conversation_id, item_id),
            ).fetchone()
        return None if row is None else str(row[0])

    async def conversation_item(self, conversation_id: str, item_id: str) -> str | None:
        try:
            return await anyio.to_thread.run_sync(self._item, conversation_id, item_id)
        except sqlite3.Error as exc:
            raise self._failed(exc) from exc

    async def delete_conversation_item(self, conversation_id: str, item_id: str) -> bool:
        try:
            deleted = self._db.execute(
                "DELETE FROM conversation_items WHERE conversation_id=? AND item_id=?",
                (conversation_id, item_id),
            ).rowcount
        except sqlite3.Error as exc:
            raise self._failed(exc) from exc
        return bool(deleted > 0)

    async def bind_conversation(
        self, response_id: str, conversation_id: str, items: Sequence[ItemRow]
    ) -> None:
        self._bound[response_id] = conversation_id, list(items)

    def append_ended(self, response_id: str, event: str) -> None:
        """In the transaction that writes `response_id`'s terminal event (`event`): append
        what it bound, when it ended completed or incomplete. (Forgotten once committed.)"""
        conversation_id, items = self._bound[response_id]
        output = ended_items(event)
        if output is not None:
            self._db.executemany(
                _APPEND, [(conversation_id, item_id, text) for item_id, text in (*items, *output)]
            )
