"""Issue 36: `streamfold serve --engine replay` with a think-tag model, native-free.

A think-tag conversation directory (`DIR/<model>/`: `0.jsonl`, `1.jsonl`, ... with
`"grammar": "thinktags"`, beside the model's `tokenizer.json` and `tokenizer_config.json`) is
prompted in the model's own chat template (`ChatTemplateFormat`), as vLLM or SGLang would be:
each prompt the replay engine receives is `transformers`' `apply_chat_template` of the same
conversation, token for token, and its turn is read from that prompt's ChatML roles. Before,
replay refused think-tag conversation directories ("harmony traces only") and rendered every
prompt as harmony. The model directory is built offline (`tests/adapters/chat_template_model`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest

from streamfold.adapters.registry import ENGINES, Engine
from streamfold.adapters.server import create_app
from streamfold.engines import GenerationRequest, TokenChunk, dump_trace
from streamfold.specs import check_bytes, format_report
from tests.adapters.chat_template_model import HF_TOOLS, TOOLS, build_model_dir

from .serving import serve

transformers = pytest.importorskip("transformers")

SYSTEM = "You answer weather questions."
# What the model wrote at each turn: a greeting, a call, the answer from the tool's output.
TURNS = [
    "<think>\nA greeting.\n</think>\n\nHi! Ask me.<|im_end|>",
    '<think>\nI need the weather tool.\n</think>\n\n<tool_call>\n{"name": "get_weather", '
    '"arguments": {"city": "Paris"}}\n</tool_call><|im_end|>',
    "<think>\nThe tool says sunny.\n</think>\n\nSunny, 21 C.<|im_end|>",
]


def _tokenizer(model_dir: Path) -> Any:
    return transformers.AutoTokenizer.from_pretrained(str(model_dir))


def hf_prompt(model_dir: Path, messages: list[dict[str, Any]]) -> list[int]:
    out = _tokenizer(model_dir).apply_chat_template(
        messages, tools=HF_TOOLS, add_generation_prompt=True, tokenize=True
    )
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def write_conversation(
    model_dir: Path,
    turns: list[str],
    *,
    contains: list[tuple[str, ...]] | None = None,
    **header: Any,
) -> None:
    """A replay conversation of `turns` (what the model writes); `contains[i]`: what turn i's
    prompt must hold (`prompt_contains`)."""
    tokenizer = _tokenizer(model_dir)
    for turn, text in enumerate(turns):
        ids = tokenizer.encode(text, add_special_tokens=False)
        head: dict[str, Any] = {
            "trace": 1,
            "grammar": "thinktags",
            "tokenizer": "tokenizer.json",
            "response_id": f"resp_turn{turn}",
            "model": model_dir.name,
            "created_at": 1,
            **header,
        }
        if contains and contains[turn]:
            head["prompt_contains"] = list(contains[turn])
        chunks = [TokenChunk(token_ids=(token,)) for token in ids]
        (model_dir / f"{turn}.jsonl").write_text(dump_trace(head, chunks, "stop"), "utf-8")


@attrs.define
class Recording:
    """The replay engine's source, recording each request it is sent."""

    inner: Any
    seen: list[GenerationRequest] = attrs.Factory(list)

    def generate(self, request: GenerationRequest) -> AsyncIterator[TokenChunk]:
        self.seen.append(request)
        generated: AsyncIterator[TokenChunk] = self.inner.generate(request)
        return generated


@attrs.define
class Stopping(Recording):
    """A recorded replay source that stops at the request's stop ids as a live engine does (the
    replay engine serves its recording whole): the stop token kept as the last of the output
    (`keep`: vLLM, the native engine), or left out and named in `stop_reason`."""

    keep: bool = True

    async def _stopped(self, request: GenerationRequest) -> AsyncIterator[TokenChunk]:
        chunks = self.inner.generate(request)
        try:
            async for chunk in chunks:
                stops = [t for t in chunk.token_ids if t in request.stop_token_ids]
                if not stops:
                    yield chunk
                    continue
                at = chunk.token_ids.index(stops[0]) + (1 if self.keep else 0)
                yield TokenChunk(
                    token_ids=chunk.token_ids[:at], finish_reason="stop", stop_reason=stops[0]
                )
                return
        finally:
            await chunks.aclose()

    def generate(self, request: GenerationRequest) -> AsyncIterator[TokenChunk]:
        self.seen.append(request)
        return self._stopped(request)


