"""Output items while they stream: opening, growing and closing one item, as events.

Both grammars (harmony, think-tags) decide *when* an item opens and closes; this module decides
*what events* that means for each kind of item, in one table-like place:

| kind                   | on open                                  | per delta                       | on close                                                  |
|------------------------|------------------------------------------|---------------------------------|-----------------------------------------------------------|
| message                | item.added, content_part.added           | output_text.delta               | output_text.done, content_part.done, item.done            |
| reasoning              | item.added, content_part.added           | reasoning_text.delta            | reasoning_text.done, content_part.done, item.done         |
| function_call          | item.added                               | function_call_arguments.delta   | function_call_arguments.done, item.done                   |
| web_search_call        | item.added, web_search_call.in_progress  | (none: arguments are collected) | .searching, .completed, item.done                         |
| code_interpreter_call  | item.added, code_interpreter_call.in_progress | code_interpreter_call_code.delta | _code.done, .interpreting, .completed, item.done     |
| mcp_call               | item.added, mcp_call.in_progress         | mcp_call_arguments.delta        | mcp_call_arguments.done, mcp_call.completed, item.done    |

Ids and indices are fixed when the item opens and copied onto every later event: nothing is
patched afterwards. A cut item (truncation, abort, error) still gets all its close events, with
status `incomplete` (tool progress events that would claim success are left out).
"""

from __future__ import annotations

import codecs
import json
from typing import Any, Literal, NamedTuple

from . import _events as ev
from . import _model as m
from ._fast import builder, replacer, updater
from ._text import Rope, flush_utf8, rope_items, rope_text
from ._vocab import Vocabulary

__all__ = [
    "DELTAS",
    "ItemKind",
    "OpenItem",
    "Out",
    "append_bytes",
    "append_text",
    "append_text_with_logprobs",
    "close_item",
    "emit_opened",
    "grow",
    "open_item",
]

ItemStatus = Literal["in_progress", "completed", "incomplete"]
ItemKind = Literal[
    "message",
    "reasoning",
    "function_call",
    "web_search_call",
    "code_interpreter_call",
    "mcp_call",
]
_ID_PREFIX = {
    "message": "msg",
    "reasoning": "rs",
    "function_call": "fc",
    "web_search_call": "ws",
    "code_interpreter_call": "ci",
    "mcp_call": "mcp",
}


class Out:
    """Collects the events of one reducer call, numbering them as they are made.

    Local to a single `step`/`finish` call and never stored in a state, so the reducer stays
    pure: the next sequence number goes back into the new state.
    """

    __slots__ = ("events", "seq")

    def __init__(self, seq: int) -> None:
        self.seq = seq
        self.events: list[ev.Event] = []

    def emit(self, cls: Any, **fields: Any) -> None:
        self.events.append(cls(sequence_number=self.seq, **fields))
        self.seq += 1


class OpenItem(NamedTuple):
    """An item between its `added` and `done` events (a NamedTuple: one is made per token).

    `text` is a rope of the decoded text so far (message or reasoning text, arguments, code);
    `pending` holds bytes of a character not yet complete; `tokens` is a rope of
    `(token_id, logprob, top_logprobs)` for message text when logprobs were given, and
    `unsent` counts those whose text has not gone out in a delta yet.
    """

    kind: ItemKind
    output_index: int
    item_id: str
    call_id: str | None = None
    name: str | None = None
    server_label: str | None = None
    container_id: str | None = None
    phase: Literal["commentary", "final_answer"] | None = None
    text: Rope = None
    pending: bytes = b""
    tokens: Rope = None
    unsent: int = 0


replace_item = replacer(OpenItem)
_decode = codecs.utf_8_decode


def item_ids(response_id: str, kind: ItemKind, output_index: int) -> tuple[str, str]:
    """The item id and call id of an item: derived, never random, so replays are identical."""
    base = response_id.removeprefix("resp_")
    return f"{_ID_PREFIX[kind]}_{base}_{output_index}", f"call_{base}_{output_index}"


