"""Issues 31/36: Codex's tools, served to a think-tag model over a real socket.

Codex sends its MCP servers' tools as `namespace` tools, `apply_patch` as a `custom` tool, and
for code-mode models every tool in an `additional_tools` item's `functions` namespace. Before, a
chat template model was shown none of them (the prompt listed top-level functions only) and a
call it wrote came back as a bare `function_call` named `mcp__fs__read`, which Codex answers
`unsupported call`. Here a replayed Qwen-style conversation (`streamfold serve --engine
replay`) searches for tools, calls one the search loaded (a namespace's), a code-mode custom
tool and `apply_patch`, then answers:
each call comes back as its tool's item with its namespace, each prompt is `transformers`'
`apply_chat_template` of the conversation with the tools as the model is shown them, and each
streamed turn passes the checker.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from streamfold.adapters.server import create_app
from tests.adapters.chat_template_model import build_model_dir
from tests.adapters.test_chat_template_tools import ADDITIONAL, HF_TOOLS, LOADED, PATCH, TOOLS

from .serving import serve
from .test_replay_thinktags import replay_served, streamed, write_conversation

transformers = pytest.importorskip("transformers")


def _turn(name: str, arguments: Any) -> str:
    call = json.dumps({"name": name, "arguments": arguments})
    return f"<think>\nI call {name}.\n</think>\n\n<tool_call>\n{call}\n</tool_call><|im_end|>"


TURNS = [
    _turn("tool_search", {"query": "web"}),
    _turn("mcp__web__fetch", {"url": "u"}),
    _turn("exec", {"input": "console.log(1)"}),
    _turn("apply_patch", {"input": PATCH}),
    "<think>\nDone.\n</think>\n\nPatched a.txt.<|im_end|>",
]
#: Each call: what the model writes (the function it is shown, its arguments), and the item
#: it comes back as (type, name, namespace, the field holding its input, that input).
CALLS = [
    (
        ("tool_search", {"query": "web"}),
        ("tool_search_call", None, None, "arguments", {"query": "web"}),
    ),
    (
        ("mcp__web__fetch", {"url": "u"}),
        ("function_call", "fetch", "mcp__web", "arguments", '{"url": "u"}'),
    ),
    (
        ("exec", {"input": "console.log(1)"}),
        ("custom_tool_call", "exec", "functions", "input", "console.log(1)"),
    ),
    (("apply_patch", {"input": PATCH}), ("custom_tool_call", "apply_patch", None, "input", PATCH)),
]


def _prompt(model_dir: Path, messages: list[dict[str, Any]], tools: Any) -> list[int]:
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    out = tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=True, tokenize=True
    )
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def _assistant(call_id: str, name: str, arguments: Any, thought: str) -> dict[str, Any]:
    function = {"name": name, "arguments": arguments}
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "id": call_id, "function": function}],
        "reasoning_content": thought,
        "reasoning": thought,
    }


def test_codex_tools_reach_a_think_tag_model_and_its_calls_come_back_with_their_namespace(
    tmp_path: Path,
) -> None:
    model_dir = build_model_dir(tmp_path / "traces" / "qwenish")
    write_conversation(model_dir, TURNS)
    engine, recording = replay_served(tmp_path / "traces")
    user = {"role": "user", "content": "Fix a.txt."}
    conversation: list[Any] = [ADDITIONAL, user]
    messages: list[dict[str, Any]] = [user]
    # Until the search has loaded `mcp__web`, its tool is not shown.
    tools = [tool for tool in HF_TOOLS if tool["function"]["name"] != "mcp__web__fetch"]
    with serve(create_app(engine)) as url:
        for turn, ((called, arguments), expected) in enumerate(CALLS):
            _, response = streamed(url, {"model": "qwenish", "tools": TOOLS, "input": conversation})
            assert list(recording.seen[-1].prompt_token_ids) == _prompt(model_dir, messages, tools)
            call = response["output"][-1]
            kind, name, namespace, field, value = expected
            assert call["type"] == kind
            assert (call.get("name"), call.get("namespace")) == (name, namespace)
            assert call[field] == value
            if kind == "tool_search_call":
                output: dict[str, Any] = {**LOADED, "call_id": call["call_id"]}
                result = '{"loaded": ["mcp__web"]}'
                tools = HF_TOOLS
            else:
                output = {
                    "type": f"{kind}_output",
                    "call_id": call["call_id"],
                    "output": f"ok {turn}",
                }
                result = f"ok {turn}"
            conversation += [*response["output"], output]
            thought = f"I call {called}."
            messages += [
                _assistant(call["call_id"], called, arguments, thought),
                {"role": "tool", "content": result, "tool_call_id": call["call_id"]},
            ]
        _, final = streamed(url, {"model": "qwenish", "tools": TOOLS, "input": conversation})
    assert list(recording.seen[-1].prompt_token_ids) == _prompt(model_dir, messages, tools)
    assert final["status"] == "completed"
    assert final["output"][-1]["content"][0]["text"] == "Patched a.txt."


def test_two_tools_shown_under_one_name_are_a_400_naming_tools(tmp_path: Path) -> None:
    """A function named `mcp__fs__read` beside namespace `mcp__fs`'s `read`: the model could
    not say which it called, so the request is refused before anything is generated."""
    import httpx

    model_dir = build_model_dir(tmp_path / "traces" / "qwenish")
    write_conversation(model_dir, TURNS)
    engine, recording = replay_served(tmp_path / "traces")
    clash = [*TOOLS, {"type": "function", "name": "mcp__fs__read"}]
    with serve(create_app(engine)) as url:
        reply = httpx.post(
            f"{url}/v1/responses",
            json={"model": "qwenish", "tools": clash, "input": "Hi"},
            timeout=60,
        )
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == "tools"
    assert "mcp__fs__read" in reply.json()["error"]["message"]
    assert recording.seen == []
