"""Issue 28/31 leftover: `truncation: "auto"` kept an answer whose call it dropped (only
function and custom tool calls took their outputs: a `tool_search_output`, an
`mcp_approval_response` or an approved `mcp_call` stayed), and could drop the newest item
with its call. A property over generated conversations of every call and answer kind."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from streamfold.adapters.formats._harmony_prompt import render_prompt
from streamfold.adapters.protocol import parse_create_request
from streamfold.adapters.server._truncate import without_oldest

KEYS = st.sampled_from(["a", "b", None])


def _keyed(item: dict[str, Any], field: str, key: str | None) -> dict[str, Any]:
    return item if key is None else {**item, field: key}


ITEMS = st.one_of(
    st.builds(
        lambda role: {"role": role, "content": role},
        st.sampled_from(["user", "assistant", "system", "developer"]),
    ),
    st.just({"type": "reasoning", "summary": [{"type": "summary_text", "text": "r"}]}),
    st.just({"type": "additional_tools", "role": "developer", "tools": []}),
    st.builds(
        lambda k: {"type": "function_call", "call_id": k, "name": "f", "arguments": "{}"},
        KEYS.filter(bool),
    ),
    st.builds(
        lambda k: {"type": "function_call_output", "call_id": k, "output": "o"}, KEYS.filter(bool)
    ),
    st.builds(
        lambda k: {"type": "custom_tool_call", "call_id": k, "name": "g", "input": "i"},
        KEYS.filter(bool),
    ),
    st.builds(
        lambda k: {"type": "custom_tool_call_output", "call_id": k, "output": "o"},
        KEYS.filter(bool),
    ),
    st.builds(lambda k: _keyed({"type": "tool_search_call", "arguments": {}}, "call_id", k), KEYS),
    st.builds(lambda k: _keyed({"type": "tool_search_output", "tools": []}, "call_id", k), KEYS),
    st.builds(
        lambda k: {
            "type": "mcp_approval_request",
            "id": k,
            "server_label": "s",
            "name": "t",
            "arguments": "{}",
        },
        KEYS.filter(bool),
    ),
    st.builds(
        lambda k: {"type": "mcp_approval_response", "approval_request_id": k, "approve": True},
        KEYS.filter(bool),
    ),
    st.builds(
        lambda k: _keyed(
            {"type": "mcp_call", "server_label": "s", "name": "t", "arguments": "{}"},
            "approval_request_id",
            k,
        ),
        KEYS,
    ),
)

#: The test's own statement of who answers whom: answer kind -> (call kind, answer's field,
#: call's field).
PAIRS = {
    "function_call_output": ("function_call", "call_id", "call_id"),
    "custom_tool_call_output": ("custom_tool_call", "call_id", "call_id"),
    "tool_search_output": ("tool_search_call", "call_id", "call_id"),
    "mcp_approval_response": ("mcp_approval_request", "approval_request_id", "id"),
    "mcp_call": ("mcp_approval_request", "approval_request_id", "id"),
}


def _valid(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items a request may hold: a function or custom tool output after its call."""
    made: set[tuple[str, str]] = set()
    valid = []
    for item in items:
        kind = item.get("type", "message")
        if kind in ("function_call", "custom_tool_call"):
            made.add((kind, item["call_id"]))
        if kind in ("function_call_output", "custom_tool_call_output"):
            if (kind.removesuffix("_output"), item["call_id"]) not in made:
                continue
        valid.append(item)
    return valid


def _calls(items: list[dict[str, Any]], i: int) -> list[int]:
    """The calls item `i` answers (a keyless answer: the latest keyless call before it)."""
    kind = items[i].get("type")
    if kind not in PAIRS:
        return []
    call, field, call_field = PAIRS[kind]
    key = items[i].get(field)
    if key is not None:
        return [
            j for j, it in enumerate(items) if it.get("type") == call and it.get(call_field) == key
        ]
    keyless = [
        j for j in range(i) if items[j].get("type") == call and items[j].get(call_field) is None
    ]
    return keyless[-1:]


def _instruction(item: dict[str, Any]) -> bool:
    return item.get("role") in ("system", "developer")


@settings(max_examples=150, deadline=None)
@given(st.lists(ITEMS, min_size=1, max_size=12).map(_valid).filter(bool))
def test_a_kept_answer_keeps_its_call_and_the_newest_item_stays(
    items: list[dict[str, Any]],
) -> None:
    request = parse_create_request({"model": "m", "input": items})
    assert isinstance(request.input, tuple)
    conversation = [i for i, item in enumerate(items) if not _instruction(item)]
    before: set[int] = set(range(len(items)))
    for count in range(len(items) + 1):
        shorter = without_oldest(request, count)
        assert isinstance(shorter.input, tuple)
        kept = {i for i, item in enumerate(request.input) if any(k is item for k in shorter.input)}
        assert len(kept) == len(shorter.input)  # the kept items, in their order
        assert kept <= before  # dropping more keeps less: the bisection's premise
        before = kept
        if count == 0:
            assert kept == set(range(len(items)))
        for i in range(len(items)):
            if _instruction(items[i]):
                assert i in kept
            for call in _calls(items, i):
                assert (i in kept) == (call in kept), (count, i, call)
        if conversation:
            newest = conversation[-1]
            assert newest in kept
        render_prompt(shorter)  # what is kept can be shown
