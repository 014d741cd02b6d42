"""The agent loop over the real socket: the official openai client, a real MCP server built with
the `mcp` SDK on 127.0.0.1, and a scripted token source playing recorded generations.

Every stream passes `streamfold.specs.check` and the openai SDK's own accumulator
(`client.responses.stream(...).get_final_response()`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from openai import OpenAI

from streamfold.adapters.agent import PythonLimits, PythonTool, StaticBrowserBackend, ToolLimits
from streamfold.adapters.agent._config import AgentConfig
from streamfold.adapters.server import MemoryEventStore, create_app
from tests.server.helpers import assert_conformant, wire
from tests.server.serving import serve

from .mcp_server import McpServerRun, running_mcp_server
from .scripted import ScriptedAgentSource

ANALYSIS = "<|channel|>analysis<|message|>{}<|end|><|start|>assistant"


def mcp_call(tool: str, arguments: dict[str, Any], label: str = "demo") -> str:
    return (
        f"<|channel|>commentary to={label}.{tool} <|constrain|>json<|message|>"
        f"{json.dumps(arguments)}<|call|>"
    )


def final(text: str) -> str:
    return f"<|channel|>final<|message|>{text}<|return|>"


SCRIPTS = {
    "two_calls": [
        ANALYSIS.format("Need the weather.") + mcp_call("weather", {"city": "Paris"}),
        mcp_call("add", {"a": 2, "b": 3}),
        final("Sunny in Paris, and 2 + 3 = 5."),
    ],
    "raises": [mcp_call("explode", {"reason": "no fuel"}), final("The tool failed.")],
    "limited": [
        mcp_call("add", {"a": 1, "b": 1}),
        mcp_call("add", {"a": 2, "b": 2}),
        mcp_call("add", {"a": 3, "b": 3}),
        final("Done adding."),
    ],
    "forever": [mcp_call("add", {"a": i, "b": i}) for i in range(12)],
    "slow": [mcp_call("slow", {"seconds": 30}), final("unreachable")],
    "ask": [mcp_call("add", {"a": 20, "b": 22})],
    "answer": [final("20 + 22 = 42.")],
    "follow_up": [final("It was sunny.")],
    "unlisted": [final("The tools are down.")],
    "python": [
        "<|channel|>analysis to=python code<|message|>print(6 * 7)<|call|>",
        final("It is 42."),
    ],
    "browser": [
        '<|channel|>analysis to=browser.search code<|message|>{"query": "paris weather"}<|call|>',
        final("Sunny."),
    ],
}


@attrs.define
class AgentServer:
    client: OpenAI
    source: ScriptedAgentSource
    mcp: McpServerRun
    url: str

    def mcp_tool(self, **extra: Any) -> dict[str, Any]:
        return {
            "type": "mcp",
            "server_label": "demo",
            "server_url": self.mcp.streamable_url,
            "require_approval": "never",
            **extra,
        }


@pytest.fixture(scope="module")
def agent_server() -> Iterator[AgentServer]:
    source = ScriptedAgentSource(SCRIPTS)
    with running_mcp_server() as mcp:
        config = AgentConfig(
            mcp_allow=(mcp.url + "/", "http://127.0.0.1:9/"),
            python=PythonTool(PythonLimits(seconds=10)),
            browser=StaticBrowserBackend(
                {"https://example.org/paris": ("Paris weather", "Sunny, 21 C")}
            ),
            limits=ToolLimits(call_seconds=20),
            max_iterations=4,
        )
        app = create_app(source.engine(), store=MemoryEventStore(), agent=config)
        with serve(app) as url:
            client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=60)
            yield AgentServer(client=client, source=source, mcp=mcp, url=url)


def stream(server: AgentServer, **body: Any) -> tuple[list[Any], Any]:
    """Stream a response with the SDK's accumulator; check the events; the final response."""
    body.setdefault("input", "go")
    with server.client.responses.stream(**body) as events:
        seen = list(events)
        final_response = events.get_final_response()
    assert_conformant(seen)
    return seen, final_response


def _types(response: Any) -> list[str]:
    return [item.type for item in response.output]


