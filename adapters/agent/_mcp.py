"""MCP servers as tools, through the official `mcp` SDK (`pip install 'streamfold[agent]'`).

One request tool `{"type": "mcp", "server_label", "server_url", ...}` is one `McpTool`, the
namespace `server_label`. The transport follows the URL, as MCP clients commonly decide it: a
path ending in `/sse` is the (older) HTTP+SSE transport, anything else streamable HTTP.
`headers` go on every HTTP request to the server (an `Authorization` header, typically).

Every HTTP request the MCP client sends is held to the operator's allow-list again (the SSE
transport posts to an endpoint the server names). The SDK follows a redirect within the
origin carrying the request's headers (its `Authorization`), so a redirect is let through only
to the `server_url`'s own path or below it (`/mcp/` to `/mcp`, as servers normalise a
trailing slash); any other redirect fails the operation, and nothing is sent there.

Each operation opens its own connection (`list_tools` once per response, then one per call)
and closes it before returning. That costs an MCP handshake per call, and buys a tool call
that is an ordinary await: cancelling it (a client that left, a cancelled background
response) closes that connection and nothing outlives it, with no connection held open across
the response's stream. Servers built on the 2026 MCP revision are stateless per request anyway.
"""

from __future__ import annotations

import functools
import json
import logging
import traceback
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Literal

import attrs

from ._allow import AllowList, UrlRefused, normal_url
from ._mcp_limits import (
    ByteBudget,
    ListingTooLarge,
    McpLimits,
    ResponseTooLarge,
    budget_transport,
    check_tool,
    shared_ssl_context,
)
from ._tool import ItemKind, ToolInfo, ToolResult

__all__ = [
    "ApprovalFilter",
    "McpServerConfig",
    "McpTool",
    "McpToolInfo",
    "ToolListError",
    "describe_error",
]

_log = logging.getLogger("streamfold")

#: Seconds to connect to an MCP server, and for its answer to `tools/list` (a tool call's answer
#: is bounded by the loop's `ToolLimits.call_seconds` instead: tools may take their time).
CONNECT_SECONDS = 10.0


class ToolListError(Exception):
    """Listing an MCP server's tools failed; the message says why (it goes on the item)."""


class McpRequestRefused(Exception):
    """An HTTP request or answer of the MCP client that the server does not let through."""


# A tool made without an allow-list (a deployment's own, or a test's) may go anywhere: the
# request path checks `AgentConfig.allow_list` before it makes one.
_ANY_URL = AllowList((), any_url=True)
_LIMITS = McpLimits()

#: The listing entry of an MCP tool (the name the `mcp_list_tools` item's type uses).
McpToolInfo = ToolInfo


@attrs.frozen(kw_only=True)
class ApprovalFilter:
    """`require_approval` as an object: tools named under `never` run without asking, all
    others (those under `always`, and any not named) need approval, the API's safe default."""

    always: frozenset[str] = frozenset()
    never: frozenset[str] = frozenset()

    def needs(self, name: str) -> bool:
        return name in self.always or name not in self.never


@attrs.frozen(kw_only=True)
class McpServerConfig:
    """A request's `{"type": "mcp"}` tool (`protocol.McpParam`, checked by
    `protocol.check_server_tools`), as the loop connects to it (`_config.py` builds it)."""

    server_label: str
    server_url: str
    headers: Mapping[str, str] = attrs.Factory(dict)
    #: Tool names the model may see and call; None: all the server lists.
    allowed_tools: frozenset[str] | None = None
    #: Only tools whose annotations say `readOnlyHint` (the `allowed_tools.read_only` filter).
    read_only: bool = False
    #: As the API: absent means "always" (nothing is sent to a remote server unasked).
    require_approval: Literal["always", "never"] | ApprovalFilter = "always"
    server_description: str | None = None

    @property
    def transport(self) -> Literal["sse", "streamable_http"]:
        path = self.server_url.split("?", 1)[0].rstrip("/")
        return "sse" if path.endswith("/sse") else "streamable_http"


def _leaf(exc: BaseException) -> BaseException:
    # The SDK's transports run in task groups: a refused connection arrives wrapped in one or
    # more exception groups, whose own message ("unhandled errors in a TaskGroup") says nothing.
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _release(exc: BaseException) -> None:
    """Clear the frames of `exc`'s tracebacks (and of the exceptions it holds), whose locals
    hold what the failed operation had read: up to a whole byte budget of it.

    The SDK's transports fail inside task groups, and the exception groups, their
    tracebacks and frames form reference cycles, which only the cyclic collector frees: with
    `tune_gc_for_serving`'s rarer young collections, a server asked again and again for a
    listing past its budget held ~280 MB of such garbage (`bench_abuse.py --agent`, issue 29).
    Cleared, a cycle holds a few small objects until it is collected."""
    seen: set[int] = set()
    pending = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if current.__traceback__ is not None:
            traceback.clear_frames(current.__traceback__)
        pending += [e for e in (current.__cause__, current.__context__) if e is not None]
        if isinstance(current, BaseExceptionGroup):
            pending += current.exceptions


