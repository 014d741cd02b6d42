"""A disk that fills mid-response, and a server restarted while it is still full (issue 29,
finding 6), against real SQLite and a real socket.

The restarted server could not write the closing events of the response the full disk cut
short (its log has no terminal event), took the log for damaged, and answered every read of
that response 500 "its stored log is damaged". It reads as the failed response it is: GET
answers it `failed`, and its stream (from the start or from a cursor) ends in
`response.failed` and passes the checker, the same events the server stores once the disk
has room again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
from openai import OpenAI

from streamfold.adapters.server import SQLiteEventStore, create_app
from streamfold.adapters.server._logwriter import Batch
from streamfold.adapters.server._store import EventRecord
from streamfold.specs import check

from .conftest import make_engine
from .serving import serve
from .test_load_and_faults import parse, wait_for


class FillingStore(SQLiteEventStore):
    """A SQLite store whose disk is full after `room` more batches: from then on SQLite itself
    refuses every write (`PRAGMA query_only`), as it refuses them on a full disk."""

    def __init__(self, path: Path, room: int) -> None:
        super().__init__(path)
        self.room = room
        self._fill(0)

    def _fill(self, written: int) -> None:
        self.room -= written
        if self.room <= 0:
            self._db.execute("PRAGMA query_only=1")

    async def append(
        self, response_id: str, records: Sequence[EventRecord], *, background: bool = False
    ) -> None:
        await super().append(response_id, records, background=background)
        self._fill(1)

    async def append_many(self, batches: Sequence[Batch]) -> list[Exception | None]:
        errors = await super().append_many(batches)
        self._fill(sum(error is None for error in errors))
        return errors


def _stream(url: str, response_id: str, after: int | None = None) -> list[dict[str, Any]]:
    cursor = "" if after is None else f"&starting_after={after}"
    reply = httpx.get(f"{url}/v1/responses/{response_id}?stream=true{cursor}", timeout=30)
    assert reply.status_code == 200, reply.text
    return parse(reply.content)


def test_a_response_cut_by_a_full_disk_reads_as_failed_after_a_restart(
    trace_dir: Path, tmp_path: Path
) -> None:
    path = tmp_path / "responses.sqlite3"
    store = FillingStore(path, room=4)  # the disk fills a few batches into the response
    with serve(create_app(make_engine(trace_dir).engine(), store=store)) as url:
        client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        response_id = client.responses.create(model="long", input="x", background=True).id
        wait_for(lambda: client.responses.retrieve(response_id).status != "in_progress", 30)
        assert client.responses.retrieve(response_id).status == "failed"
    store.close()
    reader = SQLiteEventStore(path, lock=False)
    stored = anyio.run(reader.read, response_id)
    assert stored and not stored[-1].terminal  # cut short: some events, no terminal one
    reader.close()

    store = FillingStore(path, room=0)  # restarted; the disk is still full
    with serve(create_app(make_engine(trace_dir).engine(), store=store)) as url:
        got = httpx.get(f"{url}/v1/responses/{response_id}", timeout=30)
        assert got.status_code == 200, got.text
        response = got.json()
        assert response["status"] == "failed"
        assert "stopped before the response finished" in response["error"]["message"]
        log = _stream(url, response_id)
        assert not check(log)
        assert log[-1]["type"] == "response.failed" and log[-1]["response"] == response
        assert [json.loads(r.data) for r in stored] == log[: len(stored)]
        for after in (1, len(stored) - 1, len(log) - 2):
            assert _stream(url, response_id, after) == log[after + 1 :]
        client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        resumed = client.responses.retrieve(response_id, stream=True, starting_after=2)
        assert [e.sequence_number for e in resumed] == list(range(3, len(log)))
    store.close()

    store = SQLiteEventStore(path)  # the disk has room again: the ending is stored as it read
    with serve(create_app(make_engine(trace_dir).engine(), store=store)) as url:
        assert _stream(url, response_id) == log
        assert httpx.get(f"{url}/v1/responses/{response_id}").json() == response
    store.close()
