"""Issue 31: the tool types Codex's default configuration sends, end to end over the real
socket with the official SDK: `namespace` tools (harmony namespaces; a call's namespace comes
back on its `function_call`), `custom` tools (`custom_tool_call` items with
`custom_tool_call_input` events, the raw text as `input`; a grammar that does not compile is a
400), `additional_tools` input items, and each call's output sent back."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai import OpenAI

from streamfold.adapters.agent._config import AgentConfig
from streamfold.adapters.protocol import parse_create_request
from streamfold.adapters.server import MemoryEventStore, create_app
from streamfold.adapters.structured import LarkBody, harmony_grammar
from streamfold.adapters.structured._request import shape_for
from streamfold.engines.guidance import validate_grammar
from tests.server.helpers import assert_conformant
from tests.server.serving import serve

from .scripted import ScriptedAgentSource

SPAWN = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Spawn and manage sub-agents.",
    "tools": [
        {
            "type": "function",
            "name": "spawn_agent",
            "description": "Start a sub-agent.",
            "parameters": {"type": "object", "properties": {"task": {"type": "string"}}},
            "strict": False,
        }
    ],
}
PATCH_GRAMMAR = """start: begin_patch hunk+ end_patch
begin_patch: "*** Begin Patch" LF
end_patch: "*** End Patch" LF?
hunk: add_hunk
add_hunk: "*** Add File: " filename LF add_line+
filename: /(.+)/
add_line: "+" /(.*)/ LF -> line
%import common.LF
"""
APPLY_PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Edit files with a patch.",
    "format": {"type": "grammar", "syntax": "lark", "definition": PATCH_GRAMMAR},
}
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello\n*** End Patch\n"
#: Codex's code mode (its catalog's `tool_mode: code_mode_only` models, e.g. `gpt-5.6-sol`):
#: no `tools` at all, every tool in an `additional_tools` item, the client's own ones in a
#: namespace named `functions` (a `custom` tool `exec` whose input is JavaScript, with a Lark
#: grammar), others in namespaces of their own.
EXEC = {
    "type": "custom",
    "name": "exec",
    "description": "Run JavaScript code to orchestrate/compose tool calls",
    "format": {
        "type": "grammar",
        "syntax": "lark",
        "definition": "start: pragma_source | plain_source\n"
        "pragma_source: PRAGMA_LINE NEWLINE SOURCE\nplain_source: SOURCE\n"
        "PRAGMA_LINE: /[ \\t]*\\/\\/ @exec:[^\\r\\n]*/\nNEWLINE: /\\r?\\n/\n"
        "SOURCE: /[\\s\\S]+/\n",
    },
}
WAIT = {
    "type": "function",
    "name": "wait",
    "description": "Waits on a yielded exec cell.",
    "strict": False,
    "parameters": {"type": "object", "properties": {"cell_id": {"type": "string"}}},
}
CODE_MODE_TOOLS = {
    "type": "additional_tools",
    "role": "developer",
    "tools": [
        {"type": "namespace", "name": "functions", "description": "", "tools": [EXEC, WAIT]},
        SPAWN,
    ],
}
EXEC_JS = 'const r = await tools.exec_command({cmd: "echo hi"});\ntext(r.output);\n'
SCRIPTS = {
    "spawn": [
        "<|channel|>commentary to=multi_agent_v1.spawn_agent <|constrain|>json"
        '<|message|>{"task":"count"}<|call|>'
    ],
    "patch": [f"<|channel|>commentary to=functions.apply_patch<|message|>{PATCH}<|call|>"],
    "spawned": ["<|channel|>final<|message|>spawned<|return|>"],
    "search": [
        "<|channel|>commentary to=functions.tool_search <|constrain|>json"
        '<|message|>{"query":"weather"}<|call|>'
    ],
    "searched": [
        "<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city":"Paris"}<|call|>'
    ],
    "patched": ["<|channel|>final<|message|>patched<|return|>"],
    "exec": [f"<|channel|>commentary to=functions.exec<|message|>{EXEC_JS}<|call|>"],
    "executed": ["<|channel|>final<|message|>executed<|return|>"],
}


@pytest.fixture
def served() -> Iterator[tuple[OpenAI, ScriptedAgentSource]]:
    source = ScriptedAgentSource(SCRIPTS)
    app = create_app(source.engine(), store=MemoryEventStore(), agent=AgentConfig())
    with serve(app) as url:
        yield OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=30), source


def test_a_namespace_tool_is_a_harmony_namespace_and_its_call_keeps_it(
    served: tuple[OpenAI, ScriptedAgentSource],
) -> None:
    """Codex's first request failed with 400 `unsupported tool type 'namespace'`."""
    client, source = served
    first = client.responses.create(model="spawn", input="spawn one", tools=[SPAWN])  # type: ignore[list-item]
    (call,) = [item for item in first.output if item.type == "function_call"]
    assert (call.name, call.namespace, call.arguments) == (
        "spawn_agent",
        "multi_agent_v1",
        '{"task":"count"}',
    )
    assert [tool.type for tool in first.tools] == ["namespace"]
    second = client.responses.create(
        model="spawned",
        input=[
            {"role": "user", "content": "spawn one"},
            call.model_dump(exclude_none=True),  # type: ignore[list-item]
            {"type": "function_call_output", "call_id": call.call_id, "output": "agent 7"},
        ],
        tools=[SPAWN],  # type: ignore[list-item]
    )
    assert second.output_text == "spawned"
    (head,), (again,) = source.prompts("spawn"), source.prompts("spawned")
    assert "namespace multi_agent_v1 {" in head and "type spawn_agent" in head
    assert "to=multi_agent_v1.spawn_agent" in again
    assert "<|start|>multi_agent_v1.spawn_agent to=assistant" in again