def describe_error(exc: BaseException) -> str:
    leaf = _leaf(exc)
    return f"{type(leaf).__name__}: {leaf}" if str(leaf) else type(leaf).__name__


# What the client (and the model) may read of a failure: the server's own refusals, said in
# full; of anything the remote end did, only that it failed. Its HTTP status, content type or
# connection error would make the MCP tool a probe of whatever the allow-list lets through
# (issue 29); the operator's log has the detail.
_OWN_ERRORS = (McpRequestRefused, ResponseTooLarge, ListingTooLarge, UrlRefused)
_SAID = "the MCP server could not be reached, or did not answer as an MCP server"


def _public_error(exc: BaseException, server_label: str) -> str:
    leaf = _leaf(exc)
    if isinstance(leaf, _OWN_ERRORS):
        return str(leaf)
    if isinstance(leaf, TimeoutError):
        return "the MCP server did not answer in time"
    _log.info("MCP server %r failed: %s", server_label, describe_error(exc))
    return _SAID


def _content_text(result: Any) -> str:
    parts = []
    for block in result.content:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and hasattr(block.resource, "text"):
            parts.append(block.resource.text)
        elif kind == "resource_link":
            parts.append(f"[resource: {block.uri}]")
        else:
            parts.append(f"[{kind} content: {getattr(block, 'mime_type', 'unknown type')}]")
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    return "\n".join(parts)


_SCHEMA_MAPS = frozenset({"properties", "$defs", "definitions", "patternProperties"})
_SCHEMA_KEYS = frozenset({"items", "additionalProperties", "anyOf", "oneOf", "allOf", "not"})


