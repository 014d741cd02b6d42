"""`AgentGeneration` driven directly (no HTTP): a deployment's own listed tool (a connector),
engines that drop their stop token, output-token limits across generations, and a python call."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from streamfold.adapters.agent import AgentConfig, PythonTool, ToolInfo, ToolResult
from streamfold.adapters.agent._config import prepare_agent
from streamfold.adapters.agent._loop import AgentGeneration
from streamfold.adapters.formats import stop_token_ids
from streamfold.adapters.protocol import parse_create_request
from streamfold.engines import GenerationRequest
from streamfold.engines.vocab import load_harmony_vocabulary
from streamfold.statemachine import HarmonyGrammar, Response, dumps, snapshot
from tests.server.helpers import assert_conformant

from .scripted import ScriptedAgentSource, encode

pytestmark = pytest.mark.anyio


class Clock:
    """A deployment's own tool: no MCP server, the loop does not know the difference."""

    kind = "mcp_call"

    def __init__(self, label: str) -> None:
        self.namespace = label
        self.calls: list[str] = []

    async def list_tools(self) -> tuple[ToolInfo, ...]:
        return (ToolInfo(name="now", description="The time.", input_schema={"type": "object"}),)

    def needs_approval(self, name: str) -> bool:
        return False

    def describe(self) -> Any:
        import openai_harmony as h

        return h.ToolNamespaceConfig(name=self.namespace, description="A clock.", tools=[])

    async def call(self, name: str | None, arguments: str) -> ToolResult:
        self.calls.append(f"{name}({arguments})")
        return ToolResult(output="12:00")


def _call(label: str, name: str, arguments: dict[str, Any]) -> str:
    return (
        f"<|channel|>commentary to={label}.{name} <|constrain|>json<|message|>"
        f"{json.dumps(arguments)}<|call|>"
    )


async def _run(
    body: dict[str, Any], scripts: dict[str, list[str]], config: AgentConfig, **source_options: Any
) -> tuple[list[Any], ScriptedAgentSource]:
    request = parse_create_request(body)
    run = prepare_agent(request, config, own=1)
    assert run is not None
    source = ScriptedAgentSource(scripts, **source_options)
    response = Response(id="resp_loop", created_at=1, model=request.model, status="in_progress")
    generation = GenerationRequest(
        request_id="resp_loop",
        prompt_token_ids=(),
        model=request.model,
        max_output_tokens=request.max_output_tokens,
        stop_token_ids=stop_token_ids(),
    )
    grammar = HarmonyGrammar(vocabulary=load_harmony_vocabulary())
    loop = AgentGeneration(source, request, generation, grammar, response, run)
    batches = [batch async for batch in loop.batches()]
    events = [event for batch in batches for event in batch]
    source.batches = len(batches)  # type: ignore[attr-defined]
    assert loop.finished
    assert_conformant(events)
    assert snapshot(events) == events[-1].response  # the stream folds back to the final response
    return events, source


@pytest.mark.parametrize("drop_stop_token", [False, True])
async def test_a_connector_tool_through_the_loop(drop_stop_token: bool) -> None:
    clocks: list[Clock] = []

    def make(label: str) -> Clock:
        clocks.append(Clock(label))
        return clocks[-1]

    config = AgentConfig(connectors={"clock": make})
    scripts = {"m": [_call("time", "now", {}), "<|channel|>final<|message|>Noon.<|return|>"]}
    body = {
        "model": "m",
        "input": "time?",
        "tools": [{"type": "mcp", "server_label": "time", "connector_id": "clock"}],
    }
    events, source = await _run(body, scripts, config, drop_stop_token=drop_stop_token)
    final = events[-1].response
    assert [item.type for item in final.output] == ["mcp_list_tools", "mcp_call", "message"]
    assert final.output[1].output == "12:00"
    assert clocks[0].calls == ["now({})"]
    second = source.prompts("m")[1]
    # Put back when the engine leaves it out: the prompt is the same either way.
    assert "{}<|call|><|start|>time.now to=assistant<|channel|>commentary<|message|>12:00" in second


@pytest.mark.parametrize("ended_by", ["<|call|>", "<|end|>"])
async def test_ready_chunks_share_batches_across_generations_and_give_the_same_events(
    ended_by: str,
) -> None:
    """A source that holds its chunks (`ReadyChunks`) gives the agent loop's generations in
    coalesced batches, with the same events as one chunk per batch; a call that ends mid-batch
    (ended by `<|end|>`, the engine still running) takes none of the chunks held after it."""
    config = AgentConfig(connectors={"clock": Clock})
    call = _call("time", "now", {}).removesuffix("<|call|>") + ended_by
    if ended_by == "<|end|>":
        call += "<|start|>assistant<|channel|>final<|message|>not read<|return|>"
    answer = "<|channel|>final<|message|>" + "word " * 150 + "<|return|>"
    scripts = {"m": [call, answer]}
    body = {
        "model": "m",
        "input": "time?",
        "tools": [{"type": "mcp", "server_label": "time", "connector_id": "clock"}],
    }
    plain, one_by_one = await _run(body, scripts, config, per_chunk=1)
    coalesced, held = await _run(body, scripts, config, per_chunk=1, held=True)
    assert [dumps(e) for e in coalesced] == [dumps(e) for e in plain]
    assert held.batches < one_by_one.batches / 10, (held.batches, one_by_one.batches)
    assert source_prompts_equal(held, one_by_one)


def source_prompts_equal(a: ScriptedAgentSource, b: ScriptedAgentSource) -> bool:
    return a.prompts("m") == b.prompts("m") and len(a.prompts("m")) == 2


async def test_max_output_tokens_counts_across_generations() -> None:
    config = AgentConfig(connectors={"clock": Clock})
    long_answer = "<|channel|>final<|message|>" + "word " * 200 + "<|return|>"
    scripts = {"m": [_call("time", "now", {}), long_answer]}
    body = {
        "model": "m",
        "input": "time?",
        "max_output_tokens": 40,
        "tools": [{"type": "mcp", "server_label": "time", "connector_id": "clock"}],
    }
    events, source = await _run(body, scripts, config)
    final = events[-1].response
    assert final.status == "incomplete"
    assert final.usage.output_tokens == 40
    first, second = source.requests
    assert first.max_output_tokens == 40
    assert second.max_output_tokens == 40 - len(encode(_call("time", "now", {})))


async def test_python_outputs_are_logs() -> None:
    config = AgentConfig(python=PythonTool())
    scripts = {
        "m": [
            "<|channel|>analysis to=python code<|message|>print(6 * 7)<|call|>",
            "<|channel|>final<|message|>42<|return|>",
        ]
    }
    body = {"model": "m", "input": "6*7?", "tools": [{"type": "code_interpreter"}]}
    with anyio.fail_after(30):
        events, source = await _run(body, scripts, config)
    call = events[-1].response.output[0]
    assert call.type == "code_interpreter_call"
    assert [o.logs for o in call.outputs] == ["42\n"]
    assert source.prompts("m")[1].endswith(
        "<|start|>python to=assistant<|channel|>analysis<|message|>42\n<|end|><|start|>assistant"
    )
