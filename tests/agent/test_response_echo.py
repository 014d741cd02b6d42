"""Issue 31: the Response says what was asked. Clients read request fields back from the
Response (`text`, `store`, `tools`, `truncation`, `user`, ...); they were left out, and `tools`
was `[]` when the request had MCP tools. The SDK's own `Response` model is walked against what
the server sends, over the real socket."""

from __future__ import annotations

import json
from typing import Any

import httpx
from openai.types.responses import Response as SdkResponse
from openai.types.responses.response_create_params import ResponseCreateParamsBase

from streamfold.adapters.agent._config import AgentConfig
from streamfold.adapters.server import MemoryEventStore, create_app
from tests.server.serving import serve

from .scripted import ScriptedAgentSource

#: Request fields the SDK's Response carries that this server does not take (prompt
#: templates, conversations objects, moderation, image and access settings).
NOT_TAKEN = frozenset(
    {"access_programs", "conversation", "image", "moderation", "prompt", "prompt_cache_options"}
)
MCP = {
    "type": "mcp",
    "server_label": "docs",
    "server_url": "http://127.0.0.1:9/mcp",
    "authorization": "secret-token",
    "headers": {"X-Key": "secret-header"},
    "require_approval": "never",
}
BODY: dict[str, Any] = {
    "model": "answer",
    "input": "hi",
    "instructions": "Be brief.",
    "tools": [
        {"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": False},
        {"type": "web_search", "search_context_size": "low"},
        {"type": "custom", "name": "apply_patch"},
    ],
    "tool_choice": {"type": "function", "name": "f"},
    "parallel_tool_calls": False,
    "max_tool_calls": 3,
    "max_output_tokens": 200,
    "temperature": 0.5,
    "top_p": 0.9,
    "top_logprobs": 2,
    "include": ["message.output_text.logprobs"],
    "text": {"format": {"type": "text"}, "verbosity": "low"},
    "reasoning": {"effort": "high", "summary": "auto"},
    "metadata": {"k": "v"},
    "store": True,
    "background": False,
    "truncation": "disabled",
    "user": "user-1",
    "safety_identifier": "sid-1",
    "prompt_cache_key": "codex-session-1",
    "prompt_cache_retention": "24h",
    "service_tier": "priority",
}


def _serve_one(body: dict[str, Any], *, stream: bool = False) -> dict[str, Any]:
    source = ScriptedAgentSource({"answer": ["<|channel|>final<|message|>hi<|return|>"]})
    config = AgentConfig(mcp_allow=("http://127.0.0.1:9/",))
    app = create_app(source.engine(), store=MemoryEventStore(), agent=config)
    with serve(app) as url, httpx.Client(timeout=30) as client:
        if not stream:
            reply = client.post(f"{url}/v1/responses", json=body)
            assert reply.status_code == 200, reply.text
            return dict(reply.json())
        with client.stream("POST", f"{url}/v1/responses", json={**body, "stream": True}) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    return dict(json.loads(line[6:])["response"])  # response.created
    raise AssertionError("no event")


def test_every_request_field_the_sdk_response_carries_is_echoed() -> None:
    sent = _serve_one(BODY)
    SdkResponse.model_validate(sent)
    asked = (set(SdkResponse.model_fields) & set(ResponseCreateParamsBase.__annotations__)) - (
        NOT_TAKEN
    )
    assert asked <= set(sent), f"not echoed: {sorted(asked - set(sent))}"
    for field in asked - {"tools", "reasoning", "service_tier", "previous_response_id"}:
        assert sent[field] == BODY[field], field
    assert sent["previous_response_id"] is None
    assert sent["store"] is True
    assert sent["reasoning"] == {"effort": "high", "summary": "auto"}
    assert sent["service_tier"] == "priority"
    assert [tool["type"] for tool in sent["tools"]] == ["function", "web_search", "custom"]
    assert sent["tools"][1] == BODY["tools"][1]
    assert sent["usage"]["input_tokens_details"]["cached_tokens"] == 0


def test_defaults_are_echoed_as_the_api_sends_them() -> None:
    sent = _serve_one({"model": "answer", "input": "hi", "store": False})
    assert sent["text"] == {"format": {"type": "text"}}
    assert (sent["store"], sent["truncation"], sent["service_tier"]) == (
        False,
        "disabled",
        "default",
    )
    assert (sent["top_logprobs"], sent["max_tool_calls"], sent["user"]) == (0, None, None)


def test_mcp_tools_are_echoed_without_their_secrets() -> None:
    """`tools` was `[]` for a request with MCP tools."""
    sent = _serve_one({"model": "answer", "input": "hi", "tools": [MCP]}, stream=True)
    (tool,) = sent["tools"]
    assert tool == {k: v for k, v in MCP.items() if k not in ("authorization", "headers")}
    assert "secret" not in json.dumps(sent)
