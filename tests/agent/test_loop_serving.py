"""The agent loop served as a plain request is (issue 28), over the real socket: the official
openai client, real MCP servers built with the `mcp` SDK on 127.0.0.1, a scripted engine.

Each test pins a defect of the loop's old second path (its own chunk-to-step loop, its own
prompt rendering, listing before anything was sent):
- an agent response had `completed_at: null`;
- its prompt skipped the server's input checks (`max_input_tokens`) ...
- ... and was rendered on the event loop, with no time limit, stalling every other request;
- nothing reached the client until every MCP server had listed its tools (a background
  create, too, had no id to give until then).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import attrs
import openai
import pytest
from openai import OpenAI

from streamfold.adapters.agent import ToolLimits
from streamfold.adapters.agent._config import AgentConfig
from streamfold.adapters.server import MemoryEventStore, ServerLimits, create_app
from tests.server.helpers import assert_conformant
from tests.server.serving import serve

from .mcp_server import McpServerRun, running_mcp_server
from .scripted import ScriptedAgentSource

ANSWER = "<|channel|>final<|message|>Done.<|return|>"
#: A generation that calls the MCP server's `weather`, then one that answers.
CALL_THEN_ANSWER = [
    '<|channel|>commentary to=demo.weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>',
    ANSWER,
]
#: An input of over 200 prompt tokens, over a limit of 100.
LONG_INPUT = " ".join(["word"] * 200)
#: How long the slow MCP server takes to list its tools.
LIST_DELAY = 3.0


@attrs.define
class Served:
    client: OpenAI
    mcp: McpServerRun
    source: ScriptedAgentSource

    def mcp_tool(self) -> dict[str, Any]:
        return {
            "type": "mcp",
            "server_label": "demo",
            "server_url": self.mcp.streamable_url,
            "require_approval": "never",
        }


@contextlib.contextmanager
def served(*, list_delay: float = 0.0, limits: ServerLimits | None = None) -> Iterator[Served]:
    source = ScriptedAgentSource({"m": [ANSWER], "call": CALL_THEN_ANSWER})
    with running_mcp_server(list_delay=list_delay) as mcp:
        config = AgentConfig(mcp_allow=(mcp.url + "/",), limits=ToolLimits(call_seconds=20))
        app = create_app(source.engine(), store=MemoryEventStore(), agent=config, limits=limits)
        with serve(app) as url:
            client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=60)
            yield Served(client=client, mcp=mcp, source=source)


@pytest.fixture(scope="module")
def server() -> Iterator[Served]:
    with served(limits=ServerLimits(render_timeout_s=3)) as running:
        yield running


@pytest.fixture(scope="module")
def limited() -> Iterator[Served]:
    with served(limits=ServerLimits(max_input_tokens=100)) as running:
        yield running


@pytest.fixture(scope="module")
def slow_lister() -> Iterator[Served]:
    with served(list_delay=LIST_DELAY) as running:
        yield running


def test_an_agent_response_has_completed_at(server: Served) -> None:
    """Bug: every response that ran the agent loop had `completed_at: null`."""
    before = int(time.time())
    created = server.client.responses.create(model="m", input="go", tools=[server.mcp_tool()])
    with server.client.responses.stream(model="m", input="go", tools=[server.mcp_tool()]) as s:
        events = list(s)
    assert_conformant(events)
    streamed = events[-1].response
    for response in (created, streamed):
        assert response.status == "completed"
        assert [item.type for item in response.output] == ["mcp_list_tools", "message"]
        assert response.completed_at is not None
        assert before <= response.completed_at <= time.time() + 1


def test_an_agent_request_over_the_input_token_limit_is_refused_naming_the_param(
    limited: Served,
) -> None:
    """Bug: a plain request over `max_input_tokens` was a 400, the same input with an MCP tool
    completed (its prompt was rendered outside the server's checks)."""
    for tools in ([], [limited.mcp_tool()]):
        with pytest.raises(openai.BadRequestError) as refused:
            limited.client.responses.create(model="m", input=LONG_INPUT, tools=tools)
        error = refused.value.body
        assert isinstance(error, dict)
        assert error["param"] == "input"
        assert error["code"] == "context_length_exceeded"
        assert "100 tokens" in error["message"]


def test_an_agent_prompt_that_the_listed_tools_push_over_the_limit_fails_in_band(
    limited: Served,
) -> None:
    """The input fits, the MCP server's tool descriptions (known only once the response has
    begun) make the prompt too long: the response ends `failed`, saying so."""
    with limited.client.responses.stream(model="m", input="go", tools=[limited.mcp_tool()]) as s:
        events = list(s)
    assert_conformant(events)
    response = events[-1].response
    assert response.status == "failed"
    assert [item.type for item in response.output] == ["mcp_list_tools"]
    assert "this server's limit is 100 tokens" in response.error.message


def test_an_agent_request_with_a_huge_word_does_not_stall_a_plain_one(server: Served) -> None:
    """Bug: an agent request's prompt was rendered on the event loop with no time limit: one
    request with a 200,000-character word and a server tool stalled every other request on
    the server for 43 s. Its input is now rendered as a plain request's is: in a worker
    process, refused when it outlives the time limit (3 s here), while others are answered."""
    outcome: list[Any] = []

    def big() -> None:
        try:
            server.client.responses.create(
                model="m", input="x" * 200_000, tools=[server.mcp_tool()]
            )
        except openai.APIStatusError as exc:
            outcome.append(exc)
        else:
            outcome.append("accepted")

    thread = threading.Thread(target=big)
    thread.start()
    try:
        # The plain request is due 1 s on, when the big one is being rendered (its MCP server
        # lists at once). The server runs in this process: a render that held its event loop
        # and the GIL would make this thread late too, so lateness counts from when it was due.
        due = time.monotonic() + 1.0
        time.sleep(1.0)
        plain = server.client.responses.create(model="m", input="go")
        took = time.monotonic() - due
    finally:
        thread.join(timeout=120)
    assert plain.status == "completed"
    assert took < 1.0, f"a plain request waited {took:.1f} s behind the agent request's render"
    (refused,) = outcome
    assert isinstance(refused, openai.BadRequestError), refused
    assert refused.body["param"] == "input"  # type: ignore[index]
    assert "took longer than 3 s" in refused.body["message"]  # type: ignore[index]


def test_the_stream_starts_before_a_slow_mcp_server_has_listed_its_tools(
    slow_lister: Served,
) -> None:
    """Bug: nothing reached the client until every MCP server had listed its tools
    (`response.created`, `mcp_list_tools.in_progress` and `.completed` came together)."""
    slow_lister.client.responses.create(model="m", input="go")  # a warm server: no first-use cost
    began = time.monotonic()
    stream = slow_lister.client.responses.create(
        model="m", input="go", tools=[slow_lister.mcp_tool()], stream=True
    )
    seen: list[Any] = []
    listing_when_in_progress: list[str] | None = None
    with stream:
        for event in stream:
            if not seen:
                first_after = time.monotonic() - began
            if event.type == "response.mcp_list_tools.in_progress":
                listing_when_in_progress = list(slow_lister.mcp.listings)
            seen.append(event)
    assert seen[0].type == "response.created"
    assert first_after < 1.0, f"the first event came {first_after:.1f} s after the request"
    # The listing item was in progress before the server had listed (it had not begun, or
    # had begun and not ended), and the server did list, after it.
    assert listing_when_in_progress is not None
    assert "done" not in listing_when_in_progress
    assert slow_lister.mcp.listings[-2:] == ["begun", "done"]
    assert_conformant(seen)
    assert seen[-1].type == "response.completed"
    assert seen[-1].response.output[0].type == "mcp_list_tools"


def test_a_background_create_answers_before_a_slow_mcp_server_has_listed(
    slow_lister: Served,
) -> None:
    """Bug: a `background: true` create blocked until the listing ended, so the client had no
    id (and could not cancel) for that long."""
    slow_lister.client.responses.create(model="m", input="go")  # a warm server: no first-use cost
    began = time.monotonic()
    created = slow_lister.client.responses.create(
        model="m", input="go", tools=[slow_lister.mcp_tool()], background=True
    )
    took = time.monotonic() - began
    assert took < 1.0, f"the background create answered after {took:.1f} s"
    assert created.id.startswith("resp_") and created.status in ("queued", "in_progress")
    deadline = time.monotonic() + 30
    response = created
    while response.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.1)
        response = slow_lister.client.responses.retrieve(created.id)
    assert response.status == "completed"
    assert response.completed_at is not None


