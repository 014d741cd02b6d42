"""A `Shape` as one grammar over a think-tag model's completion (Qwen3, QwQ, DeepSeek-R1,
Hermes-style tool callers), in llguidance's Lark: `thinktags_grammar`.

The completion is what the model writes after its chat template's generation prompt:

    start:  reasoning? ending            (reasoning: <think> free text </think>, then blanks)
    ending: answer blanks? stop | calls
    calls:  call (blanks? call)* blanks? stop         (one call only: `call blanks? stop`)
    call:   call_0 | call_1 | ...
    call_i: <tool_call> {"name": "NAME", "arguments": ARGS} </tool_call>

so reasoning stays free (bounded by the budget as harmony's is, `budget_shape` with one
reasoning block) and the constraint holds on what follows `</think>`: the answer's JSON (or
free text) for `text.format`, or a Hermes call to an allowed function whose arguments follow its
schema (`required`, a named tool). Where the prompt already opened `<think>` (DeepSeek-R1's
template) the completion starts inside reasoning; where it already closed it (thinking turned
off) there is none.

A tag that is one token of the vocabulary is written as that token (`<[id]>`, which every
llguidance tokenizer of the same vocabulary reads, vLLM's and SGLang's included), or spelled out
in text: the reducer finds tags in the decoded text (`ThinkTagGrammar`), so both end the same
way. The same reading decides what text may hold: reasoning never spells `</think>` (the reducer
would end it there, and what followed would escape the constraint), a free-text answer never
spells `<think>` or `<tool_call>`, and no JSON string (nor open key) spells any tag (a `<think>`
inside the answer's JSON would cut the answer into a reasoning item; a `</tool_call>` inside a
call's arguments ends the call, as vLLM's hermes parser ends it). These are regular expressions
of "no tag inside" (`without_tags`), and for JSON a rewrite of the schema (`guard_schema`): each
free string gets that pattern, each object open to other keys takes them only tag-free.

A completion may end with several calls, as Qwen3 and Hermes models write parallel calls (one
`<tool_call>` block after another, a newline between), each to any allowed function (a named
function again and again); with the request's `parallel_tool_calls: false`
(`Shape.parallel_calls`), with one. How many is not bounded but by `max_output_tokens`:
`max_tool_calls` counts the server-side calls run (`docs/agents.md`), and a think-tag model is
shown client functions only. Harmony's grammar stays at one: gpt-oss stops at its call's
`<|call|>`. JSON is written compactly, as in `harmony_grammar`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import attrs

from ._lark import compact_json, lark_literal
from ._shape import JsonBody, Shape, TextBody

__all__ = ["ThinkTagTokens", "guard_schema", "thinktags_grammar", "without_tags"]

#: How many blanks (spaces, newlines) may separate `</think>` from the answer, and the answer
#: from its end (Qwen3 writes `</think>\n\n`).
BLANKS = 8
_ANY = "streamfold_tagfree_any"


@attrs.frozen(kw_only=True)
class ThinkTagTokens:
    """How a think-tag model writes its structure: the tags' texts (`ThinkTagGrammar`'s), which
    of them are single tokens (`token_ids`, tag text to id), the tokens that end its turn
    (`stop_ids`), and where its generation prompt leaves it: `free` (the model may open
    `<think>`), `in_reasoning` (the prompt opened it) or `answering` (the prompt closed it)."""

    think_open: str = "<think>"
    think_close: str = "</think>"
    tool_open: str = "<tool_call>"
    tool_close: str = "</tool_call>"
    token_ids: Mapping[str, int] = attrs.field(factory=dict)
    stop_ids: tuple[int, ...]
    prompt: Literal["free", "in_reasoning", "answering"] = "free"

    @property
    def tags(self) -> tuple[str, ...]:
        return (self.think_open, self.think_close, self.tool_open, self.tool_close)


def _char(char: str) -> str:
    # `\uXXXX` / `\UXXXXXXXX`: read alike by Rust's regex (llguidance) and Python's `re`.
    code = ord(char)
    return f"\\u{code:04X}" if code < 0x10000 else f"\\U{code:08X}"


def without_tags(tags: Sequence[str]) -> str:
    """A regular expression (unanchored, Rust's and Python's syntax) of the strings in which
    none of `tags` occurs.

    The tags must share their first character and not repeat it (`<think>`, `</tool_call>`),
    and none may begin another: a match can then only start at that character, so a string is
    free of tags when every run from it either leaves every tag's path (a character that
    continues none, and is not the lead again) or is cut by the next lead or the end."""
    lead = tags[0][0] if tags and tags[0] else ""
    if (
        not lead
        or any(not tag or tag[0] != lead or lead in tag[1:] for tag in tags)
        or any(a != b and b.startswith(a) for a in tags for b in tags)
    ):
        raise ValueError(
            f"tags {list(tags)!r} must start with one character that none repeats, and none "
            "may begin another"
        )
    prefixes = sorted({tag[:k] for tag in tags for k in range(1, len(tag))})

    def literal(text: str) -> str:
        return "".join(_char(c) for c in text)

    exits = []
    for prefix in prefixes:
        following = {tag[len(prefix)] for tag in tags if tag.startswith(prefix)}
        banned = "".join(_char(c) for c in sorted(following | {lead}))
        exits.append(f"{literal(prefix)}[^{banned}]")
    partial = "(?:" + "|".join(literal(p) for p in prefixes) + ")"
    return f"(?:[^{_char(lead)}]|{partial}*(?:{'|'.join(exits)}))*{partial}*"


def _types(node: Mapping[str, Any]) -> set[str]:
    kind = node.get("type")
    return {kind} if isinstance(kind, str) else set(kind) if isinstance(kind, list) else set()


_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
# Not `not` nor `if`: a pattern added under them would widen what the schema accepts.
_SCHEMA_ONE = (
    *("items", "additionalItems", "contains", "additionalProperties", "then", "else"),
    *("unevaluatedItems", "unevaluatedProperties"),
)
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_STRING_KEYS = ("pattern", "minLength", "maxLength", "format")


def _guard(node: Any, pattern: str) -> Any:
    if not isinstance(node, Mapping):
        return node  # true / false schemas, and values the walk does not know
    if not node:
        return {"$ref": f"#/$defs/{_ANY}"}  # {}: any value, held tag-free
    out = dict(node)
    for key in _SCHEMA_MAPS:
        if isinstance(node.get(key), Mapping):
            out[key] = {name: _guard(value, pattern) for name, value in node[key].items()}
    for key in _SCHEMA_ONE:
        if key in node:
            out[key] = (
                [_guard(v, pattern) for v in node[key]]
                if isinstance(node[key], list)
                else _guard(node[key], pattern)
            )
    for key in _SCHEMA_LISTS:
        if isinstance(node.get(key), list):
            out[key] = [_guard(value, pattern) for value in node[key]]
    types = _types(node)
    fixed = "enum" in node or "const" in node
    if not fixed and ("string" in types or (not types and any(k in node for k in _STRING_KEYS))):
        if "pattern" in node:  # both must hold: llguidance intersects them
            out["allOf"] = [*out.get("allOf", []), {"pattern": pattern}]
        else:
            out["pattern"] = pattern
    is_object = "object" in types or (not types and "properties" in node)
    other = node.get("additionalProperties", True)
    if is_object and other is not False and "patternProperties" not in node:
        # Other keys stay allowed with the values they were (the schema's meaning), but only
        # tag-free ones.
        value = {"$ref": f"#/$defs/{_ANY}"} if other is True else out["additionalProperties"]
        out["patternProperties"] = {pattern: value}
        out["additionalProperties"] = False
    return out


def guard_schema(schema: Mapping[str, Any], tags: Sequence[str]) -> dict[str, Any]:
    """`schema`, with every free string (and every key an open object may take) held to
    spell none of `tags` (see the module docstring); what it accepts otherwise is unchanged.
    Strings fixed by `enum` or `const`, and the schema's own property names, are the schema
    author's and are kept as they are."""
    pattern = f"^{without_tags(tags)}$"
    ref = {"$ref": f"#/$defs/{_ANY}"}
    tag_free_any = {
        "anyOf": [
            {"type": "string", "pattern": pattern},
            {"type": "number"},
            {"type": "boolean"},
            {"type": "null"},
            {"type": "array", "items": ref},
            {"type": "object", "patternProperties": {pattern: ref}, "additionalProperties": False},
        ]
    }
    guarded = _guard(dict(schema), pattern) if schema else {}
    if not guarded or "$ref" in guarded:  # any value; or a reference, kept beside no $defs
        guarded = {"allOf": [guarded or ref]}
    defs = dict(guarded.get("$defs") or {})
    defs[_ANY] = tag_free_any
    guarded["$defs"] = defs
    return guarded


