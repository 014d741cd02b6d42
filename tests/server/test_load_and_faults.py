"""Load and faults against a real server: concurrency, disconnects, restarts. Each test stops
by itself (a deadline, never a wait on the server's good will)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx
import pytest
from openai import OpenAI
from starlette.applications import Starlette
from starlette.routing import Mount

from streamfold.adapters.server import MemoryEventStore, SQLiteEventStore, StoreError, create_app
from streamfold.specs import check
from streamfold.statemachine._sse import SSEParser
from tests.ports import free_port

from .conftest import Server, make_engine
from .serving import serve


def parse(body: bytes) -> list[dict]:
    parser = SSEParser()
    messages = parser.feed(body) + parser.close()
    return [json.loads(m.data) for m in messages]


def wait_for(condition, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_200_concurrent_streams_are_all_conformant_and_complete(server: Server) -> None:
    n = 200
    bodies: list[bytes] = []
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=60) as client:

        async def one(i: int) -> None:
            model = "long" if i % 4 == 0 else "greeting"
            body = b""
            async with client.stream(
                "POST", "/v1/responses", json={"model": model, "input": f"hi {i}", "stream": True}
            ) as reply:
                assert reply.status_code == 200
                assert reply.headers["content-type"].startswith("text/event-stream")
                async for chunk in reply.aiter_bytes():
                    body += chunk
            bodies.append(body)

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for i in range(n):
                    tg.start_soon(one, i)
    assert len(bodies) == n
    ids = set()
    for body in bodies:
        events = parse(body)
        assert not check(events), check(events)
        assert events[-1]["type"] == "response.completed"
        ids.add(events[0]["response"]["id"])
    assert len(ids) == n
    assert server.engine.open == 0


def test_clients_that_disconnect_mid_stream_leave_no_generation_running(server: Server) -> None:
    started = server.engine.started
    ids = []
    for _ in range(10):
        with httpx.stream(
            "POST",
            f"{server.url}/v1/responses",
            json={"model": "slow", "input": "x", "stream": True},
            timeout=10,
        ) as reply:
            parser, events = SSEParser(), []
            for chunk in reply.iter_bytes():
                events += [json.loads(m.data) for m in parser.feed(chunk)]
                if len(events) >= 6:
                    break
            ids.append(events[0]["response"]["id"])
        # leaving the block closes the connection mid-stream
    assert server.engine.started == started + 10
    wait_for(lambda: server.engine.open == 0)
    client = OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
    for response_id in ids:
        wait_for(lambda rid=response_id: client.responses.retrieve(rid).status != "in_progress")
        stored = client.responses.retrieve(response_id)
        assert stored.status == "cancelled"
        assert "disconnected" in stored.error.message
        log = [
            json.loads(e.model_dump_json(exclude_unset=True))
            for e in client.responses.retrieve(response_id, stream=True)
        ]
        assert not check(log) and log[-1]["type"] == "response.failed"


def test_a_restarted_server_loses_no_finished_response(trace_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "responses.sqlite3"
    first_store = SQLiteEventStore(path)
    engine = make_engine(trace_dir)
    kept: dict[str, tuple[dict, bytes]] = {}
    with serve(create_app(engine.engine(), store=first_store)) as url:
        client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        streamed = list(client.responses.create(model="greeting", input="hi", stream=True))
        plain = client.responses.create(model="weather_call", input="hi")
        background = client.responses.create(model="long", input="x", background=True)
        wait_for(lambda: client.responses.retrieve(background.id).status == "completed")
        unfinished = client.responses.create(model="slow", input="x", background=True)
        for response_id in (streamed[0].response.id, plain.id, background.id):
            snapshot = httpx.get(f"{url}/v1/responses/{response_id}").json()
            log = httpx.get(f"{url}/v1/responses/{response_id}?stream=true").content
            kept[response_id] = (snapshot, log)
    # Shutting down cancelled the background response still running, in its log.
    first_store.close()

    second_store = SQLiteEventStore(path)
    with serve(create_app(make_engine(trace_dir).engine(), store=second_store)) as url:
        for response_id, (snapshot, log) in kept.items():
            assert httpx.get(f"{url}/v1/responses/{response_id}").json() == snapshot
            assert httpx.get(f"{url}/v1/responses/{response_id}?stream=true").content == log
            tail = httpx.get(f"{url}/v1/responses/{response_id}?stream=true&starting_after=3")
            assert parse(tail.content)[0]["sequence_number"] == 4
            assert not check(parse(log))
        cut = httpx.get(f"{url}/v1/responses/{unfinished.id}").json()
        assert cut["status"] == "cancelled" and "shut down" in cut["error"]["message"]
        # The conversation a finished response answered survives too: it can be continued.
        client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        call = plain.output[-1]
        follow = client.responses.create(
            model="greeting",
            previous_response_id=plain.id,
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "18C"}],  # type: ignore[union-attr]
        )
        assert follow.status == "completed" and follow.previous_response_id == plain.id
        assert not check(
            parse(httpx.get(f"{url}/v1/responses/{unfinished.id}?stream=true").content)
        )
    second_store.close()


def test_a_response_whose_server_was_killed_is_ended_on_restart(
    trace_dir: Path, tmp_path: Path
) -> None:
    """A server killed mid-generation (SIGKILL: no shutdown path runs) left a log without a
    terminal event; the next server on that store ends it in `response.failed`, keeping the
    text already streamed, so a client retrieving or resuming it is not left waiting."""
    path = tmp_path / "responses.sqlite3"
    port = free_port()
    streamfold = Path(sys.executable).parent / "streamfold"
    process = subprocess.Popen(
        [str(streamfold), "serve", "--traces", str(trace_dir), "--replay-delay", "0.05",
         "--store", str(path), "--port", str(port), "--log-level", "warning"],
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"

        def up() -> bool:
            try:
                return httpx.get(f"{url}/v1/responses/resp_none").status_code == 404
            except httpx.TransportError:
                return False

        wait_for(up, timeout=60)
        client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        response_id = client.responses.create(model="long", input="x", background=True).id
        reader = SQLiteEventStore(path, lock=False)  # the server holds the store

        def some_text_stored() -> bool:
            records = anyio.run(reader.read, response_id)
            return sum(r.type == "response.output_text.delta" for r in records) >= 5

        wait_for(some_text_stored, timeout=30)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        assert not anyio.run(reader.snapshot, response_id).finished  # type: ignore[union-attr]
        reader.close()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)

    store = SQLiteEventStore(path)
    with serve(create_app(make_engine(trace_dir).engine(), store=store)) as url:
        ended = httpx.get(f"{url}/v1/responses/{response_id}").json()
        assert ended["status"] == "failed"
        assert "stopped before the response finished" in ended["error"]["message"]
        message = ended["output"][0]
        assert message["status"] == "incomplete"
        streamed = message["content"][0]["text"]
        full = " ".join(f"word{i}" for i in range(60))
        assert streamed.startswith("word0 word1") and full.startswith(streamed)
        log = parse(httpx.get(f"{url}/v1/responses/{response_id}?stream=true").content)
        assert not check(log)
        assert log[-1]["type"] == "response.failed"
        deltas = "".join(e["delta"] for e in log if e["type"] == "response.output_text.delta")
        assert deltas == streamed
    store.close()


def test_mounted_in_another_app_with_its_lifespan(trace_dir: Path) -> None:
    api = create_app(make_engine(trace_dir).engine())
    outer = Starlette(routes=[Mount("/llm", app=api)], lifespan=api.router.lifespan_context)
    with serve(outer) as url:
        client = OpenAI(base_url=f"{url}/llm/v1", api_key="x", max_retries=0)
        assert client.responses.create(model="greeting", input="hi").status == "completed"
        created = client.responses.create(model="greeting", input="hi", background=True)
        wait_for(lambda: client.responses.retrieve(created.id).status == "completed")


def test_mounted_without_lifespan_refuses_background_with_a_clear_error(trace_dir: Path) -> None:
    api = create_app(make_engine(trace_dir).engine())
    with serve(Starlette(routes=[Mount("/llm", app=api)])) as url:
        reply = httpx.post(
            f"{url}/llm/v1/responses", json={"model": "greeting", "input": "hi", "background": True}
        )
        assert reply.status_code == 503
        assert "lifespan" in reply.json()["error"]["message"]
        reply = httpx.post(f"{url}/llm/v1/responses", json={"model": "greeting", "input": "hi"})
        assert reply.json()["status"] == "completed"


class FailingStore(MemoryEventStore):
    """A store whose disk fills up after the first write."""

    async def append(self, response_id, records, *, background=False):  # type: ignore[no-untyped-def]
        if await self.snapshot(response_id) is not None:
            raise StoreError("disk full")
        await super().append(response_id, records, background=background)


def test_a_failing_store_does_not_take_the_server_down(trace_dir: Path) -> None:
    """Regression (issue 14): a run whose store write failed stayed in memory forever and was
    answered as stored. Now it ends failed, says so, and leaves nothing behind but a note."""
    app = create_app(make_engine(trace_dir).engine(), store=FailingStore())
    service = app.state.streamfold
    with serve(app) as url:
        client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        created = client.responses.create(model="long", input="x", background=True)
        wait_for(lambda: client.responses.retrieve(created.id).status != "in_progress")
        failed = client.responses.retrieve(created.id)
        assert failed.status == "failed" and "not stored" in failed.error.message
        assert created.id not in service.live
        # A streaming client sees the failure in-band, after every event it was sent.
        events = [
            json.loads(e.model_dump_json(exclude_unset=True))
            for e in client.responses.create(model="long", input="x", stream=True)
        ]
        assert not check(events) and events[-1]["type"] == "response.failed"
        assert "not stored" in events[-1]["response"]["error"]["message"]
        # The server still answers, background and foreground alike.
        assert (
            client.responses.create(model="greeting", input="hi", store=False).status == "completed"
        )
        again = client.responses.create(model="greeting", input="hi", background=True)
        assert again.status == "in_progress"
        wait_for(lambda: not service.live)


def test_a_response_the_store_refused_streams_as_the_failed_response(trace_dir: Path) -> None:
    """Issue 29: after the disk filled mid-response, streaming that response gave a lone
    `error` event (checker rule R4); it streams as the failed response it is."""
    app = create_app(make_engine(trace_dir).engine(), store=FailingStore())
    with serve(app) as url:
        client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        created = client.responses.create(model="long", input="x", background=True)
        wait_for(lambda: client.responses.retrieve(created.id).status != "in_progress")
        streamed = [
            json.loads(e.model_dump_json(exclude_unset=True))
            for e in client.responses.retrieve(created.id, stream=True)
        ]
        assert not check(streamed)
        assert [e["type"] for e in streamed] == [
            "response.created",
            "response.in_progress",
            "response.failed",
        ]
        assert "not stored" in streamed[-1]["response"]["error"]["message"]
        after = client.responses.retrieve(created.id, stream=True, starting_after=1)
        assert [e.type for e in after] == ["response.failed"]


def test_a_non_streaming_client_that_leaves_aborts_its_generation(trace_dir: Path) -> None:
    """Regression: a foreground non-streaming request kept generating after its client left."""
    from streamfold.adapters.registry import ReplayEngine

    from .helpers import ScriptedEngine

    engine = ScriptedEngine(ReplayEngine(trace_dir), delays={"slow": 0.2})  # ~30 s to finish
    app = create_app(engine.engine(), store=MemoryEventStore())
    with serve(app) as url:
        client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        client.responses.create(model="greeting", input="warm up")  # loads the vocabulary
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{url}/v1/responses", json={"model": "slow", "input": "x"}, timeout=1.0)
        wait_for(lambda: engine.started == 2, timeout=5.0)
        # Far sooner than the ~30 s the answer takes: the engine was aborted, not finished.
        wait_for(lambda: engine.open == 0, timeout=5.0)
