"""openai-agents and langchain-openai against `streamfold serve`, as applications use them
(issue 13). Both are in the `dev` extra; where one is missing the tests say so (see conftest).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from .conftest import BROKEN_ERROR, CHAT_ANSWER, WEATHER_FINAL, missing

INCLUDE = ["message.output_text.logprobs"]


def _need(module: str, package: str) -> None:
    if importlib.util.find_spec(module) is None:
        missing(package, "pip install -e '.[dev]'")


# --- openai-agents ----------------------------------------------------------------------------


@pytest.fixture
async def agents(streamfold_url: str, anyio_backend: str) -> AsyncIterator[Any]:
    _need("agents", "openai-agents")
    import agents
    from openai import AsyncOpenAI

    agents.set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=streamfold_url, api_key="unused", max_retries=0)

    def agent(model: str, **options: Any) -> Any:
        return agents.Agent(
            name="assistant",
            instructions="Be brief.",
            model=agents.OpenAIResponsesModel(model=model, openai_client=client),
            **options,
        )

    yield agents, agent
    # Inside the test's event loop: a stream the client abandoned (the failed one) still holds
    # a connection, which would otherwise be closed after the loop is gone.
    await client.close()


def _weather_tool(agents: Any) -> Any:
    @agents.function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        return json.dumps({"city": city, "temperature": "22C"})

    return get_weather


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_agents_run_and_run_streamed(agents: Any) -> None:
    sdk, agent = agents
    result = await sdk.Runner.run(agent("chat"), "Hello")
    assert result.final_output == CHAT_ANSWER
    streamed = sdk.Runner.run_streamed(agent("chat"), "Hello")
    deltas = [
        event.data.delta
        async for event in streamed.stream_events()
        if event.type == "raw_response_event" and event.data.type == "response.output_text.delta"
    ]
    assert "".join(deltas) == CHAT_ANSWER and streamed.final_output == CHAT_ANSWER


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("streaming", [False, True])
async def test_agents_function_tool_loop_ends_with_the_answer(agents: Any, streaming: bool) -> None:
    sdk, agent = agents
    weather = agent("weather", tools=[_weather_tool(sdk)])
    if streaming:
        result = sdk.Runner.run_streamed(weather, "What is the weather in Paris?")
        [_ async for _ in result.stream_events()]
    else:
        result = await sdk.Runner.run(weather, "What is the weather in Paris?")
    assert result.final_output == WEATHER_FINAL
    assert len(result.raw_responses) == 2  # the call, then the answer
    outputs = [item for item in result.new_items if item.type == "tool_call_output_item"]
    assert [json.loads(item.output) for item in outputs] == [
        {"city": "Paris", "temperature": "22C"}
    ]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("streaming", [False, True])
async def test_agents_websocket_model_runs_the_tool_loop_over_one_socket(
    streamfold_url: str, streaming: bool
) -> None:
    """Issue 32: the Agents SDK's `OpenAIResponsesWSModel` (WebSocket mode, which has no HTTP
    fallback: its model calls are `response.create` messages on `/v1/responses` upgraded) runs
    the weather tool loop: two generations on one connection, the tool's output between."""
    _need("agents", "openai-agents")
    import agents
    from openai import AsyncOpenAI

    agents.set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=streamfold_url, api_key="unused", max_retries=0)
    model = agents.OpenAIResponsesWSModel(model="weather", openai_client=client)
    weather = agents.Agent(
        name="assistant", instructions="Be brief.", model=model, tools=[_weather_tool(agents)]
    )
    try:
        if streaming:
            result = agents.Runner.run_streamed(weather, "What is the weather in Paris?")
            [_ async for _ in result.stream_events()]
        else:
            result = await agents.Runner.run(weather, "What is the weather in Paris?")
        socket = model._ws_connection  # the one connection both generations used
    finally:
        await model.close()
        await client.close()
    assert socket is not None
    assert result.final_output == WEATHER_FINAL
    assert len(result.raw_responses) == 2  # the call, then the answer
    outputs = [item for item in result.new_items if item.type == "tool_call_output_item"]
    assert [json.loads(item.output) for item in outputs] == [
        {"city": "Paris", "temperature": "22C"}
    ]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("streaming", [False, True])
