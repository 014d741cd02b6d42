"""streamfold's own reducer, judged by the checker: every way a response can end is conformant."""

from __future__ import annotations

import pytest

from streamfold.engines.vocab import harmony_encoding, load_harmony_vocabulary
from streamfold.specs import check, format_report
from streamfold.statemachine import HarmonyGrammar, Response, finish, start, step

_CALL = (
    "<|channel|>analysis<|message|>User asks for the weather. Call the tool.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city": "Paris"}<|call|>'
)
_ANSWER = (
    "<|channel|>analysis<|message|>Short answer.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Hello there, world! ☀<|return|>"
)


@pytest.fixture(scope="module")
def grammar() -> HarmonyGrammar:
    return HarmonyGrammar(vocabulary=load_harmony_vocabulary())


@pytest.mark.parametrize(
    ("text", "cut", "reason"),
    [
        (_CALL, None, "stop"),
        (_ANSWER, None, "stop"),
        (_ANSWER, 14, "length"),
        (_ANSWER, 14, "error"),
        (_ANSWER, 14, "abort"),
        (_ANSWER, 3, "length"),  # cut inside the first header
    ],
)
def test_reducer_streams_are_conformant(
    grammar: HarmonyGrammar, text: str, cut: int | None, reason: str
) -> None:
    tokens = harmony_encoding().encode(text, allowed_special="all")[:cut]
    response = Response(id="resp_conf", created_at=1, model="gpt-oss-20b", status="in_progress")
    state, events = start(grammar, response, input_tokens=7)
    for token in tokens:
        state, new = step(state, token, None)
        events += new
    state, new = finish(state, reason, "engine failed" if reason == "error" else None)  # type: ignore[arg-type]
    events += new
    violations = check(events)
    assert violations == [], format_report(violations, event_count=len(events))
    assert len(events) > 3
