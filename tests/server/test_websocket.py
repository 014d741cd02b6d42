"""Issue 32, part 1: WebSocket mode over a real socket, with openai-python's
`client.responses.connect()` (the upgrade used to be a 403).

The conversation directory `chat/` answers a first turn with `0.jsonl` and a request whose
prompt already holds one model turn with `1.jsonl`, so the second answer shows that the second
generation saw the first (its conversation was really spliced in, `store: false` and all).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosedOK, InvalidStatus
from websockets.sync.client import connect
from websockets.typing import Origin

from streamfold.adapters.registry import ReplayEngine
from streamfold.adapters.server import ServerLimits, SocketFramesProtocol, create_app
from streamfold.adapters.server._socket_memory import SocketMemory
from streamfold.adapters.server._socket_protocol import FRAMES
from streamfold.engines import TokenChunk, dump_trace
from streamfold.specs import check
from streamfold.statemachine import parse_sse
from streamfold.statemachine._accel import row_socket_frames

from .helpers import GREETING, LONG_ANSWER, encode, write_traces
from .serving import serve

KEY_A, KEY_B = "sk-alice-0123456789", "sk-bob-9876543210"
SECOND = "<|channel|>final<|message|>You said hello before.<|return|>"


@pytest.fixture(scope="module", params=["frames", "messages"])
def url(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[str]:
    """The server as `streamfold serve` runs it (its protocol takes each batch's frames in one
    write), and on uvicorn's own protocol (one ASGI message per event): the same messages."""
    root = write_traces(tmp_path_factory.mktemp("ws"), {"greeting": GREETING, "long": LONG_ANSWER})
    write_traces(root / "chat", {"0": GREETING, "1": SECOND})
    ws = SocketFramesProtocol if request.param == "frames" else "websockets-sansio"
    with serve(create_app(ReplayEngine(root).engine()), ws=ws) as base:
        yield base


def _client(url: str, key: str = "x") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)


def _until_end(connection: Any) -> list[Any]:
    """The events of one response, up to its terminal event (or an `error` message)."""
    events = []
    for event in connection:
        events.append(event)
        if event.type in ("response.completed", "response.failed", "response.incomplete"):
            return events
        if event.type == "error":
            return events
    raise AssertionError("the connection closed before the response ended")


def test_two_turns_on_one_connection_continue_a_response_the_store_never_held(url: str) -> None:
    client = _client(url)
    with client.responses.connect() as connection:
        connection.response.create(model="chat", input="Hello!", store=False)
        first = _until_end(connection)
        assert first[-1].type == "response.completed"
        first_id = first[-1].response.id
        assert first[-1].response.output_text == "Hello there, how can I help?"
        connection.response.create(
            model="chat", input="What did I say?", store=False, previous_response_id=first_id
        )
        second = _until_end(connection)
    assert second[-1].type == "response.completed", second[-1]
    # 1.jsonl: the prompt held the first turn (without it, 0.jsonl would answer again).
    assert second[-1].response.output_text == "You said hello before."
    assert second[-1].response.previous_response_id == first_id
    # Nothing of either was stored.
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first_id)


def test_a_stored_response_following_a_remembered_one_keeps_the_whole_conversation(
    url: str,
) -> None:
    """docs/websocket.md, untested until the audit: a stored response whose
    `previous_response_id` names a `store: false` response the connection remembers keeps the
    whole conversation, since the one it follows is in no store: its input listing (over HTTP,
    after the socket closed) holds the first turn's input and output before its own."""
    client = _client(url)
    with client.responses.connect() as connection:
        connection.response.create(model="chat", input="Hello!", store=False)
        first = _until_end(connection)[-1].response
        connection.response.create(
            model="chat", input="What did I say?", previous_response_id=first.id
        )
        second = _until_end(connection)[-1].response
    assert second.output_text == "You said hello before."
    listed = client.responses.input_items.list(second.id, order="asc").data
    said = [
        (item.role, part.text)  # type: ignore[union-attr]
        for item in listed
        if item.type == "message"
        for part in item.content  # type: ignore[union-attr]
    ]
    assert said == [
        ("user", "Hello!"),
        ("assistant", "Hello there, how can I help?"),
        ("user", "What did I say?"),
    ]