def open_item(
    out: Out,
    *,
    kind: ItemKind,
    output_index: int,
    response_id: str,
    name: str | None = None,
    server_label: str | None = None,
    phase: Literal["commentary", "final_answer"] | None = None,
) -> OpenItem:
    item_id, call_id = item_ids(response_id, kind, output_index)
    item = OpenItem(
        kind=kind,
        output_index=output_index,
        item_id=item_id,
        call_id=call_id if kind == "function_call" else None,
        name=name,
        server_label=server_label,
        phase=phase,
        container_id="cntr_" + response_id.removeprefix("resp_")
        if kind == "code_interpreter_call"
        else None,
    )
    out.emit(
        ev.ResponseOutputItemAddedEvent,
        output_index=output_index,
        item=_snapshot(item, "", "in_progress", ()),
    )
    emit_opened(out, item)
    return item


def emit_opened(out: Out, item: OpenItem) -> None:
    """The events that follow an item's `output_item.added` in the same call: its content part,
    or its `in_progress` progress event."""
    kind = item.kind
    where = {"item_id": item.item_id, "output_index": item.output_index}
    if kind == "message":
        out.emit(
            ev.ResponseContentPartAddedEvent,
            content_index=0,
            part=m.ResponseOutputText(text=""),
            **where,
        )
    elif kind == "reasoning":
        out.emit(
            ev.ResponseContentPartAddedEvent,
            content_index=0,
            part=m.ReasoningText(text=""),
            **where,
        )
    elif kind == "web_search_call":
        out.emit(ev.ResponseWebSearchCallInProgressEvent, **where)
    elif kind == "code_interpreter_call":
        out.emit(ev.ResponseCodeInterpreterCallInProgressEvent, **where)
    elif kind == "mcp_call":
        out.emit(ev.ResponseMcpCallInProgressEvent, **where)


def _text_logprob(vocab: Vocabulary, entry: tuple[int, float, Any]) -> m.TextLogprob:
    token, logprob, top = entry
    return m.TextLogprob(
        token=vocab.bytes_of(token).decode("utf-8", "replace"),
        logprob=logprob,
        top_logprobs=None
        if top is None
        else tuple(
            m.TextTopLogprob(token=vocab.bytes_of(t).decode("utf-8", "replace"), logprob=lp)
            for t, lp in top
        ),
    )


# Per kind: the delta event for one piece of text, `(seq, item_id, output_index, delta)`,
# built without `__init__`'s keyword handling because it runs for nearly every token (see
# `_fast.builder`). web_search_call has no delta event: its arguments become the action on close.
_WHERE = ("sequence_number", "item_id", "output_index", "delta")
DELTAS: dict[str, Any] = {
    "message": builder(ev.ResponseTextDeltaEvent, *_WHERE, content_index=0),
    "reasoning": builder(ev.ResponseReasoningTextDeltaEvent, *_WHERE, content_index=0),
    "function_call": builder(ev.ResponseFunctionCallArgumentsDeltaEvent, *_WHERE),
    "code_interpreter_call": builder(ev.ResponseCodeInterpreterCallCodeDeltaEvent, *_WHERE),
    "mcp_call": builder(ev.ResponseMcpCallArgumentsDeltaEvent, *_WHERE),
    "web_search_call": None,
}
_text_delta_with_logprobs = builder(ev.ResponseTextDeltaEvent, *_WHERE, "logprobs", content_index=0)
_item_grown = updater(OpenItem, "text", "pending")


def _delta(out: Out, item: OpenItem, text: str, logprobs: tuple[m.TextLogprob, ...]) -> None:
    if logprobs:
        event = _text_delta_with_logprobs(out.seq, item.item_id, item.output_index, text, logprobs)
    else:
        make = DELTAS[item.kind]
        if make is None:
            return
        event = make(out.seq, item.item_id, item.output_index, text)
    out.events.append(event)
    out.seq += 1