async def test_agents_failed_response_raises_with_its_message(agents: Any, streaming: bool) -> None:
    sdk, agent = agents
    with pytest.raises(sdk.exceptions.AgentsException, match=BROKEN_ERROR):
        if streaming:
            result = sdk.Runner.run_streamed(agent("broken"), "Hello")
            [_ async for _ in result.stream_events()]
        else:
            await sdk.Runner.run(agent("broken"), "Hello")


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_agents_logprobs(agents: Any) -> None:
    sdk, agent = agents
    settings = sdk.ModelSettings(top_logprobs=2)  # the SDK then includes the logprobs
    result = await sdk.Runner.run(agent("chat", model_settings=settings), "Hello")
    message = next(item for item in result.raw_responses[0].output if item.type == "message")
    entries = message.content[0].logprobs
    assert entries and all(entry.logprob < 0 and entry.top_logprobs == [] for entry in entries)
    assert "".join(entry.token for entry in entries) == CHAT_ANSWER


# --- langchain-openai -------------------------------------------------------------------------


@pytest.fixture
def chat_model(streamfold_url: str) -> Any:
    _need("langchain_openai", "langchain-openai")
    from langchain_openai import ChatOpenAI

    def model(name: str, **options: Any) -> Any:
        return ChatOpenAI(
            model=name,
            base_url=streamfold_url,
            api_key="unused",  # type: ignore[arg-type]
            use_responses_api=True,
            max_retries=0,
            **options,
        )

    return model


def _joined(chunks: Any) -> Any:
    full = None
    for chunk in chunks:
        full = chunk if full is None else full + chunk
    return full


def _reasoning_summaries(message: Any) -> list[str]:
    return [
        part["text"]
        for block in message.content
        if isinstance(block, dict) and block.get("type") == "reasoning"
        for part in block.get("summary", [])
    ]


def test_langchain_invoke_and_stream(chat_model: Any) -> None:
    assert chat_model("chat").invoke("Hello").text == CHAT_ANSWER
    assert _joined(chat_model("chat").stream("Hello")).text == CHAT_ANSWER


def test_langchain_streaming_shows_reasoning_when_a_summary_is_asked_for(chat_model: Any) -> None:
    """LangChain's streaming keeps only reasoning summaries: the server sends gpt-oss's raw
    reasoning as the summary when `reasoning.summary` is set."""
    model = chat_model("chat", reasoning={"effort": "low", "summary": "auto"})
    full = _joined(model.stream("Hello"))
    assert full.text == CHAT_ANSWER
    assert "".join(_reasoning_summaries(full)) == "The user says hello. Reply kindly."


@pytest.mark.parametrize("streaming", [False, True])
def test_langchain_bind_tools_loop_ends_with_the_answer(chat_model: Any, streaming: bool) -> None:
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool

    @tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        return json.dumps({"city": city, "temperature": "22C"})

    model = chat_model("weather", streaming=streaming).bind_tools([get_weather])
    messages: list[Any] = [HumanMessage("What is the weather in Paris?")]
    for _ in range(5):  # the application's loop, at most 5 steps
        reply = model.invoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            break
        for call in reply.tool_calls:
            messages.append(ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"]))
    calls = [call for m in messages for call in getattr(m, "tool_calls", [])]
    assert [(c["name"], c["args"]) for c in calls] == [("get_weather", {"city": "Paris"})]
    assert messages[-1].text == WEATHER_FINAL and len(messages) == 4


@pytest.mark.parametrize("streaming", [False, True])
def test_langchain_failed_response_raises_with_its_message(
    chat_model: Any, streaming: bool
) -> None:
    model = chat_model("broken")
    with pytest.raises(ValueError, match=BROKEN_ERROR):
        if streaming:
            _joined(model.stream("Hello"))
        else:
            model.invoke("Hello")


def test_langchain_logprobs_reach_its_responses(chat_model: Any) -> None:
    """langchain-openai 1.7 has no logprobs for the Responses API (`logprobs=True` is passed to
    `responses.create`, which rejects it; with `include` it drops them from the message), so the
    wire is read where LangChain receives it: its own HTTP client."""
    bodies: list[Any] = []

    def keep(response: httpx.Response) -> None:
        response.read()
        bodies.append(response.json())

    http = httpx.Client(event_hooks={"response": [keep]})
    model = chat_model("chat", include=INCLUDE, top_logprobs=2, http_client=http)
    assert model.invoke("Hello").text == CHAT_ANSWER
    message = next(item for item in bodies[-1]["output"] if item["type"] == "message")
    entries = message["content"][0]["logprobs"]
    assert "".join(entry["token"] for entry in entries) == CHAT_ANSWER
    assert all(entry["top_logprobs"] == [] for entry in entries)
