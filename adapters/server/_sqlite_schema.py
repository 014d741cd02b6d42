"""The SQLite store's tables, and the upgrade of files an earlier streamfold wrote.

Layout 1 (`PRAGMA user_version` 1): each response has a row in `responses`, numbered in the
order responses began; its events are rows of `events` (one per appended batch), appended in
commit order and found through the index on (response number, first sequence number).

Why this shape: with hundreds of streams, one group commit holds one batch of each of them.
Layout 0 kept the batches in a table keyed by (response id, sequence number), so the batches of
one commit landed on as many pages as there were responses, and a commit wrote them all to the
WAL (~27 µs a batch, measured with 200 live responses and 60 batches a commit). Appending rows
puts a commit's batches on a few pages; the index entries (two integers) of the live
responses, numbered close together, share a few more (~6 µs a batch). The `responses` row
changes on lifecycle events only.

Layout 2 adds the Conversations API's tables: `conversations`, and `conversation_items`, each
conversation's items in the order they were added (`position`), with their ids unique per
conversation. A file of layout 1 is upgraded in place by adding them (and one of layout 0 by
upgrading it to 1 first).
"""

from __future__ import annotations

import sqlite3

from ._store import StoreError

__all__ = ["LAYOUT", "open_layout"]

LAYOUT = 2

_TABLES = """
CREATE TABLE responses (
    number INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    background INTEGER NOT NULL,
    finished INTEGER NOT NULL,
    last_sequence_number INTEGER NOT NULL,
    event TEXT NOT NULL
);
CREATE TABLE events (
    response INTEGER NOT NULL,
    first_sequence_number INTEGER NOT NULL,
    last_sequence_number INTEGER NOT NULL,
    types TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE UNIQUE INDEX events_by_response ON events (response, first_sequence_number);
CREATE TABLE IF NOT EXISTS inputs (
    response_id TEXT PRIMARY KEY,
    items TEXT NOT NULL
) WITHOUT ROWID;
"""
_CONVERSATIONS = """
CREATE TABLE conversations (
    id TEXT PRIMARY KEY,
    created_at INTEGER NOT NULL,
    metadata TEXT NOT NULL,
    owner TEXT
) WITHOUT ROWID;
CREATE TABLE conversation_items (
    conversation_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    item_id TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (conversation_id, position)
) WITHOUT ROWID;
CREATE UNIQUE INDEX conversation_items_by_id ON conversation_items (conversation_id, item_id);
"""
# Which response answered each approval request (issue 29: one approval, one call). Added to
# layout 1 without a new version: a file without it gets it when its server opens it, and an
# older streamfold ignores it.
_APPROVALS = """
CREATE TABLE IF NOT EXISTS approvals (
    approval_id TEXT PRIMARY KEY,
    response_id TEXT NOT NULL
) WITHOUT ROWID
"""
# The hash of the API key each response was made with (`_guard.py`), added the same way.
_OWNERS = """
CREATE TABLE IF NOT EXISTS owners (
    response_id TEXT PRIMARY KEY,
    key_hash TEXT NOT NULL
) WITHOUT ROWID
"""
# A batch's types and data are stored newline-joined: wire JSON never holds a raw newline
# (json.dumps escapes it). One row per batch, not per event: a statement per event meant a GIL
# hand-off per event.

# Layout 0 -> 1. The response numbers follow layout 0's rowids: the order responses were made.
_UPGRADE_0 = """
ALTER TABLE responses RENAME TO responses_0;
{tables}
INSERT INTO responses (id, background, finished, last_sequence_number, event)
    SELECT id, background, finished, last_sequence_number, event FROM responses_0 ORDER BY rowid;
INSERT INTO events
    SELECT r.number, b.first_sequence_number, b.last_sequence_number, b.types, b.data
    FROM event_batches b JOIN responses r ON r.id = b.response_id
    ORDER BY r.number, b.first_sequence_number;
DROP TABLE responses_0;
DROP TABLE event_batches;
"""


def _tables(db: sqlite3.Connection) -> set[str]:
    rows = db.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
    return {row[0] for row in rows}


def open_layout(db: sqlite3.Connection, *, upgrade: bool) -> None:
    """Make the tables of an empty file, or upgrade an earlier layout (when `upgrade`: the
    store holds the file's lock); `StoreError` for a file this version cannot read."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version == LAYOUT:
        if upgrade:
            db.execute(_APPROVALS)
            db.execute(_OWNERS)
        return
    if version > LAYOUT:
        raise StoreError(
            f"it was written by a newer streamfold (layout {version}; this one reads layout "
            f"{LAYOUT}); upgrade streamfold or pass --store with another file"
        )
    old = "event_batches" in _tables(db)
    if (old or version) and not upgrade:
        raise StoreError(
            "it was written by an earlier streamfold; open it once with its lock (start the "
            "server on it) to upgrade it"
        )
    if not upgrade:  # an empty file opened without the lock: its server has not made it yet
        raise StoreError("it holds no response store yet")
    if version == 1:
        script = _CONVERSATIONS
    else:
        script = (_UPGRADE_0.format(tables=_TABLES) if old else _TABLES) + _CONVERSATIONS
    db.execute("BEGIN IMMEDIATE")
    try:
        for statement in script.split(";"):
            if statement.strip():
                db.execute(statement)
        db.execute(_APPROVALS)
        db.execute(_OWNERS)
        db.execute(f"PRAGMA user_version={LAYOUT}")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
