"""Recording a run's events: logged first (write-ahead), then published; a store that refuses
them ends the run.

`ResponseService._drive` (`_service.py`) hands each batch of a run's events to
`Recorder.record`: sealed where the client keeps the reasoning (`_reasoning_keys.py`),
serialised once, committed to the event log when the response is stored (`LogWriter` groups the
commits of concurrent runs), and only then published to the in-memory `Run`.

A store that refuses a response's events (or its input, `save_input`) ends that response
(`unstore`): its clients get the refused events and `response.failed` ("the response store
failed ... not stored"), what the store holds of it is deleted, and nothing of it stays in
memory once it has ended but its final Response without the output (`unstored`, the last
`UNSTORED_KEPT`), for clients polling it.
"""

from __future__ import annotations

import json
import logging

import anyio

from streamfold.adapters.driver import Generation
from streamfold.statemachine import Event
from streamfold.statemachine._grammar import FinishReason

from ..agent._loop import AgentGeneration
from ._conversation_store import ConversationStore
from ._logwriter import LogWriter
from ._prepare import Prepared
from ._reading import STORE_FAILED, response_of
from ._reasoning_keys import ReasoningKeys, seal_events
from ._run import Run
from ._store import EventRecord, EventStore, InputStore, records_of

__all__ = ["UNSTORED_KEPT", "AnyGeneration", "Recorder", "StoreFailed"]

log = logging.getLogger("streamfold.server")

#: Responses whose store failed, remembered (without their output) for clients polling them.
UNSTORED_KEPT = 1024

AnyGeneration = Generation | AgentGeneration


class StoreFailed(Exception):
    """The store refused `records` (a run's next batch, not yet published)."""

    def __init__(self, records: list[EventRecord], error: Exception) -> None:
        super().__init__(str(error))
        self.records = records
        self.error = error


class Recorder:
    """Where runs' events go on their way out: the log (write-ahead), then the run."""

    def __init__(self, store: EventStore, reasoning_keys: ReasoningKeys) -> None:
        self.store = store
        self.reasoning_keys = reasoning_keys
        self.log = LogWriter(store)
        # Checked once: isinstance against a runtime-checkable Protocol costs 10-25 us a call.
        self._input_store = store if isinstance(store, InputStore) else None
        self._conversation_store = store if isinstance(store, ConversationStore) else None
        self.unstored: dict[str, str] = {}  # the final Response of runs the store refused
        #: Runs whose reasoning items are sealed, with the blobs made so far.
        self.sealing: dict[str, dict[str, str]] = {}

    async def record(self, run: Run, events: list[Event]) -> list[EventRecord]:
        """Log `events` (write-ahead), then publish them; `StoreFailed` if the log refused.

        A logged batch is published by its commit (`LogWriter`), even when this run is
        cancelled while it waits for that commit."""
        sealed = self.sealing.get(run.id)
        if sealed is not None:  # the client keeps the reasoning (`_reasoning_keys.py`)
            events = seal_events(events, self.reasoning_keys, sealed)
        records = records_of(events)
        if records and run.logged:
            try:
                await self.log.write(
                    run.id, records, background=run.background, published=run.publish
                )
            except Exception as exc:
                raise StoreFailed(records, exc) from exc
        else:
            run.publish(records)
        return records

    async def close(
        self, run: Run, generation: AnyGeneration, reason: FinishReason, message: str
    ) -> list[EventRecord]:
        try:
            return await self.record(run, generation.close(reason, message))
        except StoreFailed as failed:
            return await self.unstore(run, generation, failed)

    async def unstore(
        self, run: Run, generation: AnyGeneration, failed: StoreFailed
    ) -> list[EventRecord]:
        """The store refused this run's events: it ends `failed`, unstored, and says so."""
        log.error("response %s: %s (%s); it ends failed", run.id, STORE_FAILED, failed.error)
        run.logged = False
        closing = generation.close("error", f"{STORE_FAILED}: {failed.error}")
        records = failed.records + records_of(closing)
        run.publish(records)
        # Its clients may poll for it: they find it failed, for the last UNSTORED_KEPT such.
        response = response_of(run.event)
        response["output"] = []  # what it said is gone with the log; the error says why
        self.unstored[run.id] = json.dumps(response)
        while len(self.unstored) > UNSTORED_KEPT:
            self.unstored.pop(next(iter(self.unstored)))
        with anyio.CancelScope(shield=True):
            try:  # a log without its end would read "in progress" forever
                await self.store.delete(run.id)
            except Exception as exc:
                log.error("response %s: its partial log could not be deleted (%s)", run.id, exc)
        return records

    async def save_input(self, run: Run, prepared: Prepared) -> None:
        """Before its first event: what the store keeps of a logged run's input (for
        `previous_response_id`), and the conversation it appends to when it ends."""
        conversations = self._conversation_store
        try:
            with anyio.CancelScope(shield=True):
                if self._input_store is not None:
                    await self._input_store.save_input(run.id, json.dumps(prepared.saved_input))
                if prepared.conversation_id is not None and conversations is not None:
                    await conversations.bind_conversation(
                        run.id, prepared.conversation_id, prepared.conversation_input
                    )
        except Exception as exc:
            raise StoreFailed([], exc) from exc
