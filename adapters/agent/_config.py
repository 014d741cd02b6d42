"""What the operator allows (`AgentConfig`), and a request's tools made ready to run (`AgentRun`).

Server-side tools act on the world with the server's own reach, so each is off until the
operator turns it on: `python` runs model-written code (`PythonTool`), the browser needs a
search backend, and MCP servers are called only at URLs the operator allows (`mcp_allow`: URL
rules compared by scheme, host, port and whole path segments, see `_allow.py`; or `("*",)` for
any) since a request's `server_url` makes the server send HTTP
requests wherever the client says. A request that asks for a tool this server does not offer
gets a 400 naming the tool, before anything runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs

from ..protocol import (
    CodeInterpreterParam,
    CreateRequest,
    HostedToolParam,
    McpApprovalRequestInput,
    McpApprovalResponseInput,
    McpCallInput,
    McpListToolsInput,
    McpParam,
    RequestError,
    ToolSearchParam,
    WebSearchParam,
)
from ._allow import AllowList, UrlRefused
from ._browser import BrowserBackend, BrowserTool
from ._mcp import ApprovalFilter, McpServerConfig, McpTool
from ._python import PythonTool
from ._tool import ListedTool, Tool, ToolInfo, ToolLimits

__all__ = ["AgentConfig", "AgentRun", "Approval", "prepare_agent", "served_tools"]

_log = logging.getLogger("streamfold.agent")
#: The unserved tool kinds already logged (once each per process).
_logged: set[str] = set()

#: Generations after a tool call, per response, unless the operator says otherwise.
DEFAULT_MAX_ITERATIONS = 10


def _rules(entries: Iterable[str]) -> tuple[str, ...]:
    return tuple(entries)


@attrs.frozen(kw_only=True)
class AgentConfig:
    """The server's agent settings (`create_app(..., agent=AgentConfig(...))`)."""

    #: URLs a request's MCP `server_url` may be at or under (by whole path segments, see
    #: `_allow.py`); `("*",)` allows any http(s) URL. A rule that does not parse raises
    #: `UrlRefused` here.
    mcp_allow: tuple[str, ...] = attrs.field(default=(), converter=_rules)
    #: The python tool, or None (the default): `code_interpreter` is then refused.
    python: PythonTool | None = None
    #: The browser's search/open backend, or None (the default): `web_search_preview` is then
    #: refused.
    browser: BrowserBackend | None = None
    limits: ToolLimits = attrs.Factory(ToolLimits)
    #: Tool rounds per response: after this many generations that ended in a server-side call,
    #: the response ends `incomplete` (docs/agents.md).
    max_iterations: int = DEFAULT_MAX_ITERATIONS
    #: The deployment's own listed tools, by connector id: a request's
    #: `{"type": "mcp", "server_label": L, "connector_id": ID}` gets `connectors[ID](L)`.
    connectors: Mapping[str, Callable[[str], ListedTool]] = attrs.Factory(dict)
    #: What to do with a hosted tool this server does not run (`web_search` without a
    #: browser, `code_interpreter` with the python tool off, `image_generation`, ...): by
    #: default it is left out of the prompt (logged once per kind) and the request runs, as
    #: clients such as Codex send such tools in their default configuration; True refuses the
    #: request with a 400 naming the tool (`streamfold serve --refuse-unserved-tools`).
    refuse_unserved_tools: bool = False

    allow_list: AllowList = attrs.field(init=False)

    @allow_list.default
    def _parse_allow(self) -> AllowList:
        return AllowList.parse(self.mcp_allow)

    def allows_url(self, url: str) -> bool:
        try:
            self.allow_list.check(url)
        except UrlRefused:
            return False
        return True


@attrs.frozen(kw_only=True)
class Approval:
    """An `mcp_approval_response` of the request, with the request it answers."""

    request: McpApprovalRequestInput
    approve: bool
    reason: str | None = None
    #: Where the answer is in the request (`input[3].approval_request_id`), for errors.
    param: str = "input"


