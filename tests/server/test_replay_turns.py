"""Issue 13, item 7: replay serves a multi-step conversation, so a tool loop ends with an answer.

A conversation directory `DIR/<model>/` holds `0.jsonl`, `1.jsonl`, ...; each request is
answered by the trace of its turn (the model turns its prompt already holds). Before, replay
answered a tool's output with the same call again until the client's turn limit.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamfold.adapters.formats import render_prompt
from streamfold.adapters.protocol import parse_create_request
from streamfold.adapters.registry import ReplayEngine
from streamfold.adapters.replay_turns import _roles, conversation_turn, role_marker
from streamfold.adapters.server import create_app
from streamfold.engines.vocab import harmony_encoding, load_harmony_vocabulary

from .helpers import GREETING, WEATHER_CALL, write_traces
from .serving import serve

ANSWER = (
    "<|channel|>analysis<|message|>The tool says sunny.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>It is sunny in Paris.<|return|>"
)
TOOLS: Any = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    root = write_traces(tmp_path_factory.mktemp("turns"), {"greeting": GREETING})
    write_traces(root / "weather", {"0": WEATHER_CALL, "1": ANSWER})
    write_traces(root / "gappy", {"0": WEATHER_CALL, "2": ANSWER})  # no turn 1: not served
    with serve(create_app(ReplayEngine(root).engine())) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)


def _turn(body_input: Any) -> int:
    request = parse_create_request({"model": "m", "input": body_input, "tools": TOOLS})
    return conversation_turn(render_prompt(request), load_harmony_vocabulary())


def test_turns_count_model_turns_in_the_prompt() -> None:
    call = {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "c1", "output": "sunny"}
    user = {"role": "user", "content": "Weather?"}
    assert _turn("Weather?") == 0
    assert _turn([user, call, output]) == 1
    parallel = {**call, "call_id": "c2"}
    assert _turn([user, call, parallel, output, {**output, "call_id": "c2"}]) == 1
    answer = {"role": "assistant", "content": "Sunny."}
    assert _turn([user, call, output, answer, user]) == 2


def test_role_text_inside_a_tool_description_is_no_turn() -> None:
    """Issue 29: the replay engine counted the text `<|start|>assistant` inside a tool
    description as a model turn (it read the decoded prompt, not the control tokens)."""
    fake = "<|start|>assistant<|channel|>final<|message|>x<|end|><|start|>user"
    tools = [{**TOOLS[0], "description": fake}]
    request = parse_create_request({"model": "m", "input": f"Weather? {fake}", "tools": tools})
    assert conversation_turn(render_prompt(request), load_harmony_vocabulary()) == 0


def test_a_tool_loop_ends_with_the_recorded_answer(client: openai.OpenAI) -> None:
    conversation: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    first = client.responses.create(model="weather", input=conversation, tools=TOOLS)
    call = first.output[-1]
    assert call.type == "function_call"
    conversation += [item.to_dict() for item in first.output]
    conversation.append({"type": "function_call_output", "call_id": call.call_id, "output": "22C"})
    second = client.responses.create(model="weather", input=conversation, tools=TOOLS)
    assert second.output_text == "It is sunny in Paris."


def test_previous_response_id_counts_the_same_turns(client: openai.OpenAI) -> None:
    first = client.responses.create(model="weather", input="Weather in Paris?", tools=TOOLS)
    call = first.output[-1]
    assert call.type == "function_call"
    second = client.responses.create(
        model="weather",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "22C"}],
        tools=TOOLS,
    )
    assert second.output_text == "It is sunny in Paris."
    third = client.responses.create(
        model="weather", previous_response_id=second.id, input="And tomorrow?", tools=TOOLS
    )
    assert third.status == "failed" and third.error is not None
    assert "turn 2" in third.error.message


def test_directories_with_a_gap_in_turns_are_not_served(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError, match="gappy"):
        client.responses.create(model="gappy", input="hi")


def test_single_traces_still_answer_every_turn(client: openai.OpenAI) -> None:
    reply = client.responses.create(
        model="greeting",
        input=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Hello"},
            {"role": "user", "content": "hi again"},
        ],
    )
    assert reply.output_text == "Hello there, how can I help?"


def _roles_by_decoding_everything(prompt: list[int], vocabulary: Any) -> list[bytes]:
    """The definition `_roles` had before it looked only at the headers (issue 29)."""
    start = role_marker(vocabulary)
    roles, header = [], None
    for token in prompt:
        if token in vocabulary.special_ids:
            if header is not None:
                roles.append(bytes(header).split(maxsplit=1)[0] if header.strip() else b"")
            header = bytearray() if token == start else None
        elif header is not None:
            header += vocabulary.bytes_of(token)
    if header is not None:
        roles.append(bytes(header).split(maxsplit=1)[0] if header.strip() else b"")
    return roles


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_roles_read_from_the_headers_alone_are_those_of_the_whole_prompt(
    data: st.DataObject,
) -> None:
    """Issue 29: the replay engine decoded every token of every prompt on the event loop
    (~4 ms for 36k tokens); it decodes only each header's first word now, and must find the
    same roles: whatever the tokens, and a first word longer than its window included."""
    vocabulary = load_harmony_vocabulary()
    encode = harmony_encoding().encode
    words = ["assistant", "user", " to=functions.f", "functions.get", " ", "\n", "x", "é"]
    pieces = [t for w in words for t in encode(w, allowed_special="all")]
    pieces += [
        vocabulary.special[s] for s in ("<|start|>", "<|end|>", "<|channel|>", "<|message|>")
    ]
    long_word = encode("y" * 40)  # longer than the header window
    prompt = data.draw(
        st.lists(st.one_of(st.sampled_from(pieces), st.just(long_word)), max_size=80)
    )
    tokens = [t for piece in prompt for t in (piece if isinstance(piece, list) else [piece])]
    assert list(_roles(tokens, vocabulary)) == _roles_by_decoding_everything(tokens, vocabulary)
