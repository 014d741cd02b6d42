"""The harmony grammar (gpt-oss): which tokens open, grow and close which items.

Generation starts right after the prompt's `<|start|>assistant`, so the reducer begins in the
header. The phases and what each token does in them:

| phase        | `<|message|>`          | stop: `<|end|>` `<|return|>` `<|call|>` `<|endoftext|>` | `<|start|>`     | `<|channel|>`          | other control | text                   |
|--------------|------------------------|--------------------------------------------|-----------------|------------------------|---------------|------------------------|
| header       | parse header, open item → content | flush header text as an item (bug 44) → expect | restart header | part of header | ignored | part of header (too long → it was text, bug 45) |
| content      | ignored                | close item → expect                        | close item → header | close item → header (bug 41) | ignored | delta                  |
| expect_start | ignored                | ignored: EOS (bug 39)                      | → header        | → header (role implied) | ignored      | → header (stray text)  |

A header decides the item (see `harmony_header.py` for the lenient parsing): `to=functions.NAME` on any
channel (or a bare declared function name) is a function call (bug 52, 53), `to=browser.*` a web
search call, `to=python` a code interpreter call, any other recipient an MCP call (unless
`ignore_recipients_without_tools` and the response declares no tools: bug 54) or, for a tool
of an MCP server that requires approval for it (`server_tools`), an approval request; without a
recipient `analysis` is reasoning, `final` the answer, `commentary` a preamble message (bug 62),
and an unknown channel a message, so its text is shown rather than lost (bug 45).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import attrs

from .. import _model as m
from .._fast import replacer, updater
from .._grammar import ResponseState, close_open, open_next, replace_state
from .._items import ItemKind, Out, append_bytes, append_text, grow
from .._text import Rope, rope_items
from .._vocab import Vocabulary
from .chat_tools import FUNCTIONS, TOOL_SEARCH, client_search
from .harmony_header import Header, parse_header

__all__ = ["HarmonyGrammar", "HarmonyParse"]

Phase = Literal["header", "content", "expect_start"]

#: A header longer than this without `<|message|>` was never a header; its text is shown.
HEADER_LIMIT_BYTES = 512


@attrs.frozen(kw_only=True)
class HarmonyParse:
    phase: Phase = "header"
    header: Rope = None  # token ids of the header so far
    header_bytes: int = 0
    role_pending: bool = False


#: Where a header sends its message: the item kind, its name, its server label (a client
#: tool's namespace, for function and custom calls) and a message's phase.
Route = tuple[ItemKind, str | None, str | None, Literal["commentary", "final_answer"] | None]


def client_call(tools: tuple[Any, ...], recipient: str) -> Route | None:
    """The route of a call to one of the response's client-side tools, or None.

    `functions.NAME` (or a bare declared name) is a function call, or a custom tool call when
    NAME is a `custom` tool, whose input is the raw text the model writes, or a
    `tool_search_call` when NAME is `tool_search` and no declared tool has that name but the
    client offers a `tool_search` it runs itself; `NS.NAME`, where NS
    is a `namespace` tool, is a call of NAME in NS. An undeclared `functions.NAME` is still
    a function call (bug 52): only `functions` is the client's namespace by definition. A
    `namespace` tool named `functions` (Codex's code mode offers its tools so) adds to that
    namespace: its tools are called as the request's own are, and their calls name it.
    """
    space, dot, name = recipient.partition(".")
    if dot and space != FUNCTIONS:
        for tool in tools:
            if isinstance(tool, m.NamespaceTool) and tool.name == space:
                for inner in tool.tools:
                    if inner.name == name:
                        kind: ItemKind = (
                            "custom_tool_call"
                            if isinstance(inner, m.CustomTool)
                            else "function_call"
                        )
                        return kind, name, space, None
                return "function_call", name, space, None
        return None
    if not dot:
        name = recipient
    for tool, named in _functions(tools):
        if isinstance(tool, m.CustomTool) and tool.name == name:
            return "custom_tool_call", name, named, None
        if isinstance(tool, m.FunctionTool) and tool.name == name:
            return "function_call", name, named, None
    if name == TOOL_SEARCH and any(client_search(tool) for tool in tools):
        return "tool_search_call", None, None, None
    if dot:
        return "function_call", name, None, None
    return None


def _functions(tools: tuple[Any, ...]) -> Iterator[tuple[Any, str | None]]:
    """The tools of harmony's `functions` namespace, each with the namespace its call names:
    the request's own (None) and those of a `namespace` tool named `functions`."""
    for tool in tools:
        if isinstance(tool, m.NamespaceTool) and tool.name == FUNCTIONS:
            for inner in tool.tools:
                yield inner, FUNCTIONS
        else:
            yield tool, None


def _callable(tool: object) -> bool:
    return type(tool) is not dict and (
        not isinstance(tool, m.ToolSearchTool) or client_search(tool)
    )


_EXPECT_START = HarmonyParse(phase="expect_start")
# The content phase is always this one value, so the hot path can test it by identity.
CONTENT_PHASE = HarmonyParse(phase="content")
# A positional copy for the hot path (see `_fast.updater`).
_state_after_text = updater(ResponseState, "open", "seq", "output_tokens", "reasoning_tokens")
# Each header token copies the parse (no field has a validator).
_replace_parse = replacer(HarmonyParse)


@attrs.frozen(kw_only=True, eq=False)
class HarmonyGrammar:
    """Harmony over a vocabulary that has its special tokens (o200k_harmony)."""

    vocabulary: Vocabulary
    name: str = "harmony"
    #: Read a message whose header names a recipient by its channel when the response
    #: declares no tools at all: nothing can answer such a call, and a live model that was
    #: offered no tools and writes one anyway is hallucinating it (bug 54: vLLM saw bogus
    #: `mcp_call`s in most responses). Off for replayed traces, whose calls were recorded.
    ignore_recipients_without_tools: bool = False
    start_id: int = attrs.field(init=False)
    message_id: int = attrs.field(init=False)
    channel_id: int = attrs.field(init=False)
    stops: frozenset[int] = attrs.field(init=False)
    # The vocabulary's table, one attribute lookup away on the hot path (the compiled one in
    # `_speedups.c` reads it by this name too).
    text_bytes: tuple[bytes | None, ...] = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        v = self.vocabulary
        object.__setattr__(self, "start_id", v.id_of("<|start|>"))
        object.__setattr__(self, "message_id", v.id_of("<|message|>"))
        object.__setattr__(self, "channel_id", v.id_of("<|channel|>"))
        stops = {v.id_of("<|end|>"), v.id_of("<|return|>"), v.id_of("<|call|>")}
        if "<|endoftext|>" in v.special:
            stops.add(v.special["<|endoftext|>"])
        object.__setattr__(self, "stops", frozenset(stops))
        object.__setattr__(self, "text_bytes", v.text_bytes)

    def initial(self) -> HarmonyParse:
        return HarmonyParse()

    # -- per token ----------------------------------------------------------------------------

    def feed(
        self, state: ResponseState, out: Out, token: int, logprob: float | None, top_logprobs: Any
    ) -> ResponseState:
        parse: HarmonyParse = state.parse
        item = state.open
        data = self.text_bytes[token]
        if parse is CONTENT_PHASE and logprob is None and item is not None and data is not None:
            # The hot path: one token of text gives at most one delta event, one new item
            # and one new state. Everything else takes the general path below. `_speedups.c`
            # is this path compiled; keep the two the same (tests/statemachine/test_speedups.py).
            item = grow(out, item, data)
            return _state_after_text(
                state,
                item,
                out.seq,
                state.output_tokens + 1,
                state.reasoning_tokens + (item.kind == "reasoning"),
            )
        phase = parse.phase
        if phase == "content":
            return self._content(state, out, token, logprob, top_logprobs)
        if phase == "header":
            return self._header(state, out, token)
        return self._expect_start(state, token)

    def _content(
        self, state: ResponseState, out: Out, token: int, logprob: float | None, top_logprobs: Any
    ) -> ResponseState:
        item = state.open
        reasoning = state.reasoning_tokens + (item is not None and item.kind == "reasoning")
        if token in self.vocabulary.special_ids or item is None:
            state = replace_state(state, reasoning_tokens=reasoning)
            if token in self.stops:
                state = close_open(state, out, complete=True)
                return replace_state(state, parse=_EXPECT_START)
            if token == self.start_id or token == self.channel_id:
                # A new header inside content: the model skipped `<|end|>`. Close, then re-read.
                return self._begin_header(close_open(state, out, complete=True), token)
            return state  # a stray control token is not text the model meant to show
        # The hot path: one token of text, one new item and one new state.
        item = append_bytes(
            out,
            item,
            self.vocabulary.token_bytes[token],
            self.vocabulary,
            token,
            logprob,
            top_logprobs,
        )
        return replace_state(
            state,
            open=item,
            reasoning_tokens=reasoning,
            seq=out.seq,
            output_tokens=state.output_tokens + 1,
        )

    def _begin_header(self, state: ResponseState, token: int) -> ResponseState:
        if token == self.start_id:
            return replace_state(state, parse=HarmonyParse(phase="header", role_pending=True))
        return replace_state(
            state,
            parse=HarmonyParse(
                phase="header",
                header=(None, token),
                header_bytes=len(self.vocabulary.token_bytes[token]),
            ),
        )

    def _expect_start(self, state: ResponseState, token: int) -> ResponseState:
        if token in self.stops:
            return state  # `<|return|>` after `<|end|>`: the turn is over (bug 39)
        if token == self.start_id or token == self.channel_id:
            return self._begin_header(state, token)
        if token in self.vocabulary.special_ids:
            return state
        return self._begin_header(state, token)  # stray text where a header should start

    def _header(self, state: ResponseState, out: Out, token: int) -> ResponseState:
        parse: HarmonyParse = state.parse
        if token == self.message_id:
            header = self._parse(parse)
            if not header.is_header:
                return self._header_was_text(state, out)
            state = self._open(state, out, header)
            return replace_state(state, parse=CONTENT_PHASE)
        if token in self.stops:
            state = self._flush_header(state, out, complete=True, stopped=True)
            return replace_state(state, parse=_EXPECT_START)
        if token == self.start_id:
            return replace_state(state, parse=HarmonyParse(phase="header", role_pending=True))
        size = parse.header_bytes + len(self.vocabulary.token_bytes[token])
        parse = _replace_parse(parse, header=(parse.header, token), header_bytes=size)
        if size > HEADER_LIMIT_BYTES:
            return self._header_was_text(replace_state(state, parse=parse), out)
        return replace_state(state, parse=parse)

    # -- headers ------------------------------------------------------------------------------

    def _parse(self, parse: HarmonyParse) -> Header:
        raw = b"".join(self.vocabulary.token_bytes[t] for t in rope_items(parse.header))
        return parse_header(raw.decode("utf-8", "replace"), role_pending=parse.role_pending)

    def _open(self, state: ResponseState, out: Out, header: Header) -> ResponseState:
        kind, name, label, phase = self._route(state, header)
        if kind in ("function_call", "custom_tool_call") and label is not None:
            # A client tool's `label` is its namespace tool (`NAMESPACE.tool`).
            item = open_next(out, state, kind, name=name, namespace=label)
        else:
            item = open_next(out, state, kind, name=name, server_label=label, phase=phase)
        return replace_state(state, open=item)

    def _route(self, state: ResponseState, header: Header) -> Route:
        recipient = header.recipient
        # Echoed tools the server does not run (dicts, a hosted tool search) offer the model
        # nothing to call.
        offered = state.server_tools or any(_callable(t) for t in state.response.tools)
        if self.ignore_recipients_without_tools and not offered:
            recipient = None
        if recipient is not None:
            called = client_call(state.response.tools, recipient)
            if called is not None:
                return called
            if recipient == "browser" or recipient.startswith("browser."):
                return "web_search_call", recipient.partition(".")[2] or None, None, None
            if recipient == "python" or recipient.startswith("python."):
                return "code_interpreter_call", None, None, None
            label, _, name = recipient.partition(".")
            server = state.server_tools.mcp_server(label)
            if server is not None and server.needs_approval(name or recipient):
                return "mcp_approval_request", name or recipient, label, None
            return "mcp_call", name or recipient, label, None
        if header.channel == "analysis":
            return "reasoning", None, None, None
        if header.channel == "final":
            return "message", None, None, "final_answer"
        if header.channel == "commentary":
            return "message", None, None, "commentary"
        return "message", None, None, None

    def _flush_header(
        self, state: ResponseState, out: Out, *, complete: bool, stopped: bool
    ) -> ResponseState:
        """A header that never reached `<|message|>`: keep whatever it said.

        Ended by a stop token (`stopped`), the header is complete and anything after its
        markers is content (non-strict harmony, bug 44; an unterminated call, bug 58). Cut off
        by the end of generation, a real header is unfinished: its words may be half a
        recipient, so nothing is shown; stray text that never looked like a header is.
        """
        parse: HarmonyParse = state.parse
        if parse.header is None:
            return state
        header = self._parse(parse)
        if not header.is_header:
            if not self._text_of(parse.header).strip() or (parse.role_pending and not header.rest):
                return state  # only markers or a role word: nothing was said
            return close_open(self._header_was_text(state, out), out, complete=complete)
        if not stopped or (not header.rest and header.recipient is None):
            return state
        state = self._open(state, out, header)
        state = replace_state(state, open=append_text(out, state.open, header.rest))  # type: ignore[arg-type]
        return close_open(state, out, complete=complete)

    def _text_of(self, header: Rope) -> str:
        return b"".join(
            self.vocabulary.token_bytes[t]
            for t in rope_items(header)
            if t not in self.vocabulary.special_ids
        ).decode("utf-8", "replace")

    def _header_was_text(self, state: ResponseState, out: Out) -> ResponseState:
        """What looked like a header was text: show it as a message, control tokens dropped.

        After `<|start|>` the first word is the role (`assistant`), not text.
        """
        parse: HarmonyParse = state.parse
        text = self._text_of(parse.header)
        if parse.role_pending:
            role = self._parse(parse).role
            stripped = text.lstrip()
            if role and stripped.startswith(role):
                text = stripped[len(role) :]
        state = self._open(state, out, Header())
        item = append_text(out, state.open, text)  # type: ignore[arg-type]
        return replace_state(state, open=item, parse=CONTENT_PHASE)

    def flush(self, state: ResponseState, out: Out, complete: bool) -> ResponseState:
        parse: HarmonyParse = state.parse
        if parse.phase == "header":
            state = self._flush_header(state, out, complete=complete, stopped=False)
        return replace_state(state, parse=_EXPECT_START)
