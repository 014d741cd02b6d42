"""pydantic-ai (`OpenAIResponsesModel`) against `streamfold serve`, as applications use it
(issue 31): a plain answer, a tool loop, each output mode (`ToolOutput`, `NativeOutput`,
`PromptedOutput`, `TextOutput`, and a bare output type), a streamed run, and every reasoning
effort its settings take (`none`, `xhigh` and `max` were 400s, the one thing that broke it)."""

from __future__ import annotations

import importlib.util
import typing
from typing import Any

import pytest
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


def test_tool_loop(streamfold_url: str) -> None:
    from pydantic_ai import Agent

    agent = Agent(_model(streamfold_url, "weather"))
    cities: list[str] = []

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The weather in a city."""
        cities.append(city)
        return "22C and sunny"

    assert agent.run_sync("weather in Paris?").output == WEATHER_FINAL
    assert cities == ["Paris"]


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
