"""`streamfold record` of an agent run: the loop run once on an engine, written as a trace.

The trace (agent-core's format, `streamfold.engines.dump_trace`) holds, in the order they
happened, every chunk as the reducer took it and every step of the loop (`list_tools`,
`approved_call`, `tool_result`, `next_generation`), and its header says which tools ran on the
server (`server_tools`). `streamfold replay` applies them in that order with no engine, no MCP
server and no network, and gives the very events the live run gave.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from streamfold.engines import GenerationRequest, SamplingParams, TokenChunk, TokenSource
from streamfold.statemachine import Event, LoopStep

from ..formats import stop_token_ids
from ..protocol import input_items, parse_create_request
from ._config import AgentConfig, prepare_agent
from ._loop import AgentGeneration

__all__ = ["record_agent_run", "server_tools_header"]


def server_tools_header(server_tools: Any) -> dict[str, Any]:
    """`ServerTools` as the trace header's `server_tools`."""

    def policy(value: Any) -> Any:
        return value if isinstance(value, str) else sorted(value)

    return {
        "browser": server_tools.browser,
        "python": server_tools.python,
        "mcp": [
            {"server_label": s.server_label, "require_approval": policy(s.require_approval)}
            for s in server_tools.mcp
        ],
    }


async def record_agent_run(
    source: TokenSource,
    body: Mapping[str, Any],
    config: AgentConfig,
    path: str | Path,
    header: Mapping[str, Any],
    *,
    sampling: SamplingParams | None = None,
    events: list[Event] | None = None,
) -> str:
    """Run the request `body` (its `tools` name server-side tools) through the agent loop on
    `source` and write the trace to `path`; returns the finish reason. `header` gives the
    trace's identity (`response_id`, `model`, `created_at`, `grammar`, ...); `events`, when
    given, receives the run's events (what a server would have sent)."""
    from streamfold.adapters.grammars import grammar_for, response_for
    from streamfold.engines import dump_trace

    request = parse_create_request(body)
    run = prepare_agent(request, config, len(input_items(body["input"])))
    if run is None:
        raise ValueError("the request names no server-side tools (mcp, code_interpreter, ...)")
    generation = GenerationRequest(
        request_id=str(header["response_id"]),
        prompt_token_ids=(),
        model=request.model,
        max_output_tokens=request.max_output_tokens,
        sampling=sampling or SamplingParams(),
        stop_token_ids=stop_token_ids(),
    )
    entries: list[TokenChunk | LoopStep] = []
    loop = AgentGeneration(
        source, request, generation, grammar_for(header), response_for(header), run, record=entries
    )
    async with contextlib.aclosing(loop.batches()) as batches:
        async for batch in batches:
            if events is not None:
                events.extend(batch)
    assert loop.finished_with is not None  # batches() always ends with finish()
    reason, error = loop.finished_with
    trace_header = {**header, "server_tools": server_tools_header(loop.server_tools)}
    text = dump_trace(trace_header, entries, reason, error)
    Path(path).write_text(text, encoding="utf-8")
    return reason
