"""Structured outputs for think-tag models (issue 30 item 2, issue 36): the answer after
`</think>`.

`ChatTemplateFormat.constraint_for` writes a request's shape as one llguidance grammar over the
think-tag completion (`structured.thinktags_grammar`). Before, it returned None: a think-tag
model's `text.format` and `tool_choice` were not enforced at all. There is no native think-tag
model to sample, so the constraint is driven directly (as a model's sampler would drive it): a
fuzz draws each token at random among those the constraint allows, and now and then sets out
to spell a tag in text tokens (`<`, `/`, `think`, `>`), keeping to it while the constraint
lets it, so completions spell tags wherever the grammar lets them. The invariant: every
completion the constraint lets end reads, through the reducer (the model's `ThinkTagGrammar`),
as the shape demands (a JSON answer valid against the schema; a call to an allowed function
with valid arguments). The same
sampler without the constraint never gets there. The vocabulary and template are built offline
(`tests/adapters/chat_template_model`).
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamfold.adapters.driver import fold
from streamfold.adapters.formats import ChatTemplateFormat
from streamfold.adapters.protocol import RequestError, parse_create_request
from streamfold.adapters.structured import guard_schema, without_tags
from streamfold.engines import TokenChunk
from streamfold.engines.guidance import guidance_for
from streamfold.statemachine import CustomTool, Response
from tests.adapters.chat_template_model import R1_OPENING, build_model_dir

transformers = pytest.importorskip("transformers")

TAGS = ["<think>", "</think>", "<tool_call>", "</tool_call>"]
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},  # free text: tags may be spelled in it
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "kind": {"type": "string", "enum": ["cat", "dog"]},
        "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}, "minItems": 1, "maxItems": 2},
    },
    "required": ["name", "age", "kind", "tags"],
    "additionalProperties": False,
    "$defs": {
        "tag": {
            "type": "object",
            "properties": {"code": {"type": "string", "pattern": "^[A-Z<>/a-z]{1,6}$"}},
            "required": ["code"],
            "additionalProperties": False,
        }
    },
}
WEATHER: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 8}},
    "required": ["city"],
    "additionalProperties": False,
}
TIME: dict[str, Any] = {
    "type": "object",
    "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
    "required": ["zone"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "name": "get_weather", "parameters": WEATHER, "strict": True},
    {"type": "function", "name": "get_time", "parameters": TIME, "strict": True},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
JSON_ANSWER = {"format": {"type": "json_schema", "name": "pet", "schema": SCHEMA, "strict": True}}
# name: (request fields, the function names a completion may end calling; None: a JSON answer)
CASES: dict[str, tuple[dict[str, Any], tuple[str, ...] | None]] = {
    "json answer": ({"text": JSON_ANSWER}, None),
    "json_object": ({"text": {"format": {"type": "json_object"}}}, None),
    "required": ({"tools": TOOLS, "tool_choice": "required"}, ("get_weather", "get_time")),
    "named": (
        {"tools": TOOLS, "tool_choice": {"type": "function", "name": "get_time"}},
        ("get_time",),
    ),
}
BUDGET = 120
RUNS = 24
STEPS = 400


def _request(fields: dict[str, Any]) -> Any:
    return parse_create_request(
        {"model": "qwenish", "input": "Hi", "max_output_tokens": BUDGET, **fields}
    )


def _read(chat_format: ChatTemplateFormat, ids: list[int], tools: tuple[Any, ...] = ()) -> Any:
    response = Response(id="resp_t", created_at=1, model="m", status="in_progress", tools=tools)
    chunks = [TokenChunk(token_ids=(token,)) for token in ids]
    return list(fold(chat_format.grammar(), response, chunks, "stop"))[-1].response


def _holds(final: Any, calls: tuple[str, ...] | None, schema: dict[str, Any]) -> str | None:
    """Why the response does not read as the shape demands, or None."""
    kinds = [item.type for item in final.output]
    if calls is None:
        if kinds[-1:] != ["message"] or "function_call" in kinds:
            return f"a JSON answer was asked, the output is {kinds}"
        answer = "".join(part.text for part in final.output[-1].content)
        try:
            jsonschema.validate(json.loads(answer), schema)
        except (ValueError, jsonschema.ValidationError) as exc:
            return f"the answer {answer!r} does not hold: {exc}"
        return None
    if kinds[-1:] != ["function_call"] or "message" in kinds:
        return f"a call was asked, the output is {kinds}"
    for call in final.output:  # parallel calls: each must hold
        if call.type != "function_call":
            continue
        if call.name not in calls:
            return f"called {call.name!r}, allowed {calls}"
        try:
            jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])
        except (ValueError, jsonschema.ValidationError) as exc:
            return f"the arguments {call.arguments!r} do not hold: {exc}"
    return None


def _texts(chat_format: ChatTemplateFormat) -> dict[int, str]:
    """Each text token's text (the single-token tags and stop tokens left out)."""
    vocabulary = chat_format.grammar().vocabulary
    return {
        token: vocabulary.bytes_of(token).decode("utf-8", "replace")
        for token in range(len(vocabulary))
        if token not in vocabulary.special_ids
    }


