"""The server end to end: a real uvicorn on 127.0.0.1, driven by the official openai client."""

from __future__ import annotations

import re
import time

import httpx
import openai
import pytest

from streamfold.adapters.driver import SOURCE_FAILED
from streamfold.adapters.server._prepare import new_response_id
from streamfold.engines.vocab import harmony_encoding

from .conftest import Server
from .helpers import assert_conformant

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def test_create_stream_is_conformant_and_echoes_the_request(server: Server) -> None:
    events = list(
        server.client.responses.create(
            model="greeting",
            input="hi",
            instructions="Be brief.",
            metadata={"ticket": "42"},
            temperature=0.5,
            top_p=0.9,
            max_output_tokens=500,
            reasoning={"effort": "low"},
            stream=True,
        )
    )
    assert_conformant(events)
    created, final = events[0].response, events[-1].response
    assert events[-1].type == "response.completed"
    assert final.output_text == "Hello there, how can I help?"
    assert created.id.startswith("resp_") and len(created.id) == len("resp_") + 32
    assert created.id == final.id and created.status == "in_progress"
    assert (created.instructions, created.metadata) == ("Be brief.", {"ticket": "42"})
    assert (created.temperature, created.top_p, created.max_output_tokens) == (0.5, 0.9, 500)
    assert created.reasoning.effort == "low" and created.background is False
    assert abs(created.created_at - time.time()) < 60


def test_each_response_gets_its_own_id(server: Server) -> None:
    ids = {server.client.responses.create(model="greeting", input="hi").id for _ in range(3)}
    assert len(ids) == 3
    assert all(re.fullmatch(r"resp_[0-9a-f]{32}", i) for i in ids)


def test_response_ids_are_32_hex_digits_unique_and_sorted_by_time() -> None:
    """The first 12 digits are the time, the other 20 random: ids made later sort later (so a
    store's indexes by id grow at their end), and none repeats."""
    ids = [new_response_id() for _ in range(10_000)]
    assert len(set(ids)) == 10_000
    assert all(re.fullmatch(r"resp_[0-9a-f]{32}", i) for i in ids)
    assert len({i[17:] for i in ids}) == 10_000  # the random part alone tells them apart
    spaced = []
    for _ in range(20):
        spaced.append(new_response_id())
        time.sleep(0.0002)  # more than one step of the time part (65.5 µs)
    assert spaced == sorted(spaced)  # random ids: 1 chance in 20! of this order
    assert abs(int(spaced[0][5:17], 16) * 2**16 / 1e9 - time.time()) < 60


def test_stream_helper_final_response_holds_the_function_call(server: Server) -> None:
    with server.client.responses.stream(
        model="weather_call", input="Weather in Paris?", tools=[WEATHER_TOOL]
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert_conformant(events)
    call = final.output[-1]
    assert (call.type, call.name, call.arguments) == (
        "function_call",
        "get_weather",
        '{"city":"Paris"}',
    )
    assert final.tools[0].name == "get_weather" and final.tool_choice == "auto"


def test_prompt_is_rendered_with_harmony_and_sent_to_the_engine(server: Server) -> None:
    server.client.responses.create(
        model="weather_call",
        instructions="Answer in French.",
        input=[
            {"role": "user", "content": "Weather in Paris?"},
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": '{"city":"Paris"}',
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "21C, sunny"},
        ],
        tools=[WEATHER_TOOL],
        reasoning={"effort": "high"},
        max_output_tokens=300,
        temperature=0.25,
    )
    request = server.engine.requests[-1]
    prompt = harmony_encoding().decode(list(request.prompt_token_ids))
    assert prompt.startswith("<|start|>system<|message|>") and "Reasoning: high" in prompt
    assert "<|start|>developer<|message|># Instructions\n\nAnswer in French." in prompt
    assert "type get_weather = " in prompt and "// Current weather in a city" in prompt
    assert "<|start|>assistant to=functions.get_weather<|channel|>commentary json" in prompt
    assert (
        "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>21C, sunny"
        in prompt
    )
    assert prompt.endswith("<|start|>assistant")
    assert request.max_output_tokens == 300 and request.sampling.temperature == 0.25
    stops = harmony_encoding().stop_tokens_for_assistant_actions()
    assert set(request.stop_token_ids) == set(stops)
    assert request.request_id.startswith("resp_")


