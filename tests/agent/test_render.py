"""Server-side tools and tool results in the prompt, checked on decoded prompts against what
openai-harmony renders for the same messages."""

from __future__ import annotations

import openai_harmony as h

from streamfold.adapters.agent import McpTool, McpToolInfo, PythonTool
from streamfold.adapters.agent._mcp import McpServerConfig
from streamfold.adapters.formats import (
    call_channel,
    call_message,
    continuation,
    render_prompt,
    tool_message,
)
from streamfold.adapters.protocol import parse_create_request
from streamfold.engines.vocab import harmony_encoding


def _decode(ids: tuple[int, ...]) -> str:
    return str(harmony_encoding().decode(list(ids)))


def _encode(text: str) -> list[int]:
    return list(harmony_encoding().encode(text, allowed_special="all"))


def _mcp() -> McpTool:
    tool = McpTool(McpServerConfig(server_label="demo", server_url="http://h/mcp"))
    tool.tools = (
        McpToolInfo(
            name="add",
            description="Add two integers.",
            input_schema={
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        ),
    )
    return tool


def test_server_tools_are_system_namespaces() -> None:
    request = parse_create_request(
        {"model": "m", "input": "hi", "tools": [{"type": "function", "name": "f"}]}
    )
    namespaces = [_mcp().describe(), PythonTool().describe()]
    prompt = _decode(render_prompt(request, namespaces))
    system, _, rest = prompt.partition("<|end|>")
    assert "## demo\n\n// Tools of the MCP server demo.\nnamespace demo {" in system
    assert "// Add two integers.\ntype add = (_: {\na: number,\nb: number,\n}) => any;" in system
    assert "## python\n\nUse this tool to execute Python code" in system
    assert "namespace functions {" in rest  # function tools stay in the developer message
    none = parse_create_request({"model": "m", "input": "hi", "tool_choice": "none"})
    assert "# Tools" not in _decode(render_prompt(none, namespaces))


def test_the_continuation_is_harmonys_tool_message() -> None:
    message = tool_message("demo.add", "42", "commentary")
    assert _decode(continuation(message)) == (
        "<|start|>demo.add to=assistant<|channel|>commentary<|message|>42<|end|><|start|>assistant"
    )
    # The whole conversation rendered at once gives the same tokens as the prompt, then the
    # generated call, then the continuation: the loop's prompt extends token for token.
    request = parse_create_request({"model": "m", "input": "add 40 and 2"})
    first = render_prompt(request)
    generated = _encode(
        '<|channel|>commentary to=demo.add <|constrain|>json<|message|>{"a":40,"b":2}<|call|>'
    )
    extended = (*first, *generated, *continuation(message))
    whole = render_prompt(
        request,
        after=[
            call_message("demo.add", '{"a":40,"b":2}', "commentary").with_content_type(
                "<|constrain|>json"
            ),
            message,
        ],
    )
    assert _decode(extended) == _decode(whole).replace(
        "<|start|>assistant to=demo.add<|channel|>commentary <|constrain|>json",
        "<|start|>assistant<|channel|>commentary to=demo.add <|constrain|>json",
    )


def test_call_channel_reads_the_call_message() -> None:
    analysis = _encode("<|channel|>analysis to=python code<|message|>print(1)<|call|>")
    assert call_channel(analysis, "python") == "analysis"
    commentary = _encode(
        "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>commentary "
        "to=demo.add <|constrain|>json<|message|>{}<|call|>"
    )
    assert call_channel(commentary, "demo.add") == "commentary"
    assert call_channel(_encode("garbage"), "python") == "analysis"


def test_earlier_tool_items_render_as_call_and_result() -> None:
    request = parse_create_request(
        {
            "model": "m",
            "input": [
                {"role": "user", "content": "add"},
                {
                    "type": "mcp_list_tools",
                    "id": "mcpl_1",
                    "server_label": "demo",
                    "tools": [],
                },
                {
                    "type": "mcp_call",
                    "id": "mcp_1",
                    "server_label": "demo",
                    "name": "add",
                    "arguments": '{"a":1,"b":2}',
                    "output": "3",
                },
                {
                    "type": "mcp_call",
                    "id": "mcp_2",
                    "server_label": "demo",
                    "name": "explode",
                    "arguments": "{}",
                    "error": "boom",
                },
                {
                    "type": "code_interpreter_call",
                    "id": "ci_1",
                    "code": "print(2)",
                    "outputs": [{"type": "logs", "logs": "2\n"}],
                    "container_id": "c",
                },
                {"role": "user", "content": "thanks"},
            ],
        }
    )
    messages = [
        h.Message.from_role_and_content(h.Role.USER, "add"),
        call_message("demo.add", '{"a":1,"b":2}'),
        tool_message("demo.add", "3"),
        call_message("demo.explode", "{}"),
        tool_message("demo.explode", "Error: boom"),
        call_message("python", "print(2)"),
        tool_message("python", "2\n"),
        h.Message.from_role_and_content(h.Role.USER, "thanks"),
    ]
    expected = _decode(
        tuple(
            harmony_encoding().render_conversation_for_completion(
                h.Conversation.from_messages(
                    [
                        h.Message.from_role_and_content(
                            h.Role.SYSTEM,
                            h.SystemContent.new().with_reasoning_effort(h.ReasoningEffort.MEDIUM),
                        ),
                        *messages,
                    ]
                ),
                h.Role.ASSISTANT,
            )
        )
    )
    rendered = _decode(render_prompt(request))
    assert rendered == expected
    assert (
        "<|start|>assistant to=demo.add<|channel|>commentary json<|message|>"
        '{"a":1,"b":2}<|call|><|start|>demo.add to=assistant<|channel|>commentary<|message|>3'
        "<|end|>"
    ) in rendered
    assert (
        "<|start|>assistant to=python<|channel|>analysis code<|message|>print(2)<|call|>"
        "<|start|>python to=assistant<|channel|>analysis<|message|>2\n<|end|>"
    ) in rendered