def _spelled(texts: dict[int, str], ids: list[int]) -> str:
    """What the text tokens among `ids` spell."""
    return "".join(texts.get(t, "") for t in ids)


def _allowed(matcher: Any, size: int) -> list[int]:
    bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), np.uint8), bitorder="little")
    return [int(t) for t in np.flatnonzero(bits[:size])]


def _sample(
    chat_format: ChatTemplateFormat, grammar: str | None, seed: int, texts: dict[int, str]
) -> tuple[list[int], bool]:
    """Draw a completion token by token among the tokens `grammar` allows (any token when
    None): uniformly, except that now and then the sampler sets out to spell a tag in text
    tokens and keeps to it while the constraint lets it; `(ids, whether it ended)`."""
    vocabulary = chat_format.grammar().vocabulary
    size = len(vocabulary)
    stops = set(chat_format.stop_token_ids())
    matcher = None if grammar is None else guidance_for(vocabulary).matcher(grammar)
    rng = random.Random(seed)
    ids: list[int] = []
    goal = ""  # what is left of the tag being spelled
    for _ in range(STEPS):
        allowed = list(range(size)) if matcher is None else _allowed(matcher, size)
        assert allowed, "the constraint allows no token: a dead end"
        if not goal and rng.random() < 0.2:
            goal = rng.choice(TAGS)
        spelling = [t for t in allowed if texts.get(t) and goal.startswith(texts[t])]
        token = rng.choice(spelling or allowed)
        goal = goal[len(texts[token]) :] if spelling else ""
        ids.append(token)
        if matcher is not None:
            assert matcher.consume_token(token), matcher.get_error()
        if token in stops:
            return ids, True
    return ids, False


@pytest.mark.parametrize("case", list(CASES))
def test_every_completion_the_constraint_ends_reads_as_the_shape(
    chat_format: ChatTemplateFormat, case: str
) -> None:
    """Bug: `constraint_for` returned None for think-tag models, so nothing held their answer
    after `</think>` to `text.format` or their calls to `tool_choice`."""
    fields, calls = CASES[case]
    constraint = chat_format.constraint_for(_request(fields))
    assert constraint is not None
    schema = SCHEMA if case == "json answer" else {"type": "object"}
    texts = _texts(chat_format)
    ended = 0
    spelled_tags = 0
    for seed in range(RUNS):
        ids, done = _sample(chat_format, constraint.grammar, seed, texts)
        if not done:
            continue
        ended += 1
        vocabulary = chat_format.grammar().vocabulary
        text = b"".join(vocabulary.bytes_of(t) for t in ids).decode("utf-8", "replace")
        spelled_tags += any(tag in _spelled(texts, ids) for tag in TAGS)
        why = _holds(_read(chat_format, ids), calls, schema)
        assert why is None, f"seed {seed}: {why}\n{text!r}"
    assert ended >= RUNS // 4, f"only {ended} of {RUNS} completions ended within {STEPS} tokens"
    # The sampler did reach the hard part: completions whose text tokens spell a tag.
    assert spelled_tags > 0


