"""`streamfold record` of an agent run, and `streamfold replay` of it with no MCP server, no
engine and no network: the same events, byte for byte."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from streamfold.adapters.agent import AgentConfig
from streamfold.adapters.agent._trace import record_agent_run
from streamfold.statemachine import dumps

from .mcp_server import McpServerRun, running_mcp_server
from .scripted import ScriptedAgentSource
from .test_loop_server import SCRIPTS

pytestmark = pytest.mark.anyio

HEADER = {
    "grammar": "harmony",
    "encoding": "o200k_harmony",
    "response_id": "resp_recorded",
    "model": "two_calls",
    "created_at": 1700000000,
}


def _replay(path: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "streamfold", "replay", str(path), "--format", "jsonl"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_an_agent_run_replays_offline_byte_for_byte(tmp_path: Path) -> None:
    path = tmp_path / "agent.jsonl"
    live: list[Any] = []
    with running_mcp_server() as mcp:
        body = {
            "model": "two_calls",
            "input": "go",
            "tools": [
                {
                    "type": "mcp",
                    "server_label": "demo",
                    "server_url": mcp.streamable_url,
                    "require_approval": "never",
                }
            ],
        }
        reason = await record_agent_run(
            ScriptedAgentSource(SCRIPTS),
            body,
            AgentConfig(mcp_allow=("*",)),
            path,
            HEADER,
            events=live,
        )
    assert reason == "stop"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["server_tools"] == {
        "browser": False,
        "python": False,
        "mcp": [{"server_label": "demo", "require_approval": "never"}],
    }
    kinds = [next(iter(line)) for line in lines[1:]]
    assert kinds[0] == "list_tools" and kinds[1] == "next_generation"
    assert kinds.count("tool_result") == 2 and kinds[-1] == "finish_reason"
    # The MCP server is gone: replay needs nothing but the file.
    replayed = _replay(path)
    assert replayed == [json.loads(dumps(event)) for event in live]
    assert replayed[-1]["type"] == "response.completed"
    outputs = [item.get("output") for item in replayed[-1]["response"]["output"]]
    assert outputs == [None, None, "Sunny in Paris, 21 C", "5", None]


def test_the_record_command_records_an_agent_run(tmp_path: Path, mcp_server: McpServerRun) -> None:
    path = tmp_path / "cli.jsonl"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "streamfold",
            "record",
            "--engine",
            "replay",
            "--model",
            "hello",
            "--prompt",
            "hi",
            "--mcp",
            f"demo={mcp_server.streamable_url}",
            "-o",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "finish_reason: stop" in done.stderr
    header = json.loads(path.read_text().splitlines()[0])
    assert header["server_tools"]["mcp"] == [{"server_label": "demo", "require_approval": "never"}]
    replayed = _replay(path)
    assert next(item["type"] for item in replayed[-1]["response"]["output"]) == "mcp_list_tools"
    assert replayed[-1]["type"] == "response.completed"
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "streamfold",
            "record",
            "--engine",
            "replay",
            "--model",
            "hello",
            "--prompt",
            "hi",
            "--mcp",
            "no-url",
            "-o",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bad.returncode == 2 and "--mcp takes LABEL=URL, got 'no-url'" in bad.stderr
