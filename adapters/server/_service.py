"""Running responses: foreground streams, background tasks, followers, and cancellation.
(A request becomes a `Prepared` run in `_prepare.py`; a run's events are logged and published,
and a refusing store ends the run, in `_recording.py`, on the write-ahead group commit of
`_logwriter.py`; a run's in-memory side is `_run.py`; reading logs is `_reading.py`.)

The service hands out values, never bytes: each response as batches of its event records
(`Records`), which each transport frames its own way (SSE: `_sse.py`).

Every response, however it is served, goes through `_drive`: the driver's event batches are
serialised once, committed to the event log (when the response is stored; `LogWriter` groups
the commits of concurrent runs), and only then published to the in-memory `Run` that live
followers read and sent to the client. So no client ever sees an event the log lacks: after a
crash, the restarted server ends each unfinished log after the last event anyone saw, and a
client resuming with `starting_after` gets the rest and a terminal event. A live response is
followed from memory (a window of it, `_run.py`), a finished one from the log, page by page.

A store that refuses a response's events ends that response: its clients get the refused
events and `response.failed` ("the response store failed ... not stored"), what the store
holds of it is deleted, and nothing of it stays in memory once it has ended (`_recording.py`).

- Foreground (`background` false): the HTTP response pulls from `_drive` directly, so the
  client's pace sets the engine's (backpressure), and a client that leaves closes the driver,
  which aborts the engine; the log then ends with a `cancelled` terminal event.
- Background: `_drive` runs as a task in the service's task group (the app's lifespan), at the
  engine's pace, whether or not anyone watches; clients follow the log. `cancel` cancels that
  task, which aborts the engine and logs the `cancelled` terminal event.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from typing import Any, Literal

import anyio
import anyio.lowlevel
import attrs
from anyio.abc import TaskGroup, TaskStatus

from streamfold.adapters.driver import close_source
from streamfold.engines import SamplingParams
from streamfold.statemachine import StreamfoldError, loads, snapshot, to_wire

from ..agent._config import AgentConfig
from ..agent._loop import generation_for
from ..protocol import RequestError
from ..registry import Engine
from ._guard import OWNER
from ._limits import ServerLimits
from ._prepare import Prepared, new_response_id, prepare
from ._reading import follow, input_items, not_found, response_of, unreadable
from ._reasoning_keys import ENCRYPTED_INCLUDE, ReasoningKeys
from ._recording import Recorder, StoreFailed
from ._recovery import damaged_responses, end_interrupted
from ._render import Renderer
from ._run import CLIENT_LEFT, Run
from ._store import EventRecord, EventStore, Records, StoreError
from ._turns import OPENING_TURNS, LoopTurns

__all__ = ["CLIENT_LEFT", "ResponseService", "Run", "ServiceNotRunningError"]

log = logging.getLogger("streamfold.server")

CANCELLED = "the response was cancelled before it finished"
SHUTDOWN = "the server shut down before the response finished"
DELETED = "the response was deleted before it finished"


class ServiceNotRunningError(StreamfoldError, RuntimeError):
    """A background response was requested before the app's lifespan started the service."""