@pytest.mark.parametrize("case", ["json answer", "required"])
def test_without_the_constraint_the_same_sampler_gets_nowhere(
    chat_format: ChatTemplateFormat, case: str
) -> None:
    calls = CASES[case][1]
    schema = SCHEMA if case == "json answer" else {"type": "object"}
    texts = _texts(chat_format)
    held = 0
    for seed in range(RUNS):
        ids, _ = _sample(chat_format, None, seed, texts)
        held += _holds(_read(chat_format, ids), calls, schema) is None
    assert held == 0


def _encode(model_dir: Path, text: str) -> list[int]:
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    return list(tokenizer.encode(text, add_special_tokens=False))


def _accepts(chat_format: ChatTemplateFormat, fields: dict[str, Any], ids: list[int]) -> bool:
    constraint = chat_format.constraint_for(_request(fields))
    assert constraint is not None
    matcher = guidance_for(chat_format.grammar().vocabulary).matcher(constraint.grammar)
    return all(matcher.consume_token(t) for t in ids) and bool(
        matcher.is_stopped() or matcher.is_accepting()
    )


PET = '{"name":"Rex","age":3,"kind":"dog","tags":[{"code":"A"}]}'


@pytest.mark.parametrize(
    ("fields", "completion", "accepted"),
    [
        # What Qwen3 writes: its tags as tokens, blank lines, a Hermes call with spaces.
        ({"text": JSON_ANSWER}, f"<think>\nA pet.\n</think>\n\n{PET}<|im_end|>", True),
        ({"text": JSON_ANSWER}, f"{PET}<|im_end|>", True),  # no reasoning: allowed
        ({"text": JSON_ANSWER}, "<think>\nA pet.\n</think>\n\nRex is 3.<|im_end|>", False),
        (
            {"tools": TOOLS, "tool_choice": "required"},
            '<think>\nWeather.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": '
            '{"city":"Paris"}}\n</tool_call><|im_end|>',
            True,
        ),
        (
            {"tools": TOOLS, "tool_choice": "required"},
            "<think>\nNo.\n</think>\n\nIt is sunny.<|im_end|>",
            False,
        ),
        (
            {"tools": TOOLS, "tool_choice": {"type": "function", "name": "get_time"}},
            '<tool_call>\n{"name": "get_weather", "arguments": {"city":"Paris"}}\n</tool_call>'
            "<|im_end|>",
            False,
        ),
        # A `<think>` inside the answer's JSON would be read as reasoning: refused.
        (
            {"text": JSON_ANSWER},
            '{"name":"<think>","age":3,"kind":"dog","tags":[{"code":"A"}]}<|im_end|>',
            False,
        ),
    ],
)
def test_what_the_model_writes_is_accepted_and_what_the_shape_forbids_refused(
    chat_format: ChatTemplateFormat,
    model_dir: Path,
    fields: dict[str, Any],
    completion: str,
    accepted: bool,
) -> None:
    assert _accepts(chat_format, fields, _encode(model_dir, completion)) is accepted


def test_tags_spelled_in_text_tokens_end_reasoning_too(chat_format: ChatTemplateFormat) -> None:
    """The reducer finds tags in the decoded text: `</think>` spelled over text tokens ends
    reasoning as the single token does, so the grammar takes both."""
    guidance = guidance_for(chat_format.grammar().vocabulary)
    spelled = guidance.tokenizer.tokenize_str("<think>\nA pet.\n</think>\n\n" + PET)
    assert not set(spelled) & chat_format.grammar().vocabulary.special_ids
    stop = chat_format.stop_token_ids()[0]
    assert _accepts(chat_format, {"text": JSON_ANSWER}, [*spelled, stop])