def test_socket_events_are_the_sse_streams_events(url: str) -> None:
    """The same records, framed as messages: the checker judges the socket's events as it
    judges an SSE stream, and they are the SSE stream's events but for ids and times."""
    with connect(url.replace("http://", "ws://") + "/v1/responses") as socket:
        socket.send(json.dumps({"type": "response.create", "model": "long", "input": "hi"}))
        on_socket = [json.loads(socket.recv(timeout=10))]
        while on_socket[-1]["type"] != "response.completed":
            on_socket.append(json.loads(socket.recv(timeout=10)))
    body = {"model": "long", "input": "hi", "stream": True}
    frames = httpx.post(f"{url}/v1/responses", json=body, timeout=10).content
    over_sse = [json.loads(m.data) for m in parse_sse(frames)]
    assert not check(on_socket), check(on_socket)

    def same(event: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in event.items() if k not in ("response", "item_id", "item")}

    assert [same(e) for e in on_socket] == [same(e) for e in over_sse]


def test_a_bad_message_gets_an_error_and_the_connection_lives(url: str) -> None:
    client = _client(url)
    with client.responses.connect() as connection:
        connection._connection.send(json.dumps({"type": "response.dance"}))  # type: ignore[attr-defined]
        error = connection.recv()
        assert error.type == "error"
        assert error.status == 400 and error.error.param == "type"
        assert error.error.type == "invalid_request_error"
        connection._connection.send("{not json")  # type: ignore[attr-defined]
        assert connection.recv().type == "error"
        connection.response.create(model="nope", input="hi")  # an unknown model: a 404 error
        missing = connection.recv()
        assert missing.type == "error" and missing.status == 404
        assert missing.error.param == "model"
        connection.response.create(model="greeting", input="hi")
        assert _until_end(connection)[-1].type == "response.completed"


def test_a_create_is_checked_as_a_post_body_is(url: str) -> None:
    """Audit of issue 32: nothing pinned that a socket's create is held to the POST checks.
    `background: true` is refused (the API serves no background responses over a socket), a
    limit refuses as it does over HTTP, each an `error` naming `param`, and the connection
    lives. Without the refusal, a background create ran over the socket."""
    with _client(url).responses.connect() as connection:
        send = connection._connection.send  # type: ignore[attr-defined]
        create = {"type": "response.create", "model": "greeting", "input": "hi"}
        send(json.dumps({**create, "background": True}))
        background = connection.recv()
        send(json.dumps({**create, "max_output_tokens": 10**9}))
        too_many = connection.recv()
        send(json.dumps({**create, "metadata": {f"k{i}": "v" for i in range(17)}}))
        metadata = connection.recv()
        connection.response.create(model="greeting", input="hi")
        assert _until_end(connection)[-1].type == "response.completed"
    for error, param in ((background, "background"), (too_many, "max_output_tokens")):
        assert error.type == "error", error
        assert error.status == 400 and error.error.param == param, error
        assert error.error.type == "invalid_request_error"
    assert metadata.type == "error" and metadata.status == 400
    assert metadata.error.param == "metadata", metadata


def test_an_unknown_previous_response_is_previous_response_not_found(url: str) -> None:
    with _client(url).responses.connect() as connection:
        connection.response.create(
            model="greeting", input="hi", store=False, previous_response_id="resp_gone"
        )
        error = connection.recv()
    assert error.type == "error" and error.status == 404
    assert error.error.code == "previous_response_not_found"
    assert error.error.param == "previous_response_id"