def test_a_client_that_leaves_while_a_server_lists_ends_the_listing_in_the_log(
    slow_lister: Served,
) -> None:
    """The listing item went out in progress: when the client leaves before the MCP server
    answers, the stored response ends it (failed, saying why) before its own end, and the
    log stays one conformant stream."""
    stream = slow_lister.client.responses.create(
        model="m", input="go", tools=[slow_lister.mcp_tool()], stream=True
    )
    with stream:
        for event in stream:
            if event.type == "response.created":
                response_id = event.response.id
            if event.type == "response.mcp_list_tools.in_progress":
                break
    deadline = time.monotonic() + 30
    response = slow_lister.client.responses.retrieve(response_id)
    while response.status == "in_progress" and time.monotonic() < deadline:
        time.sleep(0.1)
        response = slow_lister.client.responses.retrieve(response_id)
    assert response.status == "cancelled"
    (listing,) = response.output
    assert listing.type == "mcp_list_tools" and listing.tools == []
    assert listing.error == "the response ended before 'demo' listed its tools"
    logged = list(slow_lister.client.responses.retrieve(response_id, stream=True))
    assert_conformant(logged)
    types = [event.type for event in logged]
    assert types[2:6] == [
        "response.output_item.added",
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.failed",
        "response.output_item.done",
    ]


def test_the_prompt_after_a_call_is_held_to_the_input_token_limit_as_a_whole() -> None:
    """Every prompt of the loop, however far it has grown, is held to `max_input_tokens`
    (`_render.py`): the prompt after a call is the one before it, the generated call and the
    tool's message. A limit between the first prompt's length and the second's lets the first
    generation run and ends the response `failed`, saying so, where the second would begin (a
    continuation counted alone, without the prompt it extends, fits any limit)."""
    with served() as free:
        free.client.responses.create(model="call", input="go", tools=[free.mcp_tool()])
        first, second = (len(r.prompt_token_ids) for r in free.source.requests)
    assert first < second
    with served(limits=ServerLimits(max_input_tokens=(first + second) // 2)) as limited:
        with limited.client.responses.stream(
            model="call", input="go", tools=[limited.mcp_tool()]
        ) as stream:
            events = list(stream)
        assert len(limited.source.requests) == 1
    assert_conformant(events)
    response = events[-1].response
    assert response.status == "failed"
    assert [item.type for item in response.output] == ["mcp_list_tools", "mcp_call"]
    assert response.output[1].output == "Sunny in Paris, 21 C"
    assert f"the prompt is {second} tokens long" in response.error.message
    assert f"this server's limit is {(first + second) // 2} tokens" in response.error.message
