"""What the vLLM and SGLang adapters share: typed errors, the error chunk, the release step, and
the clamp of `max_output_tokens` to the context.

Engine failures are data. An exception raised by an engine while it streams (a dead engine, a
CUDA error, a request it rejects) ends the chunk stream with one final chunk whose
`finish_reason` is `"error"` and whose `error` names the engine and the exception; it is never
re-raised. The driver turns that chunk into `response.failed`, so a client always gets a
conformant terminal event and keeps the text generated so far (bugs #29 and #38 in the peers'
bug catalogue: a raised error became a non-event or an HTTP 500 in the middle of a stream). The
traceback goes to this module's logger, so operators still see it. Cancellation
(`GeneratorExit`, `asyncio.CancelledError`, `trio.Cancelled`) is not an engine failure and always
propagates.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio

from streamfold.engines import GenerationRequest, TokenChunk

__all__ = [
    "EngineNotInstalledError",
    "EngineOutputError",
    "clamp_to_context",
    "stream_chunks",
]

logger = logging.getLogger("streamfold.adapters")


class EngineNotInstalledError(ImportError):
    """An engine adapter was asked to build a real engine that is not installed here."""

    def __init__(self, *, engine: str, extra: str, cause: BaseException) -> None:
        super().__init__(
            f"building a {engine} engine needs the {engine!r} package, which failed to import"
            f" ({type(cause).__name__}: {cause}); install it with"
            f" `pip install 'streamfold[{extra}]'` on a machine with a CUDA GPU, or pass an"
            f" engine object you built yourself to the token source"
        )
        self.engine = engine


class EngineOutputError(Exception):
    """An engine yielded output that breaks its own documented contract.

    Raised inside an adapter's stream and turned into its final error chunk, like any other
    engine failure; it is public so tests and callers can name it.
    """


def error_chunk(engine: str, request_id: str, exc: BaseException) -> TokenChunk:
    """The final chunk that reports an engine failure, with the cause chain in the message."""
    logger.error("%s failed while streaming request %s", engine, request_id, exc_info=exc)
    detail = str(exc)
    message = f"{engine} engine failed: {type(exc).__name__}" + (f": {detail}" if detail else "")
    # vLLM raises `EngineGenerateError()` with no message `from` the real error: name the cause.
    cause = exc.__cause__
    if cause is not None:
        message += f" (caused by {type(cause).__name__}: {cause})"
    return TokenChunk(finish_reason="error", error=message)


def clamp_to_context(
    request: GenerationRequest, context: int | None, reserved: int = 0
) -> int | None:
    """`request.max_output_tokens`, clamped to what a context of `context` tokens leaves after
    the prompt (and `reserved` slots), so that a response that reaches it ends "length"
    (incomplete) on every engine. At least 1: a prompt that fills the context is the engine's
    to refuse, with its own message."""
    wanted = request.max_output_tokens
    if wanted is None or context is None:
        return wanted
    return min(wanted, max(1, context - reserved - len(request.prompt_token_ids)))


async def stream_chunks(
    engine: str,
    request_id: str,
    open_outputs: Callable[[], Awaitable[AsyncIterator[Any]]],
    read: Callable[[Any], TokenChunk | None],
    abort: Callable[[], object],
    unfinished: str,
) -> AsyncIterator[TokenChunk]:
    """The stream loop both adapters share: engine outputs in, token chunks out.

    `read` turns one engine output into the chunk of tokens not yet passed on (None: nothing
    new). The engine's stream may go on after its finished output; that rest is skipped. An
    engine failure becomes one final error chunk (after the finish it can only be logged), a
    stream that stops without a finish is such a failure (`unfinished` says so), and an
    unfinished request is aborted in the engine before its stream is closed (see `release`).
    """
    outputs: AsyncIterator[Any] | None = None
    ended = False
    try:
        try:
            outputs = await open_outputs()
            async for output in outputs:
                if ended:
                    continue
                chunk = read(output)
                if chunk is None:
                    continue
                ended = chunk.finish_reason is not None
                yield chunk
            if not ended:
                raise EngineOutputError(unfinished)
        except Exception as exc:
            if ended:
                # The finish already went out; a failure after it has nowhere in-band to go.
                logger.exception("%s failed after finishing request %s", engine, request_id)
                return
            ended = True
            yield error_chunk(engine, request_id, exc)
    finally:
        await release(engine, request_id, outputs, None if ended else abort)


async def release(
    engine: str,
    request_id: str,
    outputs: AsyncIterator[Any] | None,
    abort: Callable[[], object] | None,
) -> None:
    """Abort an unfinished request, then close the engine's output stream.

    Runs from the adapter's `finally`, often while a cancellation or `GeneratorExit` is in
    flight, so it is shielded (anyio re-delivers a cancellation at every await inside a
    cancelled scope, which would skip the abort). The abort comes *before* the close: SGLang's
    `generate_request` drops the request's state when its generator is closed, after which
    `abort_request` silently ignores the rid and the scheduler keeps decoding.

    A failing abort is logged, not raised: this code runs while another exception is already
    propagating (the consumer went away), and replacing it would break the caller's cancellation.
    """
    with anyio.CancelScope(shield=True):
        if abort is not None:
            try:
                await _maybe_await(abort())
            except Exception:
                logger.exception("%s could not abort request %s", engine, request_id)
        aclose: Callable[[], Awaitable[object]] | None = getattr(outputs, "aclose", None)
        if aclose is not None:
            try:
                await aclose()
            except Exception:
                logger.exception(
                    "%s's output stream for request %s failed while closing", engine, request_id
                )


async def _maybe_await(result: object) -> None:
    # vLLM's `AsyncLLM.abort` is a coroutine; SGLang's `TokenizerManager.abort_request` is a
    # plain method that only sends a message to the scheduler.
    if inspect.isawaitable(result):
        await result