def test_a_custom_tool_call_streams_its_raw_input(
    served: tuple[OpenAI, ScriptedAgentSource],
) -> None:
    client, source = served
    events = list(
        client.responses.create(model="patch", input="add hello", tools=[APPLY_PATCH], stream=True)  # type: ignore[list-item]
    )
    types = [event.type for event in events]
    assert "response.custom_tool_call_input.delta" in types
    (done,) = [e for e in events if e.type == "response.custom_tool_call_input.done"]
    assert done.input == PATCH
    final = events[-1].response  # type: ignore[union-attr]
    (call,) = final.output
    assert call.type == "custom_tool_call" and call.name == "apply_patch" and call.input == PATCH
    assert final.tools[0].type == "custom"
    (prompt,) = source.prompts("patch")
    assert "type apply_patch" in prompt and "Freeform tool" in prompt
    assert 'begin_patch: "*** Begin Patch" LF' in prompt
    second = client.responses.create(
        model="patched",
        input=[
            {"role": "user", "content": "add hello"},
            call.model_dump(exclude_none=True),  # type: ignore[list-item]
            {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "Done!"},
        ],
        tools=[APPLY_PATCH],  # type: ignore[list-item]
    )
    assert second.output_text == "patched"
    (again,) = source.prompts("patched")
    assert f"to=functions.apply_patch<|channel|>commentary<|message|>{PATCH}<|call|>" in again
    assert "<|start|>functions.apply_patch to=assistant<|channel|>commentary<|message|>Done!" in (
        again
    )


def test_additional_tools_join_the_request_tools(
    served: tuple[OpenAI, ScriptedAgentSource],
) -> None:
    """Codex's code-mode models send their namespaces in an `additional_tools` input item."""
    client, source = served
    response = client.responses.create(
        model="spawn",
        input=[
            {"type": "additional_tools", "role": "developer", "tools": [SPAWN]},
            {"role": "user", "content": "spawn one"},
        ],  # type: ignore[list-item]
    )
    (call,) = [item for item in response.output if item.type == "function_call"]
    assert call.namespace == "multi_agent_v1"
    assert "namespace multi_agent_v1 {" in source.prompts("spawn")[0]