@attrs.define(kw_only=True)
class AgentRun:
    """One response's tools, made fresh per response (the browser keeps that response's pages)."""

    mcp: tuple[ListedTool, ...] = ()
    builtins: tuple[Tool, ...] = ()
    approvals: tuple[Approval, ...] = ()
    #: Each MCP server's tools as the request's context last listed them (an
    #: `mcp_list_tools` item without an error, by `server_label`): the loop does not ask
    #: those servers again (`ReusesListing`), as the API does not.
    listed: Mapping[str, tuple[ToolInfo, ...]] = attrs.Factory(dict)
    limits: ToolLimits = attrs.Factory(ToolLimits)
    max_tool_calls: int = 10
    max_iterations: int = DEFAULT_MAX_ITERATIONS

    def tool(self, namespace: str) -> Tool | None:
        for tool in (*self.builtins, *self.mcp):
            if tool.namespace == namespace:
                return tool
        return None


def _mcp_config(param: McpParam, url: str) -> McpServerConfig:
    headers = dict(param.headers or {})
    if param.authorization is not None:
        headers["Authorization"] = f"Bearer {param.authorization}"
    allowed, read_only = param.allowed_tools, False
    names: frozenset[str] | None = None
    if isinstance(allowed, tuple):
        names = frozenset(allowed)
    elif allowed is not None:
        names = None if allowed.tool_names is None else frozenset(allowed.tool_names)
        read_only = bool(allowed.read_only)
    policy = param.require_approval
    approval: ApprovalFilter | str
    if policy is None:
        approval = "always"  # as the API: nothing goes to a remote server unasked
    elif isinstance(policy, str):
        approval = policy
    else:
        approval = ApprovalFilter(
            always=frozenset(policy.always.tool_names if policy.always else ()),
            never=frozenset(policy.never.tool_names if policy.never else ()),
        )
    return McpServerConfig(
        server_label=param.server_label,
        server_url=url,
        headers=headers,
        allowed_tools=names,
        read_only=read_only,
        require_approval=approval,  # type: ignore[arg-type]
        server_description=param.server_description,
    )


def _own_items(request: CreateRequest, own: int) -> Sequence[object]:
    items = request.input if isinstance(request.input, tuple) else ()
    return items[len(items) - own :]


def _approvals(request: CreateRequest, own: int, labels: set[str]) -> list[Approval]:
    items = request.input if isinstance(request.input, tuple) else ()
    asked = {item.id: item for item in items if isinstance(item, McpApprovalRequestInput)}
    answered = {
        item.approval_request_id
        for item in items
        if isinstance(item, McpCallInput) and item.approval_request_id
    }
    approvals = []
    offset = len(items) - own
    for i, item in enumerate(_own_items(request, own)):
        if not isinstance(item, McpApprovalResponseInput):
            continue
        param = f"input[{i}].approval_request_id"
        asked_for = asked.get(item.approval_request_id)
        position = offset + i
        if asked_for is None or items.index(asked_for) > position:
            raise RequestError(
                f"no mcp_approval_request with id {item.approval_request_id!r} comes before this "
                "response; continue the response that asked (previous_response_id) or send its "
                "mcp_approval_request item first",
                param=param,
            )
        if item.approval_request_id in answered:
            raise RequestError(
                f"approval request {item.approval_request_id!r} was already answered", param=param
            )
        if asked_for.server_label not in labels:
            raise RequestError(
                f"approval request {item.approval_request_id!r} is for MCP server "
                f"{asked_for.server_label!r}, which this request's tools do not include; send "
                "that mcp tool again",
                param=param,
            )
        answered.add(item.approval_request_id)
        approvals.append(
            Approval(request=asked_for, approve=item.approve, reason=item.reason, param=param)
        )
    return approvals


def _tool_info(entry: Mapping[str, object]) -> ToolInfo | None:
    name, description = entry.get("name"), entry.get("description")
    schema, annotations = entry.get("input_schema", {}), entry.get("annotations")
    if not isinstance(name, str) or not isinstance(description, str | None):
        return None
    if not isinstance(schema, dict) or not isinstance(annotations, dict | None):
        return None
    return ToolInfo(
        name=name, description=description, input_schema=schema, annotations=annotations
    )


def _listed(request: CreateRequest) -> dict[str, tuple[ToolInfo, ...]]:
    """The tools of each server's last `mcp_list_tools` item in the request's context; a
    server whose last listing failed, or holds an entry that is no tool, is not in it."""
    items = request.input if isinstance(request.input, tuple) else ()
    listed: dict[str, tuple[ToolInfo, ...]] = {}
    for item in items:
        if not isinstance(item, McpListToolsInput):
            continue
        infos = [_tool_info(entry) for entry in item.tools]
        if item.error is None and None not in infos:
            listed[item.server_label] = tuple(info for info in infos if info is not None)
        else:
            listed.pop(item.server_label, None)
    return listed


