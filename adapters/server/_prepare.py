"""Preparing a request: a `POST /v1/responses` body, validated, resolved and rendered into
what a run needs (`Prepared`), or a `RequestError` (4xx) naming the field at fault.

The conversation a request follows (`previous_response_id`, `item_reference`) is read from the
store here, and the prompt rendered (in worker processes for large bodies, `_render.py`), so
that nothing is generated for a request that cannot be answered.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from streamfold.engines import DecodingConstraint, GenerationRequest, SamplingParams
from streamfold.statemachine import ConversationRef, ReasoningConfig, Response
from streamfold.statemachine._grammar import Grammar

from .._engine import warn_once
from ..agent._config import AgentConfig, AgentRun, prepare_agent, served_tools
from ..protocol import (
    INPUT_ITEM_PREFIX,
    CreateRequest,
    RequestError,
    input_items,
    parse_create_request,
    parse_input_items,
)
from ..registry import Engine, UnknownModelError
from ..structured import check_bodies
from ._approvals import check_approvals
from ._conversation import earlier_conversation, saved_input
from ._conversation_store import ItemRow
from ._conversations import conversation_id_of, replayed_items, stored_items
from ._echo import echoed
from ._limits import ServerLimits, check_body
from ._reasoning_keys import ReasoningKeys, open_reasoning
from ._references import resolve_references
from ._render import AgentPrompts, Renderer
from ._store import EventStore
from ._truncate import render_truncated

__all__ = ["Prepared", "new_response_id", "prepare"]


@attrs.frozen(kw_only=True)
class Prepared:
    """A validated request, ready to run: its Response identity and the engine request."""

    request: CreateRequest
    response: Response
    generation: GenerationRequest
    grammar: Grammar
    # What the store keeps of the input, so that a later request can follow this response: the
    # request's own items, and the response it followed (`_conversation.saved_input`).
    saved_input: Any = attrs.Factory(list)
    # The whole input as wire items: the conversation it follows, then its own items (what a
    # WebSocket connection keeps of a `store: false` response, `_websocket.py`).
    conversation: list[Any] = attrs.Factory(list)
    agent: AgentRun | None = None  # the server-side tools: the agent loop runs the response
    # Where the agent loop renders its prompts: the same renderer, checks and limits.
    prompts: AgentPrompts | None = None
    # The agent loop's grammar for a generation after a call the server ran (`required` and a
    # named tool relax to `auto` there, or the loop could never end).
    after_call: DecodingConstraint | None = None
    # `conversation` (the API's): its id, and the request's own input as the items it appends
    # to it (with the response's output, when the response ends; `_conversation_store.py`).
    conversation_id: str | None = None
    conversation_input: tuple[ItemRow, ...] = ()


def new_response_id() -> str:
    """`resp_` and 32 hex digits: 12 of the time (in steps of 2^16 ns, 65.5 µs, for 580 years
    from 1970), then 20 random ones (80 bits from the OS: still unguessable).

    Ids made later sort later, so a new response's entries in the store's indexes by id (its
    `responses` row's, its saved input's, its owner's) go on the last page of each rather than
    on a random one, which a commit then writes to the WAL again: a group commit of three
    openings into a store holding 20,000 responses wrote 11.1 WAL frames against 16.1 with
    ids all random, in 97 µs against 126 (`benchmarks/bench_store.py --rounds 3`)."""
    return f"resp_{time.time_ns() >> 16:012x}{secrets.token_hex(10)}"


async def prepare(
    body: Any,
    *,
    body_bytes: int | None,
    engine: Engine,
    store: EventStore,
    limits: ServerLimits,
    renderer: Renderer,
    agent_config: AgentConfig,
    running: Callable[[str], bool],
    new_id: Callable[[], str],
    clock: Callable[[], float],
    reasoning_keys: ReasoningKeys | None = None,
    recent: Mapping[str, list[Any]] | None = None,
    owner: str | None = None,
) -> Prepared:
    """Validate a `POST /v1/responses` body; raises `RequestError` (4xx) naming the field.

    `body_bytes`, the size of the JSON text, decides where the prompt is rendered (see
    `_render.py`); without it, the body is measured. `running(id)` says whether a response
    is still being generated here (its stored conversation is then incomplete). `recent`:
    whole conversations of responses the store does not hold (a WebSocket connection's
    `store: false` responses), by id, which `previous_response_id` may name too. `owner`:
    the hash of the caller's API key, whose conversations it may name (None: no keys)."""
    check_body(body, limits)
    if body_bytes is None:
        body_bytes = len(json.dumps(body))
    body = await resolve_references(store, body)
    previous = body.get("previous_response_id") if isinstance(body, dict) else None
    conversation = conversation_id_of(body) if isinstance(body, dict) else None
    earlier: list[Any] = []
    cached = recent.get(previous) if recent is not None and isinstance(previous, str) else None
    if conversation is not None:
        if previous is not None:
            raise RequestError(
                "conversation and previous_response_id cannot be used together: a response "
                "continues either a conversation or an earlier response",
                param="conversation",
                code="mutually_exclusive_parameters",
            )
        if body.get("store") is False:
            raise RequestError(
                "a response in a conversation is stored with it; leave out store: false",
                param="store",
            )
        earlier = await replayed_items(store, conversation, owner)
    elif cached is not None:
        earlier = cached
    elif isinstance(previous, str) and previous:
        earlier = await earlier_conversation(store, previous, running=running(previous))
    request = parse_create_request(body, earlier=parse_input_items(earlier))
    own = input_items(body["input"])
    if (request.max_output_tokens or 0) > limits.max_output_tokens:
        raise RequestError(
            f"max_output_tokens may be at most {limits.max_output_tokens}, got "
            f"{request.max_output_tokens}",
            param="max_output_tokens",
        )
    if reasoning_keys is not None:
        request = open_reasoning(request, reasoning_keys, len(own))
    request = served_tools(request, agent_config)
    agent = prepare_agent(request, agent_config, len(own))
    check_bodies(request)
    try:
        grammar, chat_format = engine.reading(request.model)
    except UnknownModelError as exc:
        raise RequestError(str(exc), param="model", status=404, code="model_not_found") from exc
    # A request that follows another renders the whole conversation: size it as such.
    size = body_bytes + (len(json.dumps(earlier)) if earlier else 0)
    # An agent response's input is held to the same checks (time, size, max_input_tokens)
    # here, before it is accepted; the loop renders its prompts, tools included, through the
    # same renderer once its MCP servers have listed them.
    request, prompt = await render_truncated(renderer, request, size, chat_format)
    prompts = None
    if agent is not None:
        prompt, prompts = (), renderer.prompts(request, size, chat_format)
    response_id = new_id()
    if agent is not None:
        await check_approvals(store, agent.approvals, response_id)
    max_output_tokens = request.max_output_tokens
    if max_output_tokens is None:
        max_output_tokens = engine.max_output_tokens
    # The grammar is budgeted against the budget the generation runs under, the engine's
    # default included (a request sent without one): reasoning left unbounded under a cap it
    # does not know could spend the whole cap and never reach the answer.
    budgeted = attrs.evolve(request, max_output_tokens=max_output_tokens)
    sampling = SamplingParams(
        temperature=1.0 if request.temperature is None else request.temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
        logprobs=request.logprobs,
        top_logprobs=(request.top_logprobs or 0) if request.logprobs else 0,
    )
    response = Response(
        id=response_id,
        created_at=int(clock()),
        model=request.model,
        status="in_progress",
        parallel_tool_calls=request.parallel_tool_calls,
        tool_choice=request.tool_choice,
        instructions=request.instructions,
        metadata=request.metadata,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        max_output_tokens=max_output_tokens,
        reasoning=request.reasoning or ReasoningConfig(effort="medium"),
        background=bool(request.background),
        previous_response_id=request.previous_response_id,
        conversation=None if conversation is None else ConversationRef(id=conversation),
        **echoed(request, body),
    )
    generation = GenerationRequest(
        request_id=response_id,
        prompt_token_ids=prompt,
        model=request.model,
        max_output_tokens=max_output_tokens,
        sampling=sampling,
        stop_token_ids=chat_format.stop_token_ids_for(request),
        decoding=chat_format.constraint_for(budgeted),
    )
    if generation.decoding is not None and not engine.enforces_constraints:
        warn_once(
            engine,
            "unenforced constraints",
            "this engine does not enforce structured outputs or tool_choice (%s asked); "
            "it serves what it would anyway (replay: what was recorded)",
            generation.decoding.summary,
        )
    kept = saved_input(request.previous_response_id, own)
    appended: tuple[ItemRow, ...] = ()
    if cached is not None or conversation is not None:
        # Following a response the store lacks, or in a conversation, the store keeps the
        # whole input: its input_items and a later previous_response_id see it whole.
        kept = [*earlier, *own]
    if conversation is not None:
        appended = tuple(_appended_input(response_id, own, len(earlier)))
    return Prepared(
        request=request,
        response=response,
        generation=generation,
        grammar=grammar,
        saved_input=kept,
        conversation=[*earlier, *own],
        agent=agent,
        prompts=prompts,
        after_call=(
            None if agent is None else chat_format.constraint_for(budgeted, after_call=True)
        ),
        conversation_id=conversation,
        conversation_input=appended,
    )


def _appended_input(response_id: str, own: list[Any], start: int) -> list[ItemRow]:
    """The request's own items as a conversation keeps them, with the ids
    `GET /v1/responses/{id}/input_items` lists them by (`_input_items.listed_items`)."""
    base = response_id.removeprefix("resp_")
    ids = [
        item["id"]
        if isinstance(item.get("id"), str) and item["id"]
        else f"{INPUT_ITEM_PREFIX[item.get('type', 'message')]}_{base}_in{start + i}"
        for i, item in enumerate(own)
    ]
    return stored_items(own, ids)
