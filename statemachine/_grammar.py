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
from ._items import ItemKind, OpenItem, Out, close_item, open_item
from ._vocab import Vocabulary

__all__ = [
    "FINISH_REASONS",
    "FinishReason",
    "Grammar",
    "ResponseState",
    "close_open",
    "open_next",
    "replace_state",
]

FinishReason = Literal["stop", "length", "abort", "error"]
FINISH_REASONS: tuple[FinishReason, ...] = ("stop", "length", "abort", "error")


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

    @property
    def next_output_index(self) -> int:
        return len(self.output) + (self.open is not None)


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
    """Close the open item, if any, and append it to the output."""
    if state.open is None:
        return state
    done = close_item(out, state.open, state.grammar.vocabulary, complete=complete)
    return replace_state(state, open=None, output=(*state.output, done))
