"""Issues 31/36: a think-tag model is shown the client's tools however they come, and its calls
come back as the items those tools make.

Before, `ChatTemplateFormat` showed a chat template model the request's top-level function
tools only: Codex's `namespace` tools (its MCP servers), the tools of an `additional_tools`
item (all of a code-mode model's tools, in a namespace named `functions`), tools loaded by a
`tool_search_output`, `custom` tools (`apply_patch`) and a client-run `tool_search` were never
in the prompt, so a Qwen3 model under Codex could not call them; and a call it wrote came back
as a bare `function_call` without its namespace. The mapping (vLLM's: `NS__NAME`, a custom
tool as one string `input`) is `statemachine/_grammars/chat_tools.py`; here each prompt is
checked against `transformers`' `apply_chat_template` of hand-written messages and tools.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamfold.adapters.driver import fold
from streamfold.adapters.formats import ChatTemplateFormat
from streamfold.adapters.protocol import RequestError, parse_create_request
from streamfold.engines import TokenChunk
from streamfold.statemachine import Response

from .chat_template_model import hf_prompt

transformers = pytest.importorskip("transformers")

READ = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
FETCH = {"type": "object", "properties": {"url": {"type": "string"}}}
PATCH_GRAMMAR = 'start: "*** Begin Patch\\n" /[^*]+/ "*** End Patch"'
#: What Codex sends: an MCP server's tools as a namespace, apply_patch as a custom tool with a
#: grammar, a tool_search it runs itself.
TOOLS: list[dict[str, Any]] = [
    {
        "type": "namespace",
        "name": "mcp__fs",
        "description": "Files.",
        "tools": [{"type": "function", "name": "read", "description": "Read", "parameters": READ}],
    },
    {
        "type": "custom",
        "name": "apply_patch",
        "description": "Edit files.",
        "format": {"type": "grammar", "syntax": "lark", "definition": PATCH_GRAMMAR},
    },
    {"type": "tool_search", "execution": "client"},
]
#: A code-mode model's tools: all of them in an `additional_tools` item's `functions` namespace.
ADDITIONAL = {
    "type": "additional_tools",
    "role": "developer",
    "tools": [
        {
            "type": "namespace",
            "name": "functions",
            "description": "",
            "tools": [
                {"type": "custom", "name": "exec", "description": "Run JavaScript."},
                {"type": "function", "name": "wait", "parameters": {"type": "object"}},
            ],
        }
    ],
}
LOADED = {
    "type": "tool_search_output",
    "call_id": "ts_1",
    "execution": "client",
    "tools": [
        {
            "type": "namespace",
            "name": "mcp__web",
            "description": "The web.",
            "tools": [{"type": "function", "name": "fetch", "parameters": FETCH}],
        }
    ],
}
INPUT = "string `input`."
CUSTOM = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "the tool's input, as text"}},
    "required": ["input"],
}


def _function(name: str, description: str, parameters: Any) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


#: The same tools as the chat template is handed them, written out by hand (the tool search
#: last, as harmony lists it).
HF_TOOLS = [
    _function("mcp__fs__read", "Read", READ),
    _function(
        "apply_patch",
        f"Edit files.\nFreeform tool: pass its whole input as the {INPUT}\n"
        f"The input must follow this lark grammar:\n{PATCH_GRAMMAR}",
        CUSTOM,
    ),
    _function(
        "exec", f"Run JavaScript.\nFreeform tool: pass its whole input as the {INPUT}", CUSTOM
    ),
    _function("wait", "", {"type": "object"}),
    _function("mcp__web__fetch", "", FETCH),
    _function(
        "tool_search",
        "Search for more tools. The tools found are added to the ones you can call; call them "
        "by name once the search has returned.",
        {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "what the tools should do"}},
            "required": ["query"],
        },
    ),
]


def _call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"type": "function", "id": call_id, "function": {"name": name, "arguments": arguments}}


def test_every_client_tool_is_shown_and_every_earlier_call_named_as_it_is_shown(
    model_dir: Path,
) -> None:
    """Bug: the prompt held no tool but top-level functions, and earlier calls of namespace
    and custom tools or a tool search were left out of the conversation."""
    user = {"role": "user", "content": "Fix the bug."}
    items: list[dict[str, Any]] = [
        ADDITIONAL,
        user,
        {"type": "tool_search_call", "call_id": "ts_1", "arguments": {"query": "web"}},
        LOADED,
        {
            "type": "function_call",
            "call_id": "c1",
            "namespace": "mcp__fs",
            "name": "read",
            "arguments": '{"path": "a.py"}',
        },
        {"type": "function_call_output", "call_id": "c1", "output": "x = 1"},
        {
            "type": "custom_tool_call",
            "call_id": "c2",
            "namespace": "functions",
            "name": "exec",
            "input": "run()",
        },
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "ok"},
        {"type": "custom_tool_call", "call_id": "c3", "name": "apply_patch", "input": "P"},
        {"type": "custom_tool_call_output", "call_id": "c3", "output": "done"},
    ]
    request = parse_create_request({"model": "m", "tools": TOOLS, "input": items})
    messages = [
        user,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [_call("ts_1", "tool_search", {"query": "web"})],
        },
        {"role": "tool", "content": '{"loaded": ["mcp__web"]}', "tool_call_id": "ts_1"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [_call("c1", "mcp__fs__read", {"path": "a.py"})],
        },
        {"role": "tool", "content": "x = 1", "tool_call_id": "c1"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [_call("c2", "exec", {"input": "run()"})],
        },
        {"role": "tool", "content": "ok", "tool_call_id": "c2"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [_call("c3", "apply_patch", {"input": "P"})],
        },
        {"role": "tool", "content": "done", "tool_call_id": "c3"},
    ]
    rendered = ChatTemplateFormat(model_dir).render(request)
    assert list(rendered) == hf_prompt(model_dir, messages, HF_TOOLS)


def test_tool_choice_none_still_shows_no_tool(model_dir: Path) -> None:
    body = {"model": "m", "tools": TOOLS, "tool_choice": "none", "input": [ADDITIONAL, "Hi"]}
    body["input"] = [ADDITIONAL, {"role": "user", "content": "Hi"}]
    request = parse_create_request(body)
    expected = hf_prompt(model_dir, [{"role": "user", "content": "Hi"}], None)
    assert list(ChatTemplateFormat(model_dir).render(request)) == expected


def test_two_tools_shown_under_one_name_are_refused_naming_tools(model_dir: Path) -> None:
    clash = [*TOOLS, {"type": "function", "name": "mcp__fs__read"}]
    request = parse_create_request({"model": "m", "tools": clash, "input": "Hi"})
    with pytest.raises(RequestError, match="mcp__fs__read") as raised:
        ChatTemplateFormat(model_dir).render(request)
    assert raised.value.param == "tools"


def _served(model_dir: Path, text: str, tools: Any, items: Any = ()) -> Any:
    """What the reducer makes of `text`, as the server runs it: the Response echoes the
    request's client tools (and tool search), which is what routes a call."""
    from streamfold.adapters.server._echo import echoed

    body = {"model": "m", "tools": tools, "input": [*items, {"role": "user", "content": "Hi"}]}
    request = parse_create_request(body)
    response = Response(
        id="resp_t",
        created_at=1,
        model="m",
        status="in_progress",
        tools=echoed(request, body)["tools"],
    )
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    ids = tokenizer.encode(text, add_special_tokens=False)
    chunks = [TokenChunk(token_ids=(token,)) for token in ids]
    grammar = ChatTemplateFormat(model_dir).grammar()
    return list(fold(grammar, response, chunks, "stop"))[-1].response


