"""Ending a stream that was cut off: the events that close whatever a prefix left open.

A server that stops mid-response (a crash, a kill, a lost machine) leaves a log that ends
without a terminal event; clients that retrieve or resume it would wait forever. From the
events alone, `close_interrupted` writes what the reducer would have written had it been told
`finish(state, "error")` at that point: the close events of every open item, marked
`incomplete` and keeping the text its deltas carried, then `response.failed`. What the reducer
held back and never sent is not in the events and cannot be kept: a half-read header, the bytes
of a half character, and a web search call's arguments (they only ever become its action).
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from . import _events as ev
from . import _model as m
from ._errors import ReducerUsageError
from ._items import ItemKind, OpenItem, Out, close_item
from ._snapshot import TEXT_DELTAS, snapshot
from ._vocab import Vocabulary

__all__ = ["close_interrupted"]

# Closing an item only reads the vocabulary for logprobs, which a log's deltas do not bring back.
_NO_VOCABULARY = Vocabulary(name="none", token_bytes=())


def _open_item(item: m.OutputItem, output_index: int, text: str) -> OpenItem:
    """The reducer's view of an item from its `output_item.added` event and its deltas."""
    kind: ItemKind
    name = server_label = container_id = call_id = phase = None
    if isinstance(item, m.ResponseOutputMessage):
        kind, phase = "message", item.phase
    elif isinstance(item, m.ResponseReasoningItem):
        kind = "reasoning"
    elif isinstance(item, m.ResponseFunctionToolCall):
        kind, name, call_id = "function_call", item.name, item.call_id
    elif isinstance(item, m.ResponseFunctionWebSearch):
        kind = "web_search_call"
    elif isinstance(item, m.ResponseCodeInterpreterToolCall):
        kind, container_id = "code_interpreter_call", item.container_id
    elif isinstance(item, m.McpCall):
        kind, name, server_label = "mcp_call", item.name, item.server_label
    else:
        raise ReducerUsageError(
            f"close_interrupted() cannot close an item of type {item.type!r} "
            "that the reducer never opens"
        )
    return OpenItem(
        kind=kind,
        output_index=output_index,
        item_id=item.id or "",
        call_id=call_id,
        name=name,
        server_label=server_label,
        container_id=container_id,
        phase=phase,
        text=(None, text) if text else None,
    )


def close_interrupted(events: Iterable[ev.Event], error: str) -> list[ev.Event]:
    """The events that end a stream cut off after `events`: open items closed as
    `incomplete` with the text they carried, then `response.failed` with `error` as its
    message. Sequence numbers continue the stream's.

    Raises `ReducerUsageError` for a stream that did not start with `response.created` or
    that already ended.
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
    for event in events:
        if isinstance(event, ev.ResponseOutputItemAddedEvent):
            added[event.output_index] = event.item
        elif isinstance(event, ev.ResponseOutputItemDoneEvent):
            added.pop(event.output_index, None)
        elif isinstance(event, TEXT_DELTAS):
            texts.setdefault(event.output_index, []).append(event.delta)
    out = Out(events[-1].sequence_number + 1)
    closed = {
        index: close_item(
            out,
            _open_item(item, index, "".join(texts.get(index, ()))),
            _NO_VOCABULARY,
            complete=False,
        )
        for index, item in sorted(added.items())
    }
    so_far = snapshot(events)
    output = tuple(closed.get(index, item) for index, item in enumerate(so_far.output))
    out.emit(
        ev.ResponseFailedEvent,
        response=attrs.evolve(
            so_far,
            status="failed",
            output=output,
            error=m.ResponseError(code="server_error", message=error),
        ),
    )
    return out.events
