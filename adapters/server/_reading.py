"""Reading responses: a log followed from a cursor (stored pages, then live events), and the
errors a read answers with. The service's reading side; it holds no state of its own."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, Sequence
from typing import Any, Literal

from ..protocol import RequestError
from ._conversation import conversation_of
from ._input_items import input_item_page, listed_items
from ._limits import shown
from ._run import Run
from ._store import EventRecord, EventStore, InputStore, Records, StoreError

__all__ = [
    "PAGE_EVENTS",
    "STORE_FAILED",
    "failed_records",
    "follow",
    "input_items",
    "not_found",
    "response_of",
    "unreadable",
]

log = logging.getLogger("streamfold.server")

#: Events per page when a stored log is streamed (a page is read, sent, then the next).
PAGE_EVENTS = 256
STORE_FAILED = "the response store failed, so the response was not stored"


async def follow(
    store: EventStore,
    response_id: str,
    after: int,
    run: Run | None,
    *,
    unstored: str | None,
    unended: Sequence[EventRecord] | None = None,
) -> AsyncGenerator[Records, None]:
    """The log of `response_id` after `after`, then `run`'s live events until the terminal
    one, in batches (see `ResponseService.follow`). `unstored`: the final Response (JSON) of a
    response its store refused; `unended`: the close records of a stored log the store could
    not end (they follow it)."""
    position = after + 1
    if run is None and unstored is not None:
        yield failed_records(unstored, after)
        return
    try:
        while True:
            if run is None or position < run.base:  # in the store only
                page = await store.read(response_id, position - 1, limit=PAGE_EVENTS)
                if run is not None:
                    page = [r for r in page if r.sequence_number < run.base]
                if not page:
                    rest = [r for r in unended or () if r.sequence_number >= position]
                    if rest:
                        yield Records(rest)
                    return
                position = page[-1].sequence_number + 1
                yield Records(page, fresh=False)
                if page[-1].terminal:
                    return
            elif position < run.end:
                records, position = run.since(position), run.end
                yield Records(records)
            elif run.finished:
                return
            else:
                await run.changed()
    except StoreError as exc:  # a damaged log: say so in-band (the status was sent)
        log.error("response %s: %s", response_id, exc)
        yield error_records(position, f"the stored log of response {response_id} is damaged")


async def input_items(
    store: EventStore,
    response_id: str,
    *,
    running: bool,
    after: str | None,
    limit: int,
    order: Literal["asc", "desc"],
) -> dict[str, Any]:
    """A page of the input items `response_id` answered (see `_input_items.py`)."""
    items = None
    if isinstance(store, InputStore):
        items = await conversation_of(store, response_id)
    if items is None:
        if not running and await store.snapshot(response_id) is None:
            raise not_found(response_id)
        raise RequestError(
            f"the input of response {response_id} was not kept (it was made before this "
            "server kept inputs, or by a store that keeps none)",
            param="response_id",
            status=404,
            code="not_found",
        )
    listed = listed_items(response_id, items)
    return input_item_page(listed, after=after, limit=limit, order=order)


def error_records(sequence_number: int, message: str) -> Records:
    """An `error` event: the API's way to end a stream that cannot go on."""
    data = {
        "type": "error",
        "code": "server_error",
        "message": message,
        "param": None,
        "sequence_number": sequence_number,
    }
    return Records([EventRecord(sequence_number, "error", json.dumps(data))])


def failed_records(response_json: str, after: int) -> Records:
    """A response the store refused, streamed as the failed response it is (issue 29: a lone
    `error` event broke the stream's contract, checker rule R4): `response.created`,
    `response.in_progress`, then `response.failed` with its final Response, each after the
    cursor `after`."""
    final = json.loads(response_json)
    created = {
        **final,
        "status": "in_progress",
        "output": [],
        "error": None,
        "incomplete_details": None,
        "usage": None,
    }
    events = [
        ("response.created", created),
        ("response.in_progress", created),
        ("response.failed", final),
    ]
    return Records(
        [
            EventRecord(n, kind, json.dumps({"type": kind, "sequence_number": n, "response": r}))
            for n, (kind, r) in enumerate(events)
            if n > after
        ],
        fresh=False,
    )


def response_of(event: str | None) -> dict[str, Any]:
    assert event is not None  # every run logs response.created before anything else
    return json.loads(event)["response"]  # type: ignore[no-any-return]


def unreadable(response_id: str, exc: Exception) -> RequestError:
    log.error("response %s: %s", response_id, exc)
    return RequestError(
        f"response {shown(response_id)} cannot be read: its stored log is damaged",
        param="response_id",
        status=500,
        type="server_error",
    )


def not_found(response_id: str) -> RequestError:
    return RequestError(
        f"Response with id '{shown(response_id)}' not found.", param="response_id", status=404
    )