class _Writer:
    def __init__(self, tokens: ThinkTagTokens) -> None:
        self.tokens = tokens
        self.rules: list[str] = []

    def tag(self, text: str) -> str:
        """A tag as its token or spelled out (the reducer reads both alike)."""
        token = self.tokens.token_ids.get(text)
        spelled = lark_literal(text)
        return spelled if token is None else f"(<[{token}]> | {spelled})"

    def json(self, schema: Mapping[str, Any]) -> str:
        return compact_json(guard_schema(schema, self.tokens.tags))

    def call(self, index: int, name: str | None, body: Any) -> str:
        rule = f"call_{index}"
        schema = body.schema if isinstance(body, JsonBody) else {"type": "object"}
        named = (
            lark_literal(json.dumps(name)) if name is not None else self.json({"type": "string"})
        )
        self.rules += [
            f"{rule}_input: {self.json(schema)}",
            f'{rule}: {self.tag(self.tokens.tool_open)} "\\n"? "{{\\"name\\":" " "? {named} '
            f'"," " "? "\\"arguments\\":" " "? {rule}_input "}}" "\\n"? '
            f"{self.tag(self.tokens.tool_close)}",
        ]
        return rule


def _function_name(recipient: str) -> str:
    if not recipient.startswith("functions.") or "." in recipient.removeprefix("functions."):
        raise ValueError(
            f"a think-tag model calls the request's function tools only, not {recipient!r}"
        )
    return recipient.removeprefix("functions.")