def test_a_prompt_that_opened_think_starts_the_grammar_in_reasoning(tmp_path: Path) -> None:
    model_dir = build_model_dir(tmp_path / "r1", opening=R1_OPENING)
    chat_format = ChatTemplateFormat(model_dir)
    ids = _encode(model_dir, f"A pet.\n</think>\n\n{PET}<|im_end|>")
    assert _accepts(chat_format, {"text": JSON_ANSWER}, ids)
    assert not _accepts(chat_format, {"text": JSON_ANSWER}, _encode(model_dir, f"{PET}<|im_end|>"))


def test_a_prompt_that_closed_think_leaves_no_reasoning(tmp_path: Path) -> None:
    """A template with thinking turned off writes `<think>\n\n</think>\n\n` in the prompt
    (Qwen3's `enable_thinking=False`): the completion is the answer alone."""
    closed = "{{- '<think>\\n\\n</think>\\n\\n' }}"
    model_dir = build_model_dir(tmp_path / "off", opening=closed)
    chat_format = ChatTemplateFormat(model_dir)
    assert _accepts(chat_format, {"text": JSON_ANSWER}, _encode(model_dir, f"{PET}<|im_end|>"))
    thought = _encode(model_dir, f"<think>\nA pet.\n</think>\n\n{PET}<|im_end|>")
    assert not _accepts(chat_format, {"text": JSON_ANSWER}, thought)


def test_reasoning_is_bounded_by_the_budget(chat_format: ChatTemplateFormat) -> None:
    constraint = chat_format.constraint_for(_request({"text": JSON_ANSWER}))
    assert constraint is not None
    # 120 tokens: 60 kept for the answer, one reasoning block of 60 less its tags.
    assert "think[max_tokens=54]" in constraint.grammar


def test_free_requests_get_no_constraint(chat_format: ChatTemplateFormat) -> None:
    assert chat_format.constraint_for(_request({})) is None
    assert chat_format.constraint_for(_request({"tools": TOOLS})) is not None  # strict tools


def test_a_tool_the_model_is_not_shown_cannot_be_required(chat_format: ChatTemplateFormat) -> None:
    """Server-side tools are harmony's: a think-tag model is not shown them."""
    hosted = {"type": "code_interpreter", "container": {"type": "auto"}}
    fields = {"tools": [hosted], "tool_choice": {"type": "code_interpreter"}}
    with pytest.raises(RequestError, match="not shown") as raised:
        chat_format.constraint_for(_request(fields))
    assert raised.value.param == "tool_choice"


NAMESPACED = {
    "type": "namespace",
    "name": "mcp__w",
    "description": "Weather.",
    "tools": [{"type": "function", "name": "get_weather", "parameters": WEATHER, "strict": True}],
}
PATCHER = {"type": "custom", "name": "apply_patch"}
CODER = {
    "type": "custom",
    "name": "set_code",
    "format": {"type": "grammar", "syntax": "regex", "definition": '[a-z]+"?[0-9]+'},
}


