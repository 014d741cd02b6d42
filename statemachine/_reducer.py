"""The reducer: `start`, `step`, `finish` over an immutable `ResponseState`.

Theory of operation
-------------------
A response moves through three phases: *started* (`start` has emitted `response.created` and
`response.in_progress`), *streaming* (each `step` consumes exactly one token id and returns the
events that token causes), and *finished* (`finish` closed every open part and item and emitted
exactly one terminal event). Stepping or finishing a finished response is misuse and raises
`ReducerUsageError`; malformed *model output* never raises, it degrades into ordinary items.

What a token means depends on the grammar (`HarmonyGrammar` for gpt-oss, `ThinkTagGrammar` for
`<think>` models; the contract is in `_grammar.py`): the grammar decides when an item opens,
grows and closes; `_items.py` decides what events that is. Sequence numbers, output indices
and ids are fixed at the moment an event is made and travel in the state; nothing is patched
later.

A response may span several generations (the agent loop, `_loop.py`): a call to a tool the
server runs (`server_tools` at `start`) is not closed when the model finishes writing it but
left *pending*; stepping stops until `tool_result` completes it and `next_generation` begins the
next generation in the same response, whose ids, output indices and sequence numbers continue.

Every call returns a new state and leaves its input untouched, reads no clock and draws no
random number: the same tokens give byte-identical events, however the engine chunked them.
"""

from __future__ import annotations

from . import _events as ev
from . import _model as m
from ._errors import ReducerUsageError
from ._fast import replacer
from ._grammar import (
    FINISH_REASONS,
    FinishReason,
    Grammar,
    ResponseState,
    close_open,
    replace_state,
    settle_call,
)
from ._items import Out
from ._servertools import NO_SERVER_TOOLS, ServerTools

__all__ = ["closed_error", "finish", "start", "step"]

# The response is copied three times per response (start, and twice at its end); every field
# changed here is the reducer's own (status, output, usage, ...), so none needs validating.
_replace_response = replacer(m.Response)


def start(
    grammar: Grammar,
    response: m.Response,
    *,
    input_tokens: int = 0,
    server_tools: ServerTools = NO_SERVER_TOOLS,
) -> tuple[ResponseState, list[ev.Event]]:
    """Begin a response: emits `response.created` and `response.in_progress`.

    `response` carries the identity and echoed request settings (id, model, created_at,
    tools, instructions, ...); its status and output are set here. `server_tools` says which
    calls the server runs itself (the agent loop, `_loop.py`); by default none.
    """
    if not isinstance(server_tools, ServerTools):
        raise ReducerUsageError(
            f"start(server_tools=...) takes a ServerTools, got {type(server_tools).__name__}"
        )
    if response.output:
        raise ReducerUsageError(
            "start() takes a Response with empty output; items come from tokens"
        )
    response = _replace_response(
        response, status="in_progress", usage=None, error=None, incomplete_details=None
    )
    out = Out(0)
    out.emit(ev.ResponseCreatedEvent, response=response)
    out.emit(ev.ResponseInProgressEvent, response=response)
    state = ResponseState(
        grammar=grammar,
        response=response,
        seq=out.seq,
        parse=grammar.initial(),
        input_tokens=input_tokens,
        server_tools=server_tools,
    )
    return state, out.events


def step(
    state: ResponseState,
    token: int,
    logprob: float | None = None,
    top_logprobs: tuple[tuple[int, float], ...] | None = None,
) -> tuple[ResponseState, list[ev.Event]]:
    """Consume exactly one token id; returns the new state and the events it caused."""
    if state.finished or state.call is not None:
        raise closed_error(state, "step()")
    grammar = state.grammar
    if type(token) is not int or not 0 <= token < len(grammar.vocabulary.token_bytes):
        grammar.vocabulary.bytes_of(token)  # raises ReducerUsageError naming the token
    out = Out(state.seq)
    new = grammar.feed(state, out, token, logprob, top_logprobs)
    # A grammar may count the token and set `seq` itself, saving a copy on the hot path.
    if new.output_tokens == state.output_tokens or new.seq != out.seq:
        new = replace_state(new, seq=out.seq, output_tokens=state.output_tokens + 1)
    return new, out.events


