"""Issues 31/36: a think-tag model's `<tool_call>` routed by the response's tools, however the
text is tokenized.

The chat format shows a namespace's tool as `NS__NAME`, a custom tool as a function of one
string `input`, a client-run tool search as `tool_search` (`_grammars/chat_tools.py`); the
grammar reads the call back as the tool's item. A custom tool's input is the decoded string,
read whole at `</tool_call>` (it lies inside JSON), so it must come out the same whatever the
tokenization, any string it is (quotes, escapes, newlines, tags' pieces, non-ASCII), and a
response cut before `</tool_call>` must show a prefix of the full one. Every stream is judged
by the checker, the SDK's models and its accumulator.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from streamfold.specs.strategies_thinktags import tokenizations
from streamfold.statemachine import (
    CustomTool,
    FunctionTool,
    NamespaceTool,
    Response,
    ToolSearchTool,
    finish,
    start,
    step,
)
from streamfold.statemachine._grammar import ResponseState
from tests.statemachine.thinktags_helpers import (
    GRAMMAR,
    INDEX,
    PROPERTY,
    assert_sound,
    terminal_output,
)

TOOLS = (
    NamespaceTool(
        name="mcp__x",
        tools=(FunctionTool(name="f"), CustomTool(name="c")),
    ),
    CustomTool(name="apply_patch"),
    NamespaceTool(name="functions", tools=(CustomTool(name="exec"), FunctionTool(name="wait"))),
    ToolSearchTool(execution="client"),
)
#: name the model calls -> (item type, its name, its namespace)
ROUTES: dict[str, tuple[str, str | None, str | None]] = {
    "mcp__x__f": ("function_call", "f", "mcp__x"),
    "mcp__x__c": ("custom_tool_call", "c", "mcp__x"),
    "apply_patch": ("custom_tool_call", "apply_patch", None),
    "exec": ("custom_tool_call", "exec", "functions"),
    "wait": ("function_call", "wait", "functions"),
    "tool_search": ("tool_search_call", None, None),
    "elsewhere": ("function_call", "elsewhere", None),
}
#: Text a custom tool's input may hold: JSON's escapes, tags' pieces, non-ASCII.
_INPUT = st.lists(
    st.sampled_from([*'ab "\\\n\t/{}<>', "é", "🎉", "</think", "<tool_", "\u2028"]),
    max_size=30,
).map("".join)


def _run(tokens: list[int], reason: str = "stop") -> list[Any]:
    response = Response(
        id="resp_route", created_at=1, model="qwen3", status="in_progress", tools=TOOLS
    )
    state: ResponseState
    state, events = start(GRAMMAR, response)
    for token in tokens:
        state, new = step(state, token)
        events.extend(new)
    _, new = finish(state, reason, "engine failed" if reason == "error" else None)  # type: ignore[arg-type]
    return [*events, *new]


@st.composite
def _calls(draw: st.DrawFn) -> tuple[str, str, Any]:
    """A completion ending in a call, the name it calls, and what the item must hold."""
    called = draw(st.sampled_from(sorted(ROUTES)))
    kind = ROUTES[called][0]
    text = draw(_INPUT)
    arguments: Any = {"input": text} if kind == "custom_tool_call" else {"q": text}
    raw = json.dumps(arguments, ensure_ascii=draw(st.booleans()))
    space = draw(st.sampled_from(["", " ", "\n"]))
    body = f'{space}{{"name": {json.dumps(called)}, "arguments": {raw}}}{space}'
    completion = f"<think>\nCall {called}.\n</think>\n\n<tool_call>{body}</tool_call>"
    expected: Any = text if kind == "custom_tool_call" else raw
    if kind == "tool_search_call":
        expected = arguments
    return completion, called, expected


def _held(item: dict[str, Any]) -> Any:
    return item.get("input", item.get("arguments"))


@PROPERTY
@given(call=_calls(), data=st.data())
def test_a_call_becomes_its_tools_item_however_tokenized(
    call: tuple[str, str, Any], data: st.DataObject
) -> None:
    completion, called, expected = call
    events = _run(data.draw(tokenizations(completion, INDEX)))
    assert_sound(events)
    item = terminal_output(events)[-1]
    kind, name, namespace = ROUTES[called]
    assert (item["type"], item.get("name"), item.get("namespace")) == (kind, name, namespace)
    assert _held(item) == expected
    other = _run(data.draw(tokenizations(completion, INDEX)))
    assert terminal_output(other) == terminal_output(events)


@PROPERTY
@given(
    call=_calls(),
    cut=st.integers(min_value=0),
    reason=st.sampled_from(["length", "abort", "error"]),
    data=st.data(),
)
def test_a_cut_call_shows_a_prefix_of_the_full_one(
    call: tuple[str, str, Any], cut: int, reason: str, data: st.DataObject
) -> None:
    completion = call[0]
    tokens = data.draw(tokenizations(completion, INDEX))
    full = terminal_output(_run(tokens))
    events = _run(tokens[: cut % (len(tokens) + 1)], reason)
    assert_sound(events)
    short = terminal_output(events)
    assert len(short) <= len(full)
    for index, (item, whole) in enumerate(zip(short, full, strict=False)):
        assert (item["type"], item["id"], item.get("name")) == (
            whole["type"],
            whole["id"],
            whole.get("name"),
        )
        if index < len(short) - 1:
            assert item == whole
        elif item["type"] in ("function_call", "custom_tool_call"):
            assert _held(whole).startswith(_held(item))


def test_a_lone_surrogate_escape_in_a_call_is_carried_on_the_wire() -> None:
    """Bug: `"\\ud83d"` alone in a custom tool's input, or in a tool search's arguments, decoded
    to a string UTF-8 cannot encode, and framing the response's events raised
    UnicodeEncodeError. The input shows U+FFFD in its place; the search's arguments stay the
    text the model wrote."""
    from streamfold.statemachine import sse_event

    custom = '<tool_call>{"name": "apply_patch", "arguments": {"input": "a\\ud83d b"}}</tool_call>'
    search = '<tool_call>{"name": "tool_search", "arguments": {"query": "\\ud83d"}}</tool_call>'
    for text, held in ((custom, "a\ufffd b"), (search, '{"query": "\\ud83d"}')):
        events = _run([INDEX.ids[bytes([b])] for b in text.encode()])
        for event in events:
            sse_event(event)
        assert_sound(events)
        assert _held(terminal_output(events)[-1]) == held


def test_a_custom_tools_input_streams_and_a_cut_keeps_what_came() -> None:
    """The input is decoded as it arrives (one delta per byte-token here, an escape cut between
    tokens held until it can be read), not held until `</tool_call>`; a response cut inside
    it keeps the input so far, as a harmony custom call does."""
    value = 'say "hi" 🎉\n'
    text = json.dumps({"name": "apply_patch", "arguments": {"input": value}}, ensure_ascii=True)
    tokens = [INDEX.ids[bytes([b])] for b in f"<tool_call>{text}</tool_call>".encode()]
    events = _run(tokens)
    assert_sound(events)
    deltas = [e.delta for e in events if e.type == "response.custom_tool_call_input.delta"]
    assert "".join(deltas) == value and len(deltas) > len(value) // 2
    assert "🎉" in deltas  # its twelve-character escape, held whole
    cut_at = len(b'<tool_call>{"name": "apply_patch", "arguments": {"input": "say \\"h')
    cut = _run(tokens[:cut_at], "length")
    assert_sound(cut)
    [item] = terminal_output(cut)
    assert (item["type"], item["input"]) == ("custom_tool_call", 'say "h')
