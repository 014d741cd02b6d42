"""What an MCP server may send: bounds on a listing and on the bytes of one operation.

An MCP server is the client's choice, not the operator's (within `--mcp-allow`), and what it
lists goes into the prompt. Unbounded, one listing of 10,000 tools or of a 200,000-character
description stalled the event loop for most of a minute (openai-harmony's tokenizer is
quadratic in the length of a word, and panics on a long enough one), and a 100 MB `tools/list`
cost 870 MB of memory before anything looked at it. So:

- every HTTP response body of one operation (the listing, or one call) is counted as it
  arrives (`budget_transport`), and the operation fails when the total passes
  `McpLimits.listing_bytes` or `call_bytes`: nothing larger is ever held;
- a listing may hold at most `max_tools` tools, each with a name of at most `name_chars`, a
  description of at most `description_chars` and an input schema of at most `schema_chars`
  (as JSON), `listing_chars` in all; past any of them the listing fails, with an error saying
  which. (Rendering is quadratic in a word's length: a 4,096-character word costs ~25 ms.)
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import attrs

from ._tool import ToolInfo

__all__ = [
    "ByteBudget",
    "ListingTooLarge",
    "McpLimits",
    "ResponseTooLarge",
    "budget_transport",
    "check_tool",
    "shared_ssl_context",
]


@attrs.frozen(kw_only=True)
class McpLimits:
    """Bounds on what one MCP server may send (see the module docstring)."""

    max_tools: int = 128
    name_chars: int = 128
    description_chars: int = 4_096
    schema_chars: int = 8_192
    #: Characters of names, descriptions and schemas in the whole listing: what it may add to
    #: the prompt (and to the time rendering it takes).
    listing_chars: int = 65_536
    #: HTTP response bytes of one listing (all its pages) and of one call.
    listing_bytes: int = 1 << 20
    call_bytes: int = 1 << 20


class ListingTooLarge(Exception):
    """A listing past `McpLimits`; the message names the bound."""


class ResponseTooLarge(Exception):
    """An operation whose HTTP responses passed their byte budget."""


def check_tool(info: ToolInfo, limits: McpLimits) -> int:
    """The tool's size in characters; raises `ListingTooLarge` for a tool past the bounds."""
    shown = info.name[:40]
    if len(info.name) > limits.name_chars:
        raise ListingTooLarge(
            f"a tool name is longer than {limits.name_chars} characters ({shown!r}...)"
        )
    if len(info.description or "") > limits.description_chars:
        raise ListingTooLarge(
            f"tool {shown!r} has a description longer than {limits.description_chars} characters"
        )
    schema = len(json.dumps(info.input_schema, ensure_ascii=False))
    if schema > limits.schema_chars:
        raise ListingTooLarge(
            f"tool {shown!r} has an input schema longer than {limits.schema_chars} characters"
        )
    return len(info.name) + len(info.description or "") + schema


class ByteBudget:
    """The response bytes one operation may receive (`budget_transport` counts them)."""

    def __init__(self, limit: int, what: str) -> None:
        self.limit = limit
        self.what = what
        self.spent = 0

    def spend(self, size: int) -> None:
        self.spent += size
        if self.spent > self.limit:
            raise ResponseTooLarge(
                f"the MCP server sent more than {self.limit} bytes for {self.what}"
            )


@functools.cache
def _transport_class() -> type:
    # Built on first use: httpx2 comes with the `mcp` extra, and importing this package must
    # not need it.
    import httpx2

    class Counted(httpx2.AsyncByteStream):
        def __init__(self, stream: Any, budget: ByteBudget) -> None:
            self.stream = stream
            self.budget = budget

        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for chunk in self.stream:
                self.budget.spend(len(chunk))
                yield chunk

        async def aclose(self) -> None:
            await self.stream.aclose()

    class Budgeted(httpx2.AsyncHTTPTransport):
        """Fails the read that passes the budget: a body is never read whole before it is
        judged."""

        def __init__(self, budget: ByteBudget, ssl_context: Any) -> None:
            super().__init__(verify=ssl_context)
            self.budget = budget

        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            response = await super().handle_async_request(request)
            return httpx2.Response(
                status_code=response.status_code,
                headers=response.headers,
                stream=Counted(response.stream, self.budget),
                extensions=response.extensions,
            )

    return Budgeted


def budget_transport(budget: ByteBudget, ssl_context: Any) -> Any:
    """An httpx2 transport that counts every response body byte against `budget`, verifying
    TLS with `ssl_context` (an `ssl.SSLContext`: build it once, see `shared_ssl_context`)."""
    return _transport_class()(budget, ssl_context)


@functools.cache
def _ssl_context() -> Any:
    import httpx2

    return httpx2.create_ssl_context()  # what an httpx2 transport builds by default


async def shared_ssl_context() -> Any:
    """The one TLS context of every MCP connection, built off the event loop the first time.

    A transport left to build its own loads the system's CA certificates each time: ~20 ms of
    CPU per MCP operation, on the event loop (two per MCP call: its listing and the call), which
    `bench_abuse.py --agent` found to be most of what delayed other requests (issue 29)."""
    return await anyio.to_thread.run_sync(_ssl_context)
