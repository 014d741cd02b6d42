"""Issue 32 part 2: the Conversations API, over a real socket, with the clients that use it.

Each server below runs on the replay engine with conversation directories (`DIR/<model>/N.jsonl`
answers the request whose prompt already holds N model turns), so a reply proves which turns
the prompt held. Both stores serve every test (memory, SQLite). The peer bugs of
`reference/control-and-state.md` section 2 are pinned one test each.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamfold.adapters.registry import ReplayEngine
from streamfold.adapters.server import MemoryEventStore, SQLiteEventStore, create_app
from streamfold.engines.vocab import harmony_encoding

from .helpers import ScriptedEngine, write_traces
from .serving import serve


def _turn(n: int) -> str:
    return (
        f"<|channel|>analysis<|message|>Thinking about turn {n}.<|end|>"
        f"<|start|>assistant<|channel|>final<|message|>Answer {n}.<|return|>"
    )


CALL = (
    "<|channel|>analysis<|message|>I need the weather tool.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city":"Paris"}<|call|>'
)
TOOLS: Any = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]


@attrs.define
class Served:
    url: str
    client: openai.OpenAI
    engine: ScriptedEngine
    store: Any

    def raw(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.request(method, f"{self.url}/v1{path}", timeout=30, **kwargs)

    def prompt(self) -> str:
        """The last prompt the engine was given, as text."""
        return str(harmony_encoding().decode(list(self.engine.requests[-1].prompt_token_ids)))


@pytest.fixture(scope="module", params=["memory", "sqlite"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("conversations")
    write_traces(root / "chat", {str(n): _turn(n) for n in range(4)})
    write_traces(root / "tools", {"0": CALL, "1": _turn(1)})
    write_traces(root, {"broken": _turn(0)})
    engine = ScriptedEngine(ReplayEngine(root), broken={"broken"}, fail_after=3)
    if request.param == "sqlite":
        store: Any = SQLiteEventStore(tmp_path_factory.mktemp("store") / "s.sqlite3")
    else:
        store = MemoryEventStore()
    with serve(create_app(engine.engine(), store=store)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=30)
        yield Served(url=url, client=client, engine=engine, store=store)
    if request.param == "sqlite":
        store.close()


def _user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


def _ids(page: Any) -> list[str]:
    return [item.id for item in page]


# --- the clients ------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_agents_sdk_conversations_session_over_several_turns(served: Served) -> None:
    """The Agents SDK's `OpenAIConversationsSession`: each turn's reply is the trace of its
    turn, so the server's prompt held every earlier turn the session stored; reasoning items
    go back and forth with their ids; pop_item and clear_session work."""
    import agents
    from openai import AsyncOpenAI

    agents.set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=f"{served.url}/v1", api_key="x", max_retries=0)
    try:
        session = agents.OpenAIConversationsSession(openai_client=client)
        agent = agents.Agent(
            name="assistant",
            model=agents.OpenAIResponsesModel(model="chat", openai_client=client),
        )
        for n in range(3):
            result = await agents.Runner.run(agent, f"Question {n}", session=session)
            assert result.final_output == f"Answer {n}."
        assert f"Thinking about turn {2}" not in served.prompt()  # harmony drops old analysis
        items = await session.get_items()
        assert [(i["type"], i.get("role")) for i in items] == [
            ("message", "user"),
            ("reasoning", None),
            ("message", "assistant"),
        ] * 3
        assert items[4]["content"][0]["text"] == "Thinking about turn 1."
        assert len(await session.get_items(limit=2)) == 2
        popped = await session.pop_item()
        assert popped is not None and popped["content"][0]["text"] == "Answer 2."
        assert len(await session.get_items()) == 8
        conversation_id = session.session_id
        await session.clear_session()
        assert served.raw("GET", f"/conversations/{conversation_id}").status_code == 404
    finally:
        await client.close()


@pytest.mark.parametrize("order", ["asc", "desc"])
def test_openai_items_list_auto_paginates(served: Served, order: str) -> None:
    """openai-python's auto-pagination walks `after`/`has_more` to the end, in both orders."""
    client = served.client
    conversation = client.conversations.create(items=[_user("m0")])
    texts = ["m0"]
    for start in (1, 21, 41):
        batch = [_user(f"m{i}") for i in range(start, min(start + 20, 45))]
        listed = client.conversations.items.create(conversation.id, items=batch)
        assert len(listed.data) == len(batch) and not listed.has_more
        texts += [f"m{i}" for i in range(start, min(start + 20, 45))]
    seen = [
        item.content[0].text  # type: ignore[union-attr]
        for item in client.conversations.items.list(conversation.id, limit=7, order=order)  # type: ignore[arg-type]
    ]
    assert seen == (texts if order == "asc" else texts[::-1])
    first = client.conversations.items.list(conversation.id)  # API defaults: 20, newest first
    assert len(first.data) == 20 and first.has_more
    assert first.data[0].content[0].text == "m44"  # type: ignore[union-attr]