def thinktags_grammar(shape: Shape, tokens: ThinkTagTokens) -> str:
    """The llguidance Lark grammar of a think-tag completion of this shape (see the module
    docstring). `shape.reasoning_tokens` bounds the one reasoning block."""
    if not tokens.stop_ids:
        raise ValueError("a think-tag completion ends with a stop token; the model has none")
    write = _Writer(tokens)
    endings: list[str] = []
    if shape.answer is not None:
        if isinstance(shape.answer, JsonBody):
            body = write.json(shape.answer.schema)
        elif isinstance(shape.answer, TextBody):
            body = f"/{without_tags([tokens.think_open, tokens.tool_open])}/"
        else:
            raise ValueError("a think-tag model's answer is text or JSON")
        write.rules.append(f"answer: {body} blanks? stop")
        endings.append("answer")
    if shape.calls is None:
        calls = [write.call(0, None, TextBody())]
    else:
        calls = [
            write.call(i, _function_name(call.recipient), call.body)
            for i, call in enumerate(shape.calls)
        ]
    if calls:
        # The stop comes once, after the last call.
        more = " (blanks? call)*" if shape.parallel_calls else ""
        write.rules += ["call: " + " | ".join(calls), f"calls: call{more} blanks? stop"]
        endings.append("calls")
    if not endings:
        raise ValueError("a shape must allow an answer or at least one call")
    bound = "" if shape.reasoning_tokens is None else f"[max_tokens={shape.reasoning_tokens}]"
    body = without_tags([tokens.think_close])
    spelled = "".join(_char(c) for c in tokens.think_close)
    # The spelled close is one lexeme with the text before it: a lexeme is never cut short,
    # so text that could still go on (`…</think`) never hands over to a separate `"</think>"`.
    close_token = tokens.token_ids.get(tokens.think_close)
    reasoned = (
        "think_spelled" if close_token is None else f"think <[{close_token}]> | think_spelled"
    )
    head = {
        "free": f"(blanks? {write.tag(tokens.think_open)} reasoned blanks?)? ",
        "in_reasoning": "reasoned blanks? ",
        "answering": "blanks? ",
    }[tokens.prompt]
    lines = [
        f"start: {head}ending",
        "ending: " + " | ".join(endings),
        f"reasoned: {reasoned}",
        f"think{bound}: /{body}/",
        f"think_spelled{bound}: /{body}{spelled}/",
        f"blanks: /[ \\t\\r\\n]{{1,{BLANKS}}}/",
        "stop: " + " | ".join(f"<[{token}]>" for token in tokens.stop_ids),
        *write.rules,
    ]
    return "\n".join(lines)
