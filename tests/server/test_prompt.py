"""Request parsing and harmony prompt rendering, without a server."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamfold.adapters.formats import _harmony_prompt as prompt_module
from streamfold.adapters.formats._harmony_prompt import _harmony_render
from streamfold.adapters.server import RequestError, parse_create_request, render_prompt
from streamfold.engines.vocab import harmony_encoding

TOOL = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}


def prompt(**body: object) -> str:
    request = parse_create_request({"model": "m", **body})
    return harmony_encoding().decode(list(render_prompt(request)))


def test_plain_string_input_has_system_and_user_only() -> None:
    text = prompt(input="Hello?")
    assert "<|start|>developer" not in text
    assert "Reasoning: medium" in text
    assert text.endswith("<|start|>user<|message|>Hello?<|end|><|start|>assistant")


def test_minimal_effort_renders_as_low() -> None:
    assert "Reasoning: low" in prompt(input="x", reasoning={"effort": "minimal"})


def test_system_and_developer_messages_join_the_instructions() -> None:
    text = prompt(
        instructions="First.",
        input=[
            {"role": "system", "content": "Second."},
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "Third."}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "a"},
                    {"type": "input_text", "text": "b"},
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "output_text", "text": "c", "annotations": []}],
            },
            {"role": "user", "content": "d"},
        ],
    )
    assert "# Instructions\n\nFirst.\n\nSecond.\n\nThird.<|end|>" in text
    assert "<|start|>user<|message|>ab<|end|>" in text
    assert "<|start|>assistant<|channel|>final<|message|>c<|end|>" in text


def test_tool_choice_none_shows_the_model_no_tools() -> None:
    assert "namespace functions" in prompt(input="x", tools=[TOOL])
    assert "namespace functions" not in prompt(input="x", tools=[TOOL], tool_choice="none")


def test_reasoning_items_and_tool_output_parts_are_replayed() -> None:
    text = prompt(
        input=[
            {"role": "user", "content": "q"},
            {
                "type": "reasoning",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "think"}],
            },
            {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
            {
                "type": "function_call_output",
                "call_id": "c1",
                "output": [{"type": "input_text", "text": "found"}],
            },
        ],
        tools=[TOOL],
    )
    assert "<|start|>assistant<|channel|>analysis<|message|>think<|end|>" in text
    assert "<|start|>functions.lookup to=assistant<|channel|>commentary<|message|>found" in text


def test_unknown_fields_are_ignored_and_nulls_accepted() -> None:
    request = parse_create_request(
        {"model": "m", "input": "x", "user": "u", "include": [], "temperature": None}
    )
    assert request.temperature is None


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"model": "m", "input": "x", "tools": [TOOL, TOOL]}, "tools[1].name", "unique"),
        ({"model": "", "input": "x"}, "model", "empty"),
        ({"model": "m", "input": "x", "top_p": 0}, "top_p", "(0, 1]"),
        ({"model": "m", "input": [{"role": "user"}]}, "input[0].content", "required"),
        ({"model": "m", "input": "x", "temperature": "hot"}, "temperature", "expected a number"),
    ],
)
def test_errors_name_the_field(body: dict, param: str, words: str) -> None:
    with pytest.raises(RequestError) as caught:
        parse_create_request(body)
    assert caught.value.param == param and words in caught.value.message
    assert caught.value.body()["error"]["param"] == param


# --- the fast path: kept heads + user turns, against openai-harmony's whole render ----------

_SPECIALS = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>", "<|call|>"]
_texts = st.one_of(
    st.text(max_size=40),
    st.lists(
        st.sampled_from([*_SPECIALS, "user", " ", "\n", "é", "x" * 30, "日本"]), max_size=6
    ).map("".join),
)
_tools = st.lists(
    st.builds(
        lambda name, description, props: {
            "type": "function",
            "name": name,
            **({"description": description} if description is not None else {}),
            "parameters": {"type": "object", "properties": {p: {"type": "string"} for p in props}},
        },
        st.from_regex(r"[a-z_]{1,12}", fullmatch=True),
        st.none() | _texts,
        st.lists(st.from_regex(r"[a-z]{1,6}", fullmatch=True), max_size=3),
    ),
    max_size=2,
    unique_by=lambda tool: tool["name"],
)
_messages = st.lists(
    st.builds(
        lambda role, text: {"role": role, "content": text},
        st.sampled_from(["user", "user", "system", "developer", "assistant"]),
        _texts,
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=150, deadline=None)
@given(
    input=_texts | _messages,
    instructions=st.none() | _texts,
    effort=st.none() | st.sampled_from(["minimal", "low", "medium", "high"]),
    tools=_tools,
    tool_choice=st.sampled_from(["auto", "none"]),
)
def test_the_fast_render_is_openai_harmonys_render(
    input: object, instructions: str | None, effort: str | None, tools: list[Any], tool_choice: str
) -> None:
    body: dict[str, Any] = {"model": "m", "input": input, "tool_choice": tool_choice}
    if instructions is not None:
        body["instructions"] = instructions
    if effort is not None:
        body["reasoning"] = {"effort": effort}
    if tools:
        body["tools"] = tools
    try:
        request = parse_create_request(body)
    except RequestError:
        return  # e.g. an empty input list
    assert render_prompt(request) == _harmony_render(request)
    assert render_prompt(request) == _harmony_render(request)  # from the kept head, too


def test_only_short_heads_are_kept_and_only_so_many(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prompt_module, "_HEADS", 3)
    prompt_module._heads.clear()
    for i in range(5):
        request = parse_create_request({"model": "m", "input": "x", "instructions": f"Be {i}."})
        assert render_prompt(request) == _harmony_render(request)
    assert len(prompt_module._heads) == 3
    long = "y" * (prompt_module._HEAD_KEY_CHARS + 1)
    request = parse_create_request({"model": "m", "input": "x", "instructions": long})
    assert render_prompt(request) == _harmony_render(request)
    assert all(long not in key[1] for key in prompt_module._heads)


PET = {
    "type": "object",
    "properties": {"name": {"type": "string"}},
    "required": ["name"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("tools", [[], [TOOL]])
@pytest.mark.parametrize(
    "input",
    ["hi", [{"role": "assistant", "content": "earlier"}, {"role": "user", "content": "hi"}]],
)
def test_the_response_format_ends_the_developer_message(tools: list[Any], input: object) -> None:
    """Issue 30, item 1: harmony puts `# Response Formats` "at the end of the developer
    message" (openai/harmony docs/format.md, the cookbook's Structured output), after its
    `# Tools`. Bug pinned: it was rendered inside the instructions, before the tools, so a
    request with tools and a `text.format` (pydantic-ai's NativeOutput with its tools) was
    prompted out of harmony's order. Both renders (the kept head and openai-harmony's)."""
    fmt = {"type": "json_schema", "name": "pet", "description": "A pet.", "schema": PET}
    text = prompt(input=input, instructions="Be brief.", tools=tools, text={"format": fmt})
    developer = text.split("<|start|>developer<|message|>")[1].split("<|end|>")[0]
    formats = (
        '# Response Formats\n\n## pet\n\n// A pet.\n{"type":"object","properties":{"name":'
        '{"type":"string"}},"required":["name"],"additionalProperties":false}'
    )
    assert developer.startswith("# Instructions\n\nBe brief.\n\n")
    assert developer.endswith("\n\n" + formats), developer
    if tools:
        assert developer.index("# Tools") < developer.index("# Response Formats")
    alone = prompt(input=input, text={"format": {"type": "json_object"}})
    only = "<|start|>developer<|message|># Response Formats\n\nAnswer with one JSON object.<|end|>"
    assert only in alone
