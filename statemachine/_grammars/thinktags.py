"""The think-tag grammar (Qwen3, DeepSeek-R1 and kin): `<think>…</think>` and Hermes
`<tool_call>{…}</tool_call>` over any byte-level vocabulary.

Tags are found in the decoded *text*, never by token id, so they work as single special tokens
and split over ordinary ones (o200k_base sends `<think>` as `<th` `ink` `>`, and `>` often
shares a token with the newline after it). Each token's bytes are decoded (a character split
over tokens waits for its last byte), then cut at tags; text at the end that could still be
the start of a tag is *held* until the next token says whether it is, so every boundary is
decided on the same text that is emitted (peers' bugs 21-23: a token holding the end of
reasoning, some content and the start of a tool call is cut in three, nothing is dropped or
overwritten). Per token that is O(token length + longest tag), plus, while a call's name is
still being read, one match over at most `HEAD_LIMIT` characters: nothing is re-scanned.

| mode      | tag            | text            | on the tag                                      |
|-----------|----------------|-----------------|-------------------------------------------------|
| text      | `<think>`      | message delta   | close the message → reasoning                   |
|           | `<tool_call>`  |                 | → tool (the message stays open, see below)      |
| reasoning | `</think>`     | reasoning delta | close the reasoning → text                      |
|           | `<think>`      |                 | before any reasoning text: dropped (the prompt  |
|           |                |                 | opened it, bug 22); later: literal reasoning    |
| tool      | `</tool_call>` | call body       | end the call (see `hermes.py`) → text          |

Every other tag-like text is literal text of the mode it is in (a stray `</think>` in the
answer, `<tool_call>` inside reasoning). Special tokens whose text is not a tag (`<|im_end|>`,
`<|endoftext|>`) are control tokens and show no text.

Items. An item's text is its run's text without the whitespace at either end: the item opens
at the first non-whitespace character, and whitespace at the end of what has arrived is held
until more visible text follows (it is then sent with it) or the run ends (it is dropped). So
the blank lines around tags (`\\n</think>\\n\\n`, `<think>\\n\\n</think>` when thinking is off)
open no item and no text starts or ends with them; whitespace inside a run is kept. A tool call
opens its `function_call` item once its name and the start of its arguments object are read,
then streams the arguments text as the model writes it; from then on the call is committed
(its arguments are what the model wrote, valid JSON or not, as with harmony). It closes when
its arguments value does; what follows up to `</tool_call>` (the `}`) is markup. As in vLLM's
hermes parser, the first `</tool_call>` ends a call, even inside a JSON string. The call's
name is routed by the response's tools as the chat format showed them (`chat_tools.py`): a
namespace's tool (`NS__NAME`) is a `function_call` naming its namespace, `tool_search` a
`tool_search_call`, and a custom tool's call a `custom_tool_call` whose input is the `input`
string of its arguments, decoded as it streams once they read `{"input": "` (`hermes.py`;
arguments of another shape are read whole at `</tool_call>`). A body that
never gets there is read whole at `</tool_call>`; if it is not a call, `<tool_call>`, the body
and `</tool_call>` are message text, in the same message as the text around them (the message
is closed only when a call really opens).

At finish: on `stop`, held text and a half character are released as text and an unclosed
call body is read as above (an unclosed `<think>` leaves a completed reasoning item). When
cut (`length`, `abort`, `error`) they are dropped, as is an uncommitted call body: it might
still have become markup, and dropping it keeps every text of a cut response a prefix of the
text the longer run would have shown.

`reasoning_tokens` counts the tokens that arrive inside reasoning or take the grammar into it.

Logprobs. A token's logprob goes on the first `output_text.delta` that carries its text: the
delta of the same token, or a later one when its text was held (a possible tag start, trailing
whitespace, half a character, a call body that turns out to be text). Tokens whose text became
a tag, reasoning or a tool call have none (the API has logprobs on message text only). The
message's done events carry all of its tokens' logprobs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal

import attrs

from .._errors import ReducerUsageError
from .._fast import replacer
from .._grammar import ResponseState, close_open, open_next, replace_state
from .._items import ItemKind, OpenItem, Out, append_text, append_text_with_logprobs
from .._text import Rope, decode_utf8, flush_utf8, rope_items, rope_text
from .._vocab import Vocabulary
from .chat_tools import FlatTool, custom_input, flat_call
from .hermes import HEAD_LIMIT, ArgumentsScan, StringScan, input_start, match_head, parse_call

__all__ = ["ThinkTagGrammar", "ThinkTagParse", "ToolCallParse"]

Mode = Literal["text", "reasoning", "tool"]

#: Whitespace at the end of a run is held back up to this many characters at a time.
BLANK_LIMIT = 256


@attrs.frozen(kw_only=True)
class ToolCallParse:
    """A call body being read: `head` until the name is known, then `arguments` (or a custom
    tool's `input` string), then `trailer` (what follows up to `</tool_call>`: markup)."""

    phase: Literal["head", "arguments", "input", "trailer"] = "head"
    body: Rope = None  # the whole body so far, for the buffered path
    head: str = ""  # its first HEAD_LIMIT characters, where the name must be
    streamable: bool = True  # false once the head is full and did not match
    scan: ArgumentsScan = attrs.field(factory=ArgumentsScan)
    string: StringScan = attrs.field(factory=StringScan)


@attrs.frozen(kw_only=True)
class ThinkTagParse:
    mode: Mode = "text"
    held: str = ""  # decoded text that may be the start of a tag
    pending: bytes = b""  # the first bytes of a character not yet complete
    blank: str = ""  # whitespace at the end of the open run, sent only if text follows
    call: ToolCallParse | None = None
    # `(token, logprob, top_logprobs)` of earlier tokens whose text may still become message
    # text, waiting for the delta that carries it (see "Logprobs" in the module doc); and,
    # during one step, the entry of the token being read with where its text starts in the
    # text being cut (after what was held).
    awaiting: Rope = None
    reading: tuple[Any, int] | None = None


replace_parse = replacer(ThinkTagParse)
replace_call = replacer(ToolCallParse)


def _proper_prefixes(tags: tuple[str, ...]) -> frozenset[str]:
    return frozenset(tag[:k] for tag in tags for k in range(1, len(tag)))


@attrs.frozen(eq=False)
class ThinkTagGrammar:
    """`<think>` reasoning and Hermes tool calls over any vocabulary (see the module doc)."""

    vocabulary: Vocabulary
    start_in_reasoning: bool = attrs.field(default=False, kw_only=True)
    think_open: str = attrs.field(default="<think>", kw_only=True)
    think_close: str = attrs.field(default="</think>", kw_only=True)
    tool_open: str = attrs.field(default="<tool_call>", kw_only=True)
    tool_close: str = attrs.field(default="</tool_call>", kw_only=True)
    name: str = attrs.field(default="thinktags", init=False)
    _tags: dict[str, tuple[str, ...]] = attrs.field(init=False, repr=False)
    _prefixes: dict[str, frozenset[str]] = attrs.field(init=False, repr=False)
    _starts: dict[str, frozenset[str]] = attrs.field(init=False, repr=False)
    _tag_start: dict[str, Callable[[str], object]] = attrs.field(init=False, repr=False)
    _longest: dict[str, int] = attrs.field(init=False, repr=False)
    _tag_tokens: frozenset[int] = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        tags = {
            "text": (self.think_open, self.tool_open),
            "reasoning": (self.think_close, self.think_open),
            "tool": (self.tool_close,),
        }
        for field in ("think_open", "think_close", "tool_open", "tool_close"):
            if not getattr(self, field):
                raise ReducerUsageError(
                    f"ThinkTagGrammar({field}=''): a tag must not be empty; pass the text the "
                    "model writes, such as '<think>'"
                )
        for one, other in (("think_open", "tool_open"), ("think_open", "think_close")):
            a, b = getattr(self, one), getattr(self, other)
            if a.startswith(b) or b.startswith(a):
                raise ReducerUsageError(
                    f"ThinkTagGrammar: {one}={a!r} and {other}={b!r} start alike, so the text "
                    "cannot say which one it read; pick tags where neither is a prefix of the other"
                )
        all_tags = {t for group in tags.values() for t in group}
        set_ = object.__setattr__
        set_(self, "_tags", tags)
        set_(self, "_prefixes", {mode: _proper_prefixes(group) for mode, group in tags.items()})
        set_(self, "_starts", {mode: frozenset(t[0] for t in tags[mode]) for mode in tags})
        set_(
            self,
            "_tag_start",
            {m: re.compile("|".join(map(re.escape, self._starts[m]))).search for m in tags},
        )
        set_(self, "_longest", {mode: max(map(len, group)) - 1 for mode, group in tags.items()})
        set_(
            self,
            "_tag_tokens",
            frozenset(i for name, i in self.vocabulary.special.items() if name in all_tags),
        )

    def initial(self) -> ThinkTagParse:
        return ThinkTagParse(mode="reasoning" if self.start_in_reasoning else "text")

    # -- per token ----------------------------------------------------------------------------

    def feed(
        self, state: ResponseState, out: Out, token: int, logprob: float | None, top_logprobs: Any
    ) -> ResponseState:
        parse: ThinkTagParse = state.parse
        was_reasoning = parse.mode == "reasoning"
        if token in self.vocabulary.special_ids and token not in self._tag_tokens:
            # A control token (end of turn, padding) is not text the model meant to show.
            if was_reasoning:
                state = replace_state(state, reasoning_tokens=state.reasoning_tokens + 1)
            return state
        text, pending = decode_utf8(parse.pending, self.vocabulary.token_bytes[token])
        item = state.open
        if (
            not parse.held
            and item is not None
            and logprob is None
            and parse.awaiting is None
            and self._tag_start[parse.mode](text) is None
        ):
            # The common tokens: more text of the open run, or more arguments of the open
            # call, with nothing tag-like in them. One new state instead of several keeps the
            # per-token cost down (see benchmarks/bench_thinktags.py).
            if parse.mode == "tool":
                call = parse.call
                if call is not None and call.phase == "arguments":
                    scan, used = call.scan.feed(text)
                    if used == len(text) and scan.depth:
                        if scan is not call.scan or pending != parse.pending:
                            call = ToolCallParse(phase="arguments", scan=scan)
                            parse = ThinkTagParse(mode="tool", pending=pending, call=call)
                        item = append_text(out, item, text)
                        return replace_state(
                            state,
                            open=item,
                            parse=parse,
                            seq=out.seq,
                            output_tokens=state.output_tokens + 1,
                        )
            elif item.kind == ("reasoning" if was_reasoning else "message"):
                delta, blank = _split_blank(parse.blank, text)
                if pending != parse.pending or blank != parse.blank:
                    parse = ThinkTagParse(mode=parse.mode, pending=pending, blank=blank)
                item = append_text(out, item, delta)
                return replace_state(
                    state,
                    open=item,
                    parse=parse,
                    reasoning_tokens=state.reasoning_tokens + was_reasoning,
                    seq=out.seq,
                    output_tokens=state.output_tokens + 1,
                )
        reading = None if logprob is None else ((token, logprob, top_logprobs), len(parse.held))
        fresh = replace_parse(parse, held="", pending=pending, reading=reading)
        state = self._consume(replace_state(state, parse=fresh), out, parse.held + text)
        if was_reasoning or state.parse.mode == "reasoning":
            state = replace_state(state, reasoning_tokens=state.reasoning_tokens + 1)
        parse = state.parse
        if parse.awaiting is not None or parse.reading is not None:
            state = replace_state(state, parse=_settle_logprobs(parse))
        return state

    def _consume(self, state: ResponseState, out: Out, text: str) -> ResponseState:
        """Cut `text` at tags, route each piece by mode, and hold a possible tag start."""
        start = 0  # where `text` is in what was given, for the logprobs of each piece
        while text:
            tags = self._tags[state.parse.mode]
            at, tag = -1, ""
            for candidate in tags:
                found = text.find(candidate)
                if found != -1 and (at == -1 or found < at):
                    at, tag = found, candidate
            if at == -1:
                break
            state = self._content(state, out, text[:at], start)
            state = self._on_tag(state, out, tag)
            text = text[at + len(tag) :]
            start += at + len(tag)
        held = self._held_length(state.parse.mode, text)
        if held:
            state = self._content(state, out, text[:-held], start)
            return replace_state(state, parse=replace_parse(state.parse, held=text[-held:]))
        return self._content(state, out, text, start)

    def _held_length(self, mode: Mode, text: str) -> int:
        """Length of the longest end of `text` that is the start of one of `mode`'s tags."""
        longest = min(len(text), self._longest[mode])
        tail = text[-longest:] if longest else ""
        if not any(start in tail for start in self._starts[mode]):
            return 0
        prefixes = self._prefixes[mode]
        for size in range(longest, 0, -1):
            if text[-size:] in prefixes:
                return size
        return 0

    def _on_tag(self, state: ResponseState, out: Out, tag: str) -> ResponseState:
        parse: ThinkTagParse = state.parse
        if parse.mode == "text" and tag == self.think_open:
            state = _close(state, out)
            return replace_state(state, parse=replace_parse(parse, mode="reasoning"))
        if parse.mode == "text":
            return replace_state(
                state, parse=replace_parse(parse, mode="tool", call=ToolCallParse())
            )
        if parse.mode == "reasoning" and tag == self.think_open:
            # `<think>` again at the start of reasoning repeats the prompt's marker (bug 22).
            return state if state.open is None else _run_text(state, out, "reasoning", tag)
        if parse.mode == "reasoning":
            state = _close(state, out)
            return replace_state(state, parse=replace_parse(parse, mode="text"))
        state = self._end_call(state, out, closed=True)
        return replace_state(state, parse=replace_parse(state.parse, mode="text", call=None))

    def _content(self, state: ResponseState, out: Out, text: str, start: int = 0) -> ResponseState:
        """One piece of text between tags, `start` characters into the text being cut."""
        if not text:
            return state
        mode = state.parse.mode
        if mode == "tool":
            return self._call_text(state, out, text)
        # A delta of this piece carries the logprobs of the tokens whose text it begins with:
        # the earlier ones (held text and whitespace go out at the front of the first piece)
        # and the token being read, if the piece reaches into its text.
        reading = state.parse.reading
        logprobs_of = (start == 0, reading is not None and start + len(text) > reading[1])
        kind: ItemKind = "message" if mode == "text" else "reasoning"
        return _run_text(state, out, kind, text, logprobs_of)

    # -- tool calls ---------------------------------------------------------------------------

    def _call_text(self, state: ResponseState, out: Out, text: str) -> ResponseState:
        call: ToolCallParse = state.parse.call
        if call.phase == "trailer":
            return state
        if call.phase == "arguments":
            return _stream_arguments(state, out, call, text)
        if call.phase == "input":
            return _stream_input(state, out, call, text)
        call = replace_call(call, body=(call.body, text))
        if call.streamable:
            head = call.head + text[: HEAD_LIMIT - len(call.head)]
            found = match_head(head)
            waiting = found is None
            if found is not None:
                name, start = found
                tool = flat_call(state.response.tools, name)
                # A custom tool's input streams once its arguments read `{"input": "`.
                custom = tool is not None and tool.kind == "custom_tool_call"
                at = input_start(head[start:]) if custom else 0
                if at is not None and at >= 0:
                    body = rope_text(call.body)  # at most HEAD_LIMIT + one token, once per call
                    state = _close(state, out)
                    # The body is a call: the tokens it came from are not message text.
                    parse = replace_parse(state.parse, awaiting=None, reading=None)
                    state = replace_state(state, parse=parse)
                    state = replace_state(state, open=_open_call(state, out, name, tool))
                    if custom:
                        call = ToolCallParse(phase="input")
                        return _stream_input(state, out, call, body[start + at :])
                    call = ToolCallParse(phase="arguments")
                    return _stream_arguments(state, out, call, body[start:])
                waiting = at is None  # else arguments of another shape: read whole
            streamable = waiting and len(head) < HEAD_LIMIT
            call = replace_call(call, head=head, streamable=streamable)
        return replace_state(state, parse=replace_parse(state.parse, call=call))

    def _end_call(self, state: ResponseState, out: Out, *, closed: bool) -> ResponseState:
        """`</tool_call>` (closed) or a `stop` inside the body: emit what the body was."""
        call: ToolCallParse = state.parse.call
        if call.phase in ("arguments", "input"):
            return _close(state, out)
        if call.phase == "trailer":
            return state
        body = rope_text(call.body)
        parsed = parse_call(body)
        if parsed is None:
            literal = self.tool_open + body + (self.tool_close if closed else "")
            return _run_text(state, out, "message", literal, (True, True))
        name, arguments = parsed
        state = _close(state, out)
        state = replace_state(state, parse=replace_parse(state.parse, awaiting=None, reading=None))
        tool = flat_call(state.response.tools, name)
        item = _open_call(state, out, name, tool)
        if item.kind == "custom_tool_call":
            arguments = custom_input(arguments)
        state = replace_state(state, open=append_text(out, item, arguments))
        return _close(state, out)

    # -- finish -------------------------------------------------------------------------------

    def flush(self, state: ResponseState, out: Out, complete: bool) -> ResponseState:
        parse: ThinkTagParse = state.parse
        if complete:
            state = replace_state(state, parse=replace_parse(parse, held="", pending=b""))
            state = self._consume(state, out, parse.held + flush_utf8(parse.pending))
            parse = state.parse
            state = self._content(
                replace_state(state, parse=replace_parse(parse, held="")), out, parse.held
            )
            if state.parse.mode == "tool":
                state = self._end_call(state, out, closed=False)
        return replace_state(state, parse=ThinkTagParse(mode=state.parse.mode))


def _open_call(state: ResponseState, out: Out, called: str, tool: FlatTool | None) -> OpenItem:
    """The item of a call of the function `called`, routed by the tool the chat format showed
    under that name (`flat_call`; None: undeclared): a namespace's, a custom tool's, a tool
    search."""
    if tool is None:
        return open_next(out, state, "function_call", name=called)
    if tool.kind == "tool_search_call":
        return open_next(out, state, "tool_search_call")
    return open_next(out, state, tool.kind, name=tool.name, namespace=tool.namespace)


def _close(state: ResponseState, out: Out) -> ResponseState:
    """Close the open item; whitespace held at its end was never part of it."""
    state = close_open(state, out, complete=True)
    if state.parse.blank:
        state = replace_state(state, parse=replace_parse(state.parse, blank=""))
    return state


def _split_blank(blank: str, text: str) -> tuple[str, str]:
    """`(delta, blank)`: the visible part of `text` goes out with the whitespace before it;
    whitespace at its end waits, released in whole BLANK_LIMIT blocks so that a long blank run
    costs O(1) per token and what goes out depends on the text alone, not its chunking."""
    body = text.rstrip()
    if body:
        delta, blank = blank + body, text[len(body) :]
    else:
        delta, blank = "", blank + text
    if len(blank) >= BLANK_LIMIT:
        cut = len(blank) - len(blank) % BLANK_LIMIT
        delta, blank = delta + blank[:cut], blank[cut:]
    return delta, blank


def _run_text(
    state: ResponseState,
    out: Out,
    kind: ItemKind,
    text: str,
    logprobs_of: tuple[bool, bool] = (False, False),
) -> ResponseState:
    """Text of a message or reasoning run: the item opens at its first visible character and
    holds back whitespace at its end (see the module doc). A message delta carries the
    logprobs `logprobs_of` names: (the earlier tokens waiting, the token being read)."""
    item = state.open
    blank = state.parse.blank
    if item is None or item.kind != kind:
        text = text.lstrip()
        if not text:
            return state
        state = _close(state, out)
        item = open_next(out, state, kind)
        blank = ""
    delta, blank = _split_blank(blank, text)
    if blank != state.parse.blank:
        state = replace_state(state, parse=replace_parse(state.parse, blank=blank))
    parse = state.parse
    earlier, current = logprobs_of
    earlier = earlier and parse.awaiting is not None
    current = current and parse.reading is not None
    if kind == "message" and delta and (earlier or current):
        entries = rope_items(parse.awaiting) if earlier else []
        if current:
            entries.append(parse.reading[0])
        item = append_text_with_logprobs(out, item, delta, entries, state.grammar.vocabulary)
        parse = replace_parse(
            parse,
            awaiting=None if earlier else parse.awaiting,
            reading=None if current else parse.reading,
        )
        return replace_state(state, open=item, parse=parse)
    return replace_state(state, open=append_text(out, item, delta))


def _settle_logprobs(parse: ThinkTagParse) -> ThinkTagParse:
    """After a token: its logprob waits with the earlier ones if its text was not sent and
    may still become message text; if nothing held may, they are dropped."""
    awaiting = parse.awaiting
    if parse.reading is not None:
        awaiting = (awaiting, parse.reading[0])
    if not _may_become_message_text(parse):
        awaiting = None
    return replace_parse(parse, awaiting=awaiting, reading=None)


def _may_become_message_text(parse: ThinkTagParse) -> bool:
    """Whether text held now may still go out in a message delta: text, whitespace or half a
    character held in text mode, or a call body not yet known to be a call."""
    if parse.mode == "text":
        return bool(parse.held or parse.pending or parse.blank)
    return parse.mode == "tool" and parse.call is not None and parse.call.phase == "head"


def _stream_arguments(
    state: ResponseState, out: Out, call: ToolCallParse, text: str
) -> ResponseState:
    scan, used = call.scan.feed(text)
    state = replace_state(state, open=append_text(out, state.open, text[:used]))  # type: ignore[arg-type]
    if used < len(text) or (scan.depth == 0 and used):
        # The value closed: the call is complete whatever follows before `</tool_call>`.
        state = _close(state, out)
        call = ToolCallParse(phase="trailer")
    else:
        call = replace_call(call, scan=scan)
    return replace_state(state, parse=replace_parse(state.parse, call=call))


def _stream_input(state: ResponseState, out: Out, call: ToolCallParse, text: str) -> ResponseState:
    """A custom tool's input string, decoded as it streams, up to its closing quote."""
    scan, decoded, _, closed = call.string.feed(text)
    if decoded:
        state = replace_state(state, open=append_text(out, state.open, decoded))  # type: ignore[arg-type]
    if closed:
        # The input is complete whatever follows before `</tool_call>` (`}}`: markup).
        state = _close(state, out)
        call = ToolCallParse(phase="trailer")
    else:
        call = replace_call(call, string=scan)
    return replace_state(state, parse=replace_parse(state.parse, call=call))
