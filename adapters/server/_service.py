"""Running responses: foreground streams, background tasks, followers, and cancellation.

Every response, however it is served, goes through `_drive`: the driver's event batches are
serialised once, published to the in-memory `Run` that live followers read, and appended to the
event log (when the response is stored) in batches, the last one with the terminal event before
the run is finished. So a live response is followed from memory, a finished one from the log,
and a client resuming with `starting_after` gets exactly the events it missed, either way. (If
the store fails, the run stays in memory and is served from there until the process ends.)

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
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, Literal

import anyio
import anyio.lowlevel
import attrs
from anyio.abc import TaskGroup, TaskStatus

from streamfold.adapters.driver import sse_frame
from streamfold.engines import GenerationRequest, SamplingParams
from streamfold.statemachine import (
    Event,
    ReasoningConfig,
    Response,
    StreamfoldError,
    close_interrupted,
    dumps,
    loads,
)
from streamfold.statemachine._grammar import Grammar

from ..agent._config import AgentConfig, AgentRun, prepare_agent
from ..agent._loop import generation_for
from ..registry import Engine, UnknownModelError
from ._conversation import earlier_conversation, input_items
from ._input_items import input_item_page, listed_items
from ._store import EventRecord, EventStore, InputStore
from .prompt import render_prompt, stop_token_ids
from .requests import CreateRequest, RequestError, parse_create_request, parse_input_items

__all__ = ["Prepared", "ResponseService", "ServiceNotRunningError"]

log = logging.getLogger("streamfold.server")

CANCELLED = "the response was cancelled before it finished"
CLIENT_LEFT = "the client disconnected before the response finished"
SHUTDOWN = "the server shut down before the response finished"
DELETED = "the response was deleted before it finished"
INTERRUPTED = (
    "the server stopped before the response finished (it was ended when the server restarted)"
)

# The store is written in batches: at the terminal event, or when this many events or seconds
# have gathered. Followers of a live run read it from memory, so batching delays nothing they
# see; a crash loses at most that much of a response that was unfinished anyway.
FLUSH_EVENTS = 64
FLUSH_SECONDS = 0.25


class ServiceNotRunningError(StreamfoldError, RuntimeError):
    """A background response was requested before the app's lifespan started the service."""


@attrs.frozen(kw_only=True)
class Prepared:
    """A validated request, ready to run: its Response identity and the engine request."""

    request: CreateRequest
    response: Response
    generation: GenerationRequest
    grammar: Grammar
    # The whole input as wire items (with what `previous_response_id` brought in), kept with
    # the response so that a later request can follow it.
    conversation: list[Any] = attrs.Factory(list)
    agent: AgentRun | None = None  # the server-side tools: the agent loop runs the response


@attrs.define(kw_only=True, eq=False)
class Run:
    """A response being generated, as followers see it. Mutable, in memory, one per response.

    While a run is live, followers read `records` here; the store catches up in batches
    (`pending`), and holds the whole log before the run leaves `ResponseService.live`.
    """

    id: str
    background: bool
    keep: bool  # stored: log the records and keep them for followers
    records: list[EventRecord] = attrs.Factory(list)
    pending: list[EventRecord] = attrs.Factory(list)  # not yet in the store
    flushed_at: float = 0.0
    event: str | None = None  # wire JSON of the latest lifecycle event
    done: anyio.Event = attrs.Factory(anyio.Event)
    finished: bool = False
    scope: anyio.CancelScope | None = None
    stop_message: str = CLIENT_LEFT
    unsaved: bool = False  # the store failed: this run is served from memory only
    _changed: anyio.Event | None = None  # made only when someone waits: most runs have no follower

    def publish(self, records: list[EventRecord]) -> None:
        if self.keep:
            self.records.extend(records)
        for record in records:
            if record.lifecycle:
                self.event = record.data
        self._wake()

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def changed(self) -> None:
        """Wait for the next `publish` or `finish` (check `records` first: no await between)."""
        if self._changed is None:
            self._changed = anyio.Event()
        await self._changed.wait()

    def finish(self) -> None:
        self.finished = True
        self._wake()
        self.done.set()

    def cancel(self, message: str) -> None:
        self.stop_message = message
        if self.scope is not None:
            self.scope.cancel()


def _records(events: list[Event]) -> list[EventRecord]:
    return [
        EventRecord(sequence_number=e.sequence_number, type=e.type, data=dumps(e)) for e in events
    ]


def _frames(records: list[EventRecord]) -> bytes:
    return b"".join(sse_frame(r.type, r.data) for r in records)


