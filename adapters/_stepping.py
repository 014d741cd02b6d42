"""The one chunk-to-step loop: every token of a `TokenChunk` through the reducer's `step`,
synchronously, with its logprobs. It owns that loop and nothing else; every caller that turns
chunks into events reuses it rather than copying it:

- `step_chunk(state, chunk) -> (state, events, error)`: one chunk. A token `step` refuses
  (misuse: an id outside the vocabulary) ends the loop, and its exception is *returned* beside
  the state and events of the tokens before it, so the caller keeps them and can finish the
  response after them.
- `step_tokens(..., until_call=True)`: the same, stopping after the token that leaves a
  server-side call pending (the agent loop's generations), and saying how many were stepped.
- `fold(grammar, response, chunks, reason)`: the synchronous driver over chunks already at hand
  (a trace, replay): `start`, every chunk (an agent run's `LoopStep`s made again in their
  place), `finish`.

No I/O, no anyio: the async driver (`driver.py`: `Generation`, `stream_events`) pulls chunks
from a live source, holds the budget and the batching, and calls in here for each chunk.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from streamfold.engines import TokenChunk
from streamfold.statemachine import (
    Event,
    LoopStep,
    Response,
    ResponseState,
    ServerTools,
    apply_loop_step,
    finish,
    start,
    step,
)
from streamfold.statemachine._grammar import FinishReason, Grammar
from streamfold.statemachine._servertools import NO_SERVER_TOOLS

__all__ = ["fold", "step_chunk", "step_tokens"]


def _tokens(chunk: TokenChunk) -> Iterator[tuple[int, float | None, Any]]:
    logprobs = chunk.logprobs or (None,) * len(chunk.token_ids)
    tops = chunk.top_logprobs or (None,) * len(chunk.token_ids)
    return zip(chunk.token_ids, logprobs, tops, strict=True)


def step_chunk(
    state: ResponseState, chunk: TokenChunk
) -> tuple[ResponseState, list[Event], Exception | None]:
    """Every token of one engine chunk through `step`, each with its logprobs: the one loop
    from chunks to steps, which the async driver (`driver.Generation`) and `fold` (replay) share.

    A token that makes `step` raise (misuse: an id outside the vocabulary) ends the loop, and
    the exception is returned beside the state and events of the tokens before it, so the
    caller keeps those and can finish the response after them.
    """
    state, events, error, _ = step_tokens(state, chunk)
    return state, events, error


def step_tokens(
    state: ResponseState, chunk: TokenChunk, *, until_call: bool = False
) -> tuple[ResponseState, list[Event], Exception | None, int]:
    """`step_chunk`, and how many of the chunk's tokens were stepped. With `until_call`, none
    after the one that leaves a server-side call pending (the reducer takes no token while a
    call is pending); without it, every token (the count is then only read on success)."""
    events: list[Event] = []
    stepped = 0
    try:
        if until_call:
            for token, logprob, top in _tokens(chunk):
                state, produced = step(state, token, logprob, top)
                events += produced
                stepped += 1
                if state.call is not None:
                    break
        elif chunk.logprobs is None and chunk.top_logprobs is None:
            # Most chunks carry no logprobs: `step(state, token)` is the compiled step's fast
            # call, and zipping in two columns of None cost as much as the step itself
            # (benchmarks/bench_cli.py, replay).
            for token in chunk.token_ids:
                state, produced = step(state, token)
                events += produced
            stepped = len(chunk.token_ids)
        else:
            for token, logprob, top in _tokens(chunk):
                state, produced = step(state, token, logprob, top)
                events += produced
            stepped = len(chunk.token_ids)
    except Exception as exc:
        return state, events, exc, stepped
    return state, events, None, stepped


def fold(
    grammar: Grammar,
    response: Response,
    chunks: Iterable[TokenChunk | LoopStep],
    reason: FinishReason,
    message: str | None = None,
    *,
    input_tokens: int = 0,
    server_tools: ServerTools = NO_SERVER_TOOLS,
) -> Iterator[Event]:
    """The synchronous driver: `start`, every chunk's tokens, then `finish(reason, message)`.

    For token streams already at hand (a trace); a live source goes through `Generation`.
    An agent run's loop steps among the chunks are made again, in their place
    (`apply_loop_step`).
    """
    state, events = start(grammar, response, input_tokens=input_tokens, server_tools=server_tools)
    yield from events
    for chunk in chunks:
        if not isinstance(chunk, TokenChunk):
            state, events = apply_loop_step(state, chunk)
            yield from events
            continue
        ids = chunk.token_ids
        if len(ids) == 1 and chunk.logprobs is None and chunk.top_logprobs is None:
            # A trace's usual chunk, one plain token: `step_chunk`'s loop for it, inline (its
            # error, raised here, has no events before it to keep).
            state, events = step(state, ids[0])
            yield from events
            continue
        state, events, error = step_chunk(state, chunk)
        yield from events
        if error is not None:
            raise error
    state, events = finish(state, reason, message)
    yield from events
