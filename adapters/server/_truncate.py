"""`truncation: "auto"`: a request whose prompt is longer than the server's limit
(`ServerLimits.max_input_tokens`, the model's context) loses its oldest input items until it
fits, instead of the 400 that `disabled` (the default) keeps.

Whole items only, never half of one; never the instructions (`instructions` and the input's
`system`/`developer` messages, which harmony folds into its developer message); a call dropped
takes its outputs with it (an output without its call cannot be shown). The newest item always
stays: if the prompt does not fit even then, the 400 stands. How many items go is found by
bisection, so a long conversation costs a few renders, not one per item.
"""

from __future__ import annotations

import attrs

from ..formats import ChatFormat
from ..protocol import (
    CreateRequest,
    CustomToolCallInput,
    CustomToolCallOutputInput,
    FunctionCallInput,
    FunctionCallOutputInput,
    MessageInput,
    RequestError,
)
from ._render import Renderer

__all__ = ["render_truncated", "without_oldest"]

_TOO_LONG = "context_length_exceeded"


def _kept(item: object) -> bool:
    return isinstance(item, MessageInput) and item.role in ("system", "developer")


def without_oldest(request: CreateRequest, count: int) -> CreateRequest:
    """`request` without its `count` oldest droppable input items (and their calls' outputs)."""
    assert isinstance(request.input, tuple)
    droppable = [i for i, item in enumerate(request.input) if not _kept(item)]
    dropped = set(droppable[:count])
    calls = {
        item.call_id
        for i, item in enumerate(request.input)
        if i in dropped and isinstance(item, FunctionCallInput | CustomToolCallInput)
    }
    kept = tuple(
        item
        for i, item in enumerate(request.input)
        if i not in dropped
        and not (
            isinstance(item, FunctionCallOutputInput | CustomToolCallOutputInput)
            and item.call_id in calls
        )
    )
    return attrs.evolve(request, input=kept)


async def render_truncated(
    renderer: Renderer, request: CreateRequest, size: int, chat_format: ChatFormat | None = None
) -> tuple[CreateRequest, tuple[int, ...]]:
    """The request (truncated if it must be and may be) and its prompt, in `chat_format` (the
    renderer's own when None); raises the renderer's `RequestError` when the prompt does not
    fit and cannot be made to."""
    try:
        return request, await renderer.render(request, size, chat_format)
    except RequestError as exc:
        if request.truncation != "auto" or exc.code != _TOO_LONG:
            raise
        if not isinstance(request.input, tuple):
            raise
        droppable = sum(1 for item in request.input if not _kept(item))
        low, high = 1, droppable - 1  # the newest item stays
        best: tuple[CreateRequest, tuple[int, ...]] | None = None
        while low <= high:
            middle = (low + high) // 2
            shorter = without_oldest(request, middle)
            try:
                best = shorter, await renderer.render(shorter, size, chat_format)
                high = middle - 1
            except RequestError as again:
                if again.code != _TOO_LONG:
                    raise
                low = middle + 1
        if best is None:
            raise
        return best
