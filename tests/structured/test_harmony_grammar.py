"""The harmony grammar of a `Shape`, held against the header variants gpt-oss really writes.

Peers' grammars broke on exactly this (vLLM #51020: begin strings that do not match what
openai-harmony renders; #28000: `final <|constrain|>JSON`): every variant below must be accepted
token for token, and what the shape forbids must be refused."""

from __future__ import annotations

import pytest

from streamfold.adapters.structured import Call, JsonBody, Shape, TextBody, harmony_grammar
from streamfold.engines.guidance import guidance_for
from streamfold.engines.vocab import harmony_encoding, load_harmony_vocabulary

ARGS = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
WEATHER = Call(recipient="functions.get_weather", body=JsonBody(schema=ARGS))
REASON = "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant"


def _accepts(shape: Shape, completion: str) -> bool:
    guidance = guidance_for(load_harmony_vocabulary())
    matcher = guidance.matcher(harmony_grammar(shape))
    for token in harmony_encoding().encode(completion, allowed_special="all"):
        if not matcher.consume_token(token):
            return False
    return bool(matcher.is_stopped() or matcher.is_accepting())


@pytest.mark.parametrize(
    "header",
    [
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>",
        "<|channel|>commentary to=functions.get_weather<|constrain|>json<|message|>",
        "<|channel|>commentary to=functions.get_weather json<|message|>",
        "<|channel|>commentary to=functions.get_weather<|message|>",
        " to=functions.get_weather<|channel|>commentary json<|message|>",
        " to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>",
    ],
)
def test_every_call_header_variant_is_accepted(header: str) -> None:
    shape = Shape(answer=None, calls=(WEATHER,))
    assert _accepts(shape, REASON + header + '{"city":"Paris"}<|call|>')


@pytest.mark.parametrize(
    "header",
    [
        "<|channel|>final<|message|>",
        "<|channel|>final <|constrain|>json<|message|>",
        "<|channel|>final json<|message|>",
    ],
)
def test_every_final_header_variant_is_accepted(header: str) -> None:
    shape = Shape(answer=JsonBody(schema=ARGS), calls=())
    assert _accepts(shape, REASON + header + '{"city":"Paris"}<|return|>')


def test_required_refuses_a_bare_answer_and_a_call_to_another_tool() -> None:
    shape = Shape(answer=None, calls=(WEATHER,))
    assert not _accepts(shape, REASON + "<|channel|>final<|message|>Hi<|return|>")
    other = "<|channel|>commentary to=functions.get_time<|message|>{}<|call|>"
    assert not _accepts(shape, REASON + other)


def test_none_refuses_a_call_and_json_refuses_prose() -> None:
    free = Shape(answer=TextBody(), calls=())
    call = "<|channel|>commentary to=functions.get_weather<|message|>{}<|call|>"
    assert not _accepts(free, REASON + call)
    assert _accepts(free, REASON + "<|channel|>final<|message|>Hi there<|return|>")
    json_only = Shape(answer=JsonBody(schema=ARGS), calls=())
    assert not _accepts(json_only, REASON + "<|channel|>final<|message|>Sure! {}<|return|>")


def test_reasoning_comes_first_and_is_bounded() -> None:
    shape = Shape(answer=TextBody(), calls=(), reasoning_tokens=3)
    assert not _accepts(shape, "<|channel|>final<|message|>Hi<|return|>")  # no reasoning
    long = "<|channel|>analysis<|message|>" + " word" * 10 + "<|end|><|start|>assistant"
    assert not _accepts(shape, long + "<|channel|>final<|message|>Hi<|return|>")


def test_an_mcp_servers_tools_are_called_by_prefix() -> None:
    shape = Shape(answer=None, calls=(Call(recipient="docs.", any_name=True),))
    assert _accepts(shape, REASON + "<|channel|>commentary to=docs.search<|message|>{}<|call|>")
    assert not _accepts(shape, REASON + "<|channel|>commentary to=web.search<|message|>{}<|call|>")


def test_no_preamble_message_before_a_json_answer() -> None:
    """A preamble is a visible message: before a JSON answer it joined the text clients parse
    (the Vercel AI SDK's generateObject failed on `report smith{}...`)."""
    preamble = "<|channel|>commentary<|message|>Working on it.<|end|><|start|>assistant"
    answer = '<|channel|>final<|message|>{"city":"Paris"}<|return|>'
    json_only = Shape(answer=JsonBody(schema=ARGS), calls=())
    assert not _accepts(json_only, REASON + preamble + answer)
    assert _accepts(json_only, REASON + answer)
    text = Shape(answer=TextBody(), calls=())
    assert _accepts(text, REASON + preamble + "<|channel|>final<|message|>Hi<|return|>")


def test_a_custom_tools_input_follows_its_regex_or_lark_grammar() -> None:
    """Issue 30, item 2: "custom-tool inputs follow their grammar", for both syntaxes of
    `{type: custom, format: {type: grammar, syntax: regex | lark}}` (the Lark one is also held
    by tests/structured/test_lark_inline.py; the regex one had no test of what it accepts)."""
    from streamfold.adapters.structured._shape import LarkBody, RegexBody

    head = "<|channel|>commentary to=functions.code<|message|>"
    regex = Shape(
        answer=None, calls=(Call(recipient="functions.code", body=RegexBody(pattern="[a-z]{3}")),)
    )
    assert _accepts(regex, REASON + head + "abc<|call|>")
    assert not _accepts(regex, REASON + head + "abcd<|call|>")
    assert not _accepts(regex, REASON + head + "ab1<|call|>")
    lark = Shape(
        answer=None,
        calls=(Call(recipient="functions.code", body=LarkBody(definition='start: "x"+ "!"')),),
    )
    assert _accepts(lark, REASON + head + "xxx!<|call|>")
    assert not _accepts(lark, REASON + head + "xy<|call|>")
