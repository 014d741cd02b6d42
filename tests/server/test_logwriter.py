"""The write-ahead log writer: concurrent runs' batches commit together, each on its own."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from streamfold.adapters.server import MemoryEventStore, SQLiteEventStore, StoreError
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
