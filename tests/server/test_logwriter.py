"""The write-ahead log writer: concurrent runs' batches commit together, each on its own."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from streamfold.adapters.server import EventRecord, MemoryEventStore, SQLiteEventStore, StoreError
from streamfold.adapters.server._logwriter import LogWriter

from .test_store import LOG

pytestmark = pytest.mark.anyio


class CountingStore(SQLiteEventStore):
    commits = 0

    async def append_many(self, batches):  # type: ignore[no-untyped-def]
        self.commits += 1
        return await super().append_many(batches)


async def test_concurrent_batches_share_one_commit_and_fail_alone(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "r.sqlite3")
    writer = LogWriter(store)
    failures: dict[str, Exception] = {}

    async def run(response_id: str, records: list) -> None:  # type: ignore[type-arg]
        try:
            await writer.write(response_id, records, background=False)
        except StoreError as exc:
            failures[response_id] = exc

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(run, f"resp_{i}", LOG[:5])
        tg.start_soon(run, "resp_bad", LOG[3:5])  # does not begin with response.created
    assert store.commits <= 2  # 21 batches, one group (two if the first leader ran alone)
    assert list(failures) == ["resp_bad"]
    for i in range(20):
        assert await store.read(f"resp_{i}") == LOG[:5]
    assert await store.read("resp_bad") == []
    store.close()


async def test_a_store_without_append_many_gets_one_append_per_batch() -> None:
    store = MemoryEventStore()
    writer = LogWriter(store)
    async with anyio.create_task_group() as tg:
        for i in range(5):
            tg.start_soon(lambda i=i: writer.write(f"resp_{i}", LOG, background=False))
    for i in range(5):
        assert await store.read(f"resp_{i}") == LOG


async def test_a_batch_sqlite_refuses_fails_alone_in_its_group(tmp_path: Path) -> None:
    """SQLite refuses text with a lone surrogate (it cannot be encoded as UTF-8): the group's
    one-statement fast path fails, and the batches are then written one by one, so only the
    refused one fails, and its response can go on from where its log really is."""
    store = SQLiteEventStore(tmp_path / "r.sqlite3")
    writer = LogWriter(store)
    bad = EventRecord(sequence_number=2, type=LOG[2].type, data='{"delta": "\ud800"}')
    failures: dict[str, Exception] = {}

    async def run(response_id: str, records: list[EventRecord]) -> None:
        try:
            await writer.write(response_id, records, background=False)
        except StoreError as exc:
            failures[response_id] = exc

    for i in range(3):
        await writer.write(f"resp_{i}", LOG[:2], background=False)
    async with anyio.create_task_group() as tg:
        tg.start_soon(run, "resp_0", LOG[2:5])
        tg.start_soon(run, "resp_1", [bad])
        tg.start_soon(run, "resp_2", LOG[2:5])
    assert list(failures) == ["resp_1"]
    assert "writing the response store" in str(failures["resp_1"])
    await writer.write("resp_1", LOG[2:], background=False)
    assert await store.read("resp_0", 1) == await store.read("resp_2", 1) == LOG[2:5]
    assert await store.read("resp_1", 1) == LOG[2:]
    store.close()


async def test_cancelled_writers_leave_their_batches_committed_and_published(
    tmp_path: Path,
) -> None:
    """Clients leaving mid-commit must not fail the other runs of their group (one of them
    leads it) nor leave their own batches half done: the commit publishes each batch it
    wrote, whether or not its writer is still waiting."""
    scopes: list[anyio.CancelScope] = []

    class CancellingStore(SQLiteEventStore):
        async def append_many(self, batches):  # type: ignore[no-untyped-def]
            for scope in scopes:  # every writer of the group, its leader among them
                scope.cancel()
            await anyio.sleep(0)  # a cancelled waiter gives up here
            return await super().append_many(batches)

    store = CancellingStore(tmp_path / "r.sqlite3")
    writer = LogWriter(store)
    published: dict[str, list[EventRecord]] = {}
    go = anyio.Event()

    async def run(response_id: str) -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            await go.wait()
            await writer.write(
                response_id,
                LOG[:3],
                background=False,
                published=lambda records: published.setdefault(response_id, list(records)),
            )

    names = [f"resp_{i}" for i in range(3)]
    async with anyio.create_task_group() as tg:
        for name in names:
            tg.start_soon(run, name)
        while len(scopes) < len(names):
            await anyio.sleep(0)
        go.set()  # all three write in one turn of the loop: one group
    for name in names:
        assert await store.read(name) == LOG[:3]
        assert published[name] == LOG[:3]
    store.close()
