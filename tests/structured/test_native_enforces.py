"""The native engine enforces a harmony grammar on the tiny random-weight gpt-oss.

With random weights the model writes noise: only a working constraint makes its completions
valid. So every sampled completion (temperature 1.0, several seeds, a few hundred tokens) must
read, through the reducer, as reasoning followed by the answer or call the shape demands, and a
JSON answer must validate against a nested strict schema with bounds.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import jsonschema
import pytest

from streamfold.adapters.driver import fold
from streamfold.adapters.structured import Call, JsonBody, Shape, budget_shape, harmony_grammar
from streamfold.engines import DecodingConstraint, GenerationRequest, SamplingParams
from streamfold.engines.native import build_native_engine
from streamfold.engines.native.gptoss.init_model import init_model
from streamfold.engines.vocab import harmony_encoding, load_harmony_vocabulary
from streamfold.statemachine import FunctionTool, HarmonyGrammar, Response

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z]{2,8}$"},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "kind": {"type": "string", "enum": ["cat", "dog", "fish"]},
        "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}, "minItems": 1, "maxItems": 3},
    },
    "required": ["name", "age", "kind", "tags"],
    "additionalProperties": False,
    "$defs": {
        "tag": {
            "type": "object",
            "properties": {"code": {"type": "string", "pattern": "^[A-Z][0-9]{2}$"}},
            "required": ["code"],
            "additionalProperties": False,
        }
    },
}
WEATHER = Call(
    recipient="functions.get_weather",
    body=JsonBody(
        schema={
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
            "required": ["city"],
            "additionalProperties": False,
        }
    ),
)
OTHER = Call(
    recipient="functions.get_time",
    body=JsonBody(
        schema={
            "type": "object",
            "properties": {"zone": {"type": "string", "pattern": "^[A-Z]{3}$"}},
            "required": ["zone"],
            "additionalProperties": False,
        }
    ),
)
BUDGET = 300
SEEDS = range(4)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Any:
    model = init_model(tmp_path_factory.mktemp("model") / "tiny", seed=3, dtype="float32")
    with build_native_engine(model, threads=1) as native:
        yield native


def _prompt() -> tuple[int, ...]:
    text = (
        "<|start|>system<|message|>You are a test.<|end|>"
        "<|start|>user<|message|>Describe a pet.<|end|><|start|>assistant"
    )
    return tuple(harmony_encoding().encode(text, allowed_special="all"))


def _generate(engine: Any, shape: Shape, seed: int) -> Response:
    grammar = harmony_grammar(budget_shape(shape, BUDGET))
    request = GenerationRequest(
        request_id=f"r{seed}",
        prompt_token_ids=_prompt(),
        max_output_tokens=BUDGET,
        sampling=SamplingParams(temperature=1.0, seed=seed),
        stop_token_ids=(200002, 200012),
        decoding=DecodingConstraint(grammar=grammar),
    )

    async def run() -> list[Any]:
        return [chunk async for chunk in engine.generate(request)]

    chunks = anyio.run(run)
    reason = chunks[-1].finish_reason
    assert reason in ("stop", "length"), chunks[-1]
    tools = tuple(
        FunctionTool(name=c.recipient.removeprefix("functions.")) for c in shape.calls or ()
    )
    start = Response(id="resp_t", created_at=0, model="tiny", status="in_progress", tools=tools)
    grammar = HarmonyGrammar(vocabulary=load_harmony_vocabulary())
    events = list(fold(grammar, start, chunks, reason))
    final: Response = events[-1].response  # type: ignore[attr-defined]
    return final


def _kinds(response: Response) -> list[str]:
    return [item.type for item in response.output]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_json_schema_answer_always_validates_and_keeps_its_reasoning(
    engine: Any, seed: int
) -> None:
    response = _generate(engine, Shape(answer=JsonBody(schema=SCHEMA), calls=()), seed)
    assert response.status == "completed", response
    kinds = _kinds(response)
    assert kinds[0] == "reasoning" and kinds[-1] == "message", kinds
    assert "function_call" not in kinds
    text = response.output[-1].content[0].text  # type: ignore[union-attr]
    jsonschema.validate(json.loads(text), SCHEMA)


@pytest.mark.parametrize("seed", SEEDS)
def test_required_always_ends_in_an_allowed_call(engine: Any, seed: int) -> None:
    response = _generate(engine, Shape(answer=None, calls=(WEATHER, OTHER)), seed)
    calls = [item for item in response.output if item.type == "function_call"]
    assert _kinds(response)[0] == "reasoning"
    assert len(calls) == 1, _kinds(response)
    assert calls[0].name in ("get_weather", "get_time")  # type: ignore[union-attr]
    schema = (WEATHER if calls[0].name == "get_weather" else OTHER).body.schema  # type: ignore
    jsonschema.validate(json.loads(calls[0].arguments), schema)  # type: ignore[union-attr]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_named_tool_is_the_only_call(engine: Any, seed: int) -> None:
    response = _generate(engine, Shape(answer=None, calls=(WEATHER,)), seed)
    calls = [item for item in response.output if item.type == "function_call"]
    assert [c.name for c in calls] == ["get_weather"]  # type: ignore[union-attr]


@pytest.mark.parametrize("seed", SEEDS)
def test_none_never_calls(engine: Any, seed: int) -> None:
    shape = Shape(
        answer=JsonBody(
            schema={
                "type": "object",
                "properties": {"ok": {"type": "boolean"}},
                "required": ["ok"],
                "additionalProperties": False,
            }
        ),
        calls=(),
    )
    response = _generate(engine, shape, seed)
    assert "function_call" not in _kinds(response)
    assert response.status == "completed"


def _chunks(engine: Any, grammar: str, names: list[str]) -> dict[str, list[Any]]:
    """Each request's chunks, the requests sent together (16 tokens, one grammar)."""
    out: dict[str, list[Any]] = {}

    async def one(name: str) -> None:
        request = GenerationRequest(
            request_id=name,
            prompt_token_ids=_prompt(),
            max_output_tokens=16,
            sampling=SamplingParams(temperature=1.0, seed=len(out)),
            decoding=DecodingConstraint(grammar=grammar),
        )
        out[name] = [chunk async for chunk in engine.generate(request)]

    async def run() -> None:
        async with anyio.create_task_group() as group:
            for name in names:
                group.start_soon(one, name)

    anyio.run(run)
    return out


