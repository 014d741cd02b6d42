"""The event-sourced view: a Response rebuilt from events alone.

Folding any prefix of a stream gives the Response as a client would see it at that point:
finished items as their `output_item.done` says, items still streaming with the text their
deltas have carried so far. Folding a whole stream gives exactly the terminal event's response,
which is how a server can serve `GET /v1/responses/{id}` from its event log.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import attrs

from . import _events as ev
from . import _model as m
from ._errors import ReducerUsageError
from ._kinds import KINDS, kind_of_item

__all__ = ["TEXT_DELTAS", "TextDelta", "snapshot"]

_LIFECYCLE = (
    ev.ResponseCreatedEvent,
    ev.ResponseQueuedEvent,
    ev.ResponseInProgressEvent,
    ev.ResponseCompletedEvent,
    ev.ResponseIncompleteEvent,
    ev.ResponseFailedEvent,
)


class TextDelta(Protocol):
    """What every delta event has (the kinds table names their classes)."""

    @property
    def output_index(self) -> int: ...

    @property
    def delta(self) -> str: ...


TEXT_DELTAS: tuple[type[TextDelta], ...] = tuple(
    row.delta for row in KINDS.values() if row.delta is not None
)


def _with_text(item: m.OutputItem, text: str) -> m.OutputItem:
    """An in-progress item showing the text its deltas carried so far."""
    row = kind_of_item(item)
    if row is None or row.delta is None:
        return item
    text_field: dict[str, Any] = (
        {"content": (row.part(text=text),)} if row.part is not None else {row.done_field: text}
    )
    return attrs.evolve(item, **text_field)


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
