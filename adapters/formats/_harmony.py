"""gpt-oss's chat format, harmony, as one object: `HARMONY`.

It renders prompts with `_harmony_prompt.py` (openai-harmony's layout, with a fast path for
the common prompt), stops on `<|return|>` and `<|call|>`, reads the output with the reducer's
`HarmonyGrammar`, and writes a request's constraint as one grammar over its whole completion.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from streamfold.engines import DecodingConstraint
from streamfold.statemachine import HarmonyGrammar
from streamfold.statemachine._grammar import Grammar

from ..protocol import CreateRequest
from ..structured import budget_shape, harmony_grammar, shape_for
from ._harmony_prompt import render_prompt, stop_token_ids

__all__ = ["HARMONY", "HarmonyFormat"]


class HarmonyFormat:
    """harmony (gpt-oss): see the module docstring. Holds no state, so a worker process that
    receives it pickled renders exactly as the server would."""

    name = "harmony"

    def render(
        self, request: CreateRequest, namespaces: Sequence[Any] = (), after: Sequence[Any] = ()
    ) -> tuple[int, ...]:
        """`namespaces`: openai-harmony `ToolNamespaceConfig`s for the system message;
        `after`: harmony messages that follow the input (an approved call and its result)."""
        return render_prompt(request, namespaces, after)

    def stop_token_ids(self) -> tuple[int, ...]:
        return stop_token_ids()

    def stop_token_ids_for(self, request: CreateRequest) -> tuple[int, ...]:
        """The turn ends whatever `request` asks: a completion that calls a tool already
        stops at its `<|call|>`, one call per completion."""
        return self.stop_token_ids()

    def load(self) -> None:
        from streamfold.engines.vocab import harmony_encoding

        harmony_encoding()

    def grammar(self) -> Grammar:
        """A live model offered no tools that writes a tool call anyway is hallucinating it:
        its message is read by channel (bug 54)."""
        from streamfold.engines.vocab import load_harmony_vocabulary

        return HarmonyGrammar(
            vocabulary=load_harmony_vocabulary(), ignore_recipients_without_tools=True
        )

    def constraint_for(
        self, request: CreateRequest, *, after_call: bool = False
    ) -> DecodingConstraint | None:
        """One grammar over the whole completion (`structured.harmony_grammar`): reasoning
        free and bounded by the budget, then the answer or call the request allows."""
        shape = budget_shape(shape_for(request, after_call=after_call), request.max_output_tokens)
        if shape.free:
            return None
        return DecodingConstraint(grammar=harmony_grammar(shape), summary=shape.summary)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


#: The harmony format (one is enough: it holds no state).
HARMONY = HarmonyFormat()
