"""gpt-oss's chat format, harmony, as one object: `HARMONY`.

It renders prompts with `_harmony_prompt.py` (openai-harmony's layout, with a fast path for
the common prompt), stops on `<|return|>` and `<|call|>`, reads the output with the reducer's
`HarmonyGrammar`, and places a decoding constraint in the `final` channel's content.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from streamfold.statemachine import HarmonyGrammar
from streamfold.statemachine._grammar import Grammar

from ..protocol import CreateRequest
from ._format import Constraint
from ._harmony_prompt import render_prompt, stop_token_ids

__all__ = ["FINAL", "HARMONY", "HarmonyFormat"]

#: The region of harmony's output a constraint holds: the content of the message on the
#: `final` channel (`<|channel|>final<|message|>` ... `<|return|>`), the answer the client
#: reads. The `analysis` channel and tool calls (`to=...` on `commentary`) stay free.
FINAL = "final"


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

    def constraint_for(self, request: CreateRequest) -> Constraint | None:
        """None: structured outputs are not read from requests yet. When they are, a JSON
        schema format becomes `Constraint(region=FINAL, json_schema=...)`."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


#: The harmony format (one is enough: it holds no state).
HARMONY = HarmonyFormat()
