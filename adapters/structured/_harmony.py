"""A `Shape` as one grammar over the whole harmony completion, in llguidance's Lark.

The completion is what the model writes after the prompt's `<|start|>assistant`. Harmony's
control tokens are token references in the grammar (`<|channel|>`), never spelled text, so the
model cannot write a header out of text tokens, and the grammar never blocks a control token the
completion needs (peers' bugs: LM Studio #1555, sglang #31019). The grammar is

    start:  reason lead{0,N-1} ending          (reason: an analysis message)
    lead:   (analysis | preamble) <|end|> <|start|> "assistant"
    ending: final | call_0 | call_1 | ...

so reasoning stays free (and is always allowed: `required` never skips it, unlike vLLM #44664)
and the constraint holds where it belongs: JSON only inside the `final` message's content, a
call only to the tools allowed, its input following its schema or grammar. Every header
variant the model really writes is accepted (vLLM #51020, #28000): the recipient before or after
the channel, the content type as ` <|constrain|>json`, `<|constrain|>json`, ` json` or absent.

Bounds, so a constrained completion can end inside its budget: each reasoning message holds at
most `Shape.reasoning_tokens` tokens and there are at most `Shape.reasoning_messages` of them;
JSON is written compactly (no free whitespace between its tokens), so its length is what the
schema allows.

The result is llguidance's Lark, which vLLM and SGLang read too: a custom tool's own Lark
grammar is inlined under its own names (`_lark.py`). Only a tool grammar that cannot be inlined
(one with `%ignore`) makes it llguidance's top-level grammar as JSON text instead, the main
grammar first, then one nested grammar per such call (referenced as `@name`); the native engine
reads that form, vLLM and SGLang do not.
"""

from __future__ import annotations

import json

from ._lark import compact_json, inline_lark, lark_literal
from ._shape import Body, Call, JsonBody, LarkBody, RegexBody, Shape, TextBody

__all__ = ["harmony_grammar"]

_JSON_TYPES = '(" " <|constrain|> "json" | <|constrain|> "json" | " json")?'
_TEXT_TYPES = '(" code" | " text")?'


class _Builder:
    def __init__(self) -> None:
        self.rules: list[str] = []
        self.nested: list[dict[str, str]] = []
        self.imports: set[str] = set()
        self.inlined = 0

    def body(self, name: str, body: Body) -> tuple[str, str]:
        """A rule for `body` named `name`, and the content types its header may carry."""
        if isinstance(body, JsonBody):
            self.rules.append(f"{name}: {compact_json(body.schema)}")
            return name, _JSON_TYPES
        if isinstance(body, LarkBody):
            inlined = inline_lark(body.definition, f"g{self.inlined}_")
            if inlined is not None:  # one Lark grammar: every engine reads it
                self.inlined += 1
                start, rules, imports = inlined
                self.imports.update(imports)
                self.rules += [f"{name}: {start}", rules]
                return name, _TEXT_TYPES
            grammar = f"g_{name}"
            self.nested.append({"name": grammar, "lark_grammar": body.definition})
            self.rules.append(f"{name}: @{grammar}")
            return name, _TEXT_TYPES
        if isinstance(body, RegexBody):
            pattern = body.pattern.replace("/", "\\/")
            self.rules.append(f"{name}: /{pattern}/")
            return name, _TEXT_TYPES
        self.rules.append(f"{name}: /(?s:.*)/")
        return name, _TEXT_TYPES

    def call(self, index: int, call: Call) -> str:
        name = f"call_{index}"
        body, types = self.body(f"{name}_input", call.body)
        channel = lark_literal(call.channel)
        to = lark_literal(" to=" + call.recipient)
        if call.any_name:
            to = f"({to} /[A-Za-z0-9_-]+/)"
        self.rules.append(
            f"{name}: (<|channel|> {channel} {to} | {to} <|channel|> {channel}) {types} "
            f"<|message|> {body} <|call|>"
        )
        return name


#: Any call with any input, for a shape that constrains its answer but not its calls.
_ANY_CALL = (
    "any_call: (<|channel|> any_channel any_to | any_to <|channel|> any_channel) "
    f"{_TEXT_TYPES} {_JSON_TYPES} <|message|> /(?s:.*)/ <|call|>\n"
    'any_channel: "commentary" | "analysis"\n'
    'any_to: " to=" /[^ \\t\\n<]+/'
)


def harmony_grammar(shape: Shape) -> str:
    """The llguidance grammar of a harmony completion of this shape: Lark, or its top-level
    JSON when a tool grammar had to be nested (see the module docstring)."""
    build = _Builder()
    endings: list[str] = []
    if shape.answer is not None:
        body, types = build.body("answer", shape.answer)
        if isinstance(shape.answer, TextBody):
            types = ""
        build.rules.append(f'final: <|channel|> "final" {types} <|message|> {body} <|return|>')
        endings.append("final")
    if shape.calls is None:
        build.rules.append(_ANY_CALL)
        endings.append("any_call")
    else:
        endings.extend(build.call(i, call) for i, call in enumerate(shape.calls))
    if not endings:
        raise ValueError("a shape must allow an answer or at least one call")
    bound = "" if shape.reasoning_tokens is None else f"[max_tokens={shape.reasoning_tokens}]"
    first = min(shape.min_reasoning_messages, shape.reasoning_messages)
    rest = shape.reasoning_messages - first
    # A preamble (commentary without a recipient) is a visible message: before a JSON answer
    # it would be part of the text a client parses (`output_text` joins every message), so
    # only analysis may come before one.
    leads = "analysis" if isinstance(shape.answer, JsonBody) else "(analysis | preamble)"
    main = [
        f"start: reason{{{first}}} lead{{0,{rest}}} ending",
        'reason: analysis <|end|> <|start|> "assistant"',
        f'lead: {leads} <|end|> <|start|> "assistant"',
        'analysis: <|channel|> "analysis" <|message|> think',
        'preamble: <|channel|> "commentary" <|message|> think',
        f"think{bound}: /(?s:.*)/",
        "ending: " + " | ".join(endings),
        *build.rules,
    ]
    lark = "\n".join([*(f"%import common.{name}" for name in sorted(build.imports)), *main])
    if not build.nested:
        return lark  # plain Lark: what vLLM's and SGLang's llguidance backends read too
    grammars = [{"lark_grammar": lark}, *build.nested]
    return json.dumps({"grammars": grammars}, ensure_ascii=False)
