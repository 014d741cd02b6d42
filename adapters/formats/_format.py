"""The chat format: what one model family reads and writes, as one object.

A model family (gpt-oss's harmony; a think-tag model's chat template) decides four things the
rest of streamfold must agree on, and they live together here so that adding a family is one
module:

- `render(request, ...)`: the prompt, as token ids, for the assistant's next turn;
- `stop_token_ids()`: the tokens that end an assistant turn; `stop_token_ids_for(request)`:
  those one request's generation stops on (the engine's `stop_token_ids`: a think-tag model
  allowed one call stops after it);
  `load()` readies rendering (a worker process calls it before its first timed render);
- `grammar()`: the reducer's `Grammar` that reads what a live model of the family writes;
- `constraint_for(request)`: the grammar a request asks the whole completion to follow
  (structured outputs, `tool_choice`), or None.

An `Engine` names its format (`registry.Engine.format`); the server renders, stops and reads
through it and never guesses a family from a model name. A family whose prompt is a Hugging
Face chat template (Qwen3, Hermes: think tags) is one more module beside `_harmony.py`, a
`ChatTemplateFormat` whose grammar is the `ThinkTagGrammar`.

The constraint seam: `constraint_for` turns what a request asks for (`text.format`,
`tool_choice`, strict and custom tools; as a family-independent `structured.Shape`) into a
`DecodingConstraint`: one grammar over the family's whole completion, its own control tokens
included (harmony: free reasoning, then JSON only inside the `final` message's content, or a
call to an allowed tool with its input following its schema). The server passes it as
`GenerationRequest(decoding=...)`; each engine enforces it its own way (the native engine with
llguidance, one token mask per row of the batch).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from streamfold.engines import DecodingConstraint
from streamfold.statemachine._grammar import Grammar

from ..protocol import CreateRequest

__all__ = ["ChatFormat"]


@runtime_checkable
class ChatFormat(Protocol):
    """One model family's prompt, stop tokens, reducer grammar and constraint placement."""

    @property
    def name(self) -> str:
        """The family's name, as a trace header's `"grammar"` says it (`"harmony"`)."""
        ...

    def render(
        self, request: CreateRequest, namespaces: Sequence[Any] = (), after: Sequence[Any] = ()
    ) -> tuple[int, ...]:
        """The prompt token ids for the assistant's next turn.

        `namespaces`: the server-side tools the model is shown (format-specific values);
        `after`: messages that follow the input (the agent loop's call and its result)."""
        ...

    def stop_token_ids(self) -> tuple[int, ...]:
        """The tokens that end an assistant turn."""
        ...

    def stop_token_ids_for(self, request: CreateRequest) -> tuple[int, ...]:
        """The tokens `request`'s generation stops on: the turn ends, and any the request
        adds (a think-tag model allowed one call, `parallel_tool_calls: false`, stops at the
        end of its first)."""
        ...

    def grammar(self) -> Grammar:
        """The reducer's grammar for a live model of this family."""
        ...

    def load(self) -> None:
        """Load what rendering needs (a vocabulary), so a worker process's first timed render
        does not pay for it."""
        ...

    def constraint_for(
        self, request: CreateRequest, *, after_call: bool = False
    ) -> DecodingConstraint | None:
        """The grammar `request` asks the completion to follow; None when it asks nothing.
        `after_call`: a generation after a call the server ran (`required` relaxes to `auto`)."""
        ...
