"""Start-up on a store a previous server left behind: end what it left running, and say which
responses a damaged file lost (then serve the rest: one bad page must not stop the server).
"""

from __future__ import annotations

import logging
from collections.abc import Set

from streamfold.statemachine import close_interrupted, loads

from ._store import EventRecord, EventStore, records_of

__all__ = ["INTERRUPTED", "damaged_responses", "end_interrupted"]

log = logging.getLogger("streamfold.server")

INTERRUPTED = (
    "the server stopped before the response finished (it was ended when the server restarted)"
)


async def end_interrupted(
    store: EventStore, running: Set[str]
) -> tuple[list[str], list[str], dict[str, list[EventRecord]]]:
    """End every stored response that is unfinished and not in `running`.

    A server that crashed or was killed mid-generation leaves logs without a terminal event,
    which clients retrieving or resuming them would wait on forever. Each gets the close events
    of its open items (`incomplete`, with the text they had streamed) and `response.failed`
    (`close_interrupted`), numbered after the last logged event, which (the log being written
    ahead) is the last event any client saw. A store belongs to one server (its lock), so an
    unfinished log here is one nobody will finish. Returns the ids ended, those that could
    not be read, and the close records of the logs that were read but could not be ended (the
    store refused the write: a disk still full). Those are not damaged: the server serves them
    ended, with these records after the log (issue 29: they answered 500 "damaged"), and the
    next start-up tries to store them again.
    """
    ended: list[str] = []
    unreadable: list[str] = []
    unwritten: dict[str, list[EventRecord]] = {}
    try:
        ids = await store.list()
    except Exception as exc:  # a damaged index: serve what can be read, recover nothing
        log.error("the response store cannot list its responses (%s); none were ended", exc)
        return ended, unreadable, unwritten
    for response_id in ids:
        try:
            stored = await store.snapshot(response_id)
            if stored is None or stored.finished or response_id in running:
                continue
            events = [loads(record.data) for record in await store.read(response_id)]
            closing = records_of(close_interrupted(events, INTERRUPTED))
        except Exception as exc:  # one damaged log must not keep the server from starting
            unreadable.append(response_id)
            log.error("response %s is unreadable in the store (%s)", response_id, exc)
            continue
        try:
            await store.append(response_id, closing)
        except Exception as exc:  # e.g. a StoreError of a full disk
            unwritten[response_id] = closing
            log.error(
                "response %s was left unfinished and its end cannot be stored (%s); it is "
                "served as ended, and stored at the next start-up",
                response_id,
                exc,
            )
            continue
        ended.append(response_id)
    if ended:
        log.warning("ended %d response(s) left unfinished by a previous run", len(ended))
    return ended, unreadable, unwritten


async def damaged_responses(store: EventStore) -> list[str]:
    """The responses a store that can check itself (SQLite: `PRAGMA quick_check`) cannot read;
    logged, as the operator should know what a damaged file lost."""
    damaged = getattr(store, "damaged", None)
    try:
        found: list[str] = list(await damaged()) if callable(damaged) else []
    except Exception as exc:
        log.error("the response store is damaged (%s); what it holds may be unreadable", exc)
        return []
    if found:
        more = ", ..." if len(found) > 20 else ""
        log.error(
            "%d stored response(s) are unreadable (the store is damaged): %s%s",
            len(found),
            ", ".join(sorted(found)[:20]),
            more,
        )
    return found