def test_openai_python_conversation_crud(served: Served) -> None:
    client = served.client
    made = client.conversations.create(items=[_user("hi")], metadata={"topic": "demo"})
    assert made.object == "conversation" and made.metadata == {"topic": "demo"}
    assert client.conversations.retrieve(made.id).id == made.id
    updated = client.conversations.update(made.id, metadata={"topic": "other"})
    assert updated.metadata == {"topic": "other"}
    assert client.conversations.retrieve(made.id).metadata == {"topic": "other"}
    item_id = client.conversations.items.list(made.id).data[0].id
    item = client.conversations.items.retrieve(item_id, conversation_id=made.id)
    assert item.id == item_id and item.type == "message"
    after_delete = client.conversations.items.delete(item_id, conversation_id=made.id)
    assert after_delete.object == "conversation" and after_delete.id == made.id
    assert client.conversations.items.list(made.id).data == []
    deleted = client.conversations.delete(made.id)
    assert (deleted.id, deleted.deleted, deleted.object) == (made.id, True, "conversation.deleted")
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(made.id)


# --- conversation on POST /v1/responses --------------------------------------------------------


def test_response_in_a_conversation_reads_it_and_appends_input_and_output(served: Served) -> None:
    client = served.client
    conversation = client.conversations.create(items=[_user("Question 0")])
    first = client.responses.create(model="chat", input="Ignored", conversation=conversation.id)
    assert first.conversation is not None and first.conversation.id == conversation.id
    # The conversation's item was the prompt's start, the request's input came after it.
    assert first.output_text == "Answer 0."
    items = client.conversations.items.list(conversation.id, order="asc").data
    assert [i.type for i in items] == ["message", "message", "reasoning", "message"]
    assert [i.id for i in items[2:]] == [o.id for o in first.output]
    # The input as a response's input_items lists it, with the same ids.
    listed = client.responses.input_items.list(first.id, order="asc").data
    assert [i.id for i in listed] == [i.id for i in items[:2]]
    second = client.responses.create(
        model="chat", input="Question 1", conversation={"id": conversation.id}, stream=False
    )
    assert second.output_text == "Answer 1."  # the prompt held the first turn
    assert len(client.conversations.items.list(conversation.id).data) == 7


def test_reasoning_items_are_kept_on_replay(served: Served) -> None:
    """smg's history.rs dropped `reasoning` items when it replayed a conversation, so a tool
    chain continued without the model's reasoning. Harmony keeps analysis inside an open tool
    chain: the prompt of the next turn must hold it."""
    client = served.client
    conversation = client.conversations.create()
    call = client.responses.create(
        model="tools", input="Weather in Paris?", conversation=conversation.id, tools=TOOLS
    )
    assert [o.type for o in call.output] == ["reasoning", "function_call"]
    call_id = call.output[1].call_id  # type: ignore[union-attr]
    answer = client.responses.create(
        model="tools",
        input=[{"type": "function_call_output", "call_id": call_id, "output": "sunny"}],
        conversation=conversation.id,
        tools=TOOLS,
    )
    assert answer.output_text == "Answer 1."
    assert "I need the weather tool." in served.prompt()
    kinds = [i.type for i in client.responses.input_items.list(answer.id, order="asc").data]
    assert kinds == ["message", "reasoning", "function_call", "function_call_output"]