def test_a_namespace_named_functions_is_harmonys_own(
    served: tuple[OpenAI, ScriptedAgentSource],
) -> None:
    """Codex's code-mode models offer their own tools in a namespace named `functions`, which
    was a 400 ("not a built-in namespace"), so their first request failed. It is harmony's
    namespace of the client's tools: its tools are listed with the functions (one
    `namespace functions`), the model calls them as `functions.NAME`, and the call comes
    back as the tool's kind (`exec` is a custom tool) naming the namespace the client gave.
    The request's own tools stay beside them (they were replaced by the namespace's)."""
    client, source = served
    first = client.responses.create(
        model="exec",
        input=[CODE_MODE_TOOLS, {"role": "user", "content": "say hi"}],  # type: ignore[list-item]
        tools=[APPLY_PATCH],  # type: ignore[list-item]
    )
    (call,) = first.output
    assert call.type == "custom_tool_call"
    assert (call.name, call.namespace, call.input) == ("exec", "functions", EXEC_JS)
    (head,) = source.prompts("exec")
    assert head.count("namespace functions {") == 1
    assert "type exec = () => any;" in head and "type wait = (_: {" in head
    assert "type apply_patch = () => any;" in head
    assert "namespace multi_agent_v1 {" in head and "@exec:" in head
    second = client.responses.create(
        model="executed",
        input=[
            CODE_MODE_TOOLS,
            {"role": "user", "content": "say hi"},
            call.model_dump(exclude_none=True),
            {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "hi"},
        ],  # type: ignore[list-item]
    )
    assert second.output_text == "executed"
    (again,) = source.prompts("executed")
    assert f"to=functions.exec<|channel|>commentary<|message|>{EXEC_JS}<|call|>" in again
    assert "<|start|>functions.exec to=assistant<|channel|>commentary<|message|>hi" in again


@pytest.mark.parametrize(
    ("tools", "param"),
    [
        (
            [{**APPLY_PATCH, "format": {**APPLY_PATCH["format"], "definition": "start: nope"}}],
            "tools[0].format.definition",
        ),
        (
            [
                {
                    "type": "custom",
                    "name": "x",
                    "format": {"type": "grammar", "syntax": "regex", "definition": "[a-"},
                }
            ],
            "tools[0].format.definition",
        ),
        ([SPAWN, {**SPAWN, "description": "again"}], "tools[1].name"),
        # A `functions` namespace's tools are named among the request's own (harmony's
        # namespace of the client's tools): a clash is a 400 at the inner tool.
        ([SPAWN["tools"][0], {**SPAWN, "name": "functions"}], "tools[1].tools[0].name"),
        ([{**SPAWN, "name": "browser"}], "tools[0].name"),
        ([{**SPAWN, "name": "a.b"}], "tools[0].name"),
        ([{"type": "custom", "name": "f"}, {"type": "function", "name": "f"}], "tools[1].name"),
        ([{"type": "computer_use_2099"}], "tools[0]"),
    ],
)
def test_bad_client_tools_are_400s_naming_the_param(
    served: tuple[OpenAI, ScriptedAgentSource], tools: list[dict[str, Any]], param: str
) -> None:
    client, _ = served
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="patch", input="hi", tools=tools)  # type: ignore[arg-type]
    assert caught.value.body["param"] == param  # type: ignore[index]


def test_a_custom_call_output_needs_its_call(served: tuple[OpenAI, ScriptedAgentSource]) -> None:
    client, _ = served
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model="patch",
            input=[{"type": "custom_tool_call_output", "call_id": "call_1", "output": "x"}],  # type: ignore[list-item]
        )
    assert caught.value.body["param"] == "input[0].call_id"  # type: ignore[index]


