"""`parallel_tool_calls: false` for a think-tag model that nothing else constrains, over a
real socket.

Bug pinned: with `parallel_tool_calls: false` and no constraint (no `tool_choice`, strict tool
or `text.format`), the engine was handed the turn ends alone as stop ids, so a Qwen3 that wrote
two `<tool_call>` blocks had both come back, where the API allows one call. Now the request's
stop ids hold `</tool_call>` (one token of the vocabulary), so the engine stops after the first
call, and the response completes with that one `function_call`, whether the engine keeps its
stop token in the output (vLLM, the native engine) or leaves it out and names it in
`stop_reason`. The replay engine serves its recording whole whatever the stop ids say, so here
it is wrapped to stop as those engines do (`Stopping`); `streamfold serve --engine replay` replays a
completion with two calls, and every stream passes the checker.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from streamfold.adapters.registry import Engine
from streamfold.adapters.server import create_app
from tests.adapters.chat_template_model import build_model_dir
from tests.structured.test_thinktags_parallel import THOUGHT, TIME, WEATHER

from .serving import serve
from .test_replay_thinktags import Recording, replay_served, streamed, write_conversation

transformers = pytest.importorskip("transformers")

#: What the model writes: two calls, as Qwen3 writes parallel calls.
TURN = f"{THOUGHT}{WEATHER}\n{TIME}<|im_end|>"
#: Tools that ask for no constraint (not strict).
TOOLS = [
    {"type": "function", "name": name, "parameters": {"type": "object"}}
    for name in ("get_weather", "get_time")
]


def _served(tmp_path: Path, keep: bool) -> tuple[Engine, Recording, int]:
    """The replay engine of `TURN`, its source stopping at stop ids (`Stopping`), and the
    model's `</tool_call>` id."""
    model_dir = build_model_dir(tmp_path / "traces" / "qwenish")
    write_conversation(model_dir, [TURN])
    engine, source = replay_served(tmp_path / "traces", stops=keep)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    (close,) = tokenizer.encode("</tool_call>", add_special_tokens=False)
    return engine, source, close


def _calls(response: dict[str, Any]) -> list[str]:
    return [item["name"] for item in response["output"] if item["type"] == "function_call"]


@pytest.mark.parametrize("keep", [True, False], ids=["stop-token-kept", "stop-token-left-out"])
def test_parallel_tool_calls_false_stops_after_the_first_call(tmp_path: Path, keep: bool) -> None:
    engine, source, close = _served(tmp_path, keep)
    body = {"model": "qwenish", "tools": TOOLS, "input": "Weather and time?"}
    with serve(create_app(engine)) as url:
        events, serial = streamed(url, {**body, "parallel_tool_calls": False})
        _, parallel = streamed(url, body)
    assert serial["status"] == "completed" and serial["parallel_tool_calls"] is False
    assert _calls(serial) == ["get_weather"]
    assert [item["type"] for item in serial["output"]] == ["reasoning", "function_call"]
    serial_request, parallel_request = source.seen
    assert close in serial_request.stop_token_ids
    assert serial_request.decoding is None  # nothing else constrains it
    assert serial["output"][-1]["arguments"] == '{"city":"Paris"}'
    done = [e["item"]["status"] for e in events if e["type"] == "response.output_item.done"]
    assert done == ["completed", "completed"]
    # `parallel_tool_calls` left at its default: the turn ends alone stop it, both calls come.
    assert close not in parallel_request.stop_token_ids
    assert parallel["status"] == "completed"
    assert _calls(parallel) == ["get_weather", "get_time"]