def _socket_events(socket: Any) -> list[dict[str, Any]]:
    """The messages of one response on a raw socket, up to its terminal event or an error."""
    events = [json.loads(socket.recv(timeout=10))]
    while events[-1]["type"] not in ("response.completed", "response.failed", "error"):
        events.append(json.loads(socket.recv(timeout=10)))
    return events


def test_response_processed_is_taken_without_a_reply(url: str) -> None:
    """Codex (`send_response_processed`, feature `responses_websocket_response_processed`)
    acknowledges each response it has recorded with `response.processed`, then sends its
    next turn on the same socket and reads that turn's events. The server answered the
    acknowledgement with an `error` ("unknown message type"), which Codex read as the next
    turn's first event: the turn failed. Now nothing answers it, the next create's events
    come first, and the acknowledged response is still there to continue. A malformed one
    (no `response_id`) is still an error naming the param, and the connection lives."""
    with connect(url.replace("http://", "ws://") + "/v1/responses") as socket:
        first = {"type": "response.create", "model": "chat", "input": "Hello!", "store": False}
        socket.send(json.dumps(first))
        done = _socket_events(socket)[-1]
        assert done["type"] == "response.completed", done
        first_id = done["response"]["id"]
        # As Codex writes it (serde_json: compact, `type` first).
        socket.send('{"type":"response.processed","response_id":"' + first_id + '"}')
        second = {
            "type": "response.create",
            "model": "chat",
            "input": "What did I say?",
            "store": False,
            "previous_response_id": first_id,
        }
        socket.send(json.dumps(second))
        events = _socket_events(socket)
        assert events[0]["type"] == "response.created", events[0]
        assert events[-1]["type"] == "response.completed", events[-1]
        assert events[-1]["response"]["output"][-1]["content"][0]["text"] == (
            "You said hello before."
        )
        socket.send(json.dumps({"type": "response.processed"}))
        error = json.loads(socket.recv(timeout=10))
        assert error["type"] == "error" and error["error"]["param"] == "response_id", error
        socket.send(json.dumps({"type": "response.create", "model": "greeting", "input": "hi"}))
        assert _socket_events(socket)[-1]["type"] == "response.completed"


def test_a_warm_up_generates_nothing_and_a_later_create_follows_it(url: str) -> None:
    with _client(url).responses.connect() as connection:
        connection.response.create(model="chat", input="Hello!", store=False, generate=False)
        warm = _until_end(connection)
        assert [e.type for e in warm] == [
            "response.created",
            "response.in_progress",
            "response.completed",
        ]
        assert warm[-1].response.output == []
        connection.response.create(
            model="chat", input="Hi", store=False, previous_response_id=warm[-1].response.id
        )
        answer = _until_end(connection)
    # The warm-up's input is in the prompt, but no model turn: the first turn's answer.
    assert answer[-1].response.output_text == "Hello there, how can I help?"


def test_lanes_echo_their_stream_id(url: str) -> None:
    ws_url = url.replace("http://", "ws://") + "/v1/responses"
    with connect(ws_url) as socket:
        for lane in ("a", "b"):
            create = {"type": "response.create", "model": "greeting", "input": "hi"}
            socket.send(json.dumps({**create, "stream_id": lane}))
        ended: dict[str, int] = {}
        seen: dict[str, list[int]] = {"a": [], "b": []}
        while len(ended) < 2:
            event = json.loads(socket.recv(timeout=10))
            seen[event["stream_id"]].append(event["sequence_number"])
            if event["type"] == "response.completed":
                ended[event["stream_id"]] = event["sequence_number"]
    for lane, numbers in seen.items():
        assert numbers == list(range(ended[lane] + 1))  # each lane's events in order


