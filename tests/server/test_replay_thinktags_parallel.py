"""Parallel calls of a think-tag model under `tool_choice`, over a real socket.

Bug pinned: the grammar a constrained think-tag request hands its engine let the completion end
with one `<tool_call>` block only, whatever `parallel_tool_calls` said; an engine enforcing it
(vLLM, SGLang) cut off the second call Qwen3 writes. Here `streamfold serve --engine replay`
replays a Qwen-style completion with two calls: the grammar the engine is handed (fed token by
token to llguidance's matcher, as those engines' backends do) takes that completion, and the
response holds both as `function_call` items with their own ids and output indices, its stream
passing the checker (R32 included). With `parallel_tool_calls: false` the grammar refuses the
second call, and the engine, stopping at `</tool_call>` as a live one does (the replay wrapped,
`Stopping`), returns the first alone (R34).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from streamfold.adapters.server import create_app
from streamfold.engines.guidance import guidance_for
from streamfold.engines.vocab_hf import load_tokenizer_json
from tests.adapters.chat_template_model import build_model_dir
from tests.structured.test_thinktags_grammar import TOOLS
from tests.structured.test_thinktags_parallel import THOUGHT, TIME, WEATHER

from .serving import serve
from .test_replay_thinktags import replay_served, streamed, write_conversation

transformers = pytest.importorskip("transformers")

NAMED = {"type": "function", "name": "get_time"}
#: tool_choice: (the calls the model writes, the functions they come back as calls of)
CASES: dict[str, tuple[Any, list[str], list[str]]] = {
    "required": ("required", [WEATHER, TIME], ["get_weather", "get_time"]),
    "named": (NAMED, [TIME, TIME], ["get_time", "get_time"]),
}


def _completion(calls: list[str]) -> str:
    """As Qwen3 writes parallel calls: a newline between them."""
    return THOUGHT + "\n".join(calls) + "<|im_end|>"


def _grammar_takes(model_dir: Path, grammar: str, text: str) -> bool:
    vocabulary = load_tokenizer_json(model_dir / "tokenizer.json")
    matcher = guidance_for(vocabulary).matcher(grammar)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    ids = tokenizer.encode(text, add_special_tokens=False)
    return all(matcher.consume_token(t) for t in ids) and bool(
        matcher.is_stopped() or matcher.is_accepting()
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_two_calls_in_one_completion_come_back_as_two_function_calls(
    tmp_path: Path, case: str
) -> None:
    choice, written, names = CASES[case]
    turn = _completion(written)
    model_dir = build_model_dir(tmp_path / "traces" / "qwenish")
    write_conversation(model_dir, [turn])
    engine, recording = replay_served(tmp_path / "traces", stops=True)
    body: dict[str, Any] = {"model": "qwenish", "tools": TOOLS, "tool_choice": choice}
    with serve(create_app(engine)) as url:
        events, response = streamed(url, {**body, "input": "Weather and time?"})
        _, serial = streamed(url, {**body, "input": "Once.", "parallel_tool_calls": False})
    decoding = recording.seen[0].decoding
    assert decoding is not None
    assert _grammar_takes(model_dir, decoding.grammar, turn)
    assert response["status"] == "completed"
    calls = [item for item in response["output"] if item["type"] == "function_call"]
    assert [call["name"] for call in calls] == names
    assert len({c["call_id"] for c in calls}) == len({c["id"] for c in calls}) == 2
    added = [
        (e["output_index"], e["item"]["type"])
        for e in events
        if e["type"] == "response.output_item.added"
    ]
    assert added == [(0, "reasoning"), (1, "function_call"), (2, "function_call")]
    # `parallel_tool_calls: false`: the grammar the engine gets refuses the second call (the
    # replay engine enforces nothing and serves the recording as it is).
    serial_decoding = recording.seen[1].decoding
    assert serial_decoding is not None
    assert serial["parallel_tool_calls"] is False
    assert [c["name"] for c in serial["output"] if c["type"] == "function_call"] == names[:1]
    assert not _grammar_takes(model_dir, serial_decoding.grammar, turn)
    assert _grammar_takes(model_dir, serial_decoding.grammar, _completion(written[:1]))