def grow(out: Out, item: OpenItem, data: bytes) -> OpenItem:
    """Feed one token's bytes, without logprobs, to an open item: the reducer's hot path.

    Emits a delta once whole characters exist; one new item and at most one event per token.
    """
    pending = item.pending
    if pending:
        data = pending + data
    text, used = _decode(data, "replace", False)
    pending = data[used:] if used < len(data) else b""
    if not text:
        return _item_grown(item, item.text, pending)
    make = DELTAS[item.kind]
    if make is not None:
        out.events.append(make(out.seq, item.item_id, item.output_index, text))
        out.seq += 1
    return _item_grown(item, (item.text, text), pending)


def _unsent_logprobs(vocab: Vocabulary, item: OpenItem) -> tuple[m.TextLogprob, ...]:
    entries = []
    rope = item.tokens
    for _ in range(item.unsent):
        rope, entry = rope  # type: ignore[misc]
        entries.append(_text_logprob(vocab, entry))
    entries.reverse()
    return tuple(entries)


def append_bytes(
    out: Out,
    item: OpenItem,
    data: bytes,
    vocab: Vocabulary,
    token: int | None = None,
    logprob: float | None = None,
    top_logprobs: Any = None,
) -> OpenItem:
    """Feed one token's bytes to an open item; emits a delta once whole characters exist."""
    if logprob is None or token is None or item.kind != "message":
        return grow(out, item, data)
    pending = item.pending
    if pending:
        data = pending + data
    text, used = _decode(data, "replace", False)
    pending = data[used:] if used < len(data) else b""
    tokens, unsent = (item.tokens, (token, logprob, top_logprobs)), item.unsent + 1
    if not text:
        return replace_item(item, pending=pending, tokens=tokens, unsent=unsent)
    item = replace_item(item, tokens=tokens, unsent=unsent)
    _delta(out, item, text, _unsent_logprobs(vocab, item))
    return replace_item(item, text=(item.text, text), pending=pending, unsent=0)


def append_text(out: Out, item: OpenItem, text: str) -> OpenItem:
    """Feed already-decoded text (e.g. a header that turned out to be content)."""
    if not text:
        return item
    _delta(out, item, text, ())
    return replace_item(item, text=(item.text, text))


def append_text_with_logprobs(
    out: Out, item: OpenItem, text: str, entries: list[Any], vocab: Vocabulary
) -> OpenItem:
    """Feed decoded message text with the `(token, logprob, top_logprobs)` of the tokens it
    came from (the think-tag grammar decodes text before it knows where it goes). The delta
    carries them, and the item keeps them for its done events, as `append_bytes` does."""
    tokens = item.tokens
    for entry in entries:
        tokens = (tokens, entry)
    item = replace_item(item, tokens=tokens, unsent=0)
    if not text:
        return item
    _delta(out, item, text, tuple(_text_logprob(vocab, entry) for entry in entries))
    return replace_item(item, text=(item.text, text))


def _web_search_action(arguments: str, name: str | None) -> m.WebSearchAction:
    try:
        args = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        args = None
    if not isinstance(args, dict):
        return m.ActionSearch(query=arguments or None)

    def text(key: str) -> str | None:
        value = args.get(key)
        return value if isinstance(value, str) else None

    if name == "open":
        return m.ActionOpenPage(url=text("url") or text("id"))
    if name == "find" and text("pattern") is not None:
        return m.ActionFind(pattern=text("pattern") or "", url=text("url") or "")
    return m.ActionSearch(query=text("query"))


def _part_logprobs(vocab: Vocabulary, tokens: Rope) -> tuple[m.Logprob, ...]:
    def entry(token: int, logprob: float, top: Any) -> m.Logprob:
        raw = vocab.bytes_of(token)
        return m.Logprob(
            token=raw.decode("utf-8", "replace"),
            bytes=tuple(raw),
            logprob=logprob,
            top_logprobs=tuple(
                m.LogprobTopLogprob(
                    token=vocab.bytes_of(t).decode("utf-8", "replace"),
                    bytes=tuple(vocab.bytes_of(t)),
                    logprob=lp,
                )
                for t, lp in (top or ())
            ),
        )

    return tuple(entry(*e) for e in rope_items(tokens))


