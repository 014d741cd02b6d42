"""The event stores: one contract, both implementations; SQLite also across reopening."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from streamfold.adapters.server import (
    EventRecord,
    EventStore,
    InputStore,
    MemoryEventStore,
    SQLiteEventStore,
    StoreError,
)
from streamfold.adapters.server._sqlite import CHECKPOINT_PAGES

pytestmark = pytest.mark.anyio


def record(seq: int, type: str = "response.output_text.delta", **fields: object) -> EventRecord:
    data = {"type": type, "sequence_number": seq, **fields}
    return EventRecord(sequence_number=seq, type=type, data=json.dumps(data))


def lifecycle(seq: int, type: str, status: str) -> EventRecord:
    return record(seq, type, response={"id": "resp_1", "status": status})


LOG = [
    lifecycle(0, "response.created", "in_progress"),
    lifecycle(1, "response.in_progress", "in_progress"),
    *[record(i, delta=f"w{i}\nline") for i in range(2, 9)],
    lifecycle(9, "response.completed", "completed"),
]


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventStore]:
    if request.param == "memory":
        yield MemoryEventStore()
    else:
        sqlite = SQLiteEventStore(tmp_path / "log.sqlite3")
        yield sqlite
        sqlite.close()


async def test_append_read_snapshot(store: EventStore) -> None:
    assert isinstance(store, EventStore)
    await store.append("resp_1", LOG[:2], background=True)
    snapshot = await store.snapshot("resp_1")
    assert snapshot is not None and not snapshot.finished and snapshot.background
    assert snapshot.response()["status"] == "in_progress"
    await store.append("resp_1", LOG[2:5])
    await store.append("resp_1", LOG[5:])
    snapshot = await store.snapshot("resp_1")
    assert snapshot.finished and snapshot.last_sequence_number == 9
    assert snapshot.response()["status"] == "completed"
    assert await store.read("resp_1") == LOG
    assert await store.read("resp_1", after=3) == LOG[4:]
    assert await store.read("resp_1", after=9) == []
    assert await store.read("resp_unknown") == []
    assert await store.snapshot("resp_unknown") is None
    assert await store.list() == ["resp_1"]
    await store.delete("resp_1")
    assert await store.snapshot("resp_1") is None and await store.read("resp_1") == []


@pytest.mark.parametrize(
    ("first", "then", "message"),
    [
        ([], [record(0)], "must begin with response.created"),
        (LOG[:2], [LOG[3]], "without gaps"),
        (LOG[:2], [LOG[1]], "without gaps"),
        (LOG, [record(10)], "already ended"),
        # A log begun again under an id already taken (ended, or still being written).
        (LOG, LOG[:2], "at sequence number 10"),
        (LOG[:4], LOG[:2], "at sequence number 4"),
    ],
)
async def test_out_of_order_appends_are_refused(
    store: EventStore, first: list[EventRecord], then: list[EventRecord], message: str
) -> None:
    await store.append("resp_1", first)
    with pytest.raises(StoreError, match=message):
        await store.append("resp_1", then)
    # The refused append left the log as it was.
    assert await store.read("resp_1") == first


async def test_a_log_begun_again_under_a_taken_id_is_refused_alone(tmp_path: Path) -> None:
    """The SQLite writer takes a log's first batch for a new response's without reading the
    store: an id taken by an ended response, or by an unfinished one of an earlier server
    (after a reopen), is refused with the error a read gives, in a group of batches too, where
    it spares the others."""
    path = tmp_path / "log.sqlite3"
    first = SQLiteEventStore(path)
    await first.append("resp_1", LOG)
    await first.append("resp_2", LOG[:4])
    first.close()
    store = SQLiteEventStore(path)
    try:
        for taken, last in (("resp_1", 9), ("resp_2", 3)):
            with pytest.raises(StoreError, match=f"at sequence number {last + 1} without gaps"):
                await store.append(taken, LOG[:2])
        errors = await store.append_many(
            [("resp_3", LOG[:2], False), ("resp_2", LOG[:2], False), ("resp_2", LOG[2:4], False)]
        )
        assert [type(e) for e in errors] == [type(None), StoreError, StoreError]
        assert "at sequence number 4" in str(errors[1])
        assert await store.read("resp_3") == LOG[:2]
        assert await store.read("resp_2") == LOG[:4]
        assert await store.read("resp_1") == LOG
        await store.append("resp_2", LOG[4:])  # the refusals left its log as it was
        assert await store.read("resp_2") == LOG
    finally:
        store.close()


async def test_inputs_are_kept_replaced_and_deleted_with_their_response(
    store: EventStore,
) -> None:
    assert isinstance(store, InputStore)
    assert await store.load_input("resp_1") is None
    await store.append("resp_1", LOG)
    await store.save_input("resp_1", '[{"role": "user", "content": "hi"}]')
    await store.save_input("resp_1", '[{"role": "user", "content": "hi again"}]')
    assert json.loads(await store.load_input("resp_1") or "") == [
        {"role": "user", "content": "hi again"}
    ]
    await store.delete("resp_1")
    assert await store.load_input("resp_1") is None


async def test_sqlite_log_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "log.sqlite3"
    first = SQLiteEventStore(path)
    await first.append("resp_1", LOG[:6])
    await first.append("resp_1", LOG[6:])
    first.close()
    second = SQLiteEventStore(path)
    assert await second.read("resp_1") == LOG
    assert (await second.snapshot("resp_1")).finished
    second.close()


async def test_sqlite_inputs_go_in_with_the_next_write_and_survive_reopening(
    tmp_path: Path,
) -> None:
    """An input costs no transaction of its own: it is written with the next append (the
    server appends a response's first events right after saving its input). It is readable at
    once, written by the next append that writes (or at close), and gone with a delete."""
    path = tmp_path / "log.sqlite3"
    store = SQLiteEventStore(path)
    await store.save_input("resp_1", '["one"]')
    assert await store.load_input("resp_1") == '["one"]'  # kept, not yet written
    reader = sqlite3.connect(path)
    assert reader.execute("SELECT COUNT(*) FROM inputs").fetchone() == (0,)
    await store.append("resp_1", LOG[:2])
    assert reader.execute("SELECT items FROM inputs").fetchall() == [('["one"]',)]
    await store.save_input("resp_2", '["two"]')
    with pytest.raises(StoreError, match="without gaps"):
        await store.append("resp_1", [LOG[3]])  # refused before any statement: kept
    assert reader.execute("SELECT COUNT(*) FROM inputs").fetchone() == (1,)
    assert await store.load_input("resp_2") == '["two"]'
    await store.save_input("resp_3", '["three"]')
    await store.save_input("resp_4", '["four"]')
    await store.delete("resp_4")  # deleted before it was written: never written
    store.close()  # writes resp_2's and resp_3's
    reader.close()
    reopened = SQLiteEventStore(path)
    assert [await reopened.load_input(f"resp_{n}") for n in (1, 2, 3, 4)] == [
        '["one"]',
        '["two"]',
        '["three"]',
        None,
    ]
    reopened.close()


async def test_sqlite_refuses_an_input_it_could_not_write_when_it_is_saved(
    tmp_path: Path,
) -> None:
    store = SQLiteEventStore(tmp_path / "log.sqlite3")
    with pytest.raises(StoreError, match="surrogate"):
        await store.save_input("resp_1", '["\ud800"]')
    await store.append("resp_1", LOG[:2])  # nothing bad was kept for the next write
    assert await store.load_input("resp_1") is None
    store.close()


async def test_sqlite_checkpoints_the_wal_by_the_event_data_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer checkpoints on its own schedule (autocheckpoint is off): once the event data
    appended reaches `CHECKPOINT_PAGES` pages, and not before."""
    store = SQLiteEventStore(tmp_path / "log.sqlite3")
    checkpoints: list[bool] = []
    monkeypatch.setattr(store, "_checkpoint", lambda: checkpoints.append(True))
    page = "x" * 4096
    batch = [EventRecord(n, "response.output_text.delta", f'"{page}"') for n in range(2, 12)]
    await store.append("resp_1", LOG[:2])
    written = 0
    while not checkpoints:
        await store.append(
            "resp_1", [r._replace(sequence_number=r.sequence_number + written) for r in batch]
        )
        written += len(batch)
        assert written <= 2 * CHECKPOINT_PAGES, "no checkpoint after twice its pages of data"
    assert written >= CHECKPOINT_PAGES // 2  # about one page per event, one more per append
    store.close()


def test_sqlite_store_names_the_path_it_cannot_open(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreError, match="pass --store"):
        SQLiteEventStore(blocker / "log.sqlite3")


async def test_sqlite_snapshot_follows_every_batch_across_reopening(tmp_path: Path) -> None:
    """The `responses` row is rewritten on lifecycle events only (delta batches touch no row
    of it): the last sequence number still counts every batch, after a reopen too, where the
    writer's in-memory snapshots are gone."""
    path = tmp_path / "log.sqlite3"
    first = SQLiteEventStore(path)
    await first.append("resp_1", LOG[:2])
    for i in range(2, 6):
        await first.append("resp_1", LOG[i : i + 1])
        assert (await first.snapshot("resp_1")).last_sequence_number == i
    first.close()
    second = SQLiteEventStore(path)
    snapshot = await second.snapshot("resp_1")
    assert (snapshot.last_sequence_number, snapshot.finished) == (5, False)
    assert json.loads(snapshot.event)["type"] == "response.in_progress"
    with pytest.raises(StoreError, match="sequence number 6"):
        await second.append("resp_1", LOG[7:8])
    await second.append("resp_1", LOG[6:])
    assert await second.read("resp_1") == LOG
    with pytest.raises(StoreError, match="already ended"):
        await second.append("resp_1", [record(10)])
    second.close()


# Layout 0, as streamfold wrote it before `_sqlite_schema` (the batches keyed by response id).
LAYOUT_0 = """
CREATE TABLE responses (id TEXT PRIMARY KEY, background INTEGER NOT NULL,
    finished INTEGER NOT NULL, last_sequence_number INTEGER NOT NULL, event TEXT NOT NULL);
CREATE TABLE event_batches (response_id TEXT NOT NULL, first_sequence_number INTEGER NOT NULL,
    last_sequence_number INTEGER NOT NULL, types TEXT NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (response_id, first_sequence_number)) WITHOUT ROWID;
CREATE TABLE inputs (response_id TEXT PRIMARY KEY, items TEXT NOT NULL) WITHOUT ROWID;
"""


def _write_layout_0(path: Path) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    db.executescript(LAYOUT_0)
    # resp_b was made first: its rowid is lower, and `list` keeps that order.
    for rid, records, finished in (("resp_b", LOG, 1), ("resp_a", LOG[:4], 0)):
        lifecycle = [r for r in records if r.lifecycle][-1]
        db.execute(
            "INSERT INTO responses VALUES (?, 0, ?, ?, ?)",
            (rid, finished, records[-1].sequence_number, lifecycle.data),
        )
        for first in range(0, len(records), 3):
            part = records[first : first + 3]
            db.execute(
                "INSERT INTO event_batches VALUES (?, ?, ?, ?, ?)",
                (
                    rid,
                    part[0].sequence_number,
                    part[-1].sequence_number,
                    "\n".join(r.type for r in part),
                    "\n".join(r.data for r in part),
                ),
            )
    db.execute("INSERT INTO inputs VALUES ('resp_a', '[1]')")
    db.close()


async def test_sqlite_store_upgrades_a_file_of_layout_0(tmp_path: Path) -> None:
    """A store file written before the events table was keyed by response number opens with
    everything in it: logs, snapshots, inputs, the order of responses; logs go on."""
    path = tmp_path / "old.sqlite3"
    _write_layout_0(path)
    with pytest.raises(StoreError, match="earlier streamfold; open it once with its lock"):
        SQLiteEventStore(path, lock=False)
    store = SQLiteEventStore(path)
    assert await store.list() == ["resp_b", "resp_a"]
    assert await store.read("resp_b") == LOG
    assert await store.read("resp_a", 1) == LOG[2:4]
    snapshot = await store.snapshot("resp_a")
    assert (snapshot.last_sequence_number, snapshot.finished) == (3, False)
    assert await store.load_input("resp_a") == "[1]"
    await store.append("resp_a", LOG[4:])
    await store.append("resp_c", LOG)
    assert await store.read("resp_a") == await store.read("resp_c") == LOG
    assert await store.list() == ["resp_b", "resp_a", "resp_c"]
    store.close()
    reopened = SQLiteEventStore(path, lock=False)  # upgraded: readers may look now
    assert await reopened.read("resp_a") == LOG
    reopened.close()


def test_sqlite_store_refuses_a_file_of_a_newer_layout(tmp_path: Path) -> None:
    path = tmp_path / "new.sqlite3"
    SQLiteEventStore(path).close()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA user_version=3")
    db.close()
    with pytest.raises(StoreError, match="newer streamfold"):
        SQLiteEventStore(path)
    with pytest.raises(StoreError, match="newer streamfold"):
        SQLiteEventStore(path)
