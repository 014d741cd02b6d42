"""Issue 31: reasoning as stateless clients (Codex) use it, over the real socket with the SDK.

- every `reasoning.effort` the SDK types allow is accepted and mapped onto harmony's three;
  `reasoning.context` is accepted and echoed;
- with `include: ["reasoning.encrypted_content"]` a reasoning item's done form carries the
  server's AES-GCM seal of its text; sent back without its text, the seal is opened and the
  reasoning is where harmony keeps it in the next prompt; a changed or foreign seal is a 400
  naming the item; keys rotate (the first seals, all open).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai import OpenAI

from streamfold.adapters.agent._config import AgentConfig
from streamfold.adapters.server import MemoryEventStore, ReasoningKeys, create_app
from tests.clients.conftest import CODEX_FINAL, CODEX_THOUGHT, serving, write_client_traces
from tests.server.serving import serve

from .scripted import ScriptedAgentSource

THOUGHT = "The user wants the weather; call get_weather for Paris."
SCRIPTS = {
    "call": [
        f"<|channel|>analysis<|message|>{THOUGHT}<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city":"Paris"}<|call|>'
    ],
    "answer": ["<|channel|>final<|message|>Sunny.<|return|>"],
}
WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
KEYS = ReasoningKeys.from_secrets(["first secret"])


@pytest.fixture
def served() -> Iterator[tuple[OpenAI, ScriptedAgentSource]]:
    source = ScriptedAgentSource(SCRIPTS)
    app = create_app(
        source.engine(), store=MemoryEventStore(), agent=AgentConfig(), reasoning_keys=KEYS
    )
    with serve(app) as url:
        yield OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=30), source


@pytest.mark.parametrize(
    ("effort", "harmony"),
    [
        ("none", "low"),
        ("minimal", "low"),
        ("low", "low"),
        ("medium", "medium"),
        ("high", "high"),
        ("xhigh", "high"),
        ("max", "high"),
    ],
)
def test_every_effort_maps_onto_harmony(
    served: tuple[OpenAI, ScriptedAgentSource], effort: str, harmony: str
) -> None:
    """`none`, `xhigh` and `max` were 400s (`expected one of 'minimal', ...`), the one thing
    that broke pydantic-ai."""
    client, source = served
    response = client.responses.create(
        model="answer",
        input="weather?",
        reasoning={"effort": effort, "context": "all_turns"},  # type: ignore[typeddict-item]
    )
    assert response.reasoning is not None
    assert response.reasoning.effort == effort and response.reasoning.context == "all_turns"
    assert f"Reasoning: {harmony}" in source.prompts("answer")[-1]


def _first_turn(client: OpenAI) -> list[Any]:
    events = list(
        client.responses.create(
            model="call",
            input="weather in Paris?",
            tools=[WEATHER],  # type: ignore[list-item]
            include=["reasoning.encrypted_content"],
            store=False,
            stream=True,
        )
    )
    added = [e.item for e in events if e.type == "response.output_item.added"]
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert added[0].type == "reasoning" and added[0].encrypted_content is None
    assert done[0].type == "reasoning" and done[0].encrypted_content
    final = events[-1].response  # type: ignore[union-attr]
    assert final.output[0].encrypted_content == done[0].encrypted_content
    assert THOUGHT not in done[0].encrypted_content
    return list(final.output)


def _follow_up(output: list[Any], blob: str | None = None) -> list[Any]:
    reasoning, call = output
    sent = {"type": "reasoning", "id": reasoning.id, "summary": []}
    sent["encrypted_content"] = blob if blob is not None else reasoning.encrypted_content
    return [
        {"role": "user", "content": "weather in Paris?"},
        sent,
        call.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": call.call_id, "output": "22C, sunny"},
    ]


def test_sealed_reasoning_comes_back_into_the_chain(
    served: tuple[OpenAI, ScriptedAgentSource],
) -> None:
    """Reasoning items came back without `encrypted_content`, so a stateless client could not
    carry the model's reasoning through its tool-call chain."""
    client, source = served
    output = _first_turn(client)
    answer = client.responses.create(
        model="answer",
        input=_follow_up(output),  # type: ignore[arg-type]
        tools=[WEATHER],  # type: ignore[list-item]
        store=False,
    )
    assert answer.output_text == "Sunny."
    (prompt,) = source.prompts("answer")
    assert f"<|channel|>analysis<|message|>{THOUGHT}<|end|>" in prompt
    assert prompt.index(THOUGHT) < prompt.index("to=functions.get_weather")


