"""The chat format: what one model family reads and writes, as one object.

A model family (gpt-oss's harmony; a think-tag model's chat template) decides four things the
rest of streamfold must agree on, and they live together here so that adding a family is one
module:

- `render(request, ...)`: the prompt, as token ids, for the assistant's next turn;
- `stop_token_ids()`: the tokens that end an assistant turn (the engine stops on them);
  `load()` readies rendering (a worker process calls it before its first timed render);
- `grammar()`: the reducer's `Grammar` that reads what a live model of the family writes;
- `constraint_for(request)`: the decoding constraint a request asks for (structured outputs),
  and where in the family's output it applies, or None.

An `Engine` names its format (`registry.Engine.format`); the server renders, stops and reads
through it and never guesses a family from a model name. A family whose prompt is a Hugging
Face chat template (Qwen3, Hermes: think tags) is one more module beside `_harmony.py`, a
`ChatTemplateFormat` whose grammar is the `ThinkTagGrammar`.

The constraint seam: `constraint_for` returns a `Constraint` naming the `region` of the
output that the constraint holds (harmony: `"final"`, the content of the message on the
`final` channel; the analysis and any tool call stay free) and what it holds it to. The format
that knows its own token layout is the one to turn that into the engine's per-sequence
`streamfold.engines.LogitsConstraint` (for example an llguidance grammar that leaves the
analysis free and enters the JSON schema once `<|channel|>final<|message|>` has been written),
which the server passes as `GenerationRequest(constraint=...)`; the engine masks each row of
the batch before sampling. No format constrains anything yet: `constraint_for` returns None
until structured outputs (`text.format`) are read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from streamfold.statemachine._grammar import Grammar

from ..protocol import CreateRequest

__all__ = ["ChatFormat", "Constraint"]


@attrs.frozen(kw_only=True)
class Constraint:
    """A decoding constraint on one generation: where in the output it applies, and to what.

    `region` is a name the format defines for a part of its output (harmony: `"final"`).
    `json_schema` is the JSON schema the region's text must match; None means any JSON value.
    `name` and `strict` are the request's own (`text.format`), kept for the engine's errors.
    """

    region: str
    json_schema: Mapping[str, object] | None = None
    name: str | None = None
    strict: bool = False


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

    def grammar(self) -> Grammar:
        """The reducer's grammar for a live model of this family."""
        ...

    def load(self) -> None:
        """Load what rendering needs (a vocabulary), so a worker process's first timed render
        does not pay for it."""
        ...

    def constraint_for(self, request: CreateRequest) -> Constraint | None:
        """The decoding constraint `request` asks for and where it applies; None: none."""
        ...