def _tool_call(name: str, arguments: Any) -> str:
    body = json.dumps({"name": name, "arguments": arguments})
    return f"<think>\nA call.\n</think>\n\n<tool_call>\n{body}\n</tool_call><|im_end|>"


PATCH = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch"
ROUTES = {
    "a namespace's function": (
        _tool_call("mcp__fs__read", {"path": "a.py"}),
        {"type": "function_call", "name": "read", "namespace": "mcp__fs"},
        ("arguments", '{"path": "a.py"}'),
    ),
    "a custom tool": (
        _tool_call("apply_patch", {"input": PATCH}),
        {"type": "custom_tool_call", "name": "apply_patch", "namespace": None},
        ("input", PATCH),
    ),
    "a code-mode custom tool in functions": (
        _tool_call("exec", {"input": "console.log(1)"}),
        {"type": "custom_tool_call", "name": "exec", "namespace": "functions"},
        ("input", "console.log(1)"),
    ),
    "a function in functions": (
        _tool_call("wait", {}),
        {"type": "function_call", "name": "wait", "namespace": "functions"},
        ("arguments", "{}"),
    ),
    "a loaded namespace's function": (
        _tool_call("mcp__web__fetch", {"url": "u"}),
        {"type": "function_call", "name": "fetch", "namespace": "mcp__web"},
        ("arguments", '{"url": "u"}'),
    ),
    "the tool search": (
        _tool_call("tool_search", {"query": "web"}),
        {"type": "tool_search_call", "execution": "client"},
        ("arguments", {"query": "web"}),
    ),
    "an undeclared function": (
        _tool_call("read", {"path": "a.py"}),
        {"type": "function_call", "name": "read", "namespace": None},
        ("arguments", '{"path": "a.py"}'),
    ),
}


