"""pydantic-ai (`OpenAIResponsesModel`) against `streamfold serve`, as applications use it
(issue 31): a plain answer, a tool loop, each output mode (`ToolOutput`, `NativeOutput`,
`PromptedOutput`, `TextOutput`, and a bare output type), a streamed run, and every reasoning
effort its settings take (`none`, `xhigh` and `max` were 400s, the one thing that broke it)."""

from __future__ import annotations

import importlib.util
import typing
from typing import Any

import openai
import pytest
from openai import OpenAI
from pydantic import BaseModel

from .conftest import CHAT_ANSWER, WEATHER_FINAL, missing


class City(BaseModel):
    city: str
    temperature_c: int


@pytest.fixture(autouse=True)
def _installed() -> None:
    # Before any test imports it: without it each test would fail on its import, not skip.
    if importlib.util.find_spec("pydantic_ai") is None:
        missing("pydantic-ai", "pip install -e '.[dev]'")


def _model(url: str, name: str) -> Any:
    from pydantic_ai.models.openai import OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    return OpenAIResponsesModel(name, provider=OpenAIProvider(base_url=url, api_key="unused"))


def _efforts() -> list[str]:
    if importlib.util.find_spec("pydantic_ai") is None:
        return ["medium"]
    from pydantic_ai.models.openai import OpenAIResponsesModelSettings

    hint = typing.get_type_hints(OpenAIResponsesModelSettings)["openai_reasoning_effort"]
    (literal,) = [a for a in typing.get_args(hint) if typing.get_origin(a) is typing.Literal]
    return list(typing.get_args(literal))


def test_plain_answer(streamfold_url: str) -> None:
    from pydantic_ai import Agent

    result = Agent(_model(streamfold_url, "chat")).run_sync("hello")
    assert result.output == CHAT_ANSWER


@pytest.mark.parametrize(
    "settings",
    [
        {},
        # The second request sends the tool's output and the first response's id.
        {"openai_previous_response_id": "auto"},
        # Stateless: nothing kept on the server, reasoning ids not sent back.
        {"openai_store": False, "openai_send_reasoning_ids": False},
    ],
    ids=["default", "previous_response_id auto", "store false"],
)
def test_tool_loop(streamfold_url: str, settings: dict[str, Any]) -> None:
    from pydantic_ai import Agent

    agent = Agent(_model(streamfold_url, "weather"))
    cities: list[str] = []

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The weather in a city."""
        cities.append(city)
        return "22C and sunny"

    result = agent.run_sync("weather in Paris?", model_settings=settings)  # type: ignore[arg-type]
    assert result.output == WEATHER_FINAL
    assert cities == ["Paris"]
    # What the server was sent, read back from the second response it stored.
    first, second = (m.provider_response_id for m in result.all_messages()[1::2])
    client = OpenAI(base_url=streamfold_url, api_key="unused", max_retries=0, timeout=30)
    if settings.get("openai_store") is False:
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(second)  # type: ignore[arg-type]
        return
    stored = client.responses.retrieve(second)  # type: ignore[arg-type]
    auto = "openai_previous_response_id" in settings
    assert stored.previous_response_id == (first if auto else None)


def _city(text: str) -> City:
    return City.model_validate_json(text)


@pytest.mark.parametrize(
    ("mode", "model"),
    [
        ("ToolOutput", "output_tool"),
        ("NativeOutput", "output_text"),
        ("PromptedOutput", "output_text"),
        ("TextOutput", "output_text"),  # the answer's text, through an output function
        (None, "output_tool"),  # a bare `output_type=City`: the default mode
    ],
)
def test_output_modes(streamfold_url: str, mode: str | None, model: str) -> None:
    import pydantic_ai
    from pydantic_ai import Agent

    output: Any = City if mode is None else getattr(pydantic_ai, mode)(City)
    if mode == "TextOutput":
        output = pydantic_ai.TextOutput(_city)
    result = Agent(_model(streamfold_url, model), output_type=output).run_sync("Paris?")
    assert result.output == City(city="Paris", temperature_c=22)


def test_streamed_answer_and_output(streamfold_url: str) -> None:
    """`run_stream` (what a chat UI built on pydantic-ai calls) streams the answer's text, and
    an output tool's arguments as they come."""
    from pydantic_ai import Agent

    with Agent(_model(streamfold_url, "chat")).run_stream_sync("hello") as result:
        chunks = list(result.stream_text(delta=True))
    assert "".join(chunks) == CHAT_ANSWER
    agent = Agent(_model(streamfold_url, "output_tool"), output_type=City)
    with agent.run_stream_sync("Paris?") as streamed:
        outputs = list(streamed.stream_output())
    assert outputs[-1] == City(city="Paris", temperature_c=22)


@pytest.mark.parametrize("effort", _efforts())
def test_every_reasoning_effort(streamfold_url: str, effort: str) -> None:
    from pydantic_ai import Agent

    settings = {"openai_reasoning_effort": effort}
    result = Agent(_model(streamfold_url, "chat")).run_sync("hello", model_settings=settings)  # type: ignore[arg-type]
    assert result.output == CHAT_ANSWER
