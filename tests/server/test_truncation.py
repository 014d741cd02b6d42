"""Issue 31: `truncation: "auto"` drops whole oldest input items until the prompt fits the
server's limit (never the instructions, never half an item, a call with its output);
`disabled`, the default, keeps the 400. Over the real socket, with the SDK."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from openai import OpenAI

from streamfold.adapters.limits import ServerLimits
from streamfold.adapters.server import MemoryEventStore, create_app
from tests.agent.scripted import ScriptedAgentSource
from tests.server.serving import serve

WORDS = " ".join(["filler"] * 300)


def _conversation() -> list[Any]:
    return [
        {"role": "developer", "content": "Always answer in French."},
        {"role": "user", "content": f"oldest {WORDS}"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": f"old output {WORDS}"},
        {"role": "assistant", "content": f"middle {WORDS}"},
        {"role": "user", "content": "newest question"},
    ]


def _client(limit: int) -> tuple[Any, ScriptedAgentSource]:
    source = ScriptedAgentSource({"m": ["<|channel|>final<|message|>oui<|return|>"]})
    limits = ServerLimits(max_input_tokens=limit)
    app = create_app(source.engine(), store=MemoryEventStore(), limits=limits)
    return serve(app), source


def test_auto_drops_the_oldest_items_until_it_fits() -> None:
    served, source = _client(700)
    with served as url:
        client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=30)
        tools: Any = [{"type": "function", "name": "f"}]
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(
                model="m", input=_conversation(), tools=tools, instructions="Be brief."
            )
        assert caught.value.body["code"] == "context_length_exceeded"  # type: ignore[index]
        response = client.responses.create(
            model="m",
            input=_conversation(),
            tools=tools,
            instructions="Be brief.",
            truncation="auto",
        )
    assert response.output_text == "oui" and response.truncation == "auto"
    (prompt,) = source.prompts("m")
    assert "Be brief." in prompt and "Always answer in French." in prompt
    assert "newest question" in prompt and "oldest" not in prompt
    assert "old output" not in prompt and "to=functions.f" not in prompt  # call and output
    assert "middle" in prompt  # only what had to go went


def test_auto_keeps_the_400_when_even_the_newest_item_is_too_long() -> None:
    served, _ = _client(200)
    with served as url:
        client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=30)
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(
                model="m",
                input=[{"role": "user", "content": "a"}, {"role": "user", "content": WORDS}],
                truncation="auto",
            )
    assert caught.value.body["code"] == "context_length_exceeded"  # type: ignore[index]


def test_a_dropped_tool_search_call_takes_its_output() -> None:
    """Issue 28/31 leftover: only function and custom tool calls took their outputs, so a
    dropped `tool_search_call` left its `tool_search_output`: the prompt showed a search
    result the model never asked for (`functions.tool_search` answering no call), and the
    loaded tool stayed listed."""
    served, source = _client(700)
    search: Any = {"type": "tool_search", "execution": "client"}
    loaded = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
    conversation: Any = [
        {"role": "user", "content": f"oldest {WORDS}"},
        {"type": "tool_search_call", "call_id": "s1", "arguments": {"query": WORDS}},
        {"type": "tool_search_output", "call_id": "s1", "execution": "client", "tools": [loaded]},
        {"role": "assistant", "content": f"middle {WORDS}"},
        {"role": "user", "content": "newest question"},
    ]
    with served as url:
        client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=30)
        response = client.responses.create(
            model="m", input=conversation, tools=[search], truncation="auto"
        )
    assert response.output_text == "oui"
    (prompt,) = source.prompts("m")
    assert "newest question" in prompt and "middle" in prompt
    assert "to=functions.tool_search" not in prompt  # the call went
    assert '"loaded"' not in prompt and "get_weather" not in prompt  # so did its output


def test_the_newest_item_keeps_its_call() -> None:
    """Issue 28/31 leftover: the newest item was meant to stay, but a newest function call
    output went with its call when the call had to go, and the model was asked to answer an
    empty conversation. The call of the newest item stays too; when they do not fit without
    what is older, the 400 stands."""
    served, source = _client(500)
    conversation: Any = [
        {"role": "user", "content": "oldest question"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": f'"{WORDS} {WORDS}"'},
        {"type": "function_call_output", "call_id": "c1", "output": "newest result"},
    ]
    with served as url:
        client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=30)
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(
                model="m",
                input=conversation,
                tools=[{"type": "function", "name": "f"}],
                truncation="auto",
            )
    assert caught.value.body["code"] == "context_length_exceeded"  # type: ignore[index]
    assert source.prompts("m") == []


def test_additional_tools_stay_as_the_instructions_do() -> None:
    """Issue 28/31 leftover: an `additional_tools` item (a developer item: harmony lists its
    tools in the developer message, with the instructions) was dropped first, as the oldest
    item, and its tools vanished from the prompt the model could call them from."""
    served, source = _client(700)
    more: Any = {
        "type": "additional_tools",
        "role": "developer",
        "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
    }
    conversation: Any = [more, *_conversation()]
    with served as url:
        client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=30)
        response = client.responses.create(
            model="m",
            input=conversation,
            tools=[{"type": "function", "name": "f"}],
            truncation="auto",
        )
    assert response.output_text == "oui"
    (prompt,) = source.prompts("m")
    assert "newest question" in prompt and "oldest" not in prompt
    assert "type get_weather = " in prompt
