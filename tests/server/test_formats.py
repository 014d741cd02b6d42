"""Chat formats as objects (issue 28, part 2): an engine names the format its models speak,
and the server renders the prompt, stops and reads the output through it, instead of assuming
harmony in its own modules."""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import openai

from streamfold.adapters.formats import (
    HARMONY,
    ChatFormat,
    HarmonyFormat,
    render_prompt,
    stop_token_ids,
)
from streamfold.adapters.protocol import CreateRequest, parse_create_request
from streamfold.adapters.registry import Engine, ReplayEngine
from streamfold.adapters.server import create_app
from streamfold.statemachine import HarmonyGrammar

from .helpers import GREETING, ScriptedEngine, write_traces
from .serving import serve


def test_harmony_is_a_chat_format_that_renders_as_render_prompt() -> None:
    request = parse_create_request(
        {"model": "m", "input": [{"role": "user", "content": "hi"}], "instructions": "be brief"}
    )
    assert isinstance(HARMONY, ChatFormat)
    assert HARMONY.name == "harmony"
    assert HARMONY.render(request) == render_prompt(request)
    assert HARMONY.stop_token_ids() == stop_token_ids()
    assert HARMONY.constraint_for(request) is None  # free text, any call: nothing to enforce


def test_harmonys_grammar_reads_live_output_by_channel_without_tools() -> None:
    """A live model offered no tools that writes a recipient anyway is read by channel
    (bug 54): the format's grammar says so, as `live_grammar` did."""
    grammar = HARMONY.grammar()
    assert isinstance(grammar, HarmonyGrammar)
    assert grammar.ignore_recipients_without_tools


def test_the_format_travels_to_a_render_worker_pickled() -> None:
    copy = pickle.loads(pickle.dumps(HARMONY))
    request = parse_create_request({"model": "m", "input": "hello"})
    assert isinstance(copy, HarmonyFormat) and copy.render(request) == HARMONY.render(request)


def test_an_engine_speaks_harmony_unless_it_names_another_format() -> None:
    engine = Engine(source=ReplayEngine(Path(__file__).parent))
    assert engine.format is HARMONY
    assert isinstance(engine.grammar("any"), HarmonyGrammar)


class _Marked(HarmonyFormat):
    """harmony with a marker token before the prompt and stop ids of its own."""

    name = "marked"

    def render(
        self, request: CreateRequest, namespaces: Sequence[Any] = (), after: Sequence[Any] = ()
    ) -> tuple[int, ...]:
        return (7, *super().render(request, namespaces, after))

    def stop_token_ids(self) -> tuple[int, ...]:
        return (11, 12)


def test_the_server_renders_and_stops_in_the_engines_format(tmp_path: Path) -> None:
    """Regression: the server rendered every prompt with harmony's `render_prompt` and sent
    harmony's stop ids whatever the engine served; now both come from `Engine.format`."""
    scripted = ScriptedEngine(ReplayEngine(write_traces(tmp_path, {"greeting": GREETING})))
    engine = attrs.evolve(scripted.engine(), format=_Marked())
    with serve(create_app(engine)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=30)
        response = client.responses.create(model="greeting", input="hi")
    assert response.status == "completed"
    (sent,) = scripted.requests
    assert sent.stop_token_ids == (11, 12)
    expected = parse_create_request({"model": "greeting", "input": "hi"})
    assert sent.prompt_token_ids == (7, *HARMONY.render(expected))


def test_harmony_stops_a_one_call_request_at_its_turn_ends() -> None:
    """gpt-oss stops at its call's `<|call|>` already: `parallel_tool_calls: false` adds no
    stop id (a think-tag model's `</tool_call>` is one, `tests/adapters/test_chat_template`)."""
    tools = [{"type": "function", "name": "f", "parameters": {"type": "object"}}]
    request = parse_create_request(
        {"model": "m", "input": "hi", "tools": tools, "parallel_tool_calls": False}
    )
    assert HARMONY.stop_token_ids_for(request) == HARMONY.stop_token_ids()
