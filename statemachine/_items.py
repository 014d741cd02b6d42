"""Output items while they stream: opening, growing and closing one item, as events.

The grammars (harmony, think-tags) decide *when* an item opens and closes; this module decides
*what events* that means, by reading the item's row in the table of kinds (`_kinds.py`): open
emits `output_item.added`, the row's part and `opened` progress events; each piece of text its
`delta`; close its `done` (and the part's), then `running` + `completed`, or `failed` when the
item was cut, then `output_item.done`.

Ids and indices are fixed when the item opens and copied onto every later event: nothing is
patched afterwards. A cut item (truncation, abort, error) still gets all its close events, with
status `incomplete` (tool progress events that would claim success are left out).
"""

from __future__ import annotations

import codecs
from typing import Any, Literal, NamedTuple

import attrs

from . import _events as ev
from . import _model as m
from ._fast import builder, replacer, updater
from ._kinds import KINDS, ItemKind, ItemStatus, Kind, Outcome
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
    "end_call",
    "grow",
    "open_item",
    "settle",
    "summarises",
]


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
    approval_request_id: str | None = None
    namespace: str | None = None  # a function or custom call's namespace tool


replace_item = replacer(OpenItem)
_decode = codecs.utf_8_decode


def item_ids(response_id: str, kind: ItemKind, output_index: int) -> tuple[str, str]:
    """The item id and call id of an item: derived, never random, so replays are identical."""
    base = response_id.removeprefix("resp_")
    return f"{KINDS[kind].prefix}_{base}_{output_index}", f"call_{base}_{output_index}"


def open_item(
    out: Out,
    *,
    kind: ItemKind,
    output_index: int,
    response_id: str,
    name: str | None = None,
    server_label: str | None = None,
    phase: Literal["commentary", "final_answer"] | None = None,
    approval_request_id: str | None = None,
    namespace: str | None = None,
) -> OpenItem:
    row = KINDS[kind]
    item_id, call_id = item_ids(response_id, kind, output_index)
    item = OpenItem(
        kind=kind,
        output_index=output_index,
        item_id=item_id,
        call_id=call_id if row.call_id else None,
        name=name,
        server_label=server_label,
        phase=phase,
        container_id="cntr_" + response_id.removeprefix("resp_") if row.container else None,
        approval_request_id=approval_request_id,
        namespace=namespace,
    )
    out.emit(
        ev.ResponseOutputItemAddedEvent,
        output_index=output_index,
        item=row.build(item, "", "in_progress", (), None),
    )
    emit_opened(out, item)
    return item


def emit_opened(out: Out, item: OpenItem) -> None:
    """The events that follow an item's `output_item.added` in the same call: its content part
    and its row's `opened` progress events."""
    row = KINDS[item.kind]
    where = {"item_id": item.item_id, "output_index": item.output_index}
    if row.part is not None:
        out.emit(ev.ResponseContentPartAddedEvent, content_index=0, part=row.part(text=""), **where)
    for progress in row.opened:
        out.emit(progress, **where)


def _text_logprob(vocab: Vocabulary, entry: tuple[int, float, Any]) -> m.TextLogprob:
    token, logprob, top = entry
    return m.TextLogprob(
        token=vocab.bytes_of(token).decode("utf-8", "replace"),
        logprob=logprob,
        top_logprobs=tuple(
            m.TextTopLogprob(token=vocab.bytes_of(t).decode("utf-8", "replace"), logprob=lp)
            for t, lp in (top or ())
        ),
    )


# Per kind: the delta event for one piece of text, `(seq, item_id, output_index, delta)`,
# built without `__init__`'s keyword handling because it runs for nearly every token (see
# `_fast.builder`); None for a kind whose text is collected silently. `_accel` hands these to
# the compiled hot path too.
_WHERE = ("sequence_number", "item_id", "output_index", "delta")


def _delta_builder(row: Kind) -> Any:
    if row.delta is None:
        return None
    constants = {"content_index": 0} if row.part is not None else {}
    return builder(row.delta, *_WHERE, **constants)


DELTAS: dict[str, Any] = {name: _delta_builder(row) for name, row in KINDS.items()}
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
    if logprob is None or token is None or not KINDS[item.kind].logprobs:
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


