"""What a Response echoes of its request, beyond the fields the reducer needs: the API's
`Response` says what was asked (`text`, `store`, `tools`, `truncation`, `user`, ...), and
clients read it back (issue 31: Codex, pydantic-ai and every agent client).

`tools` holds the client's tools as values (the grammar routes the model's calls by them,
`additional_tools` items' included) and every other tool of the request (MCP, hosted) as the
object it was sent as, in the request's order, less its secrets: an MCP tool's
`authorization` and `headers` are never echoed (the Response is stored and shown to whoever
reads it back).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamfold.statemachine import TextConfig, ToolSearchTool

from ..protocol import CreateRequest

__all__ = ["echoed"]

_CLIENT = frozenset({"function", "custom", "namespace"})
#: Keys of a request's tool that carry secrets, left out of the echo.
_SECRET_KEYS = frozenset({"authorization", "headers"})


def _tools(request: CreateRequest, body: Any) -> tuple[Any, ...]:
    raw = body.get("tools") if isinstance(body, Mapping) else None
    own = iter(request.client_tools)
    echoed: list[Any] = []
    for tool in raw if isinstance(raw, list) else ():
        if not isinstance(tool, Mapping):
            continue
        if tool.get("type") in _CLIENT:
            echoed.append(next(own))
        elif tool.get("type") == "tool_search":  # a value: the grammar routes calls by it
            echoed.append(
                ToolSearchTool(
                    execution=tool.get("execution"),
                    description=tool.get("description"),
                    parameters=tool.get("parameters"),
                )
            )
        else:
            echoed.append({k: v for k, v in tool.items() if k not in _SECRET_KEYS})
    echoed += own  # the tools of `additional_tools` and `tool_search_output` input items
    return tuple(echoed)


def echoed(request: CreateRequest, body: Any) -> dict[str, Any]:
    """The Response's fields that repeat `request` (keyword arguments of `Response`)."""
    return {
        "tools": _tools(request, body),
        "text": request.text if request.text is not None else TextConfig(),
        "store": request.store is not False,
        "max_tool_calls": request.max_tool_calls,
        "top_logprobs": request.top_logprobs or 0,
        "truncation": request.truncation or "disabled",
        # One tier here: `auto` is served as `default`, as the API reports the tier used.
        "service_tier": "default"
        if request.service_tier in (None, "auto")
        else (request.service_tier),
        "prompt_cache_key": request.prompt_cache_key,
        "prompt_cache_retention": request.prompt_cache_retention,
        "safety_identifier": request.safety_identifier,
        "user": request.user,
    }
