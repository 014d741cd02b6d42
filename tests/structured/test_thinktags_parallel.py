"""Parallel calls of a think-tag model under a constraint (`parallel_tool_calls`).

Bug pinned: the grammar of a constrained think-tag completion (`tool_choice: "required"`, a
named function, `allowed_tools`, strict tools) let it end with one `<tool_call>` block and then
the stop token only, whatever `parallel_tool_calls` said. Qwen3 and Hermes models write parallel
calls as one block after another (`</tool_call>\\n<tool_call>`, as their templates show them),
and the API allows several calls by default; an engine enforcing the grammar (vLLM, SGLang)
masked the second `<tool_call>` and left the model one call. Now the completion may end with
several calls, each any allowed one, and with `parallel_tool_calls: false` still with one. Each
completion is fed token by token to the real llguidance matcher of the grammar the request gets.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamfold.adapters.formats import ChatTemplateFormat
from streamfold.engines.guidance import guidance_for

from .test_thinktags_grammar import JSON_ANSWER, PET, SCHEMAS, TOOLS, _read, _request

transformers = pytest.importorskip("transformers")

REQUIRED: dict[str, Any] = {"tools": TOOLS, "tool_choice": "required"}
NAMED: dict[str, Any] = {"tools": TOOLS, "tool_choice": {"type": "function", "name": "get_time"}}
ALLOWED: dict[str, Any] = {
    "tools": TOOLS,
    "tool_choice": {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "function", "name": "get_weather"}],
    },
}
#: `auto` with a JSON answer: the answer, or calls to the (strict) tools.
AUTO: dict[str, Any] = {"tools": TOOLS, "text": JSON_ANSWER}
SERIAL = {"parallel_tool_calls": False}
THOUGHT = "<think>\nTwo calls.\n</think>\n\n"


def call(name: str, arguments: dict[str, Any]) -> str:
    """A Hermes call as Qwen3 writes it (its JSON spaced; the arguments compact, as the
    grammar writes JSON)."""
    body = json.dumps(arguments, separators=(",", ":"))
    return f'<tool_call>\n{{"name": "{name}", "arguments": {body}}}\n</tool_call>'


WEATHER = call("get_weather", {"city": "Paris"})
TIME = call("get_time", {"zone": "UTC"})
STOP = "<|im_end|>"


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> Any:
    return transformers.AutoTokenizer.from_pretrained(str(model_dir))


def accepts(chat_format: ChatTemplateFormat, tokenizer: Any, fields: Any, text: str) -> bool:
    """Whether the grammar `fields` get lets the model write `text` and end there."""
    constraint = chat_format.constraint_for(_request(fields))
    assert constraint is not None
    matcher = guidance_for(chat_format.grammar().vocabulary).matcher(constraint.grammar)
    ids = tokenizer.encode(text, add_special_tokens=False)
    return all(matcher.consume_token(t) for t in ids) and bool(
        matcher.is_stopped() or matcher.is_accepting()
    )


@pytest.mark.parametrize(
    ("fields", "completion", "accepted"),
    [
        # Parallel (the default): any mix of the allowed calls, as Qwen3 separates them.
        (REQUIRED, f"{THOUGHT}{WEATHER}\n{TIME}{STOP}", True),
        (REQUIRED, f"{THOUGHT}{WEATHER}{TIME}\n{STOP}", True),
        (REQUIRED, f"{WEATHER}\n\n{TIME}\n{WEATHER}{STOP}", True),
        (REQUIRED, f"{THOUGHT}{WEATHER}\nIt is sunny.{STOP}", False),
        (REQUIRED, f"{THOUGHT}{WEATHER}\n<think>\nMore.\n</think>\n\n{TIME}{STOP}", False),
        # A named function, again and again; never another.
        (NAMED, f"{TIME}\n{TIME}{STOP}", True),
        (NAMED, f"{TIME}\n{WEATHER}{STOP}", False),
        (ALLOWED, f"{WEATHER}\n{WEATHER}{STOP}", True),
        (ALLOWED, f"{WEATHER}\n{TIME}{STOP}", False),
        # `auto` with a JSON answer: the answer, or calls; not both.
        (AUTO, f"{THOUGHT}{WEATHER}\n{TIME}{STOP}", True),
        (AUTO, f"{THOUGHT}{PET}{STOP}", True),
        (AUTO, f"{THOUGHT}{WEATHER}\n{PET}{STOP}", False),
        # `parallel_tool_calls: false`: one call, then the stop.
        ({**REQUIRED, **SERIAL}, f"{THOUGHT}{WEATHER}\n{STOP}", True),
        ({**REQUIRED, **SERIAL}, f"{THOUGHT}{WEATHER}\n{TIME}{STOP}", False),
        ({**NAMED, **SERIAL}, f"{TIME}{TIME}{STOP}", False),
        ({**AUTO, **SERIAL}, f"{THOUGHT}{WEATHER}\n{TIME}{STOP}", False),
    ],
)
def test_several_calls_end_a_completion_only_when_parallel(
    chat_format: ChatTemplateFormat,
    tokenizer: Any,
    fields: dict[str, Any],
    completion: str,
    accepted: bool,
) -> None:
    assert accepts(chat_format, tokenizer, fields, completion) is accepted


def test_parallel_tool_calls_false_alone_asks_for_no_grammar(
    chat_format: ChatTemplateFormat,
) -> None:
    """A request asking nothing else pays nothing for it (`Shape.free`)."""
    assert (
        chat_format.constraint_for(
            _request({**SERIAL, "tools": [{"type": "function", "name": "f"}]})
        )
        is None
    )


CITY = st.text(alphabet="Pars Lyon<>/-'", max_size=8)
CALLS = st.one_of(
    st.builds(lambda city: ("get_weather", {"city": city}), CITY),
    st.builds(lambda zone: ("get_time", {"zone": zone}), st.sampled_from(["UTC", "CET"])),
)


@settings(max_examples=40, deadline=None)
@given(
    calls=st.lists(CALLS, min_size=1, max_size=4),
    blanks=st.lists(st.text(alphabet=" \t\r\n", max_size=8), min_size=5, max_size=5),
    thought=st.booleans(),
    parallel=st.booleans(),
)
def test_any_run_of_allowed_calls_is_accepted_and_read_as_those_calls(
    chat_format: ChatTemplateFormat,
    tokenizer: Any,
    calls: list[tuple[str, dict[str, Any]]],
    blanks: list[str],
    thought: bool,
    parallel: bool,
) -> None:
    """Any 1..4 calls to the `required` tools, their arguments following the schema: the
    grammar takes them when parallel (one only when not), and the reducer reads them back as
    that many `function_call` items, each with its own id, in order."""
    # Blanks (up to 8 of the grammar's) between the calls and after the last.
    written = "".join(call(n, a) + blank for (n, a), blank in zip(calls, blanks, strict=False))
    text = (THOUGHT if thought else "") + written + STOP
    fields = {**REQUIRED, "parallel_tool_calls": parallel}
    assert accepts(chat_format, tokenizer, fields, text) is (parallel or len(calls) == 1)
    final = _read(chat_format, tokenizer.encode(text, add_special_tokens=False))
    items = [item for item in final.output if item.type != "reasoning"]
    assert [(i.type, i.name, json.loads(i.arguments)) for i in items] == [
        ("function_call", name, arguments) for name, arguments in calls
    ]
    assert len({i.call_id for i in items}) == len({i.id for i in items}) == len(calls)
    assert all(set(json.loads(i.arguments)) == set(SCHEMAS[i.name]["required"]) for i in items)
