"""The contract between the reducer and a grammar, and the helpers every grammar calls.

A grammar (`_grammars/harmony.py` for gpt-oss, `_grammars/thinktags.py` for `<think>` models)
turns one model family's tokens into items: `feed` reads a token and opens, grows or closes
items through `open_next`, `_items.grow`/`append_text` and `close_open`; the reducer
(`_reducer.py`) owns everything else (validation, counting, the terminal event).
`ResponseState` lives here, beside the `Grammar` protocol, because each is defined in terms of
the other. `FinishReason` is defined here once; the engines' chunks use the same one.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple, Protocol

from . import _model as m
from ._fast import replacer
from ._items import ItemKind, OpenItem, Out, close_item, end_call, open_item, settle, summarises
from ._kinds import ItemStatus, Outcome
from ._servertools import NO_SERVER_TOOLS, ServerTools
from ._text import rope_text
from ._vocab import Vocabulary

__all__ = [
    "FINISH_REASONS",
    "FinishReason",
    "Grammar",
    "ResponseState",
    "close_open",
    "open_next",
    "replace_state",
    "settle_call",
]

FinishReason = Literal["stop", "length", "abort", "error", "tool_limit"]
FINISH_REASONS: tuple[FinishReason, ...] = ("stop", "length", "abort", "error", "tool_limit")


class Grammar(Protocol):
    """How one model family's tokens become items (`_grammars/harmony.py`, `thinktags.py`)."""

    @property
    def name(self) -> str: ...

    @property
    def vocabulary(self) -> Vocabulary: ...

    def initial(self) -> Any:
        """The grammar's own parse state at the start of generation."""

    def feed(
        self, state: ResponseState, out: Out, token: int, logprob: float | None, top_logprobs: Any
    ) -> ResponseState:
        """Consume one token (already validated and counted); emit through `out`."""

    def flush(self, state: ResponseState, out: Out, complete: bool) -> ResponseState:
        """At finish: turn anything held back (a half-read header or tag) into items."""


class ResponseState(NamedTuple):
    """Everything the reducer knows between two tokens. Immutable; cheap to copy.

    A NamedTuple rather than an attrs class because one is made for every token: building it
    is one `tuple.__new__` (see `_fast.replacer`; benchmarks/bench_reducer.py measures it).
    """

    grammar: Grammar
    response: m.Response
    seq: int
    output: tuple[m.OutputItem, ...] = ()
    open: OpenItem | None = None
    parse: Any = None
    output_tokens: int = 0
    reasoning_tokens: int = 0
    input_tokens: int = 0
    finished: bool = False
    server_tools: ServerTools = NO_SERVER_TOOLS
    call: OpenItem | None = None  # a server-side call waiting for `tool_result` (`_loop.py`)

    @property
    def next_output_index(self) -> int:
        return len(self.output) + (self.open is not None) + (self.call is not None)


replace_state = replacer(ResponseState)


def open_next(out: Out, state: ResponseState, kind: ItemKind, **identity: Any) -> OpenItem:
    """Open the next item of `state`'s response (its output index and ids follow from the state).

    `identity` is `name`, `server_label` or `phase`, as the kind needs.
    """
    return open_item(
        out,
        kind=kind,
        output_index=state.next_output_index,
        response_id=state.response.id,
        **identity,
    )


def close_open(state: ResponseState, out: Out, *, complete: bool) -> ResponseState:
    """Close the open item, if any, and append it to the output.

    A call the server runs (`state.server_tools`) is not appended: written in full, it becomes
    the pending call that `tool_result` completes.
    """
    item = state.open
    if item is None:
        return state
    if complete and state.server_tools.runs(item.kind, item.server_label):
        pending = end_call(out, item, state.grammar.vocabulary)
        return replace_state(state, open=None, call=pending)
    done = close_item(
        out,
        item,
        state.grammar.vocabulary,
        complete=complete,
        summary=summarises(state.response),
    )
    return replace_state(state, open=None, output=(*state.output, done))


def settle_call(
    state: ResponseState, out: Out, status: ItemStatus, outcome: Outcome | None = None
) -> ResponseState:
    """End the pending call with `status` and append it to the output."""
    call = state.call
    assert call is not None
    done = settle(out, call, rope_text(call.text), status, outcome=outcome)
    return replace_state(state, call=None, output=(*state.output, done))
