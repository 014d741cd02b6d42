"""Rules on what a completed response says, against what its request asked (R31, R32, R34),
and on any terminal response's usage against its budget (R33).

Structured outputs and `tool_choice` are promises about content, and peers break them silently
(vLLM #23120 and #44216, sglang #31019): the stream is well formed, the answer is not JSON, or
`required` came back with a plain message. These rules read the request's controls where the
API echoes them on the response (`text.format`, `tool_choice`, `tools`) and judge the completed
response's output, so `streamfold check` tells a user whether any server's structured output
held. They judge only `response.completed`: an incomplete or failed response may be cut
anywhere.

- **R31**: with a strict `json_schema` `text.format`, the last message's text parses as JSON
  and validates against the schema (`json_object`: parses as a JSON object); a strict function
  tool's call arguments validate against its `parameters`.
- **R32**: `tool_choice` holds: `required` → at least one call; a named tool (function,
  custom tool, MCP server or one of its tools, hosted tool) → at least one call, and only to
  it; `allowed_tools` → only calls to those (at least one in `required` mode); `none` → no
  call.
- **R34**: `parallel_tool_calls: false` holds: at most one call the client runs
  (`function_call`, `custom_tool_call`); the server's own tool calls are not counted.

Schemas are validated with `jsonschema` (Draft 2020-12) where it is installed; without it, R31
checks only that the JSON parses.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["budget_rule", "content_rules"]

Report = Callable[[str, str], None]
#: A hosted tool's call item, and the `tool_choice` types that name its tool.
_HOSTED_CALLS: dict[str, tuple[str, ...]] = {
    "web_search_call": (
        "web_search",
        "web_search_preview",
        "web_search_preview_2025_03_11",
        "web_search_2025_08_26",
    ),
    "code_interpreter_call": ("code_interpreter",),
    "file_search_call": ("file_search",),
    "image_generation_call": ("image_generation",),
    "computer_call": ("computer", "computer_use", "computer_use_preview"),
    "local_shell_call": ("local_shell",),
    "shell_call": ("shell",),
    "apply_patch_call": ("apply_patch",),
    "tool_search_call": ("tool_search",),
}
_CALLS = frozenset(
    {"function_call", "custom_tool_call", "mcp_call", "mcp_approval_request", *_HOSTED_CALLS}
)


def _validator(schema: Any) -> Callable[[Any], str | None]:
    try:
        import jsonschema
    except ImportError:  # pragma: no cover - the dev extra has it
        return lambda _value: None

    def validate(value: Any) -> str | None:
        try:
            jsonschema.validate(value, schema, cls=jsonschema.Draft202012Validator)
        except jsonschema.ValidationError as exc:
            where = "/".join(str(p) for p in exc.absolute_path)
            return f"{exc.message} (at {where or 'the root'})"
        except jsonschema.SchemaError:
            return None  # not the server's fault: the request's schema itself is invalid
        return None

    return validate


def _answer_text(output: list[Any]) -> str | None:
    for item in reversed(output):
        if isinstance(item, Mapping) and item.get("type") == "message":
            parts = item.get("content") or []
            return "".join(
                part.get("text", "")
                for part in parts
                if isinstance(part, Mapping) and part.get("type") == "output_text"
            )
    return None


def _format_rule(response: Mapping[str, Any], output: list[Any], report: Report) -> None:
    fmt = (
        (response.get("text") or {}).get("format")
        if isinstance(response.get("text"), Mapping)
        else None
    )
    if not isinstance(fmt, Mapping) or fmt.get("type") not in ("json_schema", "json_object"):
        return
    if fmt.get("type") == "json_schema" and not fmt.get("strict"):
        return
    if any(isinstance(i, Mapping) and i.get("type") in _CALLS for i in output):
        return  # the response ended in a call: no answer to judge yet
    text = _answer_text(output)
    if text is None:
        report("R31", f"text.format is {fmt.get('type')} but the completed response has no message")
        return
    try:
        value = json.loads(text)
    except ValueError as exc:
        report("R31", f"the answer does not parse as JSON ({exc}); text.format asked for JSON")
        return
    if fmt.get("type") == "json_object":
        if not isinstance(value, dict):
            report("R31", "text.format json_object: the answer is JSON but not an object")
        return
    problem = _validator(fmt.get("schema"))(value)
    if problem is not None:
        report("R31", f"the answer does not follow text.format {fmt.get('name')!r}: {problem}")


def _strict_call_rule(tools: list[Any], output: list[Any], report: Report) -> None:
    strict = {
        tool.get("name"): tool.get("parameters")
        for tool in tools
        if isinstance(tool, Mapping) and tool.get("type") == "function" and tool.get("strict")
    }
    for item in output:
        if not isinstance(item, Mapping) or item.get("type") != "function_call":
            continue
        if item.get("name") not in strict:
            continue
        try:
            arguments = json.loads(item.get("arguments") or "")
        except ValueError as exc:
            report("R31", f"strict function {item.get('name')!r}: arguments are not JSON ({exc})")
            continue
        problem = _validator(strict[item.get("name")])(arguments)
        if problem is not None:
            report("R31", f"strict function {item.get('name')!r}: {problem}")


def _names(entry: Mapping[str, Any], call: Mapping[str, Any]) -> bool:
    """Whether the `tool_choice` entry `entry` (a named choice, or one of `allowed_tools`'
    tools) names the tool `call` called."""
    kind, called = entry.get("type"), call.get("type")
    if kind in ("function", "custom"):
        wanted = "function_call" if kind == "function" else "custom_tool_call"
        return called == wanted and call.get("name") == entry.get("name")
    if kind == "mcp":
        return (
            called in ("mcp_call", "mcp_approval_request")
            and call.get("server_label") == entry.get("server_label")
            and entry.get("name") in (None, call.get("name"))
        )
    return kind in _HOSTED_CALLS.get(str(called), ())


def _choice_rule(choice: Any, output: list[Any], report: Report) -> None:
    calls = [i for i in output if isinstance(i, Mapping) and i.get("type") in _CALLS]
    if choice == "none":
        if calls:
            report("R32", f"tool_choice is none but the response made {len(calls)} call(s)")
        return
    required = choice == "required"
    entries: list[Mapping[str, Any]] | None = None
    if isinstance(choice, Mapping):
        if choice.get("type") == "allowed_tools":
            required = choice.get("mode") == "required"
            entries = [t for t in choice.get("tools") or [] if isinstance(t, Mapping)]
        else:  # a named function, custom tool, MCP server (or its tool), or hosted tool
            required, entries = True, [choice]
    if required and not calls:
        report("R32", f"tool_choice {json.dumps(choice)} asks for a call; the response made none")
    if entries is not None:
        for call in calls:
            if not any(_names(entry, call) for entry in entries):
                called = call.get("name") or call.get("type")
                report(
                    "R32",
                    f"tool_choice {json.dumps(choice)} allows only those tools; the response "
                    f"called {called!r} ({call.get('type')})",
                )


#: The calls a client runs, which `parallel_tool_calls: false` allows one of.
_CLIENT_CALLS = frozenset({"function_call", "custom_tool_call"})


def _parallel_rule(response: Mapping[str, Any], output: list[Any], report: Report) -> None:
    if response.get("parallel_tool_calls") is not False:
        return
    calls = [i for i in output if isinstance(i, Mapping) and i.get("type") in _CLIENT_CALLS]
    if len(calls) > 1:
        names = ", ".join(repr(call.get("name")) for call in calls)
        report(
            "R34",
            f"parallel_tool_calls is false but the response made {len(calls)} client calls "
            f"({names}); it allows one",
        )


def budget_rule(response: Mapping[str, Any], report: Report) -> None:
    """R33 on a terminal event's response: `usage.output_tokens` is at most the
    `max_output_tokens` it echoes (a server that let its engine run past the budget)."""
    budget = response.get("max_output_tokens")
    usage = response.get("usage")
    used = usage.get("output_tokens") if isinstance(usage, Mapping) else None
    if not isinstance(budget, int) or not isinstance(used, int) or isinstance(used, bool):
        return  # no budget, or no usage to judge (R8 reports a bad usage)
    if used > budget:
        report(
            "R33",
            f"usage.output_tokens is {used}, over the response's max_output_tokens {budget}; "
            "the generation should have ended incomplete at the budget",
        )


def content_rules(response: Mapping[str, Any], report: Report) -> None:
    """R31, R32 and R34 on a `response.completed`'s response."""
    output = response.get("output")
    if not isinstance(output, list):
        return
    _format_rule(response, output, report)
    tools = response.get("tools")
    if isinstance(tools, list):
        _strict_call_rule(tools, output, report)
    _choice_rule(response.get("tool_choice", "auto"), output, report)
    _parallel_rule(response, output, report)