def test_conversation_errors_on_responses(served: Served) -> None:
    client = served.client
    conversation = client.conversations.create()
    earlier = client.responses.create(model="chat", input="hi")
    with pytest.raises(openai.BadRequestError) as both:
        client.responses.create(
            model="chat", input="hi", conversation=conversation.id, previous_response_id=earlier.id
        )
    assert both.value.body["param"] == "conversation"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError) as unknown:
        client.responses.create(model="chat", input="hi", conversation="conv_unknown")
    assert unknown.value.body["param"] == "conversation"  # type: ignore[index]
    for bad in (5, {"name": "x"}, ""):
        reply = served.raw(
            "POST", "/responses", json={"model": "chat", "input": "hi", "conversation": bad}
        )
        assert reply.status_code == 400 and reply.json()["error"]["param"] == "conversation"
    with pytest.raises(openai.BadRequestError) as unstored:
        client.responses.create(model="chat", input="hi", conversation=conversation.id, store=False)
    assert unstored.value.body["param"] == "store"  # type: ignore[index]
    assert client.conversations.items.list(conversation.id).data == []


def test_a_failed_response_appends_nothing(served: Served) -> None:
    client = served.client
    conversation = client.conversations.create(items=[_user("hi")])
    failed = client.responses.create(model="broken", input="hi", conversation=conversation.id)
    assert failed.status == "failed"
    assert len(client.conversations.items.list(conversation.id).data) == 1


# --- peer bugs ---------------------------------------------------------------------------------


def test_has_more_is_exact_on_a_full_last_page(served: Served) -> None:
    """smg: `has_more = len == limit`, true when the last page is exactly full, so a paginator
    asks once more. ogx #5612: `has_more` hard-coded false lost every page after the first."""
    conversation = served.client.conversations.create(items=[_user(f"m{i}") for i in range(10)])
    path = f"/conversations/{conversation.id}/items"
    assert served.raw("GET", path, params={"limit": 10}).json()["has_more"] is False
    first = served.raw("GET", path, params={"limit": 5}).json()
    assert first["has_more"] is True
    second = served.raw("GET", path, params={"limit": 5, "after": first["last_id"]}).json()
    assert len(second["data"]) == 5 and second["has_more"] is False


def test_after_is_honoured(served: Served) -> None:
    """ogx #5612: `after` ignored, so every page was the first."""
    conversation = served.client.conversations.create(items=[_user(f"m{i}") for i in range(6)])
    path = f"/conversations/{conversation.id}/items"
    pages = []
    after = None
    for _ in range(3):
        params: dict[str, Any] = {"limit": 2, "order": "asc"}
        if after is not None:
            params["after"] = after
        page = served.raw("GET", path, params=params).json()
        pages.append([item["content"][0]["text"] for item in page["data"]])
        after = page["last_id"]
    assert pages == [["m0", "m1"], ["m2", "m3"], ["m4", "m5"]]
    unknown = served.raw("GET", path, params={"after": "msg_nowhere"})
    assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "after"


