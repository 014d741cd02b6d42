"""Issue 30, item 1: every form of `text.format`, `tool_choice` and custom tool the SDK types
allow is read and echoed as it was sent (`response.text`, `tool_choice`, `parallel_tool_calls`,
`tools`), over a real socket, and the Response parses as the SDK's own `Response`."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from openai.types.responses import Response as SdkResponse

from streamfold.adapters.agent._config import AgentConfig
from streamfold.adapters.server import MemoryEventStore, create_app
from tests.agent.scripted import ScriptedAgentSource
from tests.server.serving import serve

OBJ = {
    "type": "object",
    "properties": {"a": {"type": "string"}},
    "required": ["a"],
    "additionalProperties": False,
}
F = {"type": "function", "name": "f", "parameters": OBJ, "strict": True}
LARK = {
    "type": "custom",
    "name": "patch",
    "description": "A patch.",
    "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "x"+'},
}
REGEX = {
    "type": "custom",
    "name": "rx",
    "format": {"type": "grammar", "syntax": "regex", "definition": "[a-z]+"},
}
TEXT = {"type": "custom", "name": "t", "format": {"type": "text"}}
MCP = {
    "type": "mcp",
    "server_label": "docs",
    "server_url": "http://127.0.0.1:9/mcp",
    "require_approval": "never",
}
SCHEMA = {"type": "json_schema", "name": "x-1_y", "schema": OBJ, "strict": True}

FORMS: dict[str, dict[str, Any]] = {
    "text": {"text": {"format": {"type": "text"}}},
    "json_object": {"text": {"format": {"type": "json_object"}}},
    "json_schema strict, described": {"text": {"format": {**SCHEMA, "description": "d"}}},
    "json_schema not strict": {"text": {"format": {**SCHEMA, "strict": False}}},
    "none": {"tool_choice": "none", "tools": [F]},
    "auto": {"tool_choice": "auto", "tools": [F]},
    "required": {"tool_choice": "required", "tools": [F]},
    "function": {"tool_choice": {"type": "function", "name": "f"}, "tools": [F]},
    "allowed_tools auto": {
        "tool_choice": {
            "type": "allowed_tools",
            "mode": "auto",
            "tools": [{"type": "function", "name": "f"}],
        },
        "tools": [F, LARK],
    },
    "allowed_tools required": {
        "tool_choice": {
            "type": "allowed_tools",
            "mode": "required",
            "tools": [{"type": "custom", "name": "patch"}],
        },
        "tools": [F, LARK],
    },
    "custom": {"tool_choice": {"type": "custom", "name": "rx"}, "tools": [REGEX, TEXT, LARK]},
    "mcp": {"tool_choice": {"type": "mcp", "server_label": "docs"}, "tools": [MCP]},
    "mcp tool": {
        "tool_choice": {"type": "mcp", "server_label": "docs", "name": "search"},
        "tools": [MCP],
    },
    "parallel_tool_calls false": {"parallel_tool_calls": False, "tools": [F]},
}


@pytest.fixture(scope="module")
def url() -> Any:
    source = ScriptedAgentSource({"m": ["<|channel|>final<|message|>hi<|return|>"] * 40})
    config = AgentConfig(mcp_allow=("http://127.0.0.1:9/",))
    with serve(create_app(source.engine(), store=MemoryEventStore(), agent=config)) as base:
        yield base


@pytest.mark.parametrize("form", sorted(FORMS))
def test_every_form_is_echoed_as_sent(url: str, form: str) -> None:
    extra = FORMS[form]
    with httpx.Client(timeout=30) as client:
        reply = client.post(f"{url}/v1/responses", json={"model": "m", "input": "hi", **extra})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    SdkResponse.model_validate(body)
    if "text" in extra:
        assert body["text"]["format"] == extra["text"]["format"]
    for key in ("tool_choice", "parallel_tool_calls"):
        if key in extra:
            assert body[key] == extra[key]
    for tool in extra.get("tools", []):
        if tool["type"] in ("function", "custom"):
            assert tool in body["tools"], body["tools"]


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "text": {"format": {"type": "json_schema", "name": "x", "strict": True, "schema": schema}}
    }


#: A bad control, and the `param` its 400 names.
REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"text": {"format": {**SCHEMA, "name": "a b"}}}, "text.format.name"),
    ({"text": {"format": {**SCHEMA, "name": "a" * 65}}}, "text.format.name"),
    ({"text": {"format": {"type": "json_schema", "schema": OBJ}}}, "text.format.name"),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
    ({"text": {"format": {"type": "xml"}}}, "text.format"),
    (_strict({**OBJ, "additionalProperties": True}), "text.format.schema.additionalProperties"),
    (_strict({**OBJ, "required": []}), "text.format.schema.required"),
    (_strict({"type": "array", "items": OBJ}), "text.format.schema.type"),
    (
        _strict({**OBJ, "properties": {"a": {"type": "string", "pattern": "(?=a)a"}}}),
        "text.format.schema",
    ),
    ({"tools": [{**F, "parameters": {**OBJ, "allOf": []}}]}, "tools[0].parameters.allOf"),
    ({"tool_choice": {"type": "function", "name": "g"}, "tools": [F]}, "tool_choice.name"),
    ({"tool_choice": "sometimes", "tools": [F]}, "tool_choice"),
    ({"tool_choice": {"type": "custom", "name": "zz"}, "tools": [REGEX]}, "tool_choice.name"),
    (
        {"tool_choice": {"type": "mcp", "server_label": "web"}, "tools": [MCP]},
        "tool_choice.server_label",
    ),
    ({"tool_choice": {"type": "code_interpreter"}, "tools": [F]}, "tool_choice.type"),
    (
        {
            "tool_choice": {
                "type": "allowed_tools",
                "mode": "auto",
                "tools": [{"type": "function", "name": "g"}],
            },
            "tools": [F],
        },
        "tool_choice.tools[0]",
    ),
    (
        {"tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": []}, "tools": [F]},
        "tool_choice.tools",
    ),
    (
        {
            "tool_choice": {
                "type": "allowed_tools",
                "mode": "often",
                "tools": [{"type": "function", "name": "f"}],
            },
            "tools": [F],
        },
        "tool_choice.mode",
    ),
    (
        {"tools": [{**LARK, "format": {**LARK["format"], "definition": "start: foo"}}]},
        "tools[0].format.definition",
    ),
    (
        {"tools": [{**REGEX, "format": {**REGEX["format"], "definition": "[a-"}}]},
        "tools[0].format.definition",
    ),
    (
        {"tools": [{**REGEX, "format": {**REGEX["format"], "syntax": "ebnf"}}]},
        "tools[0].format.syntax",
    ),
    ({"tools": [{**F, "strict": "yes"}]}, "tools[0].strict"),
    ({"parallel_tool_calls": "yes", "tools": [F]}, "parallel_tool_calls"),
]


@pytest.mark.parametrize(("extra", "param"), REFUSED)
def test_every_bad_control_is_a_400_naming_its_param(
    url: str, extra: dict[str, Any], param: str
) -> None:
    with httpx.Client(timeout=30) as client:
        reply = client.post(f"{url}/v1/responses", json={"model": "m", "input": "hi", **extra})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error", error
