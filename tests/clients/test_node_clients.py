"""The official OpenAI Node SDK (`openai` 6) and the Vercel AI SDK (`ai` 6, `@ai-sdk/openai` 3)
against `streamfold serve`, exactly as an application runs them (issue 13).

The clients are installed from `tests/clients/node/package-lock.json` (`npm ci` there; `.ci/run`
does it). Each case runs one script case in node and asserts on the JSON it prints.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .conftest import BROKEN_ERROR, CHAT_ANSWER, WEATHER_FINAL, missing

NODE_DIR = Path(__file__).parent / "node"


def run_node(script: str, case: str, url: str) -> Any:
    node = shutil.which("node")
    if node is None:
        missing("node", "install Node.js 20 or newer")
    if not (NODE_DIR / "node_modules" / ".package-lock.json").is_file():
        missing("the JavaScript clients", f"run `npm ci` in {NODE_DIR}")
    done = subprocess.run(
        [node, script, case],  # type: ignore[list-item]
        cwd=NODE_DIR,
        env={**os.environ, "STREAMFOLD_URL": url, "AI_SDK_LOG_WARNINGS": "false"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"node {script} {case} failed:\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def _logprob_entries(entries: list[Any]) -> None:
    assert entries, "no logprobs came back"
    for entry in entries:
        assert isinstance(entry["token"], str) and entry["logprob"] < 0
        assert entry["top_logprobs"] == []  # an array, even when the trace has no alternatives


# --- the official Node SDK ------------------------------------------------------------------


def node_sdk(case: str, url: str) -> Any:
    return run_node("openai-node.mjs", case, url)


def test_node_sdk_create(streamfold_url: str) -> None:
    seen = node_sdk("create", streamfold_url)
    assert seen["status"] == "completed" and seen["text"] == CHAT_ANSWER
    assert seen["types"] == ["reasoning", "message"] and seen["completedAt"] > 0


def test_node_sdk_stream(streamfold_url: str) -> None:
    seen = node_sdk("stream", streamfold_url)
    assert seen["last"] == "response.completed" and seen["text"] == CHAT_ANSWER
    assert "response.output_text.delta" in seen["types"]


def test_node_sdk_stream_helper(streamfold_url: str) -> None:
    seen = node_sdk("stream-helper", streamfold_url)
    assert seen == {"deltas": CHAT_ANSWER, "text": CHAT_ANSWER, "status": "completed"}


@pytest.mark.parametrize("case", ["tool-loop", "tool-loop-stream"])
def test_node_sdk_tool_loop_ends_with_the_answer(streamfold_url: str, case: str) -> None:
    seen = node_sdk(case, streamfold_url)
    assert seen["steps"] == 2 and seen["text"] == WEATHER_FINAL
    assert seen["calls"] == [{"name": "get_weather", "arguments": {"city": "Paris"}}]


def test_node_sdk_tool_loop_with_previous_response_id(streamfold_url: str) -> None:
    seen = node_sdk("tool-loop-previous-response", streamfold_url)
    assert seen == {"call": "get_weather", "text": WEATHER_FINAL}


@pytest.mark.parametrize("case", ["failed", "stream-failed"])
def test_node_sdk_failed_response(streamfold_url: str, case: str) -> None:
    seen = node_sdk(case, streamfold_url)
    assert seen["status"] == "failed"
    assert seen["error"] == {
        "code": "server_error",
        "message": BROKEN_ERROR,
        "type": "server_error",
        "param": None,
    }


@pytest.mark.parametrize("case", ["logprobs", "stream-logprobs"])
def test_node_sdk_logprobs(streamfold_url: str, case: str) -> None:
    _logprob_entries(node_sdk(case, streamfold_url)["logprobs"])


def test_node_sdk_unknown_item_reference_is_a_400(streamfold_url: str) -> None:
    seen = node_sdk("missing-reference", streamfold_url)
    assert seen["threw"] and seen["status"] == 400 and seen["param"] == "input[0].id"


# --- the Vercel AI SDK ------------------------------------------------------------------------


def vercel(case: str, url: str) -> Any:
    return run_node("vercel.mjs", case, url)


@pytest.mark.parametrize("case", ["generate", "stream"])
def test_vercel_text_with_reasoning(streamfold_url: str, case: str) -> None:
    seen = vercel(case, streamfold_url)
    assert seen["text"] == CHAT_ANSWER and seen["finishReason"] == "stop"
    # gpt-oss has no summariser: asked for a summary, the server sends the raw reasoning.
    assert seen["reasoning"] == "The user says hello. Reply kindly."


@pytest.mark.parametrize("case", ["generate-tools", "stream-tools"])
def test_vercel_tool_loop_ends_with_the_answer(streamfold_url: str, case: str) -> None:
    """Step 2 sends step 1's items back as item_reference (store: true, the default)."""
    seen = vercel(case, streamfold_url)
    assert seen["steps"] == 2 and seen["text"] == WEATHER_FINAL
    assert seen["toolCalls"] == [{"name": "get_weather", "input": {"city": "Paris"}}]
    assert seen["finishReason"] == "stop"


def test_vercel_generate_text_shows_the_failure(streamfold_url: str) -> None:
    seen = vercel("generate-failed", streamfold_url)
    assert seen["threw"] and seen["message"] == BROKEN_ERROR


def test_vercel_stream_text_shows_the_failure(streamfold_url: str) -> None:
    seen = vercel("stream-failed", streamfold_url)
    assert seen["finishReason"] == "error" and seen["errors"] == [BROKEN_ERROR]


def test_vercel_logprobs(streamfold_url: str) -> None:
    seen = vercel("logprobs", streamfold_url)
    assert seen["text"] == CHAT_ANSWER
    _logprob_entries([entry for part in seen["logprobs"] for entry in part])


def test_vercel_streamed_logprobs(streamfold_url: str) -> None:
    seen = vercel("stream-logprobs", streamfold_url)
    assert seen["text"] == CHAT_ANSWER
    _logprob_entries([entry for part in seen["logprobs"] for entry in part])