def _snapshot(
    item: OpenItem, text: str, status: ItemStatus, logprobs: tuple[m.Logprob, ...]
) -> m.OutputItem:
    """The item as the wire shows it, with `text` as its content so far."""
    kind = item.kind
    if kind == "message":
        message_content: tuple[m.ResponseOutputText, ...] = (
            () if status == "in_progress" else (m.ResponseOutputText(text=text, logprobs=logprobs),)
        )
        return m.ResponseOutputMessage(
            id=item.item_id, status=status, content=message_content, phase=item.phase
        )
    if kind == "reasoning":
        reasoning: tuple[m.ReasoningText, ...] = (
            () if status == "in_progress" else (m.ReasoningText(text=text),)
        )
        return m.ResponseReasoningItem(id=item.item_id, content=reasoning, status=status)
    if kind == "function_call":
        return m.ResponseFunctionToolCall(
            id=item.item_id,
            call_id=item.call_id or "",
            name=item.name or "",
            arguments=text,
            status=status,
        )
    if kind == "web_search_call":
        action = (
            m.ActionSearch() if status == "in_progress" else _web_search_action(text, item.name)
        )
        return m.ResponseFunctionWebSearch(id=item.item_id, action=action, status=status)
    if kind == "code_interpreter_call":
        return m.ResponseCodeInterpreterToolCall(
            id=item.item_id, code=text, container_id=item.container_id or "", status=status
        )
    return m.McpCall(
        id=item.item_id,
        name=item.name or "",
        server_label=item.server_label or "",
        arguments=text,
        status=status,
    )


def close_item(out: Out, item: OpenItem, vocab: Vocabulary, *, complete: bool) -> m.OutputItem:
    """Emit every close event of `item`; returns the finished item for `response.output`."""
    tail = flush_utf8(item.pending)
    if tail:
        item = append_text(out, item, tail)
    text = rope_text(item.text)
    status: ItemStatus = "completed" if complete else "incomplete"
    where = {"item_id": item.item_id, "output_index": item.output_index}
    kind = item.kind
    part_logprobs = _part_logprobs(vocab, item.tokens) if item.tokens is not None else ()
    if kind == "message":
        text_logprobs = tuple(_text_logprob(vocab, e) for e in rope_items(item.tokens))
        out.emit(
            ev.ResponseTextDoneEvent, content_index=0, text=text, logprobs=text_logprobs, **where
        )
        out.emit(
            ev.ResponseContentPartDoneEvent,
            content_index=0,
            part=m.ResponseOutputText(text=text, logprobs=part_logprobs),
            **where,
        )
    elif kind == "reasoning":
        out.emit(ev.ResponseReasoningTextDoneEvent, content_index=0, text=text, **where)
        out.emit(
            ev.ResponseContentPartDoneEvent,
            content_index=0,
            part=m.ReasoningText(text=text),
            **where,
        )
    elif kind == "function_call":
        out.emit(ev.ResponseFunctionCallArgumentsDoneEvent, arguments=text, **where)
    elif kind == "web_search_call":
        if complete:
            out.emit(ev.ResponseWebSearchCallSearchingEvent, **where)
            out.emit(ev.ResponseWebSearchCallCompletedEvent, **where)
    elif kind == "code_interpreter_call":
        out.emit(ev.ResponseCodeInterpreterCallCodeDoneEvent, code=text, **where)
        if complete:
            out.emit(ev.ResponseCodeInterpreterCallInterpretingEvent, **where)
            out.emit(ev.ResponseCodeInterpreterCallCompletedEvent, **where)
    else:
        out.emit(ev.ResponseMcpCallArgumentsDoneEvent, arguments=text, **where)
        out.emit(
            ev.ResponseMcpCallCompletedEvent if complete else ev.ResponseMcpCallFailedEvent, **where
        )
    done = _snapshot(item, text, status, part_logprobs)
    out.emit(ev.ResponseOutputItemDoneEvent, output_index=item.output_index, item=done)
    return done