def test_a_lane_answers_its_creates_one_after_another_in_order(url: str) -> None:
    """Audit of issue 32: creates on one lane are first-in-first-out (the next one starts
    after the previous one's terminal event), and another lane runs beside them; nothing
    pinned the order within a lane."""
    ws_url = url.replace("http://", "ws://") + "/v1/responses"
    with connect(ws_url) as socket:
        for lane, model in (("a", "long"), ("a", "greeting"), ("b", "greeting")):
            create = {"type": "response.create", "model": model, "input": "hi"}
            socket.send(json.dumps({**create, "stream_id": lane}))
        events: list[dict[str, Any]] = []
        while sum(e["type"] == "response.completed" for e in events) < 3:
            events.append(json.loads(socket.recv(timeout=10)))
    lane_a = [e for e in events if e["stream_id"] == "a"]
    starts = [i for i, e in enumerate(lane_a) if e["type"] == "response.created"]
    ends = [i for i, e in enumerate(lane_a) if e["type"] == "response.completed"]
    assert len(starts) == len(ends) == 2
    assert starts[0] == 0 and ends[0] < starts[1]  # the second began after the first ended
    assert [lane_a[i]["response"]["model"] for i in starts] == ["long", "greeting"]
    assert sum(e["type"] == "response.completed" for e in events if e["stream_id"] == "b") == 1


def test_a_closed_socket_cancels_its_running_response(tmp_path: Path) -> None:
    """The client leaves mid-response: the response's log ends cancelled (as a foreground HTTP
    stream whose client leaves), and nothing keeps generating for nobody."""

    ids = [*encode("<|channel|>final<|message|>"), *encode(" a") * 2000, *encode("<|return|>")]
    header = {"grammar": "harmony", "encoding": "o200k_harmony", "response_id": "resp_slow"}
    header |= {"model": "slow", "created_at": 1}
    chunks = [TokenChunk(token_ids=(t,)) for t in ids]
    (tmp_path / "slow.jsonl").write_text(dump_trace(header, chunks, "stop"), encoding="utf-8")
    app = create_app(ReplayEngine(tmp_path, delay=0.005).engine())
    with serve(app) as base:
        ws_url = base.replace("http://", "ws://") + "/v1/responses"
        with connect(ws_url) as socket:
            socket.send(json.dumps({"type": "response.create", "model": "slow", "input": "hi"}))
            created = json.loads(socket.recv(timeout=10))
            response_id = created["response"]["id"]
            json.loads(socket.recv(timeout=10))
        client = _client(base)
        for _ in range(200):
            response = client.responses.retrieve(response_id)
            if response.status != "in_progress":
                break
            time.sleep(0.05)
    assert response.status == "cancelled", response.status
    assert response.error is not None and "client disconnected" in response.error.message


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = write_traces(tmp_path_factory.mktemp("wskeys"), {"greeting": GREETING})
    with serve(create_app(ReplayEngine(root).engine(), api_keys=[KEY_A, KEY_B])) as base:
        yield base


def test_a_socket_needs_an_api_key_as_a_post_does(keyed: str) -> None:
    """Issue 29's keys hold for the socket too: the guard passed every non-HTTP scope through,
    so without this a socket ran the model with no key at all."""
    ws_url = keyed.replace("http://", "ws://") + "/v1/responses"
    with pytest.raises(InvalidStatus) as refused:
        connect(ws_url)
    assert refused.value.response.status_code == 401
    assert json.loads(refused.value.response.body)["error"]["code"] == "invalid_api_key"
    with _client(keyed, KEY_A).responses.connect() as connection:
        connection.response.create(model="greeting", input="hi")
        assert _until_end(connection)[-1].type == "response.completed"


def test_a_socket_sees_only_its_keys_stored_responses(keyed: str) -> None:
    mine = _client(keyed, KEY_A).responses.create(model="greeting", input="hi")
    with _client(keyed, KEY_B).responses.connect() as connection:
        connection.response.create(model="greeting", input="hi", previous_response_id=mine.id)
        error = connection.recv()
    assert error.type == "error" and error.error.code == "previous_response_not_found"