class ResponseService:
    """The server's state: the engine, the event store, and the responses running now."""

    def __init__(
        self,
        engine: Engine,
        store: EventStore,
        *,
        new_id: Callable[[], str] = new_response_id,
        clock: Callable[[], float] = time.time,
        agent: AgentConfig | None = None,
        limits: ServerLimits | None = None,
        reasoning_keys: ReasoningKeys | None = None,
    ) -> None:
        self.engine = engine
        self.started_at = int(clock())  # the `created` of the models it lists (`_models.py`)
        #: Seal and open reasoning items' `encrypted_content` (`_reasoning_keys.py`).
        self.reasoning_keys = (
            reasoning_keys if reasoning_keys is not None else ReasoningKeys.from_environment()
        )
        self.limits = limits if limits is not None else ServerLimits()
        self.renderer = Renderer(self.limits, engine.format)
        self.store = store
        self.agent = agent if agent is not None else AgentConfig()
        self.new_id = new_id
        self.clock = clock
        self.live: dict[str, Run] = {}
        #: Logs and publishes runs' events; remembers the runs the store refused (`unstored`).
        self.recorder = Recorder(store, self.reasoning_keys)
        self.turns = LoopTurns()  # new requests open before held chunks are stepped (`_turns`)
        self.unreadable: set[str] = set()  # responses the store holds but cannot read
        # The close records of stored logs left unfinished that the store could not end at
        # start-up (a full disk): served after the log (`_recovery.end_interrupted`).
        self.unended: dict[str, list[EventRecord]] = {}
        self._task_group: TaskGroup | None = None
        self._stop_message = CANCELLED

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[ResponseService]:
        """Hold the task group background responses run in (enter it in the app's lifespan).

        On the way in, responses that a previous server left unfinished are ended
        (`end_interrupted`)."""
        await self.end_interrupted()
        self.unreadable.update(await damaged_responses(self.store))
        try:
            async with anyio.create_task_group() as tg:
                self._task_group = tg
                try:
                    yield self
                finally:
                    self._task_group = None
                    for run in list(self.live.values()):
                        if run.background:
                            run.cancel(SHUTDOWN)
        finally:
            self.renderer.close()

    async def end_interrupted(self) -> list[str]:
        """End every stored response that is unfinished and not running here; returns their
        ids (see `_recovery.end_interrupted`). Responses found unreadable are remembered."""
        ended, unreadable, unwritten = await end_interrupted(self.store, set(self.live))
        self.unreadable.update(unreadable)
        self.unended.update(unwritten)
        return ended

    # --- preparing a request ------------------------------------------------------------

    async def prepare(
        self,
        body: Any,
        *,
        body_bytes: int | None = None,
        recent: Mapping[str, list[Any]] | None = None,
    ) -> Prepared:
        """Validate a `POST /v1/responses` body; raises `RequestError` (4xx) naming the field
        (see `_prepare.prepare`; `recent`: conversations the store lacks, by response id).

        When many requests arrive together, their openings are committed a few at a time
        (`LogWriter.room_for_opening`), so the first of them need not wait for the last; a
        `store: false` request, which writes nothing to the log, never waits for it."""
        if not (isinstance(body, dict) and body.get("store") is False):
            await self.recorder.log.room_for_opening()

        def running(response_id: str) -> bool:
            run = self.live.get(response_id)
            return run is not None and not run.finished

        return await prepare(
            body,
            body_bytes=body_bytes,
            engine=self.engine,
            store=self.store,
            limits=self.limits,
            renderer=self.renderer,
            agent_config=self.agent,
            running=running,
            new_id=self.new_id,
            clock=self.clock,
            reasoning_keys=self.reasoning_keys,
            recent=recent,
            owner=OWNER.get(),
        )

    # --- driving a response -------------------------------------------------------------

    def _new_run(self, prepared: Prepared) -> Run:
        stored = prepared.request.store is not False
        run = Run(
            id=prepared.response.id,
            background=bool(prepared.response.background),
            keep=stored,
            logged=stored,
        )
        if stored:
            self.live[run.id] = run
        return run

    async def _openings_first(self) -> None:
        """Before a new stream steps the chunks its source already holds (see `_turns.py`)."""
        await self.turns.after(OPENING_TURNS)

    async def _drive(self, prepared: Prepared, run: Run) -> AsyncGenerator[list[EventRecord], None]:
        generation = generation_for(
            self.engine.source,
            prepared.request,
            prepared.generation,
            prepared.grammar,
            prepared.response,
            prepared.agent,
            clock=self.clock,
            prompts=prepared.prompts,
            after_call=prepared.after_call,
            before_held=self._openings_first,
        )
        try:
            if run.logged:
                await self.recorder.save_input(run, prepared)
            if ENCRYPTED_INCLUDE in prepared.request.include:
                self.recorder.sealing[run.id] = {}
            async with contextlib.aclosing(generation.batches()) as batches:
                async for events in batches:
                    yield await self.recorder.record(run, events)
                    # An engine that never awaits (replay without delay) would otherwise keep
                    # the loop until its socket buffer fills, starving every other request. (A
                    # logged batch gave the loop away already, while its group was committed.)
                    if not run.logged:
                        await anyio.lowlevel.checkpoint()
        except StoreFailed as failed:
            yield await self.recorder.unstore(run, generation, failed)
        except Exception as exc:  # a fault of the server itself: still end the log properly
            log.exception("response %s failed", run.id)
            message = f"the server failed: {type(exc).__name__}"
            yield await self.recorder.close(run, generation, "error", message)
        finally:
            if not generation.finished:  # the consumer left, or the run was cancelled
                # Shielded: when this run was cancelled, the log must still get its end.
                with anyio.CancelScope(shield=True):
                    await self.recorder.close(run, generation, "abort", run.stop_message)
            run.finish()
            self.recorder.sealing.pop(run.id, None)
            # Memory holds running responses only: a finished one is served from the store.
            self.live.pop(run.id, None)

    async def prefill(self, prepared: Prepared) -> int:
        """Compute a warm-up's prompt into the engine's prefix cache (`Engine.keeps_prefixes`),
        so that a response whose prompt starts with it starts warm; returns the prompt tokens
        sent (0: the engine keeps no prefixes, or the prompt is the agent loop's, rendered
        later). Nothing is generated for anyone: the engine's one drawn token is dropped."""
        prompt = prepared.generation.prompt_token_ids
        if not self.engine.keeps_prefixes or not prompt:
            return 0
        request = attrs.evolve(
            prepared.generation,
            max_output_tokens=1,
            sampling=SamplingParams(),
            decoding=None,  # the token is dropped: no grammar to compile for it
            constraint=None,
        )
        chunks = self.engine.source.generate(request)
        try:
            async for chunk in chunks:
                if chunk.finish_reason == "error":
                    log.warning("response %s: its warm-up's prefill failed: %s",
                                prepared.response.id, chunk.error)  # fmt: skip
                if chunk.finish_reason is not None:
                    break
        finally:
            await close_source(chunks)  # the engine's request ends (aborted if still running)
        return len(prompt)

    async def stream(self, prepared: Prepared) -> AsyncGenerator[Records, None]:
        """A foreground stream: its record batches, pulled at the client's pace (a transport
        frames them)."""
        run = self._new_run(prepared)
        async with contextlib.aclosing(self._drive(prepared, run)) as batches:
            async for records in batches:
                yield Records(records)

    async def complete(self, prepared: Prepared) -> dict[str, Any]:
        """A foreground, non-streaming response: run it to the end, return the final Response."""
        run = self._new_run(prepared)
        async with contextlib.aclosing(self._drive(prepared, run)) as batches:
            async for _ in batches:
                pass
        return response_of(run.event)

    async def start_background(self, prepared: Prepared) -> Run:
        """Start a background response; returns once its first events are published."""
        if self._task_group is None:
            raise ServiceNotRunningError(
                "background responses need the app's lifespan to have started; when you mount "
                "the streamfold app, pass lifespan=streamfold_app.router.lifespan_context to "
                "your outer Starlette app"
            )
        run = self._new_run(prepared)
        await self._task_group.start(self._background, prepared, run)
        return run

    async def _background(
        self, prepared: Prepared, run: Run, *, task_status: TaskStatus[None]
    ) -> None:
        started = False
        try:
            with anyio.CancelScope() as run.scope:
                async with contextlib.aclosing(self._drive(prepared, run)) as batches:
                    async for _ in batches:
                        if not started:
                            started = True
                            task_status.started()
        except Exception:
            # E.g. the store failing: logged, and kept from the task group, whose failure would
            # take every other response (and the server's lifespan) down with it.
            log.exception("background response %s stopped", run.id)
        if not started:
            task_status.started()

    # --- reading responses ------------------------------------------------------------------

    async def lookup(self, response_id: str) -> dict[str, Any]:
        """The current Response; raises a 404 `RequestError` for an unknown id."""
        run = self.live.get(response_id)
        if run is not None and run.event is not None:
            if run.logged and not run.finished:
                # Still running: the Response as its stream so far shows it, items included
                # (its latest lifecycle event says `output: []` until the end; issue 31).
                return await self._so_far(response_id, run)
            return response_of(run.event)
        if response_id in self.recorder.unstored:
            return json.loads(self.recorder.unstored[response_id])  # type: ignore[no-any-return]
        if response_id in self.unended:  # its terminal event is the last close record
            return response_of(self.unended[response_id][-1].data)
        if response_id in self.unreadable:
            raise unreadable(response_id, StoreError("found damaged at start-up"))
        try:
            snapshot = await self.store.snapshot(response_id)
        except StoreError as exc:
            raise unreadable(response_id, exc) from exc
        if snapshot is None:
            raise not_found(response_id)
        return snapshot.response()

    async def _so_far(self, response_id: str, run: Run) -> dict[str, Any]:
        """A running response folded from its logged events (`statemachine.snapshot`)."""
        try:
            records = await self.store.read(response_id)
        except StoreError as exc:
            raise unreadable(response_id, exc) from exc
        if not records:
            return response_of(run.event)
        events = [loads(record.data) for record in records]
        return to_wire(snapshot(events))

    def current(self, run: Run) -> dict[str, Any]:
        """The Response of a run started here (even one that has already ended)."""
        return response_of(run.event)

    def follow(
        self, response_id: str, after: int = -1, *, run: Run | None = None
    ) -> AsyncGenerator[Records, None]:
        """The log after `after`, then live events until the terminal one, in batches.

        Call `lookup` first: an unknown id here is an empty stream, not an error, because the
        HTTP status is sent before the first byte. A stored log is read a page at a time, each
        sent before the next is read, so a client that reads slowly holds one page in memory.
        """
        run = run if run is not None else self.live.get(response_id)
        return follow(
            self.store,
            response_id,
            after,
            run,
            unstored=self.recorder.unstored.get(response_id),
            unended=self.unended.get(response_id),
        )

    async def cancel(self, response_id: str) -> dict[str, Any]:
        """Cancel a background response (idempotent); returns the final Response."""
        run = self.live.get(response_id)
        if run is None:
            snapshot = await self.store.snapshot(response_id)
            if snapshot is None:
                raise not_found(response_id)
            background, response = snapshot.background, snapshot.response()
            if response_id in self.unended:
                response = response_of(self.unended[response_id][-1].data)
        else:
            background = run.background
        if not background:
            raise RequestError(
                f"response {response_id} was not created with background=true; only background "
                "responses can be cancelled (close the stream to stop a foreground one)",
                param="response_id",
            )
        if run is not None:
            run.cancel(CANCELLED)
            await run.ended()
            response = response_of(run.event)
        return response

    async def delete(self, response_id: str) -> dict[str, Any]:
        """Forget a response and its log; a background one still running is cancelled first.

        A foreground response still streaming to its client cannot be deleted (its client
        holds the stream; close it, or delete once it has finished)."""
        run = self.live.get(response_id)
        if run is not None and not run.finished:
            if not run.background:
                raise RequestError(
                    f"response {response_id} is still streaming to its client; close that "
                    "stream or delete the response once it has finished",
                    param="response_id",
                )
            run.cancel(DELETED)
            await run.ended()
        elif run is None and await self.store.snapshot(response_id) is None:
            raise not_found(response_id)
        self.live.pop(response_id, None)
        await self.store.delete(response_id)
        self.unended.pop(response_id, None)
        return {"id": response_id, "object": "response.deleted", "deleted": True}

    async def list_input_items(
        self, response_id: str, *, after: str | None, limit: int, order: Literal["asc", "desc"]
    ) -> dict[str, Any]:
        """A page of the input items `response_id` answered (see `_input_items.py`)."""
        running = response_id in self.live
        return await input_items(
            self.store, response_id, running=running, after=after, limit=limit, order=order
        )