def closed_error(state: ResponseState, what: str) -> ReducerUsageError:
    """The error for `what` on a response that takes no tokens now: finished, or waiting for a
    server-side call's result."""
    if state.finished:
        return ReducerUsageError(
            f"{what} after finish() on response {state.response.id}: the response is closed; "
            "start a new one with start()"
        )
    call = state.call
    assert call is not None
    return ReducerUsageError(
        f"{what} while the {call.kind} {call.item_id} waits for its result: the generation "
        "ends at a server-side call (stop the engine at <|call|>); answer it with "
        "tool_result(), then begin the next generation with next_generation()"
    )


def _usage(state: ResponseState, cached_tokens: int) -> m.ResponseUsage:
    return m.ResponseUsage(
        input_tokens=state.input_tokens,
        input_tokens_details=m.InputTokensDetails(cached_tokens=cached_tokens),
        output_tokens=state.output_tokens,
        output_tokens_details=m.OutputTokensDetails(reasoning_tokens=state.reasoning_tokens),
        total_tokens=state.input_tokens + state.output_tokens,
    )


def finish(
    state: ResponseState,
    reason: FinishReason,
    error: str | None = None,
    *,
    completed_at: int | None = None,
    cached_tokens: int = 0,
) -> tuple[ResponseState, list[ev.Event]]:
    """Close every open part and item, then emit exactly one terminal event.

    `stop` → `response.completed`; `length` → `response.incomplete` (reason
    `max_output_tokens`, the cut item `incomplete`); `tool_limit` (the agent loop stopped at its
    limit of tool calls or generations) → `response.incomplete` with reason `max_messages`;
    `error` → `response.failed` with `error` as its message; `abort` → `response.failed` with
    status `cancelled` (the SDK has no `response.cancelled` event; see specs/README.md). A call
    still pending never got its result: it ends `incomplete`. `completed_at` (Unix seconds,
    read by the caller: the reducer has no clock) goes on a completed response.
    `cached_tokens` (the prompt tokens the token source took from its prefix cache, summed
    over the response's generations; the source reports them, the reducer cannot know) goes in
    `usage.input_tokens_details.cached_tokens`.
    """
    if state.finished:
        raise ReducerUsageError(
            f"finish() called twice on response {state.response.id}; a response has exactly "
            "one terminal event"
        )
    if reason not in FINISH_REASONS:
        raise ReducerUsageError(f"finish reason must be one of {FINISH_REASONS}, got {reason!r}")
    if error is not None and not isinstance(error, str):
        # The wire's `error.message` is a string; anything else would break rule R7.
        raise ReducerUsageError(
            f"finish() error must be a message string or None, got {error!r} "
            f"({type(error).__name__}); pass str(...) of what went wrong"
        )
    if type(cached_tokens) is not int or cached_tokens < 0:
        raise ReducerUsageError(
            f"finish(cached_tokens=...) takes a non-negative int, got {cached_tokens!r}"
        )
    complete = reason == "stop"
    out = Out(state.seq)
    if state.call is not None:  # the tool never answered: the call did not finish
        state = settle_call(state, out, "incomplete")
    state = state.grammar.flush(state, out, complete)
    state = close_open(state, out, complete=complete)
    if state.call is not None:  # a call the flush closed is not run any more either
        state = settle_call(state, out, "incomplete")
    usage = _usage(state, cached_tokens)
    base = _replace_response(state.response, output=state.output, usage=usage)
    if reason == "stop":
        out.emit(
            ev.ResponseCompletedEvent,
            response=_replace_response(base, status="completed", completed_at=completed_at),
        )
    elif reason in ("length", "tool_limit"):
        out.emit(
            ev.ResponseIncompleteEvent,
            response=_replace_response(
                base,
                status="incomplete",
                incomplete_details=m.IncompleteDetails(
                    reason="max_output_tokens" if reason == "length" else "max_messages"
                ),
            ),
        )
    elif reason == "error":
        out.emit(
            ev.ResponseFailedEvent,
            response=_replace_response(
                base,
                status="failed",
                error=m.ResponseError(code="server_error", message=error or "generation failed"),
            ),
        )
    else:
        out.emit(
            ev.ResponseFailedEvent,
            response=_replace_response(
                base,
                status="cancelled",
                error=m.ResponseError(
                    code="server_error",
                    message=error or "the response was cancelled before it finished",
                ),
            ),
        )
    return replace_state(state, seq=out.seq, finished=True), out.events