def test_a_page_of_another_origin_cannot_open_a_socket(url: str) -> None:
    """A browser lets any web page open a WebSocket to 127.0.0.1 (no CORS, no preflight) and
    names the page in `Origin`: a keyless local server would run the model for any site."""
    ws_url = url.replace("http://", "ws://") + "/v1/responses"
    with pytest.raises(InvalidStatus) as refused:
        connect(ws_url, origin=Origin("http://evil.example"))
    assert refused.value.response.status_code == 403
    with connect(ws_url, origin=Origin(url)) as socket:  # the server's own pages may
        socket.send(json.dumps({"type": "response.create", "model": "greeting", "input": "hi"}))
        assert json.loads(socket.recv(timeout=10))["type"] == "response.created"


def test_a_lane_may_fork_from_another_lanes_response(url: str) -> None:
    """`stream_id` routes, `previous_response_id` carries the conversation: lane b continues
    what lane a answered (store: false, so from the connection's memory)."""

    def answer(socket: Any, lane: str, **fields: Any) -> dict[str, Any]:
        create = {"type": "response.create", "model": "chat", "store": False, **fields}
        socket.send(json.dumps({**create, "stream_id": lane}))
        while True:
            event = json.loads(socket.recv(timeout=10))
            assert event["type"] != "error", event
            if event["type"] == "response.completed":
                assert event["stream_id"] == lane
                return event["response"]  # type: ignore[no-any-return]

    with connect(url.replace("http://", "ws://") + "/v1/responses") as socket:
        first = answer(socket, "a", input="Hello!")
        second = answer(socket, "b", input="What did I say?", previous_response_id=first["id"])
    text = [
        p["text"] for item in second["output"] if item["type"] == "message" for p in item["content"]
    ]
    assert text == ["You said hello before."]


def test_the_frames_protocol_writes_an_apps_frames_and_declares_itself() -> None:
    """`SocketFramesProtocol` (what `streamfold serve` runs): an app that finds the extension
    in its scope sends several messages' frames as one bytes object; a client (which offered
    permessage-deflate, as openai-python's does) reads each as a message. After a close the
    protocol refuses frames as it refuses messages."""
    seen: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await receive()
            await send({"type": "lifespan.startup.complete"})
            await receive()
            await send({"type": "lifespan.shutdown.complete"})
            return
        seen["extensions"] = dict(scope["extensions"])
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        rows = [(i, "t", json.dumps({"n": i, "pad": "x" * 200 * i})) for i in range(3)]
        await send({"type": FRAMES, "frames": row_socket_frames(rows, "")})
        await send({"type": "websocket.close"})
        try:
            await send({"type": FRAMES, "frames": row_socket_frames(rows, "")})
        except OSError as exc:  # uvicorn's ClientDisconnected
            seen["after_close"] = type(exc).__name__

    with serve(app) as base, connect(base.replace("http://", "ws://") + "/") as socket:
        assert socket.protocol.extensions  # deflate was negotiated
        messages = [json.loads(socket.recv(timeout=10)) for _ in range(3)]
    assert [m["n"] for m in messages] == [0, 1, 2]
    assert FRAMES in seen["extensions"]
    assert seen["after_close"] == "ClientDisconnected"


