"""What a constrained completion may contain, as values: the `Shape` a request asks for.

A request's `text.format`, `tool_choice`, `parallel_tool_calls` and its tools' `strict` flags and
grammars say what the model may write. `Shape` is that answer in one value, independent of any
model family: which bodies an answer may have, which calls may be made (and what each call's
input must follow), and how far reasoning may run. A chat format turns a `Shape` into the grammar
of its own completion (`harmony_grammar` for gpt-oss); the engine enforces the grammar.

`Shape.free` is the shape that constrains nothing: a request asking for nothing gets no grammar
at all, so the common case pays nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

__all__ = ["Body", "Call", "JsonBody", "LarkBody", "RegexBody", "Shape", "TextBody", "budget_shape"]


@attrs.frozen(kw_only=True)
class TextBody:
    """Any text (an unconstrained answer, a freeform custom tool's input)."""


@attrs.frozen(kw_only=True)
class JsonBody:
    """JSON following `schema` (an object schema; `{"type": "object"}` for `json_object`)."""

    schema: Mapping[str, Any] = attrs.field(eq=False)
    #: The schema's canonical text: what makes two bodies equal and a grammar cacheable.
    key: str = attrs.field(init=False)

    @key.default
    def _key(self) -> str:
        return json.dumps(self.schema, sort_keys=True, separators=(",", ":"))


@attrs.frozen(kw_only=True)
class LarkBody:
    """Text in the language of a Lark grammar (a custom tool's `format.syntax: "lark"`)."""

    definition: str


@attrs.frozen(kw_only=True)
class RegexBody:
    """Text matching a regular expression (a custom tool's `format.syntax: "regex"`)."""

    pattern: str


Body = TextBody | JsonBody | LarkBody | RegexBody


@attrs.frozen(kw_only=True)
class Call:
    """One tool the model may call: its harmony recipient (`functions.get_weather`, `python`,
    `browser.search`), the channel the call is written on, and what its input must follow."""

    recipient: str
    channel: str = "commentary"
    body: Body = TextBody()
    #: The recipient is a prefix (an MCP server's `label.`): any tool name may follow it.
    any_name: bool = False


@attrs.frozen(kw_only=True)
class Shape:
    """What the completion may end with, after free reasoning.

    - `answer`: the body of the final answer, or `None` when the completion must end in a call
      (`tool_choice: "required"`, a named tool).
    - `calls`: the calls the completion may end with instead: `None` allows any call with any
      input (nothing to enforce), `()` allows none (`tool_choice: "none"`).
    - `parallel_calls`: whether it may end with several of them, one after another (the
      request's `parallel_tool_calls`; each any of `calls`, so a named function may be called
      again). A format whose completion stops at its first call (harmony's `<|call|>`) makes
      one whatever this says. It constrains nothing alone: a shape otherwise free is free.
    - `reasoning_tokens`: the most tokens one reasoning (or preamble) message may hold, and
      `reasoning_messages` how many of them may come before the answer or call; `None` leaves
      reasoning unbounded. See `budget_shape` for how a token budget sets them. At least
      `min_reasoning_messages` come first.
    """

    answer: Body | None = TextBody()
    calls: tuple[Call, ...] | None = None
    parallel_calls: bool = True
    reasoning_tokens: int | None = None
    reasoning_messages: int = 3
    #: gpt-oss reasons before it answers or calls; the grammar asks for this many `analysis`
    #: messages first, so a constrained answer never comes without its reasoning.
    min_reasoning_messages: int = 1

    @property
    def summary(self) -> str:
        """What the shape enforces, in a few words (for logs and errors)."""
        answer = {
            type(None): "no answer",
            TextBody: "a text answer",
            JsonBody: "a JSON answer",
        }.get(type(self.answer), "an answer")
        if self.calls is None:
            calls = "any call"
        elif not self.calls:
            calls = "no call"
        else:
            calls = "a call to " + ", ".join(call.recipient for call in self.calls)
        return f"{answer} or {calls}" if self.answer is not None else calls

    @property
    def free(self) -> bool:
        """Whether this shape constrains nothing (any call, free text, no bound)."""
        return (
            isinstance(self.answer, TextBody)
            and self.calls is None
            and self.reasoning_tokens is None
        )


#: Tokens one reasoning message's header and end take (`<|channel|>analysis<|message|>` ...
#: `<|end|><|start|>assistant`), counted against the budget with its text.
_LEAD_OVERHEAD = 6
#: The share of `max_output_tokens` kept for the answer or call, and its ceiling.
ANSWER_SHARE = 2
ANSWER_RESERVE_MAX = 1024


def budget_shape(shape: Shape, max_output_tokens: int | None) -> Shape:
    """`shape` with its reasoning bounded so a constrained completion can end inside
    `max_output_tokens`.

    The rule: reasoning may take the budget less what is kept for the answer, which is half
    the budget, at most 1,024 tokens; that share is split evenly between the reasoning
    messages allowed (`reasoning_messages`), each also paying its header. So with 300 tokens,
    150 stay for the answer and each of 3 reasoning messages holds at most 44 tokens of text.
    Reasoning is bounded, never dropped: the reasoning item stays in the response. A shape that
    constrains nothing, or no budget, is returned as it is; a bound already set is kept if
    smaller. An answer the schema lets grow without bound (a string with no pattern or
    maxLength) can still run past the budget; the response then ends `incomplete`.
    """
    if max_output_tokens is None or shape.free:
        return shape
    reserve = min(max_output_tokens // ANSWER_SHARE, ANSWER_RESERVE_MAX)
    share = (max_output_tokens - reserve) // max(shape.reasoning_messages, 1)
    bound = max(share - _LEAD_OVERHEAD, 1)
    if shape.reasoning_tokens is not None:
        bound = min(bound, shape.reasoning_tokens)
    return attrs.evolve(shape, reasoning_tokens=bound)
