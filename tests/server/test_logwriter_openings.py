"""Openings a few at a time: the first events of requests that arrive together are committed
in small groups, the first ones first (`LogWriter.room_for_opening`; issue 28's time to first
event at 10 streams of `benchmarks/bench_server.py`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamfold.adapters.registry import ReplayEngine
from streamfold.adapters.server import SQLiteEventStore, create_app
from streamfold.adapters.server import _service as service_module
from streamfold.adapters.server._logwriter import OPENINGS_PER_GROUP, LogWriter

from .test_logwriter import HANG, GatedStore
from .test_store import LOG

pytestmark = pytest.mark.anyio


def _openings(store: GatedStore, group: list[str]) -> int:
    return sum(1 for name in group if name.startswith("resp_new"))


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the server's loop: tasks run in order
async def test_a_burst_of_openings_commits_a_few_at_a_time_the_first_sent_first(
    anyio_backend: str,
) -> None:
    """Before: ten requests arriving together were all prepared before any was committed, so
    the first waited for the last (one group of ten). Now three are committed, and their runs
    woken, before the fourth is prepared; the next group takes half of the seven that waited,
    then the rest: groups of 3, 4 and 3."""
    assert OPENINGS_PER_GROUP == 3
    store = GatedStore()
    writer = LogWriter(store)
    order: list[tuple[str, int]] = []

    async def request(i: int) -> None:
        await writer.room_for_opening()
        order.append(("prepared", i))
        await writer.write(f"resp_new{i}", LOG[:2], background=False)
        order.append(("committed", i))

    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            for i in range(10):
                tg.start_soon(request, i)
    assert [len(group) for group in store.groups] == [3, 4, 3]
    assert order.index(("committed", 2)) < order.index(("prepared", 3))
    assert order.index(("committed", 6)) < order.index(("prepared", 7))
    for i in range(10):
        assert await store.read(f"resp_new{i}") == LOG[:2]


@pytest.mark.parametrize(
    ("burst", "groups"), [(4, [3, 1]), (9, [3, 3, 3]), (10, [3, 4, 3]), (30, [3, 14, 7, 3, 3])]
)
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_each_group_takes_half_of_those_that_waited_and_at_least_three(
    anyio_backend: str, burst: int, groups: list[int]
) -> None:
    """The next group's room is half the requests that waited, rounded up, at least
    `OPENINGS_PER_GROUP`: 27 waited, 14; 13, 7; 6, 3 (not 3.5, nor 4)."""
    store = GatedStore()
    writer = LogWriter(store)

    async def request(i: int) -> None:
        await writer.room_for_opening()
        await writer.write(f"resp_new{i}", LOG[:2], background=False)

    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            for i in range(burst):
                tg.start_soon(request, i)
    assert [len(group) for group in store.groups] == groups


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_running_streams_batches_take_no_room_from_new_responses(anyio_backend: str) -> None:
    """Only openings (a log's first batch, sequence number 0) count: five running streams'
    next batches and three new responses arriving in the same turn are one commit."""
    store = GatedStore()
    writer = LogWriter(store)
    for s in range(5):
        await writer.write(f"resp_run{s}", LOG[:2], background=False)
    store.groups.clear()

    async def stream(s: int) -> None:
        await writer.write(f"resp_run{s}", LOG[2:5], background=False)

    async def request(i: int) -> None:
        await writer.room_for_opening()
        await writer.write(f"resp_new{i}", LOG[:2], background=False)

    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            for s in range(5):
                tg.start_soon(stream, s)
            for i in range(4):
                tg.start_soon(request, i)
    assert [sorted(group) for group in store.groups] == [
        sorted([*(f"resp_run{s}" for s in range(5)), "resp_new0", "resp_new1", "resp_new2"]),
        ["resp_new3"],
    ]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_group_past_its_room_still_holds_newcomers_back(anyio_backend: str) -> None:
    """Requests whose preparation suspends (a render in a worker process) all pass before any
    writes, so a group can gather more openings than its room (five here); a request arriving
    then still waits for that group's commit rather than join it."""
    store = GatedStore()
    writer = LogWriter(store)

    async def suspending(i: int) -> None:
        await writer.room_for_opening()
        await anyio.sleep(0)  # prepared elsewhere
        await writer.write(f"resp_new{i}", LOG[:2], background=False)

    async def newcomer() -> None:
        await anyio.sleep(0)  # arrives once the five have passed, as they write
        await writer.room_for_opening()
        await writer.write("resp_late", LOG[:2], background=False)

    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            for i in range(5):
                tg.start_soon(suspending, i)
            tg.start_soon(newcomer)
    assert [len(group) for group in store.groups] == [5, 1]
    assert store.groups[1] == ["resp_late"]


@settings(max_examples=60, deadline=None)
@given(
    news=st.integers(1, 25),
    streams=st.integers(0, 6),
    data=st.data(),
    backend=st.sampled_from(["asyncio", "trio"]),
)
def test_no_request_waits_forever_for_room_whatever_the_others_do(
    news: int, streams: int, data: st.DataObject, backend: str
) -> None:
    """Property: requests arriving together, beside running streams writing their next
    batches, some refused once prepared (they write nothing), some cancelled while they wait
    for room (their clients left), all return; every opening written and every stream's batch
    is committed; and the first commit holds at most `OPENINGS_PER_GROUP` openings."""
    refused = data.draw(st.frozensets(st.integers(0, news - 1)), label="refused")
    left = data.draw(st.frozensets(st.integers(0, news - 1)), label="left")

    async def main() -> None:
        store = GatedStore()
        writer = LogWriter(store)
        for s in range(streams):
            await writer.write(f"resp_run{s}", LOG[:2], background=False)
        store.groups.clear()
        scopes: dict[int, anyio.CancelScope] = {}
        wrote: list[int] = []

        async def request(i: int) -> None:
            scopes[i] = anyio.CancelScope()
            with scopes[i]:
                await writer.room_for_opening()
            if scopes[i].cancelled_caught or i in refused:
                return
            await writer.write(f"resp_new{i}", LOG[:2], background=False)
            wrote.append(i)

        async def stream(s: int) -> None:
            await writer.write(f"resp_run{s}", LOG[2:5], background=False)

        with anyio.fail_after(HANG):
            async with anyio.create_task_group() as tg:
                for i in range(news):
                    tg.start_soon(request, i)
                for s in range(streams):
                    tg.start_soon(stream, s)
                while len(scopes) < news:  # every request has arrived
                    await anyio.sleep(0)
                for i in left:
                    scopes[i].cancel()
        for i in wrote:
            assert await store.read(f"resp_new{i}") == LOG[:2]
        assert set(wrote) <= set(range(news)) - refused
        for s in range(streams):
            assert await store.read(f"resp_run{s}") == LOG[:5]
        if store.groups:
            assert _openings(store, store.groups[0]) <= OPENINGS_PER_GROUP

    anyio.run(main, backend=backend)


def _post(body: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    raw = json.dumps(body).encode()
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/v1/responses", "raw_path": b"/v1/responses",
        "query_string": b"", "root_path": "", "state": {},
        "headers": [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json"),
                    (b"content-length", str(len(raw)).encode())],
        "client": ("127.0.0.1", 5555), "server": ("127.0.0.1", 8000),
    }  # fmt: skip
    return scope, raw


async def _burst(
    trace_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unstored: frozenset[int]
) -> list[tuple[str, int]]:
    """Ten streamed requests started in one turn through the app and a SQLite log (`unstored`:
    those sent with `store: false`): the order in which each was prepared and sent its first
    body bytes (`response.created`)."""
    order: list[tuple[str, int]] = []
    prepare = service_module.prepare

    async def noting(body: Any, **kwargs: Any) -> Any:
        order.append(("prepared", int(body["metadata"]["i"])))
        return await prepare(body, **kwargs)

    monkeypatch.setattr(service_module, "prepare", noting)
    store = SQLiteEventStore(tmp_path / "log.sqlite3")
    app = create_app(ReplayEngine(trace_dir).engine(), store=store)

    async def request(i: int) -> None:
        scope, raw = _post({"model": "greeting", "input": "hi", "stream": True,
                            "store": i not in unstored, "metadata": {"i": str(i)}})  # fmt: skip
        asked = False
        done = anyio.Event()
        bodies = 0

        async def receive() -> dict[str, Any]:
            nonlocal asked
            if not asked:
                asked = True
                return {"type": "http.request", "body": raw, "more_body": False}
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            nonlocal bodies
            if message["type"] == "http.response.start":
                assert message["status"] == 200
            elif message.get("body"):
                bodies += 1
                if bodies == 1:
                    assert b"response.created" in message["body"]
                    order.append(("first event", i))
            if message["type"] == "http.response.body" and not message.get("more_body"):
                done.set()

        await app(scope, receive, send)

    try:
        async with app.router.lifespan_context(app):  # type: ignore[attr-defined]
            with anyio.fail_after(HANG):
                async with anyio.create_task_group() as tg:
                    for i in range(10):
                        tg.start_soon(request, i)
    finally:
        store.close()
    assert len(order) == 20
    return order


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_requests_arriving_together_get_their_first_events_before_the_rest_are_prepared(
    anyio_backend: str, trace_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Of ten streamed requests started in one turn, the first three have sent their first
    events before the fourth is prepared. Before, every one of the ten was prepared first
    (the first event of the first waited for the preparation of the other nine)."""
    order = await _burst(trace_dir, tmp_path, monkeypatch, frozenset())
    fourth = order.index(("prepared", 3))
    assert {i for kind, i in order[:fourth] if kind == "first event"} == {0, 1, 2}


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_store_false_request_in_a_burst_does_not_wait_for_the_log(
    anyio_backend: str, trace_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `store: false` request writes nothing to the log: arriving last in a burst, it is
    prepared (and answered) before the logged requests that wait for room (it waited with
    them before)."""
    order = await _burst(trace_dir, tmp_path, monkeypatch, frozenset({9}))
    assert order.index(("prepared", 9)) < order.index(("prepared", 3))
    assert order.index(("first event", 9)) < order.index(("prepared", 3))
