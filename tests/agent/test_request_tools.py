"""Parsing the server-side tools and `max_tool_calls`: values, and 400s naming `param`."""

from __future__ import annotations

from typing import Any

import pytest

from streamfold.adapters.protocol import (
    AllowedToolsFilter,
    ApprovalFilterParam,
    ApprovalToolNames,
    CodeInterpreterParam,
    McpApprovalResponseInput,
    McpCallInput,
    McpParam,
    RequestError,
    WebSearchParam,
    parse_create_request,
)
from streamfold.statemachine import FunctionTool

MCP = {"type": "mcp", "server_label": "demo", "server_url": "http://127.0.0.1:1/mcp"}


def _parse(**body: Any) -> Any:
    return parse_create_request({"model": "m", "input": "hi", **body})


def test_every_server_tool_type_and_max_tool_calls() -> None:
    request = _parse(
        max_tool_calls=3,
        tools=[
            {"type": "function", "name": "f"},
            {
                **MCP,
                "allowed_tools": {"tool_names": ["add"], "read_only": True},
                "headers": {"Authorization": "Bearer x"},
                "require_approval": {"never": {"tool_names": ["add"]}},
            },
            {"type": "web_search_preview", "search_context_size": "low"},
            {"type": "code_interpreter", "container": {"type": "auto"}},
        ],
    )
    assert request.max_tool_calls == 3
    assert request.function_tools == (FunctionTool(name="f"),)
    mcp, web, python = request.server_tools
    assert mcp == McpParam(
        type="mcp",
        server_label="demo",
        server_url="http://127.0.0.1:1/mcp",
        allowed_tools=AllowedToolsFilter(tool_names=("add",), read_only=True),
        headers={"Authorization": "Bearer x"},
        require_approval=ApprovalFilterParam(never=ApprovalToolNames(tool_names=("add",))),
    )
    assert web == WebSearchParam(type="web_search_preview", search_context_size="low")
    assert python == CodeInterpreterParam(type="code_interpreter", container={"type": "auto"})
    plain = _parse(tools=[{**MCP, "allowed_tools": ["add"], "require_approval": "never"}])
    assert plain.server_tools[0].allowed_tools == ("add",)
    assert plain.server_tools[0].require_approval == "never"


@pytest.mark.parametrize(
    ("tool", "param", "message"),
    [
        ({**MCP, "server_label": "de.mo"}, "tools[1].server_label", "letters, digits"),
        ({**MCP, "server_label": "python"}, "tools[1].server_label", "reserved"),
        ({"type": "mcp", "server_label": "d"}, "tools[1].server_url", "is required"),
        ({**MCP, "server_url": "file:///etc/passwd"}, "tools[1].server_url", "http:// or https://"),
        ({**MCP, "connector_id": "connector_gmail"}, "tools[1].server_url", "not both"),
        ({**MCP, "headers": {"X": 1}}, "tools[1].headers", "string values"),
        ({**MCP, "headers": {"X": "a\r\nInjected: 1"}}, "tools[1].headers", "line break"),
        ({**MCP, "headers": {"Bad Name": "a"}}, "tools[1].headers", "not a valid HTTP header"),
        ({**MCP, "require_approval": "sometimes"}, "tools[1].require_approval", "'always'"),
        ({**MCP, "allowed_tools": "add"}, "tools[1].allowed_tools", "array of tool names"),
        ({**MCP, "server_url": 5}, "tools[1].server_url", "expected a string"),
        ({"type": "no_such_tool"}, "tools[1]", "unsupported tool type 'no_such_tool'"),
        ({"type": "code_interpreter", "container": 3}, "tools[1].container", "an object"),
    ],
)
def test_bad_tools_are_400s_naming_the_param(tool: Any, param: str, message: str) -> None:
    with pytest.raises(RequestError) as caught:
        _parse(tools=[{"type": "function", "name": "f"}, tool])
    assert caught.value.status == 400
    assert caught.value.param == param
    assert message in caught.value.message


def test_duplicates_and_limits() -> None:
    with pytest.raises(RequestError) as caught:
        _parse(tools=[MCP, MCP])
    assert caught.value.param == "tools[1].server_label"
    assert "used by tools[0] too" in caught.value.message
    with pytest.raises(RequestError) as caught:
        _parse(tools=[{"type": "web_search_preview"}, {"type": "web_search"}])
    assert caught.value.param == "tools[1].type"
    for bad in (0, -1):
        with pytest.raises(RequestError) as caught:
            _parse(max_tool_calls=bad)
        assert caught.value.param == "max_tool_calls"
    with pytest.raises(RequestError) as caught:
        _parse(max_tool_calls="3")
    assert caught.value.param == "max_tool_calls"


def test_agent_input_items() -> None:
    request = _parse(
        input=[
            {"role": "user", "content": "add"},
            {
                "type": "mcp_call",
                "id": "mcp_1",
                "server_label": "demo",
                "name": "add",
                "arguments": "{}",
                "output": "3",
                "status": "completed",
            },
            {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True},
        ]
    )
    assert isinstance(request.input[1], McpCallInput) and request.input[1].output == "3"
    assert request.input[2] == McpApprovalResponseInput(
        type="mcp_approval_response", approval_request_id="mcpr_1", approve=True
    )
    with pytest.raises(RequestError) as caught:
        _parse(input=[{"type": "mcp_approval_response", "approval_request_id": "x"}])
    assert caught.value.param == "input[0].approve"