def test_lists_tools_calls_two_tools_in_two_iterations_and_answers(
    agent_server: AgentServer,
) -> None:
    events, response = stream(agent_server, model="two_calls", tools=[agent_server.mcp_tool()])
    assert response.status == "completed"
    assert _types(response) == ["mcp_list_tools", "reasoning", "mcp_call", "mcp_call", "message"]
    listing, _, weather, add, answer = response.output
    assert [t.name for t in listing.tools] == ["add", "weather", "explode", "slow"]
    assert (weather.name, weather.output, weather.error) == (
        "weather",
        "Sunny in Paris, 21 C",
        None,
    )
    assert (add.name, add.arguments, add.output) == ("add", '{"a": 2, "b": 3}', "5")
    assert answer.content[0].text == "Sunny in Paris, and 2 + 3 = 5."
    # One continuous stream: indices and sequence numbers run on across the generations.
    data = wire(events)
    assert [e["sequence_number"] for e in data] == list(range(len(data)))
    added = [e["output_index"] for e in data if e["type"] == "response.output_item.added"]
    assert added == [0, 1, 2, 3, 4]
    # What the model saw: each prompt extends the last with the call and harmony's tool message.
    prompts = agent_server.source.prompts("two_calls")
    assert len(prompts) == 3
    assert (
        "## demo\n\n" in prompts[0]
        and "type weather = (_: {\ncity: string,\n}) => any;" in prompts[0]
    )
    assert prompts[1].startswith(prompts[0])
    assert prompts[1].endswith(
        '<|channel|>commentary to=demo.weather <|constrain|>json<|message|>{"city": "Paris"}'
        "<|call|><|start|>demo.weather to=assistant<|channel|>commentary<|message|>"
        "Sunny in Paris, 21 C<|end|><|start|>assistant"
    )
    assert prompts[2].startswith(prompts[1])
    assert prompts[2].endswith(
        "<|start|>demo.add to=assistant<|channel|>commentary<|message|>5<|end|><|start|>assistant"
    )
    assert response.usage.input_tokens == sum(
        len(r.prompt_token_ids) for r in agent_server.source.requests if r.model == "two_calls"
    )


def test_non_streaming_and_background_give_the_same_output(agent_server: AgentServer) -> None:
    _, streamed = stream(agent_server, model="two_calls", tools=[agent_server.mcp_tool()])
    plain = agent_server.client.responses.create(
        model="two_calls", input="go", tools=[agent_server.mcp_tool()]
    )
    background = agent_server.client.responses.create(
        model="two_calls", input="go", tools=[agent_server.mcp_tool()], background=True
    )
    deadline = time.monotonic() + 30
    while background.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.05)
        background = agent_server.client.responses.retrieve(background.id)
    followed = list(agent_server.client.responses.retrieve(background.id, stream=True))
    assert_conformant(followed)

    def shape(response: Any) -> list[tuple[str, str | None]]:
        return [(i.type, getattr(i, "output", None)) for i in response.output]

    assert shape(plain) == shape(streamed) == shape(background)
    assert plain.status == background.status == "completed"


def test_a_tool_that_raises_is_the_items_error_and_the_model_reads_it(
    agent_server: AgentServer,
) -> None:
    _, response = stream(agent_server, model="raises", tools=[agent_server.mcp_tool()])
    assert response.status == "completed"
    call = response.output[1]
    assert call.type == "mcp_call" and call.output is None and call.status == "failed"
    assert call.error.type == "mcp_tool_execution_error"
    assert call.error.content == [
        {"type": "text", "text": "Error executing tool explode: the tool failed: no fuel"}
    ]
    second = agent_server.source.prompts("raises")[1]
    assert second.endswith(
        "<|start|>demo.explode to=assistant<|channel|>commentary<|message|>Error: Error executing "
        "tool explode: the tool failed: no fuel<|end|><|start|>assistant"
    )


def test_cut_by_max_tool_calls(agent_server: AgentServer) -> None:
    before = list(agent_server.mcp.calls)
    _, response = stream(
        agent_server, model="limited", tools=[agent_server.mcp_tool()], max_tool_calls=2
    )
    calls = [item for item in response.output if item.type == "mcp_call"]
    assert [c.output for c in calls] == ["2", "4", None]
    assert calls[2].error.content[0]["text"].startswith("max_tool_calls (2) reached")
    assert agent_server.mcp.calls[len(before) :] == ["add(1,1)", "add(2,2)"]
    assert response.status == "completed" and response.output[-1].type == "message"


def test_the_servers_round_limit_ends_the_response_incomplete(agent_server: AgentServer) -> None:
    # The SDK's stream helper wants response.completed: read the raw stream.
    events = list(
        agent_server.client.responses.create(
            model="forever", input="go", tools=[agent_server.mcp_tool()], stream=True
        )
    )
    assert_conformant(events)
    response = events[-1].response
    assert events[-1].type == "response.incomplete"
    assert response.incomplete_details.reason == "max_messages"
    calls = [item for item in response.output if item.type == "mcp_call"]
    assert len(calls) == 5  # four rounds run, the fifth call answered with the limit
    assert "limit of 4 tool rounds" in calls[-1].error.content[0]["text"]