def test_a_compiled_grammar_is_not_sent_to_a_worker_thread(
    engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug: every constrained request compiled (or copied from the cache) its grammar in a
    worker thread, so requests sent together with free ones were added a step after them (one
    more step per 16 requests, its first a prefill: ~3% of bench_constrained's tokens/s at 32
    tokens each). A grammar compiled before is copied on the event loop, in microseconds."""
    grammar = harmony_grammar(budget_shape(Shape(answer=JsonBody(schema=SCHEMA)), BUDGET))
    hops: list[object] = []
    original = anyio.to_thread.run_sync

    async def counted(func: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(func)
        return await original(func, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counted)
    _chunks(engine, grammar + "\n// a new grammar", ["first"])
    assert len(hops) == 1  # a new grammar compiles in a worker thread
    hops.clear()
    out = _chunks(engine, grammar + "\n// a new grammar", [f"again{i}" for i in range(4)])
    assert hops == []
    assert all(chunks[-1].finish_reason == "length" for chunks in out.values()), out


def test_a_grammar_that_does_not_compile_ends_its_request_with_an_error(engine: Any) -> None:
    out = _chunks(engine, "start: ( unclosed", ["bad"])
    assert [c.finish_reason for c in out["bad"]] == ["error"]
    assert "does not compile" in (out["bad"][0].error or "")


def test_the_batch_fill_writes_what_each_row_would_and_names_a_failed_row() -> None:
    """`GuidanceConstraint.fill_batch` (one llguidance call for all rows, the engine's path) gives
    every row the mask its own `fill_bitmask` gives, over rows in different states, and
    reports a matcher in error as that row's failure alone."""
    import torch

    from streamfold.engines.guidance import GuidanceConstraint, guidance_for

    guidance = guidance_for(load_harmony_vocabulary())
    grammar = harmony_grammar(budget_shape(Shape(answer=JsonBody(schema=SCHEMA)), BUDGET))
    encoding = harmony_encoding()
    texts = [
        "",
        "<|channel|>analysis<|message|> the pet",
        '<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>final<|message|>{"na',
    ]
    rows = []
    for text in texts:
        constraint = GuidanceConstraint(guidance.matcher(grammar))
        for token in encoding.encode(text, allowed_special="all"):
            constraint.advance(token)
        rows.append(constraint)
    broken = GuidanceConstraint(guidance.matcher(grammar))
    broken._matcher.consume_token(17196)  # "final" before any channel: the matcher errs
    one_by_one = torch.full((4, guidance.row_words), -1, dtype=torch.int32)
    for row, constraint in enumerate(rows):
        constraint.fill_bitmask(one_by_one, row)
    batched = torch.full((4, guidance.row_words), -1, dtype=torch.int32)
    failed = GuidanceConstraint.fill_batch(batched, [*enumerate(rows), (3, broken)])
    assert torch.equal(batched[:3], one_by_one[:3])
    assert list(failed) == [3] and "final" in str(failed[3])