@pytest.mark.parametrize("case", list(ROUTES))
def test_a_call_is_routed_back_to_its_tools_item(model_dir: Path, case: str) -> None:
    """Bug: every call came back a `function_call` named as the model wrote it (`mcp__fs__read`,
    `apply_patch` with JSON arguments), which Codex answers `unsupported call`."""
    text, identity, (field, value) = ROUTES[case]
    final = _served(model_dir, text, TOOLS, [ADDITIONAL, LOADED])
    call = final.output[-1]
    assert {key: getattr(call, key) for key in identity if key != "type"} == {
        k: v for k, v in identity.items() if k != "type"
    }
    assert call.type == identity["type"]
    assert getattr(call, field) == value


_NAMES = st.sampled_from(["a", "b", "a__b", "functions", "tool_search", "mcp__x", "x__y"])
_INNER = st.builds(
    lambda kind, name: {"type": kind, "name": name},
    st.sampled_from(["function", "custom"]),
    _NAMES,
)
_TOOL = st.one_of(
    _INNER,
    st.builds(
        lambda name, tools: {"type": "namespace", "name": name, "description": "", "tools": tools},
        _NAMES,
        st.lists(_INNER, max_size=3),
    ),
    st.just({"type": "tool_search", "execution": "client"}),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_TOOL, max_size=5))
def test_a_call_of_any_shown_function_comes_back_and_is_shown_again_under_that_name(
    tools: list[dict[str, Any]],
) -> None:
    """Over any mix of tools: each function shown routes a call of it to its tool (kind, name,
    namespace), and that call sent back in the history is shown under the name it was made by,
    so a tool loop never renames a tool between turns."""
    from streamfold.adapters.formats import shown_tools
    from streamfold.adapters.protocol import parse_create_request as parse
    from streamfold.statemachine._grammars.chat_tools import flat_call, flat_name

    try:
        request = parse({"model": "m", "tools": tools, "input": "Hi"})
        shown = shown_tools(request)
    except RequestError:
        return  # names the request checks refuse (duplicates), or two shown alike: a 400
    names = [tool.flat for tool in shown]
    assert len(names) == len(set(names))
    echoed = (*request.client_tools, *(t for t in request.tools if t.type == "tool_search"))
    for tool in shown:
        routed = flat_call(echoed, tool.flat)
        assert routed == tool
        if tool.kind != "tool_search_call":
            assert tool.name is not None
            assert flat_name(tool.namespace, tool.name) == tool.flat