def test_cancelled_mid_tool(agent_server: AgentServer) -> None:
    started = len(agent_server.mcp.started)
    background = agent_server.client.responses.create(
        model="slow", input="go", tools=[agent_server.mcp_tool()], background=True
    )
    deadline = time.monotonic() + 20
    while len(agent_server.mcp.started) == started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(agent_server.mcp.started) == started + 1  # the tool is running now
    t0 = time.monotonic()
    cancelled = agent_server.client.responses.cancel(background.id)
    assert time.monotonic() - t0 < 5  # the 30 s tool did not hold the cancel up
    assert cancelled.status == "cancelled"
    call = cancelled.output[-1]
    assert call.type == "mcp_call" and call.status == "incomplete"
    followed = list(agent_server.client.responses.retrieve(background.id, stream=True))
    assert_conformant(followed)
    assert len(agent_server.source.prompts("slow")) == 1  # no generation after the cut


def test_a_client_that_leaves_mid_tool_stops_the_loop(agent_server: AgentServer) -> None:
    started = len(agent_server.mcp.started)
    with agent_server.client.responses.stream(
        model="slow", input="go", tools=[agent_server.mcp_tool()]
    ) as events:
        for event in events:
            if event.type == "response.mcp_call_arguments.done":
                break
    deadline = time.monotonic() + 10
    while agent_server.source.open and time.monotonic() < deadline:
        time.sleep(0.02)
    assert agent_server.source.open == 0
    assert len(agent_server.source.prompts("slow")) <= 2
    assert len(agent_server.mcp.started) <= started + 1


def test_approval(agent_server: AgentServer) -> None:
    calls = list(agent_server.mcp.calls)
    tool = agent_server.mcp_tool(require_approval="always")
    _, asked = stream(agent_server, model="ask", tools=[tool])
    assert asked.status == "completed"
    assert _types(asked) == ["mcp_list_tools", "mcp_approval_request"]
    request = asked.output[1]
    assert (request.server_label, request.name) == ("demo", "add")
    assert agent_server.mcp.calls == calls  # nothing ran before the client said so
    _, answered = stream(
        agent_server,
        model="answer",
        tools=[tool],
        previous_response_id=asked.id,
        input=[
            {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}
        ],
    )
    assert answered.status == "completed"
    # Issue 31: the follow-up listed the server's tools again. The API does not while the
    # context (here the asking response, by previous_response_id) holds its mcp_list_tools.
    assert _types(answered) == ["mcp_call", "message"]
    call = answered.output[0]
    assert (call.output, call.approval_request_id) == ("42", request.id)
    assert agent_server.mcp.calls[len(calls) :] == ["add(20,22)"]
    prompt = agent_server.source.prompts("answer")[0]
    assert prompt.endswith(
        "<|start|>demo.add to=assistant<|channel|>commentary<|message|>42<|end|><|start|>assistant"
    )


def test_bad_approval_and_unoffered_tools_are_400s(agent_server: AgentServer) -> None:
    import openai

    with pytest.raises(openai.BadRequestError) as caught:
        agent_server.client.responses.create(
            model="answer",
            input=[
                {"type": "mcp_approval_response", "approval_request_id": "mcpr_x", "approve": True}
            ],
            tools=[agent_server.mcp_tool()],
        )
    assert caught.value.body["param"] == "input[0].approval_request_id"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as caught:
        agent_server.client.responses.create(
            model="answer",
            input="go",
            tools=[agent_server.mcp_tool(server_url="http://10.0.0.1/mcp")],
        )
    assert caught.value.body["param"] == "tools[0].server_url"  # type: ignore[index]


def test_python_and_browser(agent_server: AgentServer) -> None:
    _, response = stream(
        agent_server,
        model="python",
        tools=[{"type": "code_interpreter", "container": {"type": "auto"}}],
    )
    call = response.output[0]
    assert call.type == "code_interpreter_call" and call.code == "print(6 * 7)"
    assert [o.logs for o in call.outputs] == ["42\n"]
    assert agent_server.source.prompts("python")[1].endswith(
        "<|start|>python to=assistant<|channel|>analysis<|message|>42\n<|end|><|start|>assistant"
    )
    _, response = stream(agent_server, model="browser", tools=[{"type": "web_search_preview"}])
    search = response.output[0]
    assert search.type == "web_search_call" and search.action.query == "paris weather"
    assert "【0†Paris weather†example.org】" in agent_server.source.prompts("browser")[1]