def test_errors_are_openai_error_objects_naming_the_param(served: Served) -> None:
    """smg answered `{"error": "<string>"}`; the SDK reads `error.message`, `param`, `code`."""
    conversation = served.client.conversations.create(items=[_user("hi")])
    items = f"/conversations/{conversation.id}/items"
    cases = [
        ("GET", "/conversations/conv_nowhere", {}, 404, "conversation_id"),
        (
            "POST",
            "/conversations/conv_nowhere/items",
            {"json": {"items": [_user("x")]}},
            404,
            "conversation_id",
        ),
        ("GET", items, {"params": {"limit": 0}}, 400, "limit"),
        ("GET", items, {"params": {"limit": 101}}, 400, "limit"),
        ("GET", items, {"params": {"limit": "many"}}, 400, "limit"),
        ("GET", items, {"params": {"order": "sideways"}}, 400, "order"),
        ("GET", items, {"params": {"include[]": "nothing.here"}}, 400, "include"),
        ("GET", f"{items}/msg_nowhere", {}, 404, "item_id"),
        ("DELETE", f"{items}/msg_nowhere", {}, 404, "item_id"),
        ("POST", "/conversations", {"json": {"items": [_user("x")] * 21}}, 400, "items"),
        (
            "POST",
            "/conversations",
            {"json": {"items": [{"role": "nobody", "content": "x"}]}},
            400,
            "items[0].role",
        ),
        (
            "POST",
            "/conversations",
            {"json": {"items": [_user("x"), {"type": "bogus"}]}},
            400,
            "items[1].type",
        ),
        (
            "POST",
            "/conversations",
            {"json": {"metadata": {f"k{i}": "v" for i in range(17)}}},
            400,
            "metadata",
        ),
        ("POST", "/conversations", {"json": {"metadata": {"k": 1}}}, 400, "metadata"),
        (
            "POST",
            "/conversations",
            {"content": b"{not json", "headers": {"content-type": "application/json"}},
            400,
            None,
        ),
        ("POST", f"/conversations/{conversation.id}", {"json": {}}, 400, "metadata"),
        ("POST", items, {"json": {"items": []}}, 400, "items"),
        (
            "POST",
            items,
            {"json": {"items": [{"role": "user", "content": "x", "id": "m1"}] * 2}},
            400,
            "items[1].id",
        ),
    ]
    for method, path, kwargs, status, param in cases:
        reply = served.raw(method, path, **kwargs)
        assert reply.status_code == status, (path, kwargs, reply.text)
        error = reply.json()["error"]
        assert isinstance(error, dict), reply.text
        assert set(error) == {"message", "type", "param", "code"} and error["message"]
        assert error["param"] == param, (path, kwargs, error)
    existing = served.raw("GET", items).json()["data"][0]["id"]
    again = served.raw("POST", items, json={"items": [{**_user("x"), "id": existing}]})
    assert again.status_code == 400
    assert again.json()["error"]["code"] == "item_already_in_conversation"


def test_include_decides_whether_output_text_logprobs_are_listed(served: Served) -> None:
    """smg ignored `include`: items came back the same whatever it asked. Here the logprobs of
    a stored output text are listed, and retrieved, only with
    `include=["message.output_text.logprobs"]`; without it the text comes without them."""
    logprob = {"token": "Hi", "logprob": -0.25, "bytes": [72, 105], "top_logprobs": []}
    dumped = {
        "id": "msg_with_logprobs",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [
            {"type": "output_text", "text": "Hi", "annotations": [], "logprobs": [logprob]}
        ],
    }
    conversation = served.client.conversations.create(items=[dumped])
    items = f"/conversations/{conversation.id}/items"
    include = {"include": ["message.output_text.logprobs"]}
    for path in (items, f"{items}/msg_with_logprobs"):
        plain, asked = (served.raw("GET", path, params=p).json() for p in ({}, include))
        plain_part = (plain["data"][0] if "data" in plain else plain)["content"][0]
        asked_part = (asked["data"][0] if "data" in asked else asked)["content"][0]
        assert plain_part["text"] == asked_part["text"] == "Hi"
        assert "logprobs" not in plain_part or not plain_part["logprobs"], plain_part
        assert asked_part["logprobs"] == [logprob], asked_part
    typed = served.client.conversations.items.list(
        conversation.id, include=["message.output_text.logprobs"]
    )
    assert typed.data[0].content[0].logprobs[0].logprob == -0.25  # type: ignore[union-attr]