def test_non_streaming_create_then_retrieve(server: Server) -> None:
    response = server.client.responses.create(model="greeting", input="hi")
    assert response.status == "completed" and response.output_text.startswith("Hello")
    assert response.usage.output_tokens > 0 and response.usage.input_tokens > 0
    again = server.client.responses.retrieve(response.id)
    assert again.model_dump() == response.model_dump()


def test_max_output_tokens_gives_incomplete(server: Server) -> None:
    response = server.client.responses.create(model="long", input="x", max_output_tokens=12)
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage.output_tokens == 12


def test_store_false_is_not_kept(server: Server) -> None:
    response = server.client.responses.create(model="greeting", input="hi", store=False)
    assert response.status == "completed"
    with pytest.raises(openai.NotFoundError):
        server.client.responses.retrieve(response.id)


def test_failing_engine_gives_response_failed_in_band(server: Server) -> None:
    events = list(server.client.responses.create(model="broken", input="x", stream=True))
    assert_conformant(events)
    assert events[-1].type == "response.failed"
    assert events[-1].response.error.message == SOURCE_FAILED  # the exception is logged
    assert any(e.type == "response.output_text.delta" for e in events)
    # A non-streaming request to a failing engine still gets 200 and the failed Response.
    response = server.client.responses.create(model="broken", input="x")
    assert response.status == "failed" and response.error.message == SOURCE_FAILED


# --- background, resume, cancel ---------------------------------------------------------


def wait_until_done(server: Server, response_id: str, timeout: float = 10) -> object:
    deadline = time.monotonic() + timeout
    while True:
        response = server.client.responses.retrieve(response_id)
        if response.status not in ("queued", "in_progress"):
            return response
        assert time.monotonic() < deadline, f"{response_id} still {response.status}"
        time.sleep(0.02)


def test_background_retrieve_then_resume_both_ways(server: Server) -> None:
    created = server.client.responses.create(model="long", input="x", background=True)
    assert created.status == "in_progress" and created.background is True
    done = wait_until_done(server, created.id)
    assert done.status == "completed" and done.output_text.startswith("word0 word1")

    full = list(server.client.responses.retrieve(created.id, stream=True))
    assert_conformant(full)
    resumed = list(server.client.responses.retrieve(created.id, stream=True, starting_after=10))
    assert [e.sequence_number for e in resumed] == list(range(11, len(full)))
    assert [e.model_dump() for e in resumed] == [e.model_dump() for e in full[11:]]

    # The SDK helper refetches from 0 (without the cursor) and filters on its side.
    with server.client.responses.stream(response_id=created.id, starting_after=10) as stream:
        helper_events = list(stream)
        final = stream.get_final_response()
    assert helper_events[0].sequence_number == 11
    assert final.output_text == done.output_text


def test_background_stream_resumed_mid_generation_loses_nothing(server: Server) -> None:
    stream = server.client.responses.create(model="slow", input="x", background=True, stream=True)
    first = []
    for event in stream:
        first.append(event)
        if len(first) == 8:
            break
    stream.close()  # the client drops; a background response keeps running
    response_id = first[0].response.id
    assert server.client.responses.retrieve(response_id).status == "in_progress"
    rest = list(
        server.client.responses.retrieve(
            response_id, stream=True, starting_after=first[-1].sequence_number
        )
    )
    assert rest[-1].type == "response.completed"
    assert_conformant(first + rest)


def test_cancel_mid_stream(server: Server) -> None:
    open_before = server.engine.open
    created = server.client.responses.create(model="slow", input="x", background=True)
    follower = server.client.responses.retrieve(created.id, stream=True)
    seen = [next(iter(follower)) for _ in range(6)]
    cancelled = server.client.responses.cancel(created.id)
    assert cancelled.status == "cancelled"
    seen += list(follower)
    assert_conformant(seen)
    assert seen[-1].type == "response.failed" and seen[-1].response.status == "cancelled"
    assert server.client.responses.cancel(created.id).status == "cancelled"  # idempotent
    assert server.client.responses.retrieve(created.id).status == "cancelled"
    assert server.engine.open == open_before  # the engine was aborted
    # It stopped well before the end of the 125-token trace.
    assert cancelled.usage.output_tokens < 100


