"""Issue 32: a `store: false` response continued on the same WebSocket connection
(`previous_response_id` of a response the connection remembers) takes its KV blocks from the
native engine's prefix cache, over a real socket with openai-python's `responses.connect()`.

What can be reused is what turn 2's prompt shares with turn 1's prompt and generated tokens:
turn 1's output is re-rendered from its items in turn 2's prompt, so the shared prefix ends at
the first token the renderer writes otherwise than the engine generated it. The tests record
both token sequences at the token-source seam and hold the engine to exactly the whole blocks
of that shared prefix (docs/websocket.md, "Reusing the KV cache", has the numbers).
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest

pytest.importorskip("torch")

from openai import OpenAI

from streamfold.adapters.registry import ENGINES
from streamfold.adapters.server import MemoryEventStore, create_app
from streamfold.engines import GenerationRequest, TokenChunk, TokenSource
from streamfold.engines.native.gptoss.init_model import init_model
from streamfold.engines.vocab import harmony_encoding

from .serving import serve
from .test_native_serve import NATIVE

BLOCK = NATIVE["block_size"]
assert isinstance(BLOCK, int)
COUNT = {
    "type": "function",
    "name": "count",
    "description": "Count to n.",
    "strict": True,
    "parameters": {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["n"],
        "additionalProperties": False,
    },
}
#: A prompt of 15 blocks: turn 1's prompt with the call tool ends 4 tokens before a block
#: boundary, so turn 2 reuses a block holding turn 1's first output tokens as well.
INSTRUCTIONS = " ".join(f"alpha{i}" for i in range(63))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_model(tmp_path_factory.mktemp("model") / "tiny", seed=7, dtype="float32")


@attrs.define
class Recording:
    """The engine's source, keeping each request's prompt and generated tokens by its id
    (the response id)."""

    inner: TokenSource
    seen: dict[str, tuple[tuple[int, ...], list[int]]] = attrs.Factory(dict)

    async def generate(self, request: GenerationRequest) -> AsyncIterator[TokenChunk]:
        generated: list[int] = []
        self.seen[request.request_id] = (request.prompt_token_ids, generated)
        chunks = self.inner.generate(request)
        try:
            async for chunk in chunks:
                generated.extend(chunk.token_ids)
                yield chunk
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]


def _until_end(connection: Any) -> Any:
    for event in connection:
        if event.type in ("response.completed", "response.incomplete", "response.failed"):
            return event.response
        assert event.type != "error", event
    raise AssertionError("the connection closed before the response ended")


def _two_turns(model_dir: Path, *, call: bool, prefix_cache: bool = True) -> dict[str, Any]:
    """Turn 1 (`store: false`) and turn 2 continuing it on the same connection: their usage,
    turn 1's prompt and generated tokens, and turn 2's prompt."""
    options = dict(NATIVE, no_prefix_cache=not prefix_cache)
    engine = ENGINES["native"](argparse.Namespace(model=str(model_dir), **options))
    assert engine.keeps_prefixes is prefix_cache
    recording = Recording(engine.source)
    app = create_app(attrs.evolve(engine, source=recording), store=MemoryEventStore())
    create: dict[str, Any] = {
        "model": "tiny",
        "instructions": INSTRUCTIONS,  # sent again each turn, as Codex does
        "store": False,
        "temperature": 0,
    }
    if call:  # the model must call `count` (its arguments held to the schema)
        first: dict[str, Any] = {"tools": [COUNT], "tool_choice": "required"}
    else:  # the model must answer, in JSON: harmony on the random weights too
        schema = {"type": "json_schema", "name": "n", "strict": True}
        first = {"text": {"format": {**schema, "schema": COUNT["parameters"]}}}
    with serve(app) as url:
        client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=120)
        with client.responses.connect() as connection:
            connection.response.create(**create, **first, input="Hi", max_output_tokens=40)
            one = _until_end(connection)
            assert one.status == "completed", one
            if call:
                (made,) = [item for item in one.output if item.type == "function_call"]
                follow: Any = [
                    {"type": "function_call_output", "call_id": made.call_id, "output": "3"}
                ]
                then = {"tools": [COUNT]}
            else:
                follow, then = "Again", first  # the same developer message
            connection.response.create(
                **create, **then, input=follow, previous_response_id=one.id, max_output_tokens=2
            )
            two = _until_end(connection)
    prompt_1, generated_1 = recording.seen[one.id]
    prompt_2, _ = recording.seen[two.id]
    shared = 0
    for a, b in zip((*prompt_1, *generated_1), prompt_2, strict=False):
        if a != b:
            break
        shared += 1
    return {
        "one": one.usage,
        "two": two.usage,
        "prompt_1": prompt_1,
        "generated_1": generated_1,
        "prompt_2": prompt_2,
        "shared": shared,
    }


def _reusable(turns: dict[str, Any]) -> int:
    """The tokens turn 2 can take from the cache: the whole blocks of what it shares with
    turn 1, whose K/V were computed (all but turn 1's last token, drawn and never fed back),
    leaving turn 2 one token to compute."""
    computed = len(turns["prompt_1"]) + len(turns["generated_1"]) - 1
    most = min(turns["shared"], computed, len(turns["prompt_2"]) - 1)
    return most // BLOCK * BLOCK


def test_continuing_a_call_on_the_socket_reuses_its_prompt_and_kept_reasoning(
    model_dir: Path,
) -> None:
    """Turn 1 ends in a function call: harmony keeps that turn's reasoning in turn 2's prompt
    (it drops reasoning only from turns that ended in an answer), so the shared prefix runs
    through turn 1's whole prompt and its analysis message, into the call's header."""
    turns = _two_turns(model_dir, call=True)
    prompt_1, generated_1 = turns["prompt_1"], turns["generated_1"]
    assert turns["prompt_2"][: len(prompt_1)] == prompt_1
    encoding = harmony_encoding()
    end, start = (encoding.encode(t, allowed_special="all")[0] for t in ("<|end|>", "<|start|>"))
    analysis = generated_1.index(end) + 3  # `<|end|><|start|>assistant`
    assert encoding.decode(generated_1[:2]) == "<|channel|>analysis"
    assert generated_1[analysis - 2] == start
    assert turns["shared"] >= len(prompt_1) + analysis
    cached = turns["two"].input_tokens_details.cached_tokens
    # All of turn 1's prompt, and (whole blocks) of its output as well: 240 of its 260 tokens
    # on this model, the rest being the block the shared prefix ends in.
    assert cached == _reusable(turns) > len(prompt_1), turns


def test_continuing_an_answer_on_the_socket_reuses_its_prompt(model_dir: Path) -> None:
    """Turn 1 reasons and answers: gpt-oss's prompts drop the reasoning of turns that ended
    in an answer (openai-harmony's `auto_drop_analysis`), so turn 2's prompt writes turn 1's
    answer where turn 1 generated its analysis: the shared prefix ends one token into turn 1's
    output (`<|channel|>`, then `analysis` against `final`)."""
    turns = _two_turns(model_dir, call=False)
    prompt_1 = turns["prompt_1"]
    assert turns["prompt_2"][: len(prompt_1)] == prompt_1
    assert turns["shared"] == len(prompt_1) + 1
    cached = turns["two"].input_tokens_details.cached_tokens
    assert cached == _reusable(turns) == len(prompt_1) // BLOCK * BLOCK, turns


def test_without_the_prefix_cache_a_continuation_computes_its_whole_prompt(
    model_dir: Path,
) -> None:
    turns = _two_turns(model_dir, call=True, prefix_cache=False)
    assert turns["shared"] > len(turns["prompt_1"])  # the same prompts ...
    assert turns["two"].input_tokens_details.cached_tokens == 0  # ... and nothing reused