def test_an_unusual_item_is_stored_and_listed_without_a_500(served: Served) -> None:
    """stdapi #260: an `additional_tools` item was stored, then every later list of the
    conversation was a 500 for its whole life. Items of every ConversationItem kind the server
    does not replay are kept as they came and listed back; a response still runs."""
    client = served.client
    unusual: list[Any] = [
        {"type": "additional_tools", "role": "developer", "tools": [TOOLS[0]]},
        {"type": "compaction", "id": "cmp_1", "encrypted_content": "opaque"},
        {"type": "program", "id": "prg_1", "call_id": "p1", "code": "x = 1", "status": "completed"},
        {
            "type": "web_search_call",
            "id": "ws_1",
            "status": "completed",
            "action": {"type": "search", "query": "q"},
        },
    ]
    conversation = client.conversations.create(items=[_user("Question 0"), *unusual])
    raw = served.raw("GET", f"/conversations/{conversation.id}/items", params={"order": "asc"})
    assert raw.status_code == 200
    assert [i["type"] for i in raw.json()["data"]] == ["message"] + [i["type"] for i in unusual]
    assert raw.json()["data"][2] == unusual[1]
    typed = client.conversations.items.list(conversation.id, order="asc").data
    assert [i.type for i in typed][1:] == [i["type"] for i in unusual]
    reply = client.responses.create(model="chat", input="More", conversation=conversation.id)
    assert reply.status == "completed"
    assert served.raw("GET", f"/conversations/{conversation.id}/items").status_code == 200


def test_items_are_stored(served: Served) -> None:
    """llama-stack #4718: items were accepted and never stored. Here every way in stores them:
    create, items.create (output-shaped, with ids and status, as the Agents SDK dumps them),
    and a response's input and output; and they are in the store itself."""
    client = served.client
    conversation = client.conversations.create(items=[_user("one")])
    dumped = {
        "id": "msg_dumped",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "two", "annotations": [], "logprobs": []}],
    }
    reasoning = {
        "id": "rs_dumped",
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "hmm"}],
    }
    client.conversations.items.create(conversation.id, items=[reasoning, dumped])  # type: ignore[list-item]
    client.responses.create(model="chat", input="three", conversation=conversation.id)
    ids = [i.id for i in client.conversations.items.list(conversation.id, order="asc").data]
    assert ids[1:3] == ["rs_dumped", "msg_dumped"] and len(ids) == 6
    assert (
        served.raw("GET", f"/conversations/{conversation.id}/items/msg_dumped").json()["content"][
            0
        ]["text"]
        == "two"
    )
    import anyio

    page = anyio.run(
        lambda: served.store.conversation_items(conversation.id, after=None, limit=100, order="asc")
    )
    assert [json.loads(text)["id"] for text in page.items] == ids


# --- the store ---------------------------------------------------------------------------------


def _log(response_id: str, status: str) -> list[Any]:
    """A response's log: created, in progress, its end (`status`) with one output message."""
    from streamfold.adapters.server import EventRecord

    def event(seq: int, kind: str, state: str, output: list[Any]) -> EventRecord:
        response = {"id": response_id, "object": "response", "status": state, "output": output}
        data = {"type": kind, "sequence_number": seq, "response": response}
        return EventRecord(seq, kind, json.dumps(data))

    message = {
        "id": f"msg_{response_id}_0",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [],
    }
    end = {"completed": "response.completed", "failed": "response.failed"}[status]
    return [
        event(0, "response.created", "in_progress", []),
        event(1, "response.in_progress", "in_progress", []),
        event(2, end, status, [message]),
    ]


