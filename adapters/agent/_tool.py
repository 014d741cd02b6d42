"""The one interface every server-side tool implements, and what a call gives back.

A tool is a *namespace* the model addresses in a harmony header: `to=python`,
`to=browser.search`, `to=<server_label>.<tool>`. The loop finds the tool by the part before
the first dot and hands it the rest (the function name, or None for `python`) and the raw
arguments the model wrote. So a deployment adds its own tool by implementing `Tool` and
registering it under a namespace; the loop itself never changes.

Cancellation is anyio's: the loop awaits `call` inside a cancel scope, and a cancelled or
disconnected response cancels that scope. A tool must let the cancellation through and free
what it holds in `finally` (the python tool kills its process group there). Time limits are
the loop's as well (`ToolLimits.call_seconds`), so a tool need not keep its own clock.

Failure is data, not an exception: a tool that raises, or runs out of time, becomes a
`ToolResult` with `error` set (see `run_tool`), the item shows that error and the model reads
it in the next generation, and the response goes on.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import anyio
import attrs

from streamfold.statemachine._kinds import CallKind

__all__ = [
    "ItemKind",
    "ListedTool",
    "ReusesListing",
    "Tool",
    "ToolInfo",
    "ToolLimits",
    "ToolResult",
    "run_tool",
]

#: The output item a call to this tool becomes (the reducer decides it from the recipient:
#: `browser.*` a web search call, `python` a code interpreter call, anything else an MCP call):
#: the kinds table's `CallKind`.
ItemKind = CallKind

# What the model reads back is capped: a tool that prints a gigabyte must not become a
# gigabyte prompt (nor a gigabyte event).
DEFAULT_OUTPUT_CHARS = 20_000


@attrs.frozen(kw_only=True)
class ToolResult:
    """What one call gave: `output` (the text the model reads and the item shows), or `error`.

    `logs` is for the python tool: the stdout/stderr the item's `outputs` show (the model reads
    `output`, which holds the same text).
    """

    output: str | None = None
    error: str | None = None
    logs: str | None = None

    @property
    def text(self) -> str:
        """What the model reads back: the output, or the error's text."""
        if self.error is not None:
            return f"Error: {self.error}"
        return self.output or ""


@attrs.frozen(kw_only=True)
class ToolLimits:
    """The loop's limits on tool calls (the operator sets them; requests can only lower
    `max_tool_calls`)."""

    #: Wall-clock seconds one call may take before it becomes an error.
    call_seconds: float = 60.0
    #: Characters of output the model reads back (the rest is cut, with a note saying so).
    output_chars: int = DEFAULT_OUTPUT_CHARS
    #: The most tool calls one response runs (a request's `max_tool_calls` may lower it).
    max_tool_calls: int = 10


@runtime_checkable
class Tool(Protocol):
    """A server-side tool the model can call, addressed as `namespace` (or `namespace.name`)."""

    @property
    def namespace(self) -> str:
        """The recipient's first part: `python`, `browser`, or an MCP `server_label`."""

    @property
    def kind(self) -> ItemKind:
        """The output item a call becomes (must match how the reducer reads the recipient)."""

    def describe(self) -> Any:
        """The tool as openai-harmony shows it in the system message: a `ToolNamespaceConfig`."""

    async def call(self, name: str | None, arguments: str) -> ToolResult:
        """Run one call: `name` is the function after the namespace (None for a bare
        `to=python`), `arguments` what the model wrote (JSON for functions, code for python).
        May raise; `run_tool` turns that into an error result."""


@attrs.frozen(kw_only=True)
class ToolInfo:
    """One function a listed tool offers, as the `mcp_list_tools` item shows it."""

    name: str
    description: str | None = None
    input_schema: dict[str, Any] = attrs.Factory(dict)
    annotations: dict[str, Any] | None = None


@runtime_checkable
class ListedTool(Tool, Protocol):
    """A tool whose functions are listed once per response, as an `mcp_list_tools` item, and
    called as `mcp_call` items: an MCP server (`McpTool`), or a deployment's own connector
    (`AgentConfig.connectors`)."""

    async def list_tools(self) -> tuple[ToolInfo, ...]:
        """The functions offered (kept for `describe` and `call`); raises with a message for
        the item's `error` when listing fails."""

    def needs_approval(self, name: str) -> bool:
        """Whether a call to `name` waits for the client's `mcp_approval_response`."""


@runtime_checkable
class ReusesListing(Protocol):
    """A listed tool that can take its functions from an earlier `mcp_list_tools` item
    instead of being asked again: as the API does, a request whose context (its input, or
    what `previous_response_id` brings) holds that item is not listed anew (an approval
    follow-up included). `McpTool` does; a connector that does not is listed every time."""

    def reuse_listing(self, tools: tuple[ToolInfo, ...]) -> bool:
        """Keep `tools` (as `list_tools` keeps its own, filtered the same way) and say True;
        False, keeping nothing, where they do not pass the tool's own checks (it is then
        listed again)."""


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[output cut: {len(text) - limit} more characters not shown]"


async def run_tool(tool: Tool, name: str | None, arguments: str, limits: ToolLimits) -> ToolResult:
    """Call `tool` under the loop's limits; every failure comes back as an error result.

    A cancellation of the caller is not a failure: it propagates (the response is ending).
    """
    result: ToolResult | None = None
    try:
        # move_on_after, not fail_after: a TimeoutError the tool raises itself (an HTTP
        # client's) is the tool's own error, not this limit.
        with anyio.move_on_after(limits.call_seconds):
            result = await tool.call(name, arguments)
    except Exception as exc:  # a tool's own failure: the model reads it and the response goes on
        message = str(exc) or "no message"
        return ToolResult(error=f"{type(exc).__name__}: {message}")
    if result is None:
        return ToolResult(error=f"the tool call timed out after {limits.call_seconds:g} s")
    return attrs.evolve(
        result,
        output=None if result.output is None else _cut(result.output, limits.output_chars),
        error=None if result.error is None else _cut(result.error, limits.output_chars),
        logs=None if result.logs is None else _cut(result.logs, limits.output_chars),
    )