def test_cancel_rules(server: Server) -> None:
    foreground = server.client.responses.create(model="greeting", input="hi")
    with pytest.raises(openai.BadRequestError, match="background"):
        server.client.responses.cancel(foreground.id)
    with pytest.raises(openai.NotFoundError):
        server.client.responses.cancel("resp_doesnotexist")
    finished = server.client.responses.create(model="greeting", input="hi", background=True)
    wait_until_done(server, finished.id)
    assert server.client.responses.cancel(finished.id).status == "completed"


def test_delete_forgets_a_response_and_cancels_a_running_one(server: Server) -> None:
    finished = server.client.responses.create(model="greeting", input="hi")
    server.client.responses.delete(finished.id)
    with pytest.raises(openai.NotFoundError):
        server.client.responses.retrieve(finished.id)
    open_before = server.engine.open
    running = server.client.responses.create(model="slow", input="x", background=True)
    server.client.responses.delete(running.id)
    with pytest.raises(openai.NotFoundError):
        server.client.responses.retrieve(running.id)
    assert server.engine.open == open_before  # the engine was aborted
    with pytest.raises(openai.NotFoundError):
        server.client.responses.delete(running.id)
    with pytest.raises(openai.NotFoundError):
        server.client.responses.delete("resp_doesnotexist")


def _prompt_text(server: Server, response_id: str) -> str:
    (request,) = [r for r in server.engine.requests if r.request_id == response_id]
    return harmony_encoding().decode(list(request.prompt_token_ids))


def test_previous_response_id_continues_the_conversation(server: Server) -> None:
    """The context of a following request is the earlier input, the earlier output and the
    new input; chains resolve link by link; instructions are not carried over."""
    first = server.client.responses.create(
        model="weather_call", input="Weather in Paris?", instructions="Be brief."
    )
    call = first.output[-1]
    assert call.type == "function_call"
    second = server.client.responses.create(
        model="greeting",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "18C"}],
    )
    assert second.previous_response_id == first.id
    prompt = _prompt_text(server, second.id)
    assert prompt.index("Weather in Paris?") < prompt.index("to=functions.get_weather")
    assert prompt.index("to=functions.get_weather") < prompt.index("18C")
    assert "Be brief." not in prompt
    third = server.client.responses.create(
        model="greeting", previous_response_id=second.id, input="Thanks!"
    )
    prompt = _prompt_text(server, third.id)
    answer = second.output_text
    assert answer and prompt.index("18C") < prompt.index(answer) < prompt.index("Thanks!")
    assert "Weather in Paris?" in prompt


def test_input_items_list_the_whole_conversation_a_response_answered(server: Server) -> None:
    first = server.client.responses.create(model="weather_call", input="Weather in Paris?")
    call = first.output[-1]
    second = server.client.responses.create(
        model="greeting",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "18C"}],  # type: ignore[union-attr]
    )
    # The SDK parses every item into its ResponseItem models; newest first by default.
    newest_first = list(server.client.responses.input_items.list(second.id))
    assert [item.type for item in newest_first] == [
        "function_call_output", "function_call", "reasoning", "message",
    ]  # fmt: skip
    assert newest_first[0].output == "18C"  # type: ignore[union-attr]
    assert newest_first[1].id == call.id and newest_first[1].call_id == call.call_id  # type: ignore[union-attr]
    assert newest_first[-1].content[0].text == "Weather in Paris?"  # type: ignore[union-attr]
    # Pages of one follow the cursor to the same items, oldest first with order=asc.
    paged = list(server.client.responses.input_items.list(second.id, limit=1, order="asc"))
    assert [item.id for item in paged] == [item.id for item in reversed(newest_first)]
    assert [item.id for item in server.client.responses.input_items.list(second.id)] == [
        item.id for item in newest_first
    ]  # the derived ids are stable
    with pytest.raises(openai.NotFoundError):
        server.client.responses.input_items.list("resp_doesnotexist")
    with pytest.raises(openai.BadRequestError, match="limit"):
        server.client.responses.input_items.list(second.id, limit=0)