def _stores(tmp_path: Path) -> list[Any]:
    return [MemoryEventStore(), SQLiteEventStore(tmp_path / "s.sqlite3")]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_bound_response_appends_with_its_terminal_event_only(tmp_path: Path) -> None:
    """Input and output join the conversation in the write of the terminal event: not before
    (a crash mid-response leaves the conversation as it was), and not for a failed response."""
    from streamfold.adapters.server._conversation_store import StoredConversation

    for store in _stores(tmp_path):
        await store.create_conversation(StoredConversation(id="conv_1", created_at=1), [])
        user = (
            "msg_in",
            json.dumps({"id": "msg_in", "type": "message", "role": "user", "content": []}),
        )
        for response_id, status in (("resp_a", "completed"), ("resp_b", "failed")):
            await store.bind_conversation(
                response_id, "conv_1", [user] if status == "completed" else []
            )
            log = _log(response_id, status)
            await store.append(response_id, log[:2])
            page = await store.conversation_items("conv_1", after=None, limit=10, order="asc")
            assert page.items == [] or status == "failed"
            await store.append(response_id, log[2:])
        page = await store.conversation_items("conv_1", after=None, limit=10, order="asc")
        assert [json.loads(t)["id"] for t in page.items] == ["msg_in", "msg_resp_a_0"]
        if isinstance(store, SQLiteEventStore):
            store.close()
            reopened = SQLiteEventStore(tmp_path / "s.sqlite3", lock=False)
            again = await reopened.conversation_items("conv_1", after=None, limit=10, order="asc")
            assert again == page
            reopened.close()


def test_sqlite_store_upgrades_a_file_of_layout_1(tmp_path: Path) -> None:
    """A file of layout 1 (before conversations) opens with its responses and gains the
    conversation tables in place; a reader without the lock is told to let the server
    upgrade it first."""
    import sqlite3

    import anyio

    from streamfold.adapters.server._sqlite_schema import _APPROVALS, _TABLES

    path = tmp_path / "layout1.sqlite3"
    db = sqlite3.connect(path, isolation_level=None)
    db.executescript(_TABLES)
    db.execute(_APPROVALS)
    db.execute("PRAGMA user_version=1")
    db.close()
    log = _log("resp_old", "completed")
    with pytest.raises(Exception, match="earlier streamfold; open it once with its lock"):
        SQLiteEventStore(path, lock=False)
    store = SQLiteEventStore(path)

    async def use() -> None:
        from streamfold.adapters.server._conversation_store import StoredConversation

        await store.append("resp_old", log)
        await store.create_conversation(
            StoredConversation(id="conv_1", created_at=1, metadata={"a": "b"}), [("i1", "{}")]
        )
        assert (await store.get_conversation("conv_1")).metadata == {"a": "b"}  # type: ignore[union-attr]
        assert await store.read("resp_old") == log

    anyio.run(use)
    store.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 2
    db.close()
    reader = SQLiteEventStore(path, lock=False)
    assert anyio.run(reader.get_conversation, "conv_1") is not None
    reader.close()


def test_a_conversation_belongs_to_the_key_that_made_it(tmp_path: Path) -> None:
    """With API keys, a conversation is another key's 404 everywhere it is named by id, on
    `POST /v1/responses` too (as a response is, `_guard.py`)."""
    root = write_traces(tmp_path / "traces" / "chat", {"0": _turn(0), "1": _turn(1)}).parent
    engine = ScriptedEngine(ReplayEngine(root))
    app = create_app(
        engine.engine(), store=SQLiteEventStore(tmp_path / "s.sqlite3"), api_keys=["key-a", "key-b"]
    )
    with serve(app) as url:
        alice = openai.OpenAI(base_url=f"{url}/v1", api_key="key-a", max_retries=0)
        bob = openai.OpenAI(base_url=f"{url}/v1", api_key="key-b", max_retries=0)
        made = alice.conversations.create(items=[_user("secret")])
        for call in (
            lambda: bob.conversations.retrieve(made.id),
            lambda: bob.conversations.items.list(made.id),
            lambda: bob.conversations.items.create(made.id, items=[_user("x")]),
            lambda: bob.conversations.update(made.id, metadata={"a": "b"}),
            lambda: bob.conversations.delete(made.id),
            lambda: bob.responses.create(model="chat", input="hi", conversation=made.id),
        ):
            with pytest.raises(openai.NotFoundError):
                call()
        reply = alice.responses.create(model="chat", input="hi", conversation=made.id)
        assert reply.output_text == "Answer 0."
        assert len(alice.conversations.items.list(made.id).data) == 4


