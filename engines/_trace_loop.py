"""The agent loop in a trace: its header field and its lines (see `_trace.py` for the format).

A recorded agent run holds, besides each generation's chunks, everything the server's loop fed
the reducer: which tools it ran (`"server_tools"` in the header) and, in order among the chunk
lines, each `list_tools`, `tool_result`, `next_generation` and `approved_call`. Replay makes the
same calls (`statemachine.apply_loop_step`), so the run replays byte for byte with no tool, MCP
server or network.

    {"server_tools": {"browser": true, "python": false,
                      "mcp": [{"server_label": "wiki", "require_approval": "never"}]}}
    {"list_tools": {"server_label": "wiki", "tools": [{"name": "ask", "input_schema": {}}]}}
    {"tool_result": {"item_id": "ws_…_1", "output": "…"}}      (or "error": "…" | {MCP error})
    {"next_generation": {"input_tokens": 212}}
    {"approved_call": {"approval_request_id": "mcpr_…", "server_label": "wiki",
                       "name": "ask", "arguments": "{…}"}}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamfold.statemachine import (
    ApprovedCallStep,
    ListToolsStep,
    LoopStep,
    McpServer,
    NextGenerationStep,
    ServerTools,
    StreamfoldError,
    ToolResultStep,
    WireFormatError,
    structure,
    to_wire,
)

__all__ = ["LOOP_KEYS", "loop_line", "loop_step", "server_tools_from_header", "server_tools_line"]

_STEPS: dict[str, type[LoopStep]] = {
    "list_tools": ListToolsStep,
    "tool_result": ToolResultStep,
    "next_generation": NextGenerationStep,
    "approved_call": ApprovedCallStep,
}
_KEYS = {cls: key for key, cls in _STEPS.items()}
#: The keys of a trace line that is a loop step.
LOOP_KEYS = frozenset(_STEPS)


def loop_step(line: Mapping[str, Any]) -> LoopStep:
    """The loop step a trace line records (its one key names it); raises `ValueError`
    saying what is wrong."""
    if len(line) != 1:
        raise ValueError(f"a loop line has one key ({sorted(LOOP_KEYS)}), got {sorted(line)}")
    ((key, body),) = line.items()
    if not isinstance(body, Mapping):
        raise ValueError(f'"{key}" must be an object')
    try:
        return structure(body, _STEPS[key], key)  # type: ignore[no-any-return]
    except WireFormatError as exc:
        raise ValueError(str(exc)) from exc


def loop_line(step: LoopStep) -> dict[str, Any]:
    """The trace line of a loop step."""
    return {_KEYS[type(step)]: to_wire(step)}


def server_tools_line(tools: ServerTools) -> dict[str, Any]:
    """A header's `"server_tools"` value."""
    return {
        "browser": tools.browser,
        "python": tools.python,
        "mcp": [
            {
                "server_label": s.server_label,
                "require_approval": sorted(s.require_approval)
                if isinstance(s.require_approval, frozenset)
                else s.require_approval,
            }
            for s in tools.mcp
        ],
    }


def server_tools_from_header(header: Mapping[str, Any]) -> ServerTools:
    """The `ServerTools` a header records (none when it has no `"server_tools"`); raises
    `ValueError` saying what is wrong."""
    raw = header.get("server_tools")
    if raw is None:
        return ServerTools()
    if not isinstance(raw, Mapping):
        raise ValueError('"server_tools" must be an object')
    browser, python, mcp = raw.get("browser", False), raw.get("python", False), raw.get("mcp", [])
    if not isinstance(browser, bool) or not isinstance(python, bool):
        raise ValueError('"server_tools": "browser" and "python" must be true or false')
    if not isinstance(mcp, list) or not all(isinstance(s, Mapping) for s in mcp):
        raise ValueError('"server_tools": "mcp" must be a list of objects')
    servers = []
    for server in mcp:
        label, approval = server.get("server_label"), server.get("require_approval", "never")
        if not isinstance(label, str) or not label:
            raise ValueError('"server_tools": each MCP server needs a "server_label" string')
        if isinstance(approval, list) and all(isinstance(n, str) for n in approval):
            approval = frozenset(approval)
        elif approval not in ("always", "never"):
            raise ValueError(
                f'"server_tools": "require_approval" of {label!r} must be "always", "never" '
                "or a list of tool names"
            )
        servers.append(McpServer(server_label=label, require_approval=approval))
    try:
        return ServerTools(browser=browser, python=python, mcp=tuple(servers))
    except StreamfoldError as exc:
        raise ValueError(str(exc)) from exc