def test_a_connections_memory_is_bounded_by_bytes_not_only_by_count(tmp_path: Path) -> None:
    """The memory of `store: false` conversations held up to 64 of any size: 64 conversations
    near the body limit (8 MiB each) were half a gigabyte per connection. Now their JSON text
    is bounded together (`websocket_memory_bytes`): the oldest goes, the newest continues."""
    write_traces(tmp_path / "chat", {"0": GREETING, "1": SECOND})
    app = create_app(
        ReplayEngine(tmp_path).engine(), limits=ServerLimits(websocket_memory_bytes=2500)
    )
    with serve(app) as base, _client(base).responses.connect() as connection:
        ids = []
        for pad in ("x", "y"):  # two conversations of ~1.8 kB each: both do not fit
            connection.response.create(model="chat", input=f"Hello! {pad * 1500}", store=False)
            ids.append(_until_end(connection)[-1].response.id)
        connection.response.create(
            model="chat", input="What did I say?", store=False, previous_response_id=ids[0]
        )
        forgotten = connection.recv()
        connection.response.create(
            model="chat", input="What did I say?", store=False, previous_response_id=ids[1]
        )
        kept = _until_end(connection)
    assert forgotten.type == "error", forgotten
    assert forgotten.error.code == "previous_response_not_found"
    assert kept[-1].response.output_text == "You said hello before."


@given(
    st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(0, 400)), min_size=1, max_size=30),
    st.integers(1, 5),
    st.integers(1, 1500),
)
@settings(max_examples=200, deadline=None)
def test_socket_memory_keeps_the_newest_within_both_bounds(
    writes: list[tuple[str, int]], count: int, max_bytes: int
) -> None:
    """Against a model: after any writes, the memory holds the newest conversations that fit
    both bounds together (a conversation larger than the whole budget is not kept), each read
    back as written, and its byte count is their JSON text's."""
    memory = SocketMemory(count, max_bytes)
    model: dict[str, tuple[list[Any], int]] = {}
    for key, size in writes:
        items = [{"type": "message", "text": "z" * size}]
        memory.remember(key, items)
        length = len(json.dumps(items, separators=(",", ":")))
        if length <= max_bytes:
            model.pop(key, None)
            model[key] = (items, length)
            while len(model) > count or sum(n for _, n in model.values()) > max_bytes:
                model.pop(next(iter(model)))
    assert list(memory) == list(model)
    assert {k: memory[k] for k in memory} == {k: v[0] for k, v in model.items()}
    assert memory.bytes == sum(n for _, n in model.values()) <= max_bytes
    assert len(memory) <= count


def _slow_trace(root: Path, tokens: int = 200) -> None:
    ids = [*encode("<|channel|>final<|message|>"), *encode(" a") * tokens, *encode("<|return|>")]
    header = {"grammar": "harmony", "encoding": "o200k_harmony", "response_id": "resp_slow"}
    header |= {"model": "slow", "created_at": 1}
    chunks = [TokenChunk(token_ids=(t,)) for t in ids]
    (root / "slow.jsonl").write_text(dump_trace(header, chunks, "stop"), encoding="utf-8")


def test_a_connection_holds_a_bounded_number_of_creates(tmp_path: Path) -> None:
    """Audit of issue 32 ("the same limits as HTTP"): a lane's queue and the number of lanes
    were unbounded, so one connection could queue any number of creates of up to 8 MiB each
    (an HTTP connection holds one body at a time) and run any number of lanes at once. Past
    `websocket_max_pending` creates queued or running, a create gets an `error` (429, with
    its `stream_id`) and the connection lives; once one ends, creates are taken again."""
    _slow_trace(tmp_path)
    engine = ReplayEngine(tmp_path, delay=0.01).engine()  # 2 s a response at least
    app = create_app(engine, limits=ServerLimits(websocket_max_pending=2))
    create = {"type": "response.create", "model": "slow", "input": "hi", "store": False}
    with serve(app) as base, connect(base.replace("http://", "ws://") + "/v1/responses") as socket:
        for lane in ("a", "a", "b", "c"):  # two taken (one queued behind the other), two not
            socket.send(json.dumps({**create, "stream_id": lane}))
        refused: list[dict[str, Any]] = []
        completed: list[str] = []
        while len(completed) < 2:
            message = json.loads(socket.recv(timeout=30))
            if message["type"] == "error":
                refused.append(message)
            elif message["type"] == "response.completed":
                completed.append(message["stream_id"])
        socket.send(json.dumps({**create, "stream_id": "d"}))
        while (message := json.loads(socket.recv(timeout=30)))["type"] != "response.completed":
            assert message["type"] != "error", message
    assert completed == ["a", "a"]
    assert [m["stream_id"] for m in refused] == ["b", "c"]
    for error in refused:
        assert error["status"] == 429
        assert error["error"]["code"] == "too_many_pending_responses"
        assert "2 responses" in error["error"]["message"]
    assert message["stream_id"] == "d"


