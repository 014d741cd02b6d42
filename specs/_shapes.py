"""Shapes that validating clients require beyond the SDK's models (rules R29, R30).

openai-python builds its models without validating and marks a required-but-nullable key
`Optional[...] = None`, so a key left out passes the Python SDK; clients that validate every
event (the Vercel AI SDK, with zod) reject it. The keys here are the ones the SDK's request
types mark `Required[Optional[...]]` (`*_param.py`), plus the error and logprob shapes the API
always sends; each was seen breaking a real client (issue 13).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import _wire as w

__all__: list[str] = []  # private helpers of the checker

# R29: item keys the API always sends, as null when empty (SDK `Required[Optional[...]]`).
ITEM_NULLABLE: dict[str, tuple[str, ...]] = {
    "code_interpreter_call": ("code", "outputs"),
    "image_generation_call": ("result",),
    "mcp_call": ("approval_request_id", "error", "output"),
    "mcp_list_tools": ("error",),
}
TOOL_NULLABLE: dict[str, tuple[str, ...]] = {"function": ("parameters", "strict")}
# The API's error object: `{code, message, param, type}`; zod clients require `type`.
ERROR_KEYS = ("code", "message", "type")


def missing_nullable(item: Any, table: Mapping[str, tuple[str, ...]]) -> list[str]:
    """The always-sent keys `item` (of its `type`) lacks."""
    if not w.is_mapping(item):
        return []
    return [key for key in table.get(str(item.get("type")), ()) if key not in item]


def error_problem(error: Any) -> str | None:
    """What a response's `error` object lacks (None when it is null or complete)."""
    if not w.is_mapping(error):
        return None
    lacking = [key for key in ERROR_KEYS if not isinstance(error.get(key), str)]
    if not lacking:
        return None
    shape = "{code, message, param, type}"
    return f"response.error lacks {', '.join(lacking)} (the API sends {shape})"


def logprob_problem(entries: Any, *, with_bytes: bool) -> str | None:
    """R30: what is wrong with a `logprobs` list (None when every entry is well formed).

    An entry is `{token, logprob, top_logprobs: [...]}` (`bytes` too in a content part), and
    `top_logprobs` is an array even when no alternatives were asked for."""
    if not isinstance(entries, list):
        return None  # R2's business where it is required
    keys = ("token", "bytes", "logprob") if with_bytes else ("token", "logprob")
    for i, entry in enumerate(entries):
        if not w.is_mapping(entry):
            return f"logprobs[{i}] is not an object: {w.short(entry)}"
        if not isinstance(entry.get("token"), str):
            return f"logprobs[{i}].token must be a string, saw {w.short(entry.get('token'))}"
        if w.type_error(entry.get("logprob"), w.NUM):
            return f"logprobs[{i}].logprob must be a number, saw {w.short(entry.get('logprob'))}"
        if with_bytes and not isinstance(entry.get("bytes"), list):
            return f"logprobs[{i}].bytes must be a list, saw {w.short(entry.get('bytes'))}"
        top = entry.get("top_logprobs")
        if not isinstance(top, list):
            return (
                f"logprobs[{i}].top_logprobs must be an array ([] when none were asked "
                f"for), saw {w.short(top)}"
            )
        for j, alternative in enumerate(top):
            if not w.is_mapping(alternative) or any(k not in alternative for k in keys):
                return (
                    f"logprobs[{i}].top_logprobs[{j}] must be an object with "
                    f"{', '.join(keys)}, saw {w.short(alternative)}"
                )
    return None


def part_logprob_problem(part: Any) -> str | None:
    """R30 for an `output_text` content part (its `logprobs` is optional, but well formed)."""
    if not w.is_mapping(part) or part.get("type") != "output_text" or "logprobs" not in part:
        return None
    return logprob_problem(part.get("logprobs"), with_bytes=True)


def item_logprob_problem(item: Any) -> str | None:
    """R30 for every `output_text` part of a message item."""
    content = w.get(item, "content")
    if w.get(item, "type") != "message" or not isinstance(content, list):
        return None
    for part in content:
        problem = part_logprob_problem(part)
        if problem is not None:
            return problem
    return None


def client_problems(ev: Mapping[str, Any], etype: str, bad: set[str]) -> list[tuple[str, str]]:
    """R29 (keys the API always sends, even as null) and R30 (logprob entries' shape) for one
    event, as (rule, message) pairs; `bad` are the fields R2 already reported."""
    problems: list[tuple[str, str | None]] = []
    if etype in ("response.output_item.added", "response.output_item.done"):
        item = ev.get("item")
        lacking = missing_nullable(item, ITEM_NULLABLE)
        if lacking:
            problems.append(
                (
                    "R29",
                    f"{w.get(item, 'type')} item lacks {', '.join(lacking)}"
                    " (the API sends these keys even when null)",
                )
            )
        problems.append(("R30", item_logprob_problem(item)))
    elif etype in ("response.content_part.added", "response.content_part.done"):
        problems.append(("R30", part_logprob_problem(ev.get("part"))))
    elif etype in ("response.output_text.delta", "response.output_text.done"):
        if "logprobs" not in bad:
            problems.append(("R30", logprob_problem(ev.get("logprobs"), with_bytes=False)))
    elif etype in w.LIFECYCLE and "response" not in bad:
        response = ev.get("response")
        tools = w.get(response, "tools")
        for i, tool in enumerate(tools if isinstance(tools, list) else []):
            lacking = missing_nullable(tool, TOOL_NULLABLE)
            if lacking:
                problems.append(
                    (
                        "R29",
                        f"response.tools[{i}] lacks {', '.join(lacking)} "
                        "(the API sends these keys even when null)",
                    )
                )
        problems.append(("R29", error_problem(w.get(response, "error"))))
    return [(rule, message) for rule, message in problems if message is not None]