def new_response_id() -> str:
    return f"resp_{uuid.uuid4().hex}"


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
    ) -> None:
        self.engine = engine
        self.store = store
        self.agent = agent if agent is not None else AgentConfig()
        self.new_id = new_id
        self.clock = clock
        self.live: dict[str, Run] = {}
        self._task_group: TaskGroup | None = None
        self._stop_message = CANCELLED

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[ResponseService]:
        """Hold the task group background responses run in (enter it in the app's lifespan).

        On the way in, responses that a previous server left unfinished are ended
        (`end_interrupted`)."""
        ended = await self.end_interrupted()
        if ended:
            log.warning("ended %d response(s) left unfinished by a previous run", len(ended))
        async with anyio.create_task_group() as tg:
            self._task_group = tg
            try:
                yield self
            finally:
                self._task_group = None
                for run in list(self.live.values()):
                    if run.background:
                        run.cancel(SHUTDOWN)

    async def end_interrupted(self) -> list[str]:
        """End every stored response that is unfinished and not running here.

        A server that crashed or was killed mid-generation leaves logs without a terminal
        event, which clients retrieving or resuming them would wait on forever. Each gets the
        close events of its open items (`incomplete`, with the text they had streamed) and
        `response.failed` (`close_interrupted`). A store belongs to one server process (live
        following is per process too), so an unfinished log here is one nobody will finish.
        Returns the ids ended.
        """
        ended = []
        for response_id in await self.store.list():
            stored = await self.store.snapshot(response_id)
            if stored is None or stored.finished or response_id in self.live:
                continue
            events = [loads(record.data) for record in await self.store.read(response_id)]
            closing = close_interrupted(events, INTERRUPTED)
            await self.store.append(response_id, _records(closing))
            ended.append(response_id)
        return ended

    # --- preparing a request ------------------------------------------------------------

    async def prepare(self, body: Any) -> Prepared:
        """Validate a `POST /v1/responses` body; raises `RequestError` (4xx) naming the field."""
        previous = body.get("previous_response_id") if isinstance(body, dict) else None
        earlier: list[Any] = []
        if isinstance(previous, str) and previous:
            run = self.live.get(previous)
            running = run is not None and not run.finished
            earlier = await earlier_conversation(self.store, previous, running=running)
        request = parse_create_request(body, earlier=parse_input_items(earlier))
        own = input_items(body["input"])
        conversation = [*earlier, *own]
        agent = prepare_agent(request, self.agent, len(own))
        try:
            grammar = self.engine.grammar(request.model)
        except UnknownModelError as exc:
            raise RequestError(str(exc), param="model", status=404, code="model_not_found") from exc
        # On the loop, not in a thread: openai-harmony holds the GIL while it renders (~0.6 ms
        # for a short prompt; two threads gain nothing), so a thread would only add GIL
        # hand-offs, which under load cost far more than the rendering.
        # An agent response renders its prompt once its MCP servers have listed their tools.
        prompt = render_prompt(request) if agent is None else ()
        response_id = self.new_id()
        sampling = SamplingParams(
            temperature=1.0 if request.temperature is None else request.temperature,
            top_p=1.0 if request.top_p is None else request.top_p,
        )
        response = Response(
            id=response_id,
            created_at=int(self.clock()),
            model=request.model,
            status="in_progress",
            parallel_tool_calls=request.parallel_tool_calls,
            tool_choice=request.tool_choice,
            tools=request.function_tools,
            instructions=request.instructions,
            metadata=request.metadata,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_output_tokens=request.max_output_tokens,
            reasoning=request.reasoning or ReasoningConfig(effort="medium"),
            background=bool(request.background),
            previous_response_id=request.previous_response_id,
        )
        generation = GenerationRequest(
            request_id=response_id,
            prompt_token_ids=prompt,
            model=request.model,
            max_output_tokens=request.max_output_tokens,
            sampling=sampling,
            stop_token_ids=stop_token_ids(),
        )
        return Prepared(
            request=request,
            response=response,
            generation=generation,
            grammar=grammar,
            conversation=conversation,
            agent=agent,
        )

    # --- driving a response -------------------------------------------------------------

    def _new_run(self, prepared: Prepared) -> Run:
        stored = prepared.request.store is not False
        run = Run(
            id=prepared.response.id,
            background=bool(prepared.response.background),
            keep=stored,
            flushed_at=anyio.current_time(),
        )
        if stored:
            self.live[run.id] = run
        return run

    async def _record(self, run: Run, events: list[Event]) -> list[EventRecord]:
        records = _records(events)
        if not records:
            return records
        run.publish(records)
        if run.keep and not run.unsaved:
            run.pending.extend(records)
            now = anyio.current_time()
            if (
                records[-1].terminal
                or len(run.pending) >= FLUSH_EVENTS
                or now - run.flushed_at >= FLUSH_SECONDS
            ):
                batch, run.pending, run.flushed_at = run.pending, [], now
                try:
                    # Shielded: a cancelled client or run must not leave a write half-done.
                    with anyio.CancelScope(shield=True):
                        await self.store.append(run.id, batch, background=run.background)
                except Exception:
                    # The store failed (disk full, ...): the response goes on for its clients
                    # and stays served from memory, rather than failing because of the log.
                    log.exception("response %s: the event store failed; kept in memory", run.id)
                    run.unsaved = True
        return records

    async def _save_input(self, store: InputStore, run: Run, prepared: Prepared) -> None:
        try:
            with anyio.CancelScope(shield=True):
                await store.save_input(run.id, json.dumps(prepared.conversation))
        except Exception:
            # Like a failed log write: the response goes on; only following it is lost.
            log.exception("response %s: the store could not keep its input", run.id)

    async def _drive(self, prepared: Prepared, run: Run) -> AsyncGenerator[list[EventRecord], None]:
        generation = generation_for(
            self.engine.source,
            prepared.request,
            prepared.generation,
            prepared.grammar,
            prepared.response,
            prepared.agent,
        )
        if run.keep and isinstance(self.store, InputStore):
            await self._save_input(self.store, run, prepared)
        try:
            async with contextlib.aclosing(generation.batches()) as batches:
                async for events in batches:
                    yield await self._record(run, events)
                    # An engine that never awaits (replay without delay) would otherwise keep
                    # the loop until its socket buffer fills, starving every other request.
                    await anyio.lowlevel.checkpoint()
        except Exception as exc:  # a fault of the server itself: still end the log properly
            log.exception("response %s failed", run.id)
            closing = generation.close("error", f"the server failed: {type(exc).__name__}")
            yield await self._record(run, closing)
        finally:
            if not generation.finished:  # the consumer left, or the run was cancelled
                # Shielded: when this run was cancelled, the log must still get its end.
                with anyio.CancelScope(shield=True):
                    await self._record(run, generation.close("abort", run.stop_message))
            run.finish()
            if not run.unsaved:  # else the memory copy is the only one left
                self.live.pop(run.id, None)

    async def stream(self, prepared: Prepared) -> AsyncGenerator[bytes, None]:
        """A foreground stream: SSE bytes, pulled at the client's pace."""
        run = self._new_run(prepared)
        async with contextlib.aclosing(self._drive(prepared, run)) as batches:
            async for records in batches:
                yield _frames(records)

    async def complete(self, prepared: Prepared) -> dict[str, Any]:
        """A foreground, non-streaming response: run it to the end, return the final Response."""
        run = self._new_run(prepared)
        async with contextlib.aclosing(self._drive(prepared, run)) as batches:
            async for _ in batches:
                pass
        return _response_of(run.event)

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
            return _response_of(run.event)
        snapshot = await self.store.snapshot(response_id)
        if snapshot is None:
            raise _not_found(response_id)
        return snapshot.response()

    async def follow(self, response_id: str, after: int = -1) -> AsyncGenerator[bytes, None]:
        """The log after `after`, then live events until the terminal one (SSE bytes).

        Call `lookup` first: an unknown id here is an empty stream, not an error, because the
        HTTP status is sent before the first byte.
        """
        run = self.live.get(response_id)
        if run is None:
            records = await self.store.read(response_id, after)
            if records:
                yield _frames(records)
            return
        position = after + 1
        while True:
            if position < len(run.records):
                records, position = run.records[position:], len(run.records)
                yield _frames(records)
            elif run.finished:
                return
            else:
                await run.changed()

    async def cancel(self, response_id: str) -> dict[str, Any]:
        """Cancel a background response (idempotent); returns the final Response."""
        run = self.live.get(response_id)
        if run is None:
            snapshot = await self.store.snapshot(response_id)
            if snapshot is None:
                raise _not_found(response_id)
            background, response = snapshot.background, snapshot.response()
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
            await run.done.wait()
            response = _response_of(run.event)
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
            await run.done.wait()
        elif run is None and await self.store.snapshot(response_id) is None:
            raise _not_found(response_id)
        self.live.pop(response_id, None)
        await self.store.delete(response_id)
        return {"id": response_id, "object": "response.deleted", "deleted": True}

    async def list_input_items(
        self, response_id: str, *, after: str | None, limit: int, order: Literal["asc", "desc"]
    ) -> dict[str, Any]:
        """A page of the input items `response_id` answered (see `_input_items.py`)."""
        raw = None
        if isinstance(self.store, InputStore):
            raw = await self.store.load_input(response_id)
        if raw is None:
            if response_id not in self.live and await self.store.snapshot(response_id) is None:
                raise _not_found(response_id)
            raise RequestError(
                f"the input of response {response_id} was not kept (it was made before this "
                "server kept inputs, or by a store that keeps none)",
                param="response_id",
                status=404,
                code="not_found",
            )
        items = listed_items(response_id, json.loads(raw))
        return input_item_page(items, after=after, limit=limit, order=order)


def _response_of(event: str | None) -> dict[str, Any]:
    assert event is not None  # every run logs response.created before anything else
    return json.loads(event)["response"]  # type: ignore[no-any-return]


def _not_found(response_id: str) -> RequestError:
    return RequestError(
        f"Response with id '{response_id}' not found.", param="response_id", status=404
    )
