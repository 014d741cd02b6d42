"""Issue 30, item 1: a `tool_choice` the request cannot meet is a 400 naming `tool_choice`.

Bug pinned: `tool_choice: "required"` with no tools, or a `tool_choice` naming a hosted tool
this server does not run (left out of the prompt by `served_tools`: `web_search_preview`
without a browser, `code_interpreter` with the python tool off, `file_search`), made a shape
allowing neither an answer nor a call; building its grammar raised `ValueError`, and the client
got a 500 (or a reset connection) instead of a 400 naming the param. Over a real socket."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from streamfold.adapters.server import MemoryEventStore, create_app
from tests.agent.scripted import ScriptedAgentSource
from tests.server.serving import serve

F = {"type": "function", "name": "f", "parameters": {"type": "object"}}

REFUSED: dict[str, dict[str, Any]] = {
    "required without tools": {"tool_choice": "required"},
    "web_search_preview, not run": {
        "tool_choice": {"type": "web_search_preview"},
        "tools": [{"type": "web_search_preview"}],
    },
    "code_interpreter, not run": {
        "tool_choice": {"type": "code_interpreter"},
        "tools": [{"type": "code_interpreter", "container": {"type": "auto"}}],
    },
    "file_search, not run": {
        "tool_choice": {"type": "file_search"},
        "tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}],
    },
    "allowed_tools required, only unserved": {
        "tool_choice": {
            "type": "allowed_tools",
            "mode": "required",
            "tools": [{"type": "web_search_preview"}],
        },
        "tools": [F, {"type": "web_search_preview"}],
    },
}


@pytest.fixture(scope="module")
def url() -> Any:
    source = ScriptedAgentSource({"m": ["<|channel|>final<|message|>hi<|return|>"] * 20})
    with serve(create_app(source.engine(), store=MemoryEventStore())) as base:
        yield base


@pytest.mark.parametrize("case", sorted(REFUSED))
@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_choice_nothing_can_meet_is_a_400_naming_it(
    url: str, case: str, stream: bool
) -> None:
    body = {"model": "m", "input": "hi", "stream": stream, **REFUSED[case]}
    with httpx.Client(timeout=30) as client:
        reply = client.post(f"{url}/v1/responses", json=body)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == "tool_choice" and error["type"] == "invalid_request_error"


def test_allowed_tools_in_auto_mode_still_answers(url: str) -> None:
    """Not over-refused: `auto` lets the model answer when the only allowed tool is gone."""
    choice = {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "web_search_preview"}]}
    body = {
        "model": "m",
        "input": "hi",
        "tool_choice": choice,
        "tools": [F, {"type": "web_search_preview"}],
    }
    with httpx.Client(timeout=30) as client:
        reply = client.post(f"{url}/v1/responses", json=body)
    assert reply.status_code == 200, reply.text
    assert reply.json()["tool_choice"] == choice


#: openai 3.57's `ToolChoice` forms naming hosted tools this server never runs.
NEVER_RUN = ["apply_patch", "shell", "computer", "computer_use"]


@pytest.mark.parametrize("kind", NEVER_RUN)
def test_every_sdk_tool_choice_form_is_read_and_refused_for_what_it_names(
    url: str, kind: str
) -> None:
    """Bug pinned: `{type: apply_patch}`, `{type: shell}` (openai `ToolChoiceApplyPatch`,
    `ToolChoiceShell`) and `{type: computer}`/`computer_use` (`ToolChoiceTypes`) were refused
    as an "unknown tool_choice type", a form the SDK sends; now read, and refused (400 naming
    `tool_choice`) because the server does not run the tool they name."""
    with httpx.Client(timeout=30) as client:
        # `computer_use` names the `computer` tool, which it does not spell: "not in tools".
        served = "tool_choice.type" if kind == "computer_use" else "tool_choice"
        tool = {"type": "computer" if kind == "computer_use" else kind}
        for tools, param in (([tool], served), ([F], "tool_choice.type")):
            body = {"model": "m", "input": "hi", "tool_choice": {"type": kind}, "tools": tools}
            reply = client.post(f"{url}/v1/responses", json=body)
            assert reply.status_code == 400, reply.text
            error = reply.json()["error"]
            assert error["param"] == param and "unknown" not in error["message"], error