def replay_served(root: Path, *, stops: bool | None = None) -> tuple[Engine, Recording]:
    """`streamfold serve --engine replay --traces ROOT`'s engine, its source recorded; with
    `stops`, stopping at the stop ids (`Stopping`, `keep=stops`)."""
    args = argparse.Namespace(traces=str(root), replay_delay=0.0, chat_format="harmony")
    engine = ENGINES["replay"](args)
    recording = Recording(engine.source) if stops is None else Stopping(engine.source, keep=stops)
    return attrs.evolve(engine, source=recording), recording


def streamed(url: str, body: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The events of a streamed request (checked by `streamfold.specs`), and its response."""
    with httpx.stream(
        "POST", f"{url}/v1/responses", json={**body, "stream": True}, timeout=60
    ) as r:
        assert r.status_code == 200, r.read()
        data = r.read()
    _, violations = check_bytes(data)
    assert not violations, format_report(violations)
    events = [
        json.loads(line[len(b"data: ") :])
        for line in data.splitlines()
        if line.startswith(b"data: ") and line != b"data: [DONE]"
    ]
    return events, events[-1]["response"]


def test_a_think_tag_conversation_is_prompted_in_the_models_own_template(tmp_path: Path) -> None:
    """Bug: replay refused a think-tag conversation directory and prompted every model in
    harmony; now each turn's prompt is `apply_chat_template`'s, token for token, with tools,
    an earlier turn, a call and its output, and each streamed turn passes the checker."""
    model_dir = build_model_dir(tmp_path / "traces" / "qwenish")
    write_conversation(model_dir, TURNS)
    engine, recording = replay_served(tmp_path / "traces")
    base = {"model": "qwenish", "instructions": SYSTEM, "tools": TOOLS}
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    conversation: list[Any] = [{"role": "user", "content": "Hello"}]
    with serve(create_app(engine)) as url:
        # Turn 0: a greeting.
        _, first = streamed(url, {**base, "input": conversation})
        assert [item["type"] for item in first["output"]] == ["reasoning", "message"]
        messages += [{"role": "user", "content": "Hello"}]
        assert list(recording.seen[-1].prompt_token_ids) == hf_prompt(model_dir, messages)

        # Turn 1: the earlier turn sent back (its reasoning item too), a new question.
        conversation += [*first["output"], {"role": "user", "content": "Weather in Paris?"}]
        _, second = streamed(url, {**base, "input": conversation})
        messages += [
            {"role": "assistant", "content": "Hi! Ask me."},
            {"role": "user", "content": "Weather in Paris?"},
        ]
        assert list(recording.seen[-1].prompt_token_ids) == hf_prompt(model_dir, messages)
        call = second["output"][-1]
        assert call["type"] == "function_call" and call["name"] == "get_weather"
        assert json.loads(call["arguments"]) == {"city": "Paris"}

        # Turn 2: the call and its output.
        output = {"type": "function_call_output", "call_id": call["call_id"], "output": "21 C"}
        conversation += [*second["output"], output]
        _, third = streamed(url, {**base, "input": conversation})
        messages += [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "type": "function",
                        "id": call["call_id"],
                        "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                    }
                ],
            },
            {"role": "tool", "content": "21 C", "tool_call_id": call["call_id"]},
        ]
        assert list(recording.seen[-1].prompt_token_ids) == hf_prompt(model_dir, messages)
    assert third["status"] == "completed"
    assert third["output"][-1]["content"][0]["text"] == "Sunny, 21 C."
    # The template's own stop ids, not harmony's.
    stops = _tokenizer(model_dir).convert_ids_to_tokens(list(recording.seen[-1].stop_token_ids))
    assert stops == ["<|im_end|>", "<|endoftext|>"]


def test_previous_response_id_reads_the_same_turns(tmp_path: Path) -> None:
    model_dir = build_model_dir(tmp_path / "traces" / "qwenish")
    write_conversation(model_dir, TURNS[1:])
    engine, _ = replay_served(tmp_path / "traces")
    with serve(create_app(engine)) as url:
        _, first = streamed(url, {"model": "qwenish", "tools": TOOLS, "input": "Weather?"})
        call = first["output"][-1]
        assert call["type"] == "function_call"
        output = {"type": "function_call_output", "call_id": call["call_id"], "output": "21 C"}
        _, second = streamed(
            url,
            {
                "model": "qwenish",
                "tools": TOOLS,
                "previous_response_id": first["id"],
                "input": [output],
            },
        )
    assert second["output"][-1]["content"][0]["text"] == "Sunny, 21 C."


def test_a_large_prompt_renders_in_a_worker_in_the_models_template(tmp_path: Path) -> None:
    """Past `inline_render_bytes` the prompt renders in a worker process: one of the model's
    own format (the renderer's default is harmony), so the same prompt."""
    from streamfold.adapters.limits import ServerLimits

    model_dir = build_model_dir(tmp_path / "traces" / "qwenish")
    write_conversation(model_dir, TURNS)
    engine, recording = replay_served(tmp_path / "traces")
    text = "What is the weather in Paris? " * 40
    app = create_app(engine, limits=ServerLimits(inline_render_bytes=64))
    with serve(app) as url:
        _, first = streamed(url, {"model": "qwenish", "tools": TOOLS, "input": text})
    assert first["status"] == "completed"
    expected = hf_prompt(model_dir, [{"role": "user", "content": text}])
    assert list(recording.seen[0].prompt_token_ids) == expected


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ("no chat template", "chat_template"),
        ("another tokenizer", "tokenizer.json"),
        ("mixed families", "all harmony"),
    ],
)
def test_a_conversation_that_cannot_be_prompted_is_not_served(
    tmp_path: Path, change: str, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    from streamfold.adapters.registry import ReplayEngine, UnknownModelError

    model_dir = build_model_dir(tmp_path / "traces" / "qwenish")
    write_conversation(model_dir, TURNS)
    if change == "no chat template":
        config = json.loads((model_dir / "tokenizer_config.json").read_text("utf-8"))
        del config["chat_template"]
        (model_dir / "tokenizer_config.json").write_text(json.dumps(config), "utf-8")
    elif change == "another tokenizer":
        write_conversation(model_dir, TURNS, tokenizer="../elsewhere/tokenizer.json")
    else:
        trace = (model_dir / "1.jsonl").read_text("utf-8").replace('"thinktags"', '"harmony"')
        (model_dir / "1.jsonl").write_text(trace, "utf-8")
    replay = ReplayEngine(tmp_path / "traces")
    with pytest.raises(UnknownModelError, match="cannot be replayed") as raised:
        replay.chat_format("qwenish")
    assert why in str(raised.value.__cause__)
    assert why in caplog.text  # the operator's log says why; the client is told only "cannot"


def test_the_agent_loop_prompts_a_think_tag_model_in_its_own_template(tmp_path: Path) -> None:
    """Bug: a response with server-side tools renders its prompts in the agent loop, which
    rendered them as harmony whatever the model's format: a think-tag model was sent a harmony
    prompt. Here the MCP server cannot be reached, so no tool is shown and the prompt is the
    template's; with tools listed, the model's format refuses them, saying they are harmony's."""
    from streamfold.adapters.agent._config import AgentConfig

    model_dir = build_model_dir(tmp_path / "traces" / "qwenish")
    write_conversation(model_dir, TURNS)
    engine, recording = replay_served(tmp_path / "traces")
    nowhere = "http://127.0.0.1:9/"
    tool = {"type": "mcp", "server_label": "w", "server_url": nowhere, "require_approval": "never"}
    app = create_app(engine, agent=AgentConfig(mcp_allow=(nowhere,)))
    with serve(app) as url:
        _, reply = streamed(url, {"model": "qwenish", "input": "Hello", "tools": [tool]})
    assert reply["status"] == "completed", reply.get("error")
    [request] = recording.seen
    expected = _tokenizer(model_dir).apply_chat_template(
        [{"role": "user", "content": "Hello"}], add_generation_prompt=True, tokenize=True
    )
    expected = list(expected["input_ids"] if hasattr(expected, "keys") else expected)
    assert list(request.prompt_token_ids) == expected


def test_server_tools_listed_for_a_think_tag_model_fail_saying_they_are_harmonys(
    tmp_path: Path,
) -> None:
    from streamfold.adapters.agent._config import AgentConfig
    from tests.agent.mcp_server import running_mcp_server

    model_dir = build_model_dir(tmp_path / "traces" / "qwenish")
    write_conversation(model_dir, TURNS)
    engine, recording = replay_served(tmp_path / "traces")
    with running_mcp_server() as mcp:
        tool = {
            "type": "mcp",
            "server_label": "w",
            "server_url": mcp.streamable_url,
            "require_approval": "never",
        }
        app = create_app(engine, agent=AgentConfig(mcp_allow=(mcp.url + "/",)))
        with serve(app) as url:
            _, reply = streamed(url, {"model": "qwenish", "input": "Hello", "tools": [tool]})
    assert reply["status"] == "failed"
    assert "harmony models only" in reply["error"]["message"]
    assert recording.seen == []  # nothing was generated from a prompt the model cannot read


def test_turns_are_read_from_the_templates_chatml_roles(tmp_path: Path) -> None:
    """The turn is the number of assistant runs followed by a user turn or a tool's output,
    read from `<|im_start|>` roles; parallel calls answered together are one turn."""
    from streamfold.adapters.formats import ChatTemplateFormat
    from streamfold.adapters.protocol import parse_create_request
    from streamfold.adapters.replay_turns import conversation_turn

    chat_format = ChatTemplateFormat(build_model_dir(tmp_path / "m"))
    vocabulary = chat_format.grammar().vocabulary

    def turn(items: Any) -> int:
        request = parse_create_request({"model": "m", "input": items, "tools": TOOLS})
        return conversation_turn(chat_format.render(request), vocabulary)

    user = {"role": "user", "content": "Weather?"}
    call = {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "c1", "output": "sunny"}
    answer = {"role": "assistant", "content": "Sunny."}
    assert turn("Weather?") == 0
    assert turn([user, call, output]) == 1
    parallel = [user, call, {**call, "call_id": "c2"}, output, {**output, "call_id": "c2"}]
    assert turn(parallel) == 1
    assert turn([user, call, output, answer, user]) == 2


@pytest.mark.parametrize("continued", ["previous_response_id", "items", "encrypted_content"])
def test_a_tool_loops_next_turn_shows_qwen3_its_reasoning_over_the_socket(
    tmp_path: Path, continued: str
) -> None:
    """Bug: reasoning items were left out of the chat template's messages, so Qwen3 (whose
    template shows `reasoning_content` after the last user query) got the tool's output without
    the reasoning that called the tool. The official client continues the loop by
    `previous_response_id`, by sending the items back, or statelessly (`store: false`, the
    reasoning item sent back with its `encrypted_content` only, which the server opens)."""
    import openai

    from tests.adapters.chat_template_model import QWEN3_TEMPLATE

    model_dir = build_model_dir(tmp_path / "traces" / "qwen3", template=QWEN3_TEMPLATE)
    write_conversation(model_dir, TURNS[1:])
    engine, recording = replay_served(tmp_path / "traces")
    question = {"role": "user", "content": "Weather in Paris?"}
    stateless = continued == "encrypted_content"
    with serve(create_app(engine)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        extra: dict[str, Any] = (
            {"store": False, "include": ["reasoning.encrypted_content"]} if stateless else {}
        )
        first = client.responses.create(model="qwen3", tools=TOOLS, input=[question], **extra)
        thought, call = first.output
        assert thought.type == "reasoning" and call.type == "function_call"
        output = {"type": "function_call_output", "call_id": call.call_id, "output": "21 C"}
        sent: list[Any] = [question, *(item.model_dump(exclude_none=True) for item in first.output)]
        if stateless:  # the reasoning item as the API returns it under store: false
            assert thought.encrypted_content
            sealed = {"encrypted_content": thought.encrypted_content}
            sent[1] = {"type": "reasoning", "id": thought.id, "summary": [], **sealed}
        if continued == "previous_response_id":
            second = client.responses.create(
                model="qwen3", tools=TOOLS, previous_response_id=first.id, input=[output]
            )
        else:
            second = client.responses.create(
                model="qwen3", tools=TOOLS, input=[*sent, output], **extra
            )
    assert second.output_text == "Sunny, 21 C."
    prompt = _tokenizer(model_dir).decode(list(recording.seen[-1].prompt_token_ids))
    assert (
        "<|im_start|>assistant\n<think>\nI need the weather tool.\n</think>\n\n<tool_call>"
        in prompt
    )
    messages = [
        question,
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "I need the weather tool.",
            "tool_calls": [
                {
                    "type": "function",
                    "id": call.call_id,
                    "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                }
            ],
        },
        {"role": "tool", "content": "21 C", "tool_call_id": call.call_id},
    ]
    assert list(recording.seen[-1].prompt_token_ids) == hf_prompt(model_dir, messages)