def _unserved(config: AgentConfig, tool: object) -> str | None:
    """Why this server does not run `tool`, or None when it does (or the client does)."""
    if isinstance(tool, WebSearchParam) and config.browser is None:
        return (
            f"this server has no browser backend, so {tool.type} is not offered; its "
            "operator enables it with AgentConfig(browser=...)"
        )
    if isinstance(tool, CodeInterpreterParam) and config.python is None:
        return (
            "the python tool is off on this server, so code_interpreter is not offered; "
            "its operator enables it with `streamfold serve --python-tool`"
        )
    if isinstance(tool, HostedToolParam):
        return f"this server does not run the hosted tool {tool.type}"
    if isinstance(tool, ToolSearchParam) and tool.execution != "client":
        return (
            "this server runs no hosted tool search (tool_search with execution 'server'); "
            "a client that runs its own search sends execution 'client'"
        )
    return None


def served_tools(request: CreateRequest, config: AgentConfig) -> CreateRequest:
    """`request` without the tools this server does not run, each logged once per kind; or,
    where the operator refuses them (`refuse_unserved_tools`), a `RequestError` (400) naming
    the first one."""
    kept = []
    for i, tool in enumerate(request.tools):
        why = _unserved(config, tool)
        if why is None:
            kept.append(tool)
            continue
        if config.refuse_unserved_tools:
            raise RequestError(why, param=f"tools[{i}].type")
        kind = str(getattr(tool, "type", ""))
        if kind not in _logged:
            _logged.add(kind)
            _log.warning("%s; a request's %s tool is left out of the prompt", why, kind)
    if len(kept) == len(request.tools):
        return request
    return attrs.evolve(request, tools=tuple(kept))


def prepare_agent(request: CreateRequest, config: AgentConfig, own: int) -> AgentRun | None:
    """The request's server-side tools, checked against what this server offers; None when the
    request names none. `own`: how many of `request.input`'s items are the body's own (the
    rest came with `previous_response_id`); approval responses count only there. Raises
    `RequestError` (400) naming the tool that cannot run here. Tools the server does not run
    are expected gone already (`served_tools`)."""
    if not request.server_tools:
        for i, item in enumerate(_own_items(request, own)):
            if isinstance(item, McpApprovalResponseInput):
                raise RequestError(
                    "an mcp_approval_response needs the mcp tool it answers for in `tools`",
                    param=f"input[{i}]",
                )
        return None
    mcp: list[ListedTool] = []
    builtins: list[Tool] = []
    for i, tool in enumerate(request.tools):
        if isinstance(tool, McpParam) and tool.connector_id is not None:
            if tool.connector_id not in config.connectors:
                offered = ", ".join(sorted(config.connectors)) or "none"
                raise RequestError(
                    f"this server has no connector {tool.connector_id!r} (it has: {offered})",
                    param=f"tools[{i}].connector_id",
                )
            mcp.append(config.connectors[tool.connector_id](tool.server_label))
        elif isinstance(tool, McpParam):
            try:
                url = config.allow_list.check(tool.server_url or "")
            except UrlRefused as exc:
                raise RequestError(
                    f"this server does not call MCP servers at {tool.server_url!r} ({exc}); its "
                    "operator allows them with `streamfold serve --mcp-allow URL` "
                    "(AgentConfig.mcp_allow)",
                    param=f"tools[{i}].server_url",
                ) from None
            # Connected with `CONNECT_SECONDS`, as documented (not the call limit).
            mcp.append(McpTool(_mcp_config(tool, str(url)), allow=config.allow_list))
        elif isinstance(tool, WebSearchParam | CodeInterpreterParam):
            why = _unserved(config, tool)
            if why is not None:
                raise RequestError(why, param=f"tools[{i}].type")
            if isinstance(tool, WebSearchParam):
                assert config.browser is not None
                builtins.append(BrowserTool(config.browser))
            else:
                assert config.python is not None
                builtins.append(config.python)
    limit = config.limits.max_tool_calls
    return AgentRun(
        mcp=tuple(mcp),
        builtins=tuple(builtins),
        approvals=tuple(_approvals(request, own, {t.namespace for t in mcp})),
        listed=_listed(request),
        limits=config.limits,
        max_tool_calls=min(limit, request.max_tool_calls or limit),
        max_iterations=config.max_iterations,
    )