def test_conversation_over_websocket_and_in_the_background(served: Served) -> None:
    """`conversation` works wherever a response is created: a WebSocket `response.create`
    (the events are the same; the items are appended as over HTTP) and `background: true`."""
    client = served.client
    conversation = client.conversations.create(items=[_user("Question 0")])
    with client.responses.connect() as connection:
        connection.response.create(model="chat", input="Go on", conversation=conversation.id)
        for event in connection:
            if event.type in ("response.completed", "response.failed", "error"):
                break
    assert event.type == "response.completed", event
    assert event.response.output_text == "Answer 0."
    assert event.response.conversation is not None
    assert event.response.conversation.id == conversation.id
    background = client.responses.create(
        model="chat", input="Question 1", conversation=conversation.id, background=True
    )
    for _ in range(200):
        if client.responses.retrieve(background.id).status == "completed":
            break
        time.sleep(0.05)
    assert client.responses.retrieve(background.id).output_text == "Answer 1."
    assert len(client.conversations.items.list(conversation.id).data) == 7


def test_item_references_in_items_are_the_items_they_name(served: Served) -> None:
    """An `item_reference` in `items` is stored as the item it names (smg supports them too);
    one that names nothing is a 400 naming its position in `items`."""
    client = served.client
    earlier = client.responses.create(model="chat", input="Question 0")
    message = earlier.output[-1]
    conversation = client.conversations.create()
    reference = {"type": "item_reference", "id": message.id}
    client.conversations.items.create(conversation.id, items=[reference])  # type: ignore[list-item]
    stored = client.conversations.items.retrieve(message.id, conversation_id=conversation.id)
    assert stored.type == "message" and stored.content[0].text == "Answer 0."  # type: ignore[union-attr]
    missing = served.raw(
        "POST",
        f"/conversations/{conversation.id}/items",
        json={"items": [_user("x"), {"type": "item_reference", "id": "msg_nowhere_0"}]},
    )
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "items[1].id"


@settings(max_examples=60, deadline=None)
@given(
    count=st.integers(0, 45),
    limit=st.integers(1, 100),
    order=st.sampled_from(["asc", "desc"]),
    deleted=st.sets(st.integers(0, 44), max_size=5),
)
def test_paging_walks_every_item_once_in_both_stores(
    tmp_path_factory: pytest.TempPathFactory, count: int, limit: int, order: str, deleted: set[int]
) -> None:
    """Property: walking `after` cursors yields each item once, in order, in pages of at most
    `limit`, `has_more` false exactly on the last page (memory and SQLite alike), also after
    items were deleted from the middle."""
    import anyio

    from streamfold.adapters.server._conversation_store import StoredConversation

    path = tmp_path_factory.mktemp("paging") / "s.sqlite3"

    async def walk(store: Any) -> list[list[str]]:
        rows = [(f"i{n}", json.dumps({"id": f"i{n}"})) for n in range(count)]
        await store.create_conversation(StoredConversation(id="c", created_at=1), rows[:20])
        for start in range(20, count, 20):
            assert await store.add_conversation_items("c", rows[start : start + 20]) == []
        for n in deleted:
            await store.delete_conversation_item("c", f"i{n}")
        pages: list[list[str]] = []
        after = None
        while True:
            page = await store.conversation_items("c", after=after, limit=limit, order=order)
            ids = [json.loads(text)["id"] for text in page.items]
            assert len(ids) <= limit
            pages.append(ids)
            if not page.has_more:
                return pages
            assert len(ids) == limit
            after = ids[-1]

    sqlite = SQLiteEventStore(path)
    try:
        by_store = [anyio.run(walk, MemoryEventStore()), anyio.run(walk, sqlite)]
    finally:
        sqlite.close()
    kept = [f"i{n}" for n in range(count) if n not in deleted]
    expected = kept if order == "asc" else kept[::-1]
    for pages in by_store:
        assert [i for page in pages for i in page] == expected
        assert all(pages[:-1]) and (pages[-1] or len(pages) == 1)
    assert by_store[0] == by_store[1]