def _hermes(name: str, arguments: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call><|im_end|>'


@pytest.mark.parametrize(
    ("fields", "completion", "accepted"),
    [
        # A namespace's tool is called by the name it is shown (`NS__NAME`), its schema held.
        (
            {"tools": [NAMESPACED], "tool_choice": "required"},
            _hermes("mcp__w__get_weather", '{"city":"Paris"}'),
            True,
        ),
        (
            {"tools": [NAMESPACED], "tool_choice": "required"},
            _hermes("get_weather", '{"city":"Paris"}'),
            False,
        ),
        (
            {"tools": [NAMESPACED], "tool_choice": "required"},
            _hermes("mcp__w__get_weather", '{"town":"Paris"}'),
            False,
        ),
        # A custom tool: one string `input`.
        (
            {"tools": [PATCHER], "tool_choice": {"type": "custom", "name": "apply_patch"}},
            _hermes("apply_patch", '{"input":"*** Begin"}'),
            True,
        ),
        (
            {"tools": [PATCHER], "tool_choice": {"type": "custom", "name": "apply_patch"}},
            _hermes("apply_patch", '{"patch":"x"}'),
            False,
        ),
        (
            {"tools": [PATCHER, *TOOLS], "tool_choice": {"type": "custom", "name": "apply_patch"}},
            _hermes("get_time", '{"zone":"UTC"}'),
            False,
        ),
        # A custom tool's regex holds its input, escapes read as JSON reads them (`\"`);
        # not held before: any string was taken.
        (
            {"tools": [CODER], "tool_choice": {"type": "custom", "name": "set_code"}},
            _hermes("set_code", '{"input":"abc123"}'),
            True,
        ),
        (
            {"tools": [CODER], "tool_choice": {"type": "custom", "name": "set_code"}},
            _hermes("set_code", '{"input":"ab\\"12"}'),
            True,
        ),
        (
            {"tools": [CODER], "tool_choice": {"type": "custom", "name": "set_code"}},
            _hermes("set_code", '{"input":"123abc"}'),
            False,
        ),
        (
            {"tools": [CODER], "tool_choice": "auto"},
            _hermes("set_code", '{"input":"abc"}'),
            False,
        ),
    ],
)
def test_namespace_and_custom_tools_are_required_by_their_shown_names(
    chat_format: ChatTemplateFormat,
    model_dir: Path,
    fields: dict[str, Any],
    completion: str,
    accepted: bool,
) -> None:
    """Bug: `tool_choice` naming a custom tool (or `required` with a namespace's tools only)
    was a 400, "not shown": the model was shown top-level functions only."""
    assert _accepts(chat_format, fields, _encode(model_dir, completion)) is accepted


def test_a_regex_custom_input_is_read_back_unescaped(
    chat_format: ChatTemplateFormat, model_dir: Path
) -> None:
    """The string the regex held is the tool's input as the client gets it: JSON's escapes
    undone (`ab\\"12` written, `ab"12` read)."""
    ids = _encode(model_dir, _hermes("set_code", '{"input":"ab\\"12"}'))
    fields = {"tools": [CODER], "tool_choice": {"type": "custom", "name": "set_code"}}
    assert _accepts(chat_format, fields, ids)
    final = _read(chat_format, ids, (CustomTool(name="set_code"),))
    (call,) = [item for item in final.output if item.type == "custom_tool_call"]
    assert call.name == "set_code" and call.input == 'ab"12'


ALPHABET = "<>/thinkoolcal_x \n"


@given(st.lists(st.sampled_from([*ALPHABET, *TAGS]), max_size=12).map("".join))
def test_without_tags_matches_exactly_the_strings_that_spell_no_tag(text: str) -> None:
    pattern = re.compile(without_tags(TAGS), re.DOTALL)
    assert (pattern.fullmatch(text) is not None) == (not any(tag in text for tag in TAGS))


def test_guard_schema_keeps_the_schemas_meaning_but_tags() -> None:
    guarded = guard_schema(SCHEMA, TAGS)
    good = json.loads(PET)
    jsonschema.validate(good, guarded)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**good, "name": "a</tool_call>"}, guarded)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**good, "age": -1}, guarded)
    open_object = guard_schema({"type": "object"}, TAGS)
    jsonschema.validate({"a": [1, {"b": "x<y"}]}, open_object)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"a": [1, {"b": "<think>"}]}, open_object)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"<think>": 1}, open_object)
    counts = guard_schema({"type": "object", "additionalProperties": {"type": "integer"}}, TAGS)
    jsonschema.validate({"a": 1}, counts)
    for wrong in ({"a": "1"}, {"</think>": 1}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(wrong, counts)
    # Under `not`, a pattern would widen the schema: it is left alone.
    assert guard_schema({"not": {"type": "string"}}, TAGS)["not"] == {"type": "string"}
