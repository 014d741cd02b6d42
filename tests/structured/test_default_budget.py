"""Issue 30, item 7: a constrained response finishes inside its budget, also when the budget
is the engine's default (`--default-max-output-tokens`, the native engine's 4,096).

Bug pinned: a request without `max_output_tokens` (openai-python's `responses.parse`, the
Agents SDK and pydantic-ai send none by default) was generated under the engine's cap, echoed
as its `max_output_tokens`, but its grammar was budgeted against no budget: reasoning was left
unbounded, so a model that does not end its reasoning (random weights: `<|end|>` about once in
a million tokens) spent the whole cap there and never reached the answer. Over a real socket."""

from __future__ import annotations

from typing import Any

import attrs
import httpx

from streamfold.adapters.server import MemoryEventStore, create_app
from tests.agent.scripted import ScriptedAgentSource
from tests.server.serving import serve

PET = {
    "type": "object",
    "properties": {"name": {"type": "string", "pattern": "^[a-z]{2,8}$"}},
    "required": ["name"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "name": "pet", "strict": True, "schema": PET}
ANSWER = (
    "<|channel|>analysis<|message|>ok<|end|>"
    '<|start|>assistant<|channel|>final<|message|>{"name":"rex"}<|return|>'
)


def _grammars(*bodies: dict[str, Any], cap: int) -> list[str]:
    source = ScriptedAgentSource({"m": [ANSWER]})
    engine = attrs.evolve(source.engine(), max_output_tokens=cap)
    with serve(create_app(engine, store=MemoryEventStore())) as url, httpx.Client() as client:
        for body in bodies:
            reply = client.post(f"{url}/v1/responses", json={"model": "m", "input": "hi", **body})
            assert reply.status_code == 200, reply.text
            assert reply.json()["max_output_tokens"] == body.get("max_output_tokens", cap)
    grammars = []
    for request in source.requests:
        assert request.decoding is not None
        grammars.append(request.decoding.grammar)
    return grammars


def test_the_engines_default_budget_bounds_the_reasoning() -> None:
    unset, explicit, larger = _grammars(
        {"text": {"format": FORMAT}},
        {"text": {"format": FORMAT}, "max_output_tokens": 300},
        {"text": {"format": FORMAT}, "max_output_tokens": 3000},
        cap=300,
    )
    assert unset == explicit  # budgeted as the 300 tokens it is generated under
    assert unset != larger