def test_previous_response_id_must_name_a_finished_stored_response(server: Server) -> None:
    with pytest.raises(openai.NotFoundError):
        server.client.responses.create(
            model="greeting", previous_response_id="resp_doesnotexist", input="hi"
        )
    running = server.client.responses.create(model="slow", input="x", background=True)
    with pytest.raises(openai.BadRequestError, match="still in progress"):
        server.client.responses.create(
            model="greeting", previous_response_id=running.id, input="hi"
        )
    server.client.responses.cancel(running.id)
    unstored = server.client.responses.create(model="greeting", input="hi", store=False)
    with pytest.raises(openai.NotFoundError):
        server.client.responses.create(
            model="greeting", previous_response_id=unstored.id, input="hi"
        )


def test_a_response_still_streaming_to_its_client_cannot_be_deleted(server: Server) -> None:
    stream = server.client.responses.create(model="slow", input="x", stream=True)
    first = next(iter(stream))
    with pytest.raises(openai.BadRequestError, match="still streaming"):
        server.client.responses.delete(first.response.id)  # type: ignore[union-attr]
    events = [first, *stream]
    assert events[-1].type == "response.completed"
    server.client.responses.delete(first.response.id)  # type: ignore[union-attr]


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "hi"}, "model"),
        ({"model": "greeting"}, "input"),
        ({"model": "greeting", "input": 3}, "input"),
        ({"model": "greeting", "input": "hi", "max_output_tokens": "12"}, "max_output_tokens"),
        ({"model": "greeting", "input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
        ({"model": "greeting", "input": "hi", "temperature": 3}, "temperature"),
        ({"model": "greeting", "input": "hi", "stream": "yes"}, "stream"),
        ({"model": "greeting", "input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        (
            {
                "model": "greeting",
                "input": [{"role": "user", "content": [{"type": "input_image"}]}],
            },
            "input[0].content[0].type",
        ),
        (
            {
                "model": "greeting",
                "input": [{"type": "function_call_output", "call_id": "c", "output": "1"}],
            },
            "input[0].call_id",
        ),
        ({"model": "greeting", "input": "hi", "tools": [{"type": "no_such_tool"}]}, "tools[0]"),
        (
            {"model": "greeting", "input": "hi", "tool_choice": {"type": "function", "name": "f"}},
            "tool_choice.name",
        ),
        ({"model": "greeting", "input": "hi", "reasoning": {"effort": "big"}}, "reasoning.effort"),
        ({"model": "greeting", "input": "hi", "metadata": {"k": 1}}, "metadata"),
        ({"model": "greeting", "input": "hi", "background": True, "store": False}, "store"),
        (
            {"model": "greeting", "input": "hi", "previous_response_id": ""},
            "previous_response_id",
        ),
    ],
)
def test_bad_requests_get_openai_error_json_naming_the_field(
    server: Server, body: dict, param: str
) -> None:
    reply = httpx.post(f"{server.url}/v1/responses", json=body)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] is None
    assert error["param"] == param and error["message"]


def test_bad_json_and_unknown_model_and_unknown_ids(server: Server) -> None:
    reply = httpx.post(
        f"{server.url}/v1/responses",
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    assert reply.status_code == 400 and "JSON" in reply.json()["error"]["message"]
    reply = httpx.post(f"{server.url}/v1/responses", json={"model": "gpt-9", "input": "hi"})
    assert reply.status_code == 404
    assert (
        reply.json()["error"]["param"] == "model" and "greeting" in reply.json()["error"]["message"]
    )
    for url in ("/v1/responses/resp_nope", "/v1/responses/resp_nope?stream=true"):
        reply = httpx.get(server.url + url)
        assert reply.status_code == 404 and reply.json()["error"]["type"] == "invalid_request_error"
    reply = httpx.get(f"{server.url}/v1/responses/resp_nope?starting_after=x")
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "starting_after"
    reply = httpx.get(f"{server.url}/v1/nothing-here")
    assert reply.status_code == 404 and "error" in reply.json()


def test_completed_response_has_completed_at(server: Server) -> None:
    """Bug (issue 13, item 6): `completed_at` was null on completed responses."""
    response = server.client.responses.create(model="greeting", input="hi")
    assert response.status == "completed"
    assert response.completed_at is not None and response.completed_at >= response.created_at
