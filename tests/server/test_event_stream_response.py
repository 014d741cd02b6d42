"""`EventStreamResponse`'s disconnect watcher, on both backends (on asyncio it is a bare task,
on trio a task group's): a client that leaves, or whose connection fails, ends the stream and
closes its body at once, and a stream that ends leaves no watcher behind."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
import sniffio

from streamfold.adapters.server._sse import EventStreamResponse
from streamfold.adapters.server._store import EventRecord, Records

pytestmark = pytest.mark.anyio

FIRST = Records([EventRecord(0, "a", "{}")])
LAST = Records([EventRecord(1, "response.completed", "{}")])  # a terminal event: the end
LATE = Records([EventRecord(2, "late", "{}")])


class Body:
    """A body that sends one frame, then waits for an engine that never answers (or ends at
    once, with `endless=False`), and records its close."""

    def __init__(self, *, endless: bool = True) -> None:
        self.endless = endless
        self.closed = False
        self.sent = 0

    def __aiter__(self) -> AsyncIterator[Records]:
        return self

    async def __anext__(self) -> Records:
        self.sent += 1
        if self.sent == 1:
            return FIRST
        if not self.endless:
            if self.sent == 2:
                return LAST
            raise StopAsyncIteration
        await anyio.sleep_forever()
        raise AssertionError

    async def aclose(self) -> None:
        self.closed = True


def _tasks() -> int:
    return len(asyncio.all_tasks()) if sniffio.current_async_library() == "asyncio" else 0


async def _call(body: Body, receive: Any) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    with anyio.fail_after(5):  # the watcher ends the stream, not this limit
        await EventStreamResponse(body)({"type": "http"}, receive, send)
    return messages


async def test_a_client_that_leaves_ends_the_stream_and_closes_its_body() -> None:
    calls = 0

    async def receive() -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 1:
            return {"type": "http.request", "body": b"", "more_body": False}
        await anyio.sleep(0.05)
        return {"type": "http.disconnect"}

    body = Body()
    messages = await _call(body, receive)
    assert body.closed and calls == 2
    assert [m["type"] for m in messages] == ["http.response.start", "http.response.body"]


async def test_a_connection_that_fails_ends_the_stream_and_closes_its_body() -> None:
    """A receive that raises (a broken connection) ends the stream as a disconnect does; it
    does not fail the request with an error nobody can read."""

    async def receive() -> dict[str, Any]:
        await anyio.sleep(0.05)
        raise OSError("connection reset")

    body = Body()
    await _call(body, receive)
    assert body.closed


async def test_a_stream_that_ends_leaves_no_watcher_behind() -> None:
    async def receive() -> dict[str, Any]:
        await anyio.sleep_forever()
        raise AssertionError

    before = _tasks()
    body = Body(endless=False)
    messages = await _call(body, receive)
    await anyio.sleep(0)  # the stopped watcher takes its cancellation
    await anyio.sleep(0)
    assert _tasks() == before
    assert body.closed
    assert messages[-1]["more_body"] is False


async def _never_receive() -> dict[str, Any]:
    await anyio.sleep_forever()
    raise AssertionError


async def test_a_body_runs_on_to_its_end_after_its_last_frames() -> None:
    """After the write that ends the body, the body's generator finishes as it would on its
    own (its cleanup runs, no GeneratorExit is thrown into it), so nothing is left to close."""
    steps: list[str] = []

    async def body() -> AsyncIterator[Records]:
        try:
            yield FIRST
            yield LAST
            steps.append("ran on")
        except GeneratorExit:
            steps.append("closed")
            raise

    messages = await _call(body(), _never_receive)  # type: ignore[arg-type]
    assert steps == ["ran on"]
    assert [(m["type"], m.get("more_body")) for m in messages] == [
        ("http.response.start", None),
        ("http.response.body", True),
        ("http.response.body", False),
    ]


async def test_bytes_after_the_last_frames_are_not_sent_and_the_body_is_closed() -> None:
    steps: list[str] = []

    async def body() -> AsyncIterator[Records]:
        try:
            yield LAST
            yield LATE
            steps.append("ran on")
        finally:
            steps.append("finally")

    messages = await _call(body(), _never_receive)  # type: ignore[arg-type]
    assert steps == ["finally"]
    assert [m.get("body") for m in messages[1:]] == [b"event: response.completed\ndata: {}\n\n"]
    assert messages[-1]["more_body"] is False
