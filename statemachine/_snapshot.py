"""The event-sourced view: a Response rebuilt from events alone.

Folding any prefix of a stream gives the Response as a client would see it at that point:
finished items as their `output_item.done` says, items still streaming with the text their
deltas have carried so far. Folding a whole stream gives exactly the terminal event's response,
which is how a server can serve `GET /v1/responses/{id}` from its event log.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from . import _events as ev
from . import _model as m
from ._errors import ReducerUsageError

__all__ = ["TEXT_DELTAS", "snapshot"]

_LIFECYCLE = (
    ev.ResponseCreatedEvent,
    ev.ResponseQueuedEvent,
    ev.ResponseInProgressEvent,
    ev.ResponseCompletedEvent,
    ev.ResponseIncompleteEvent,
    ev.ResponseFailedEvent,
)
TEXT_DELTAS = (
    ev.ResponseTextDeltaEvent,
    ev.ResponseReasoningTextDeltaEvent,
    ev.ResponseFunctionCallArgumentsDeltaEvent,
    ev.ResponseCodeInterpreterCallCodeDeltaEvent,
    ev.ResponseMcpCallArgumentsDeltaEvent,
)


def _with_text(item: m.OutputItem, text: str) -> m.OutputItem:
    """An in-progress item showing the text its deltas carried so far."""
    if isinstance(item, m.ResponseOutputMessage):
        return attrs.evolve(item, content=(m.ResponseOutputText(text=text),))
    if isinstance(item, m.ResponseReasoningItem):
        return attrs.evolve(item, content=(m.ReasoningText(text=text),))
    if isinstance(item, m.ResponseFunctionToolCall | m.McpCall):
        return attrs.evolve(item, arguments=text)
    if isinstance(item, m.ResponseCodeInterpreterToolCall):
        return attrs.evolve(item, code=text)
    return item


def snapshot(events: Iterable[ev.Event]) -> m.Response:
    """The Response as of the last event given (see module docstring)."""
    response: m.Response | None = None
    items: dict[int, m.OutputItem] = {}
    done: set[int] = set()
    texts: dict[int, list[str]] = {}
    for event in events:
        if isinstance(event, _LIFECYCLE):
            response = event.response
        elif isinstance(event, ev.ResponseOutputItemAddedEvent):
            items[event.output_index] = event.item
            texts[event.output_index] = []
        elif isinstance(event, ev.ResponseOutputItemDoneEvent):
            items[event.output_index] = event.item
            done.add(event.output_index)
        elif isinstance(event, TEXT_DELTAS):
            texts.setdefault(event.output_index, []).append(event.delta)
    if response is None:
        raise ReducerUsageError("snapshot() needs a stream that starts with response.created")
    if response.status not in ("in_progress", "queued"):
        return response  # a terminal event carries the whole response
    output = tuple(
        item if index in done else _with_text(item, "".join(texts.get(index, ())))
        for index, item in sorted(items.items())
    )
    return attrs.evolve(response, output=output)