def test_idle_lanes_are_bounded_as_creates_are(tmp_path: Path) -> None:
    """Audit of issue 32: every `stream_id` a connection ever named kept its queue and its
    task until the connection closed, so a client naming a new lane for each create grew the
    connection for its whole lifetime (an hour). Lanes are bounded by `websocket_max_pending`
    too: a new one lets the oldest idle one go; naming it again starts it afresh."""
    import gc

    from streamfold.adapters.server._websocket import _Connection

    write_traces(tmp_path, {"greeting": GREETING})
    app = create_app(ReplayEngine(tmp_path).engine(), limits=ServerLimits(websocket_max_pending=4))
    with serve(app) as base, connect(base.replace("http://", "ws://") + "/v1/responses") as socket:
        for n in range(20):
            lane = f"lane-{n % 10}"
            create = {"type": "response.create", "model": "greeting", "input": "hi"}
            socket.send(json.dumps({**create, "stream_id": lane}))
            while (event := json.loads(socket.recv(timeout=10)))["type"] != "response.completed":
                assert event["type"] != "error", event
            assert event["stream_id"] == lane
        connections = [o for o in gc.get_objects() if isinstance(o, _Connection)]
        held = [lane for c in connections for lane in c.lanes if str(lane).startswith("lane-")]
    assert held == ["lane-6", "lane-7", "lane-8", "lane-9"]


def test_a_connection_says_its_limit_is_reached_and_closes_after_answering(
    tmp_path: Path,
) -> None:
    """At the connection's lifetime (OpenAI's: 60 minutes; here half a second) the response
    under way runs to its end, a create queued behind it is refused with the lane's
    `websocket_connection_limit_reached`, then the connection says it (no lane) and closes
    normally. It used to stay open for ever, and a server's end could only cut it."""
    ids = [*encode("<|channel|>final<|message|>"), *encode(" a") * 200, *encode("<|return|>")]
    header = {"grammar": "harmony", "encoding": "o200k_harmony", "response_id": "resp_slow"}
    header |= {"model": "slow", "created_at": 1}
    chunks = [TokenChunk(token_ids=(t,)) for t in ids]
    (tmp_path / "slow.jsonl").write_text(dump_trace(header, chunks, "stop"), encoding="utf-8")
    engine = ReplayEngine(tmp_path, delay=0.01).engine()  # 2 s at least
    app = create_app(engine, limits=ServerLimits(websocket_lifetime_s=0.5))
    create = {"type": "response.create", "model": "slow", "input": "hi", "stream_id": "a"}
    with serve(app) as base, connect(base.replace("http://", "ws://") + "/v1/responses") as socket:
        socket.send(json.dumps(create))
        socket.send(json.dumps(create))  # queued on lane a behind the first
        messages = []
        with pytest.raises(ConnectionClosedOK) as closed:
            while True:
                messages.append(json.loads(socket.recv(timeout=20)))
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000
    types = [m["type"] for m in messages]
    assert types[-3:] == ["response.completed", "error", "error"], types
    assert types.count("response.created") == 1
    lane_error, connection_error = messages[-2:]
    for error in (lane_error, connection_error):
        assert error["status"] == 400
        assert error["error"]["code"] == "websocket_connection_limit_reached"
        assert error["error"]["type"] == "invalid_request_error"
        assert "new websocket connection" in error["error"]["message"]
    assert lane_error["stream_id"] == "a" and "stream_id" not in connection_error