def test_previous_response_id_carries_the_loops_items(agent_server: AgentServer) -> None:
    _, first = stream(agent_server, model="two_calls", tools=[agent_server.mcp_tool()])
    _, second = stream(
        agent_server,
        model="follow_up",
        input="And the weather again?",
        previous_response_id=first.id,
        tools=[agent_server.mcp_tool()],
    )
    assert second.output_text == "It was sunny."
    prompt = agent_server.source.prompts("follow_up")[-1]
    # The earlier calls and their results, as harmony renders them, then the new question.
    weather = prompt.index(
        "<|start|>demo.weather to=assistant<|channel|>commentary<|message|>Sunny in Paris, 21 C"
    )
    add = prompt.index("<|start|>demo.add to=assistant<|channel|>commentary<|message|>5<|end|>")
    question = prompt.index("<|start|>user<|message|>And the weather again?")
    assert weather < add < question
    listed = agent_server.client.responses.input_items.list(second.id, order="asc")
    assert [item.type for item in listed.data][:5] == [
        "message",
        "mcp_list_tools",
        "reasoning",
        "mcp_call",
        "mcp_call",
    ]


def test_a_server_that_cannot_be_listed_is_reported_and_not_offered(
    agent_server: AgentServer,
) -> None:
    down = agent_server.mcp_tool(server_label="down", server_url="http://127.0.0.1:9/mcp")
    _, response = stream(agent_server, model="unlisted", tools=[agent_server.mcp_tool(), down])
    assert response.status == "completed"
    assert _types(response) == ["mcp_list_tools", "mcp_list_tools", "message"]
    listed = {item.server_label: item for item in response.output[:2]}
    assert listed["demo"].error is None and listed["down"].tools == []
    assert "could not list the tools of MCP server 'down'" in listed["down"].error
    prompt = agent_server.source.prompts("unlisted")[-1]
    assert "## demo" in prompt and "## down" not in prompt


def test_required_forces_the_first_call_and_relaxes_after_the_server_ran_it(
    agent_server: AgentServer,
) -> None:
    """Structured outputs in the server's own loop (issue 30): `tool_choice: "required"` holds
    the first generation to a call, and the generation after the server ran it is `auto`
    (else the loop could never answer)."""
    _, response = stream(
        agent_server,
        model="python",
        tools=[{"type": "code_interpreter", "container": {"type": "auto"}}],
        tool_choice="required",
    )
    assert response.status == "completed" and _types(response)[-1] == "message"
    first, after = [r for r in agent_server.source.requests if r.model == "python"][-2:]
    assert first.decoding is not None and "final:" not in first.decoding.grammar
    assert "to=python" in first.decoding.grammar
    assert after.decoding is None  # auto with free tools: nothing to enforce


def test_a_listing_in_the_context_is_not_asked_for_again(agent_server: AgentServer) -> None:
    """Issue 31: every request listed its MCP servers' tools again. The API does not while the
    request's context holds the server's `mcp_list_tools` item ("As long as the mcp_list_tools
    item is present in the context of an API request, the API will not fetch a list of tools
    from the MCP server again", the remote MCP guide): here a stateless client sends the item
    back. Its tools are still held to the request's `allowed_tools`."""
    _, first = stream(agent_server, model="two_calls", tools=[agent_server.mcp_tool()])
    listing = first.output[0].model_dump(exclude_none=True)
    assert listing["type"] == "mcp_list_tools"
    turn = [{"role": "user", "content": "And the weather again?"}]
    only_weather = agent_server.mcp_tool(allowed_tools=["weather"])
    _, second = stream(
        agent_server, model="follow_up", input=[listing, *turn], tools=[only_weather]
    )
    assert _types(second) == ["message"]
    prompt = agent_server.source.prompts("follow_up")[-1]
    assert "type weather = " in prompt and "type add = " not in prompt
    # A listing that failed is no listing: the server is asked again.
    failed = {**listing, "tools": [], "error": "the server was down"}
    _, third = stream(agent_server, model="follow_up", input=[failed, *turn], tools=[only_weather])
    assert _types(third) == ["mcp_list_tools", "message"]
    assert [tool.name for tool in third.output[0].tools] == ["weather"]


def test_max_tool_calls_zero_is_a_400_naming_it(agent_server: AgentServer) -> None:
    """Documented in docs/agents.md (issue 31): `max_tool_calls` counts the calls run and must
    be at least 1."""
    import openai

    with pytest.raises(openai.BadRequestError) as caught:
        agent_server.client.responses.create(
            model="two_calls", input="go", tools=[agent_server.mcp_tool()], max_tool_calls=0
        )
    assert caught.value.body["param"] == "max_tool_calls"  # type: ignore[index]
    assert "at least 1" in caught.value.body["message"]  # type: ignore[index]
