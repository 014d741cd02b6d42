"""Issue 30, item 1: only a *strict* schema outside what can be enforced is a 400.

Bug pinned: a non-strict `json_schema` (`strict: false` or absent: the Agents SDK's
`AgentOutputSchema(strict_json_schema=False)`, LangChain's default) holding a keyword llguidance
does not implement (`uniqueItems`, which pydantic writes for a `set[str]`; `not`; a format such
as `binary`) was refused with a 400 ("the schema cannot be enforced"), where the API takes it
and follows it as far as it can. Now such a schema is enforced leniently (llguidance's
`lenient`: what it implements is held, the rest left free); a strict one is still refused.
Over a real socket."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from streamfold.adapters.server import MemoryEventStore, create_app
from streamfold.engines.guidance import validate_grammar
from tests.agent.scripted import ScriptedAgentSource
from tests.server.serving import serve

UNIMPLEMENTED = [
    {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
    {"not": {"type": "integer"}},
    {"type": "string", "format": "binary"},
]


def _schema(prop: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"a": prop, "n": {"type": "integer", "minimum": 1}},
        "required": ["a", "n"],
        "additionalProperties": False,
    }


@pytest.fixture(scope="module")
def served() -> Any:
    source = ScriptedAgentSource({"m": ['<|channel|>final<|message|>{"a":1,"n":1}<|return|>'] * 9})
    with serve(create_app(source.engine(), store=MemoryEventStore())) as url:
        yield url, source


@pytest.mark.parametrize("prop", UNIMPLEMENTED)
@pytest.mark.parametrize("strict", [False, None])
def test_a_non_strict_schema_is_enforced_as_far_as_it_can_be(
    served: tuple[str, ScriptedAgentSource], prop: dict[str, Any], strict: bool | None
) -> None:
    url, source = served
    fmt: dict[str, Any] = {"type": "json_schema", "name": "x", "schema": _schema(prop)}
    if strict is not None:
        fmt["strict"] = strict
    with httpx.Client(timeout=30) as client:
        reply = client.post(
            f"{url}/v1/responses", json={"model": "m", "input": "hi", "text": {"format": fmt}}
        )
    assert reply.status_code == 200, reply.text
    decoding = source.requests[-1].decoding
    assert decoding is not None and validate_grammar(decoding.grammar) is None
    assert '"minimum": 1' in decoding.grammar  # what llguidance implements is still held


def test_a_strict_schema_it_cannot_enforce_is_still_a_400(
    served: tuple[str, ScriptedAgentSource],
) -> None:
    url, _ = served
    fmt = {"type": "json_schema", "name": "x", "strict": True, "schema": _schema(UNIMPLEMENTED[2])}
    with httpx.Client(timeout=30) as client:
        reply = client.post(
            f"{url}/v1/responses", json={"model": "m", "input": "hi", "text": {"format": fmt}}
        )
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == "text.format.schema"
