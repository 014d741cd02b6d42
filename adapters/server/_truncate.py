"""`truncation: "auto"`: a request whose prompt is longer than the server's limit
(`ServerLimits.max_input_tokens`, the model's context) loses its oldest input items until it
fits, instead of the 400 that `disabled` (the default) keeps.

Whole items only, never half of one; never the instructions (`instructions`, and the input's
`system`/`developer` messages and `additional_tools`, which harmony folds into its developer
message). A call and its answers go together (`ANSWERS`, the protocol layer's table: an output
without its call cannot be shown), whichever of them is reached first; an answer that names no
call (a `tool_search_output` without `call_id`) answers the latest call of its kind that names
none either. The newest item of the conversation always stays, and so does its call: if the
prompt does not fit even then, the 400 stands. How many items go is found by bisection, so a
long conversation costs a few renders, not one per item.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from ..formats import ChatFormat
from ..protocol import ANSWERS, AdditionalToolsInput, CreateRequest, MessageInput, RequestError
from ._render import Renderer

__all__ = ["render_truncated", "without_oldest"]

_TOO_LONG = "context_length_exceeded"
#: Each call kind that `ANSWERS` names, and the field its answers name it by.
_CALL_KEYS = {answers.call: answers.call_key for answers in ANSWERS.values()}


def _kept(item: object) -> bool:
    """Whether `item` is part of the instructions (never dropped)."""
    return isinstance(item, AdditionalToolsInput) or (
        isinstance(item, MessageInput) and item.role in ("system", "developer")
    )


def _together(items: Sequence[object]) -> list[frozenset[int]]:
    """For each item, the items that go with it: itself, and for a call or an answer, the
    call and all its answers."""
    groups: dict[object, set[int]] = {}
    named: list[object] = []
    keyless: dict[str, int] = {}  # the latest call of each kind that names no key
    for i, item in enumerate(items):
        kind = getattr(item, "type", None)
        group: object = i
        if kind in _CALL_KEYS:
            key = getattr(item, _CALL_KEYS[kind])
            if key is None:
                keyless[kind] = i
            else:
                group = (kind, key)
        elif kind in ANSWERS:
            call, _, field = ANSWERS[kind]
            key = getattr(item, field)
            group = keyless.get(call, i) if key is None else (call, key)
        groups.setdefault(group, set()).add(i)
        named.append(group)
    return [frozenset(groups[group]) for group in named]


def _droppable(items: Sequence[object], together: Sequence[frozenset[int]]) -> list[int]:
    """The items that may go, oldest first: the conversation but its newest item's group."""
    conversation = [i for i, item in enumerate(items) if not _kept(item)]
    newest = together[conversation[-1]] if conversation else frozenset()
    return [i for i in conversation if i not in newest]


def _dropping(request: CreateRequest) -> tuple[int, Callable[[int], CreateRequest]]:
    """How many input items may go, and `count -> request` without its `count` oldest of
    them and what goes with them: the groups are found once per request, however many
    counts the bisection tries."""
    assert isinstance(request.input, tuple)
    items = request.input
    together = _together(items)
    droppable = _droppable(items, together)

    def without(count: int) -> CreateRequest:
        dropped = frozenset[int]().union(*(together[i] for i in droppable[:count]))
        kept = tuple(item for i, item in enumerate(items) if i not in dropped)
        return attrs.evolve(request, input=kept)

    return len(droppable), without


def without_oldest(request: CreateRequest, count: int) -> CreateRequest:
    """`request` without its `count` oldest droppable input items, and what goes with them."""
    return _dropping(request)[1](count)


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
        high, without = _dropping(request)
        low = 1
        best: tuple[CreateRequest, tuple[int, ...]] | None = None
        while low <= high:
            middle = (low + high) // 2
            shorter = without(middle)
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