@pytest.mark.parametrize("how", ["changed", "foreign", "not base64"])
def test_a_changed_or_foreign_seal_is_a_400_naming_the_item(
    served: tuple[OpenAI, ScriptedAgentSource], how: str
) -> None:
    client, _ = served
    output = _first_turn(client)
    blob = output[0].encrypted_content
    if how == "changed":
        raw = bytearray(__import__("base64").b64decode(blob))
        raw[-1] ^= 1
        blob = __import__("base64").b64encode(bytes(raw)).decode()
    elif how == "foreign":
        blob = ReasoningKeys.from_secrets(["another server"]).seal(THOUGHT)
    else:
        blob = "not base64!"
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model="answer",
            input=_follow_up(output, blob),  # type: ignore[arg-type]
            tools=[WEATHER],  # type: ignore[list-item]
        )
    assert caught.value.body["param"] == "input[1].encrypted_content"  # type: ignore[index]


@given(st.text())
def test_seal_and_open_round_trip_and_rotate(text: str) -> None:
    """The first key seals, every key opens: a rotated server opens its old blobs."""
    old = ReasoningKeys.from_secrets(["old"])
    rotated = ReasoningKeys.from_secrets(["new", "old"])
    assert rotated.open(old.seal(text)) == text
    assert rotated.open(rotated.seal(text)) == text
    assert old.open(rotated.seal(text)) is None


def test_keys_from_the_environment_and_a_file(tmp_path: Any) -> None:
    env = ReasoningKeys.from_environment({"STREAMFOLD_REASONING_KEY": "new, old"})
    path = tmp_path / "keys"
    path.write_text("old\n")
    assert ReasoningKeys.from_file(path).open(env.seal("x")) is None
    assert env.open(ReasoningKeys.from_file(path).seal("x")) == "x"
    assert ReasoningKeys.from_environment({}).ephemeral


def test_serve_seals_with_its_key_file_and_a_restart_with_the_same_key_opens_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 31: 'a key from the environment or a file, rotated keys still decryptable', through
    the command users run (no test ran `--reasoning-key-file` or `STREAMFOLD_REASONING_KEY` on
    `streamfold serve`). A blob sealed by a server started with a key file opens in a restarted
    server whose environment holds that secret second (rotated), where the replayed turn checks
    that its prompt holds the reasoning; a server with neither (a random key) refuses it."""
    traces = write_client_traces(tmp_path / "traces")
    keys = tmp_path / "keys"
    keys.write_text("old-secret\n", encoding="utf-8")
    shell = {"type": "function", "name": "exec_command", "parameters": {"type": "object"}}
    with serving(traces, tmp_path / "a.txt", flags=("--reasoning-key-file", str(keys))) as url:
        client = OpenAI(base_url=url, api_key="x", max_retries=0, timeout=30)
        first = client.responses.create(
            model="codex_shell",
            input="run it",
            tools=[shell],  # type: ignore[list-item]
            include=["reasoning.encrypted_content"],
            store=False,
        )
    reasoning, call = first.output
    assert reasoning.type == "reasoning" and call.type == "function_call"
    blob = reasoning.encrypted_content
    assert blob and ReasoningKeys.from_file(keys).open(blob) == CODEX_THOUGHT
    follow_up = [
        {"role": "user", "content": "run it"},
        {"type": "reasoning", "id": reasoning.id, "summary": [], "encrypted_content": blob},
        call.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": call.call_id, "output": "streamfold-42"},
    ]
    monkeypatch.setenv("STREAMFOLD_REASONING_KEY", "new-secret, old-secret")
    with serving(traces, tmp_path / "b.txt") as url:
        client = OpenAI(base_url=url, api_key="x", max_retries=0, timeout=30)
        answer = client.responses.create(
            model="codex_shell",
            input=follow_up,  # type: ignore[arg-type]
            tools=[shell],  # type: ignore[list-item]
            store=False,
        )
    assert answer.status == "completed", answer.error
    assert answer.output_text == CODEX_FINAL
    monkeypatch.delenv("STREAMFOLD_REASONING_KEY")
    with serving(traces, tmp_path / "c.txt") as url:
        client = OpenAI(base_url=url, api_key="x", max_retries=0, timeout=30)
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="codex_shell", input=follow_up, tools=[shell])  # type: ignore[arg-type,list-item]
    assert caught.value.body["param"] == "input[1].encrypted_content"  # type: ignore[index]