def test_a_custom_tool_named_by_tool_choice_is_held_to_its_grammar() -> None:
    """`tool_choice: {type: custom}` was a 400 for any name; now the shape's one call is the
    custom tool, its input held to its Lark grammar (one llguidance grammar compiles)."""
    request = parse_create_request(
        {
            "model": "m",
            "input": "hi",
            "tools": [APPLY_PATCH, SPAWN],
            "tool_choice": {"type": "custom", "name": "apply_patch"},
        }
    )
    shape = shape_for(request)
    assert shape.answer is None and shape.calls is not None
    (call,) = shape.calls
    assert call.recipient == "functions.apply_patch"
    assert call.body == LarkBody(definition=PATCH_GRAMMAR)
    assert validate_grammar(harmony_grammar(shape)) is None
    anything = shape_for(parse_create_request({**request_body(), "tool_choice": "required"}))
    assert {c.recipient for c in anything.calls or ()} == {
        "functions.apply_patch",
        "multi_agent_v1.spawn_agent",
    }


def request_body() -> dict[str, Any]:
    return {"model": "m", "input": "hi", "tools": [APPLY_PATCH, SPAWN]}


SEARCH = {
    "type": "tool_search",
    "execution": "client",
    "description": "Find tools by what they do.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "defer_loading": True,
}


def test_a_client_tool_search_call_is_a_tool_search_call_item(
    served: tuple[OpenAI, ScriptedAgentSource],
) -> None:
    """Issue 31: a client-executed `tool_search` was left out of the prompt, so the model
    could never call it. It is offered as the function `tool_search`, and the model's call
    comes back as the item the API defines (`ResponseToolSearchCall`: `arguments` a JSON
    value, `execution: "client"`, a `call_id`), streamed with the SDK's accumulator; the
    client's `tool_search_output` (loaded tools) is read back, its tools join the tool list
    and the model calls one of them."""
    client, source = served
    with client.responses.stream(model="search", input="weather?", tools=[SEARCH]) as stream:  # type: ignore[list-item]
        events = list(stream)
        first = stream.get_final_response()
    assert_conformant(events)
    (call,) = first.output
    assert call.type == "tool_search_call"
    assert (call.arguments, call.execution, call.status) == (
        {"query": "weather"},
        "client",
        "completed",
    )
    assert call.call_id and first.tools[0].type == "tool_search"
    (prompt,) = source.prompts("search")
    assert "type tool_search = " in prompt and "Find tools by what they do." in prompt
    output = {
        "type": "tool_search_output",
        "call_id": call.call_id,
        "execution": "client",
        "tools": [WEATHER],
    }
    stateless = [
        {"role": "user", "content": "weather?"},
        call.model_dump(exclude_none=True),
        output,
    ]
    carried = [output]
    for body in (
        {"input": stateless},
        {"input": carried, "previous_response_id": first.id},
    ):
        second = client.responses.create(model="searched", tools=[SEARCH], **body)  # type: ignore[arg-type]
        (weather,) = second.output
        assert (weather.type, weather.name, weather.arguments) == (
            "function_call",
            "get_weather",
            '{"city":"Paris"}',
        )
        again = source.prompts("searched")[-1]
        assert "type get_weather = " in again
        assert (
            "<|start|>assistant to=functions.tool_search<|channel|>commentary json"
            '<|message|>{"query":"weather"}<|call|>'
        ) in again
        assert (
            "<|start|>functions.tool_search to=assistant<|channel|>commentary"
            '<|message|>{"loaded":["get_weather"]}<|end|>'
        ) in again


def test_a_constrained_engine_lets_the_model_call_the_client_tool_search() -> None:
    """Where calls are held to the declared tools (a custom tool's grammar, a strict function,
    `required`), `functions.tool_search` was not among them: an engine that enforces the
    grammar (native, vLLM, SGLang) could never let the model call the search it is offered."""
    body = {"model": "m", "input": "hi", "tools": [APPLY_PATCH, SEARCH]}
    for choice in ("auto", "required"):
        shape = shape_for(parse_create_request({**body, "tool_choice": choice}))
        assert {c.recipient for c in shape.calls or ()} == {
            "functions.apply_patch",
            "functions.tool_search",
        }, choice
        assert validate_grammar(harmony_grammar(shape)) is None
    hosted = {**SEARCH, "execution": "server"}
    shape = shape_for(parse_create_request({**body, "tools": [APPLY_PATCH, hosted]}))
    assert {c.recipient for c in shape.calls or ()} == {"functions.apply_patch"}