def _end_text(
    out: Out, item: OpenItem, vocab: Vocabulary
) -> tuple[OpenItem, str, tuple[m.Logprob, ...]]:
    """Close the item's text: its `done` event and its part's; returns the item, its whole
    text and (message text only) the content part's logprobs."""
    tail = flush_utf8(item.pending)
    if tail:
        item = append_text(out, item, tail)
    text = rope_text(item.text)
    row = KINDS[item.kind]
    where = {"item_id": item.item_id, "output_index": item.output_index}
    part_logprobs = _part_logprobs(vocab, item.tokens) if item.tokens is not None else ()
    if row.done is not None:
        fields: dict[str, Any] = {row.done_field: text}
        if row.part is not None:
            fields["content_index"] = 0
        if row.logprobs:
            fields["logprobs"] = tuple(_text_logprob(vocab, e) for e in rope_items(item.tokens))
        out.emit(row.done, **fields, **where)
    if row.part is not None:
        part = row.part(text=text, logprobs=part_logprobs) if row.logprobs else row.part(text=text)
        out.emit(ev.ResponseContentPartDoneEvent, content_index=0, part=part, **where)
    return item, text, part_logprobs


def settle(
    out: Out,
    item: OpenItem,
    text: str,
    status: ItemStatus,
    *,
    logprobs: tuple[m.Logprob, ...] = (),
    outcome: Outcome | None = None,
    summary: bool = False,
) -> m.OutputItem:
    """The end of an item whose text is closed: `completed` (after `running`, unless the call
    was pending and `running` went out already) or `failed` progress events, then
    `output_item.done` with `status` (a reasoning item with its text as its summary when
    `summary`, see `close_item`)."""
    row = KINDS[item.kind]
    where = {"item_id": item.item_id, "output_index": item.output_index}
    for progress in row.completed if status == "completed" else row.failed:
        out.emit(progress, **where)
    done = row.build(item, text, status, logprobs, outcome)
    if summary and isinstance(done, m.ResponseReasoningItem):
        done = attrs.evolve(done, summary=(m.SummaryText(text=text),))
    out.emit(ev.ResponseOutputItemDoneEvent, output_index=item.output_index, item=done)
    return done


def close_item(
    out: Out,
    item: OpenItem,
    vocab: Vocabulary,
    *,
    complete: bool,
    outcome: Outcome | None = None,
    summary: bool = False,
) -> m.OutputItem:
    """Emit every close event of `item`; returns the finished item for `response.output`.

    With `summary` (the request asked for `reasoning.summary`), a reasoning item also gets its
    text as summary part 0: gpt-oss has no summariser, and clients that show only summaries
    (the Vercel AI SDK, LangChain's streaming) would show no reasoning at all. It is sent on
    close, as one delta, rather than token by token: that keeps the per-token path (and its
    compiled copy) at one event per token, and the API's own summaries come after the
    reasoning too."""
    item, text, logprobs = _end_text(out, item, vocab)
    summary = summary and item.kind == "reasoning"
    if summary:
        at = {"item_id": item.item_id, "output_index": item.output_index, "summary_index": 0}
        out.emit(ev.ResponseReasoningSummaryPartAddedEvent, part=m.SummaryText(text=""), **at)
        out.emit(ev.ResponseReasoningSummaryTextDeltaEvent, delta=text, **at)
        out.emit(ev.ResponseReasoningSummaryTextDoneEvent, text=text, **at)
        out.emit(ev.ResponseReasoningSummaryPartDoneEvent, part=m.SummaryText(text=text), **at)
    if complete:
        run_call(out, item)
    status: ItemStatus = "completed" if complete else "incomplete"
    return settle(out, item, text, status, logprobs=logprobs, outcome=outcome, summary=summary)


def summarises(response: m.Response) -> bool:
    """Whether the request asked for reasoning summaries (`reasoning.summary`)."""
    return response.reasoning is not None and response.reasoning.summary is not None


def run_call(out: Out, item: OpenItem) -> None:
    """The `running` progress events: a call is written in full and its tool runs now."""
    where = {"item_id": item.item_id, "output_index": item.output_index}
    for progress in KINDS[item.kind].running:
        out.emit(progress, **where)


def end_call(out: Out, item: OpenItem, vocab: Vocabulary) -> OpenItem:
    """A call the server runs, written in full: its text closed and its `running` events sent.
    The returned item (holding the whole text) is pending until `settle` brings its outcome."""
    item, text, _ = _end_text(out, item, vocab)
    run_call(out, item)
    return replace_item(item, text=(None, text) if text else None, pending=b"")