def _untitled(schema: Any) -> Any:
    """`schema` without `title`s: pydantic (so most Python MCP servers) titles every field with
    its own name capitalized, which harmony renders as a `// City` comment line per field."""
    if isinstance(schema, list):
        return [_untitled(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _untitled(sub) for name, sub in value.items()}
        elif key in _SCHEMA_KEYS:
            out[key] = _untitled(value)
        else:  # a default, an enum, an example: data, kept as it is
            out[key] = value
    return out


class McpTool:
    """One MCP server, the namespace `server_label` (see the module docstring)."""

    kind: ItemKind = "mcp_call"

    def __init__(
        self,
        config: McpServerConfig,
        *,
        connect_seconds: float = CONNECT_SECONDS,
        allow: AllowList = _ANY_URL,
        limits: McpLimits = _LIMITS,
    ):
        self.config = config
        self.connect_seconds = connect_seconds
        self.allow = allow
        self.limits = limits
        self.tools: tuple[McpToolInfo, ...] = ()

    async def _check_request(self, request: Any) -> None:
        try:
            self.allow.check(str(request.url))
        except UrlRefused as exc:
            raise McpRequestRefused(
                f"the MCP client was sent outside the allow-list: {exc}"
            ) from None

    async def _refuse_redirect(self, response: Any) -> None:
        if not response.is_redirect:
            return
        # (httpx sets `next_request` only after the response hooks ran.)
        base = normal_url(self.config.server_url).path.rstrip("/")
        try:
            target = response.request.url.join(response.headers["location"])
            path: str | None = normal_url(str(target)).path
        except (UrlRefused, KeyError, ValueError):
            path = None
        if path is None or not (path.rstrip("/") == base or path.startswith(base + "/")):
            raise McpRequestRefused(
                f"the MCP server answered a redirect ({response.status_code}) away from its "
                "server_url's path; not followed"
            )

    def _http_client(
        self,
        budget: ByteBudget,
        ssl_context: Any,
        headers: dict[str, str] | None = None,
        timeout: Any = None,
        auth: Any = None,
    ) -> Any:
        import httpx2

        return httpx2.AsyncClient(
            headers=headers,
            timeout=timeout,
            auth=auth,
            follow_redirects=False,
            event_hooks={"request": [self._check_request], "response": [self._refuse_redirect]},
            transport=budget_transport(budget, ssl_context),
        )

    @property
    def namespace(self) -> str:
        return self.config.server_label

    @asynccontextmanager
    async def _client(self, budget: ByteBudget, read_seconds: float | None) -> AsyncIterator[Any]:
        import httpx2
        from mcp import Client
        from mcp.client.sse import sse_client
        from mcp.client.streamable_http import streamable_http_client

        config = self.config
        headers = dict(config.headers)
        timeout = self.connect_seconds
        ssl_context = await shared_ssl_context()
        if config.transport == "sse":
            transport: Any = sse_client(
                config.server_url,
                headers=headers,
                timeout=timeout,
                httpx_client_factory=functools.partial(self._http_client, budget, ssl_context),
            )
            async with Client(transport, read_timeout_seconds=read_seconds, cache=None) as client:
                yield client
            return
        http = self._http_client(
            budget, ssl_context, headers=headers, timeout=httpx2.Timeout(timeout, read=None)
        )
        async with http:
            transport = streamable_http_client(config.server_url, http_client=http)
            async with Client(transport, read_timeout_seconds=read_seconds, cache=None) as client:
                yield client

    def _allowed(self, info: McpToolInfo) -> bool:
        config = self.config
        if config.allowed_tools is not None and info.name not in config.allowed_tools:
            return False
        return not config.read_only or bool((info.annotations or {}).get("readOnlyHint"))

    async def list_tools(self) -> tuple[McpToolInfo, ...]:
        """The server's tools that `allowed_tools` lets through (all pages); kept for
        `describe` and `call`. Raises `ToolListError` with a message for the item."""
        try:
            listed: list[McpToolInfo] = []
            limits = self.limits
            chars = 0
            budget = ByteBudget(limits.listing_bytes, "its tool listing")
            async with self._client(budget, self.connect_seconds) as client:
                cursor = None
                for _ in range(100):  # a server whose pages never end cannot hang the response
                    page = await client.list_tools(cursor=cursor)
                    for tool in page.tools:
                        annotations = (
                            tool.annotations.model_dump(by_alias=True, exclude_none=True)
                            if tool.annotations is not None
                            else None
                        )
                        info = McpToolInfo(
                            name=tool.name,
                            description=tool.description,
                            input_schema=dict(tool.input_schema),
                            annotations=annotations,
                        )
                        chars += check_tool(info, limits)
                        if chars > limits.listing_chars:
                            raise ListingTooLarge(
                                f"its tools' names, descriptions and schemas pass "
                                f"{limits.listing_chars} characters"
                            )
                        listed.append(info)
                    if len(listed) > limits.max_tools:
                        raise ListingTooLarge(f"it lists more than {limits.max_tools} tools")
                    cursor = page.next_cursor
                    if cursor is None:
                        break
        except Exception as exc:
            label = self.config.server_label
            message = (
                f"could not list the tools of MCP server {label!r}: {_public_error(exc, label)}"
            )
            _release(exc)
            raise ToolListError(message) from exc
        self.tools = tuple(info for info in listed if self._allowed(info))
        return self.tools

    def reuse_listing(self, tools: tuple[McpToolInfo, ...]) -> bool:
        """An earlier `mcp_list_tools` item's tools, held to the bounds and filters a listing
        is (a stateless client sends that item back itself); False where they fail them."""
        limits = self.limits
        try:
            chars = sum(check_tool(info, limits) for info in tools)
        except ListingTooLarge:
            return False
        if chars > limits.listing_chars or len(tools) > limits.max_tools:
            return False
        self.tools = tuple(info for info in tools if self._allowed(info))
        return True

    def needs_approval(self, name: str) -> bool:
        policy = self.config.require_approval
        return policy == "always" if isinstance(policy, str) else policy.needs(name)

    def describe(self) -> Any:
        import openai_harmony as h

        return h.ToolNamespaceConfig(
            name=self.config.server_label,
            description=self.config.server_description
            or f"Tools of the MCP server {self.config.server_label}.",
            tools=[
                h.ToolDescription.new(
                    tool.name,
                    tool.description or "",
                    parameters=_untitled(tool.input_schema) or None,
                )
                for tool in self.tools
            ],
        )

    async def call(self, name: str | None, arguments: str) -> ToolResult:
        listed = {tool.name for tool in self.tools}
        if name is None or name not in listed:
            offered = ", ".join(sorted(listed)) or "none"
            return ToolResult(
                error=f"MCP server {self.config.server_label!r} offers no tool {name!r} "
                f"(its tools: {offered})"
            )
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return ToolResult(error=f"the arguments are not valid JSON ({exc})")
        if not isinstance(parsed, dict):
            return ToolResult(error="the arguments must be a JSON object")
        try:
            budget = ByteBudget(self.limits.call_bytes, "one tool call")
            async with self._client(budget, None) as client:  # the loop bounds the call
                result = await client.call_tool(name, parsed)
        except Exception as exc:  # protocol/transport errors: the model reads them
            error = _public_error(exc, self.config.server_label)
            _release(exc)
            return ToolResult(error=error)
        text = _content_text(result)
        if result.is_error:
            return ToolResult(error=text or "the tool reported an error")
        return ToolResult(output=text)
