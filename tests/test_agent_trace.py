"""The trace format records an agent run's loop (issue 12), and replay plays it offline.

A recorded run holds each generation's chunks and, in order among them, every `list_tools`,
`tool_result`, `next_generation` and `approved_call` the server's loop made; its header says
which tools the server ran. Replaying it makes the same reducer calls, with no tool or network.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import streamfold.specs
from streamfold.adapters.grammars import replay_events
from streamfold.cli import main as cli_main
from streamfold.engines import (
    TokenChunk,
    TraceFormatError,
    dump_trace,
    parse_trace,
    read_trace,
    server_tools_from_header,
    server_tools_line,
)
from streamfold.specs import check
from streamfold.statemachine import (
    ApprovedCallStep,
    HttpError,
    ListToolsStep,
    McpServer,
    McpToolInfo,
    NextGenerationStep,
    ReducerUsageError,
    ServerTools,
    ToolResultStep,
    apply_loop_step,
    start,
)
from tests.harmony_helpers import GRAMMAR, new_response

TRACES = Path(streamfold.specs.__file__).parent / "traces"
AGENT = TRACES / "agent_loop_list_tools_two_calls_answer.jsonl"
HEADER = {"grammar": "harmony", "response_id": "resp_a", "model": "m", "created_at": 1}


def test_the_agent_trace_reads_back_and_writes_the_same_bytes() -> None:
    trace = read_trace(AGENT)
    kinds = [type(e).__name__ for e in trace.entries]
    assert kinds[0] == "ListToolsStep"
    assert kinds.count("ToolResultStep") == 2 and kinds.count("NextGenerationStep") == 2
    assert all(isinstance(c, TokenChunk) for c in trace.chunks)
    header = {k: v for k, v in trace.header.items() if k != "trace"}
    again = dump_trace(header, trace.entries, trace.finish_reason)
    assert again == AGENT.read_text()


def test_streamfold_replay_prints_the_golden_agent_stream(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli_main(["replay", str(AGENT)]) == 0
    out = capsys.readouterr().out
    assert out == AGENT.with_name(AGENT.stem + ".golden.jsonl").read_text()
    assert check([json.loads(line) for line in out.splitlines()]) == []


def test_every_loop_step_round_trips_through_a_trace_line() -> None:
    steps = [
        ListToolsStep(server_label="w", tools=(McpToolInfo(name="ask", input_schema={"a": 1}),)),
        ListToolsStep(server_label="w", error="401 Unauthorized"),
        ToolResultStep(item_id="mcp_a_1", output="ok"),
        ToolResultStep(item_id="mcp_a_1", error="boom"),
        ToolResultStep(item_id="mcp_a_1", error=HttpError(code=502, message="bad gateway")),
        NextGenerationStep(input_tokens=7),
        ApprovedCallStep(approval_request_id="mcpr_1", server_label="w", name="n", arguments="{}"),
    ]
    chunk = TokenChunk(token_ids=(1, 2))
    text = dump_trace(HEADER, [chunk, *steps, chunk], "stop")
    assert parse_trace(text.splitlines()).entries == [chunk, *steps, chunk]


def test_server_tools_round_trip_through_the_header() -> None:
    tools = ServerTools(
        browser=True,
        mcp=(
            McpServer(server_label="a", require_approval=frozenset({"x", "y"})),
            McpServer(server_label="b", require_approval="always"),
        ),
    )
    assert server_tools_from_header({"server_tools": server_tools_line(tools)}) == tools
    assert server_tools_from_header({}) == ServerTools()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"tool_result": {"item_id": 3}}', "item_id"),
        ('{"tool_result": "x"}', "must be an object"),
        ('{"next_generation": {"input_tokens": "many"}}', "input_tokens"),
        ('{"list_tools": {}, "tool_result": {}}', "one key"),
    ],
)
def test_a_bad_loop_line_names_its_line(line: str, message: str) -> None:
    text = json.dumps({"trace": 1, **HEADER}) + "\n" + line + "\n"
    with pytest.raises(TraceFormatError, match=rf"<trace>:2: .*{message}"):
        parse_trace(text.splitlines())


@pytest.mark.parametrize(
    "server_tools",
    [
        {"browser": "yes"},
        {"mcp": [{"require_approval": "never"}]},
        {"mcp": [{"server_label": "a", "require_approval": "sometimes"}]},
        {"mcp": [{"server_label": "a"}, {"server_label": "a"}]},
    ],
)
def test_a_bad_server_tools_header_is_a_trace_error(server_tools: object) -> None:
    text = json.dumps({"trace": 1, **HEADER, "server_tools": server_tools})
    with pytest.raises(TraceFormatError, match=r"<trace>:1: .*(server_tools|server_label)"):
        parse_trace([text])


def test_a_recorded_step_that_does_not_fit_the_run_is_a_usage_error() -> None:
    # A trace whose tool_result names no pending call cannot be replayed: it says so.
    text = dump_trace(HEADER, [ToolResultStep(item_id="ws_a_0", output="x")], "stop")
    with pytest.raises(ReducerUsageError, match="nothing is pending"):
        replay_events(parse_trace(text.splitlines()))


def test_apply_loop_step_rejects_what_is_not_a_step() -> None:
    state, _ = start(GRAMMAR, new_response())
    with pytest.raises(ReducerUsageError, match="apply_loop_step"):
        apply_loop_step(state, "list_tools")  # type: ignore[arg-type]


def test_plain_traces_have_no_loop() -> None:
    trace = read_trace(TRACES / "hello.jsonl")
    assert trace.loop == () and trace.entries == list(trace.chunks)
