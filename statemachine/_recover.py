"""Ending a stream that was cut off: the events that close whatever a prefix left open.

A server that stops mid-response (a crash, a kill, a lost machine) leaves a log that ends
without a terminal event; clients that retrieve or resume it would wait forever. From the
events alone, `close_interrupted` writes what the reducer would have written had it been told
`finish(state, "error")` at that point: the close events of every open item, marked
`incomplete` and keeping the text its deltas carried, then `response.failed`.

The cut may fall anywhere, also between two events of one reducer call: after
`response.created` (then `response.in_progress` is still owed), between an item's
`output_item.added` and its content part or progress event, or halfway through an item's close
events. Whatever the prefix already holds of an item's open and close events is not sent again;
the rest is, in the reducer's order. An item whose close had begun as a success (a tool call
already `completed`) finishes that close as it began. What the reducer
held back and never sent is not in the events and cannot be kept: a half-read header, the bytes
of a half character, and a web search call's arguments (they only ever become its action).
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from . import _events as ev
from . import _model as m
from ._errors import ReducerUsageError
from ._items import OpenItem, Out, close_item, emit_opened, end_call, settle, summarises
from ._kinds import KINDS, kind_of_item
from ._snapshot import TEXT_DELTAS, snapshot
from ._text import rope_text
from ._vocab import Vocabulary

__all__ = ["close_interrupted"]

# Closing an item only reads the vocabulary for logprobs, which a log's deltas do not bring back.
_NO_VOCABULARY = Vocabulary(name="none", token_bytes=())


def _open_item(item: m.OutputItem, output_index: int, text: str) -> OpenItem:
    """The reducer's view of an item from its `output_item.added` event and its deltas."""
    row = kind_of_item(item)
    if row is None:
        raise ReducerUsageError(
            f"close_interrupted() cannot close an item of type {item.type!r} "
            "that the reducer never opens"
        )
    # The identity fields an item class has (a message's phase, a call's name, ...).
    return OpenItem(
        kind=row.name,  # type: ignore[arg-type]
        output_index=output_index,
        item_id=item.id or "",
        call_id=getattr(item, "call_id", None),
        name=getattr(item, "name", None),
        server_label=getattr(item, "server_label", None),
        container_id=getattr(item, "container_id", None),
        phase=getattr(item, "phase", None),
        text=(None, text) if text else None,
        approval_request_id=getattr(item, "approval_request_id", None),
        namespace=getattr(item, "namespace", None),
    )


# A `completed` progress event means the cut fell inside a successful close, which is then
# finished the same way. A `running` one without it (`searching`, `interpreting`) means a
# server-side call was pending (its tool running) when the stream was cut: it ends as the
# reducer ends a pending call at `finish`, `incomplete`.
_COMPLETED = tuple(e for row in KINDS.values() for e in row.completed)
_RUNNING = tuple(e for row in KINDS.values() for e in row.running)


def _owed(item: OpenItem, sent: list[ev.Event], summary: bool) -> list[ev.Event]:
    """The events of `item` after its `added` that the reducer would still send, given the
    non-delta ones the prefix already holds (`sent`, in order)."""
    scratch = Out(0)
    emit_opened(scratch, item)
    if any(isinstance(e, _COMPLETED) for e in sent):
        close_item(scratch, item, _NO_VOCABULARY, complete=True, summary=summary)
    elif any(isinstance(e, _RUNNING) for e in sent):
        pending = end_call(scratch, item, _NO_VOCABULARY)
        settle(scratch, pending, rope_text(pending.text), "incomplete")
    else:
        close_item(scratch, item, _NO_VOCABULARY, complete=False, summary=summary)
    expected = scratch.events
    if [type(e) for e in sent] != [type(e) for e in expected[: len(sent)]]:
        raise ReducerUsageError(
            f"close_interrupted(): the events of item {item.item_id!r} at output_index "
            f"{item.output_index} are not the reducer's ({[e.type for e in sent]}); it only "
            "closes streams the reducer wrote"
        )
    return expected[len(sent) :]


def close_interrupted(events: Iterable[ev.Event], error: str) -> list[ev.Event]:
    """The events that end a stream cut off after `events`, at any event: what the reducer
    still owed (`response.in_progress`, an item's content part), open items closed as
    `incomplete` with the text they carried, then `response.failed` with `error` as its
    message. Sequence numbers continue the stream's.

    Raises `ReducerUsageError` for a stream that did not start with `response.created`, that
    already ended, or whose item events are not the reducer's.
    """
    events = list(events)
    if not events or not isinstance(events[0], ev.ResponseCreatedEvent):
        raise ReducerUsageError(
            "close_interrupted() needs the stream from its response.created event on"
        )
    if any(e.type in ev.TERMINAL_EVENT_TYPES for e in events):
        raise ReducerUsageError("close_interrupted(): the stream already has its terminal event")
    added: dict[int, m.OutputItem] = {}
    texts: dict[int, list[str]] = {}
    sent: dict[int, list[ev.Event]] = {}
    for event in events:
        if isinstance(event, ev.ResponseOutputItemAddedEvent):
            added[event.output_index] = event.item
            sent[event.output_index] = []
        elif isinstance(event, ev.ResponseOutputItemDoneEvent):
            added.pop(event.output_index, None)
        elif isinstance(event, TEXT_DELTAS):
            texts.setdefault(event.output_index, []).append(event.delta)
        elif getattr(event, "output_index", None) in sent:
            sent[event.output_index].append(event)  # type: ignore[union-attr]
    owed: list[ev.Event] = []
    if not any(isinstance(e, ev.ResponseInProgressEvent) for e in events):
        owed.append(ev.ResponseInProgressEvent(sequence_number=0, response=events[0].response))
    closed: dict[int, m.OutputItem] = {}
    for index, item in sorted(added.items()):
        opened = _open_item(item, index, "".join(texts.get(index, ())))
        tail = _owed(opened, sent[index], summarises(events[0].response))
        owed += tail
        closed[index] = tail[-1].item  # type: ignore[union-attr]
    so_far = snapshot(events)
    output = tuple(closed.get(index, item) for index, item in enumerate(so_far.output))
    failed = ev.ResponseFailedEvent(
        sequence_number=0,
        response=attrs.evolve(
            so_far,
            status="failed",
            output=output,
            error=m.ResponseError(code="server_error", message=error),
        ),
    )
    first = events[-1].sequence_number + 1
    return [attrs.evolve(e, sequence_number=first + n) for n, e in enumerate([*owed, failed])]
