"""Facts about the wire format that the checker's rules look up: which event types exist,
which fields each requires, and which item each item-scoped event belongs to.

Taken from the `openai` 3.54 SDK models (`ResponseStreamEvent`, 59 members); written out as
tables here so that the checker needs no SDK at run time and judges any server's JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, TypeGuard

import attrs

__all__: list[str] = []  # private helpers of the checker

INT: Final = "an integer"
INDEX: Final = "a non-negative integer"
STR: Final = "a string"
LIST: Final = "a list"
OBJ: Final = "an object"
NUM: Final = "a number"
BOOL: Final = "a boolean"
ANY: Final = "present"

LIFECYCLE_START = frozenset({"response.created", "response.queued", "response.in_progress"})
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
LIFECYCLE = LIFECYCLE_START | TERMINAL

_ITEM = {"item_id": STR, "output_index": INDEX}
_PART = {**_ITEM, "content_index": INDEX}
_SUMMARY = {**_ITEM, "summary_index": INDEX}

# Required fields of every ResponseStreamEvent type, besides `type` and `sequence_number`.
FIELDS: dict[str, dict[str, str]] = {
    **{t: {"response": OBJ} for t in LIFECYCLE},
    "error": {},  # judged by R23: the flat and the nested shape are both seen
    "response.output_item.added": {"output_index": INDEX, "item": OBJ},
    "response.output_item.done": {"output_index": INDEX, "item": OBJ},
    "response.content_part.added": {**_PART, "part": OBJ},
    "response.content_part.done": {**_PART, "part": OBJ},
    "response.output_text.delta": {**_PART, "delta": STR, "logprobs": LIST},
    "response.output_text.done": {**_PART, "text": STR, "logprobs": LIST},
    "response.output_text.annotation.added": {**_PART, "annotation_index": INDEX},
    "response.refusal.delta": {**_PART, "delta": STR},
    "response.refusal.done": {**_PART, "refusal": STR},
    "response.reasoning_text.delta": {**_PART, "delta": STR},
    "response.reasoning_text.done": {**_PART, "text": STR},
    "response.reasoning_summary_part.added": {**_SUMMARY, "part": OBJ},
    "response.reasoning_summary_part.done": {**_SUMMARY, "part": OBJ},
    "response.reasoning_summary_text.delta": {**_SUMMARY, "delta": STR},
    "response.reasoning_summary_text.done": {**_SUMMARY, "text": STR},
    "response.function_call_arguments.delta": {**_ITEM, "delta": STR},
    "response.function_call_arguments.done": {**_ITEM, "arguments": STR},
    "response.custom_tool_call_input.delta": {**_ITEM, "delta": STR},
    "response.custom_tool_call_input.done": {**_ITEM, "input": STR},
    "response.code_interpreter_call_code.delta": {**_ITEM, "delta": STR},
    "response.code_interpreter_call_code.done": {**_ITEM, "code": STR},
    "response.mcp_call_arguments.delta": {**_ITEM, "delta": STR},
    "response.mcp_call_arguments.done": {**_ITEM, "arguments": STR},
    "response.image_generation_call.partial_image": {
        **_ITEM,
        "partial_image_b64": STR,
        "partial_image_index": INDEX,
    },
    "response.shell_call_command.added": {
        "output_index": INDEX,
        "command_index": INDEX,
        "command": STR,
    },
    "response.shell_call_command.delta": {
        "output_index": INDEX,
        "command_index": INDEX,
        "delta": STR,
    },
    "response.shell_call_command.done": {
        "output_index": INDEX,
        "command_index": INDEX,
        "command": STR,
    },
    "response.shell_call_output_content.delta": {**_ITEM, "command_index": INDEX, "delta": OBJ},
    "response.shell_call_output_content.done": {**_ITEM, "command_index": INDEX, "output": LIST},
    "response.audio.delta": {"delta": STR},
    "response.audio.done": {},
    "response.audio.transcript.delta": {"delta": STR},
    "response.audio.transcript.done": {},
}

# Progress events: they carry only `item_id` and `output_index`, and belong to one item type.
PROGRESS: dict[str, str] = {}
for _family, _stages in {
    "web_search_call": ("in_progress", "searching", "completed"),
    "file_search_call": ("in_progress", "searching", "completed"),
    "code_interpreter_call": ("in_progress", "interpreting", "completed"),
    "image_generation_call": ("in_progress", "generating", "completed"),
    "mcp_call": ("in_progress", "completed", "failed"),
    "mcp_list_tools": ("in_progress", "completed", "failed"),
}.items():
    for _stage in _stages:
        PROGRESS[f"response.{_family}.{_stage}"] = _family
PROGRESS["response.compaction.compacting"] = "compaction"
PROGRESS["response.image_generation_call.partial_image"] = "image_generation_call"
PROGRESS["response.output_text.annotation.added"] = "message"
PROGRESS["response.shell_call_output_content.delta"] = "shell_call_output"
PROGRESS["response.shell_call_output_content.done"] = "shell_call_output"
for _t in PROGRESS:
    FIELDS.setdefault(_t, dict(_ITEM))

KNOWN_TYPES = frozenset(FIELDS)

# Response fields the SDK's `Response` model requires.
RESPONSE_FIELDS: dict[str, str] = {
    "id": STR,
    "object": STR,
    "created_at": NUM,
    "model": STR,
    "output": LIST,
    "parallel_tool_calls": BOOL,
    "tool_choice": ANY,
    "tools": LIST,
}

# Item fields the SDK requires, for the item types streamfold emits.
ITEM_FIELDS: dict[str, dict[str, str]] = {
    "message": {"id": STR, "role": STR, "status": STR, "content": LIST},
    "reasoning": {"id": STR, "summary": LIST},
    "function_call": {"call_id": STR, "name": STR, "arguments": STR},
    "code_interpreter_call": {"id": STR, "container_id": STR, "status": STR},
    "web_search_call": {"id": STR, "status": STR, "action": OBJ},
    "mcp_call": {"id": STR, "name": STR, "arguments": STR, "server_label": STR},
    "mcp_list_tools": {"id": STR, "server_label": STR, "tools": LIST},
    "mcp_approval_request": {"id": STR, "name": STR, "arguments": STR, "server_label": STR},
    "custom_tool_call": {"call_id": STR, "name": STR, "input": STR},
    "tool_search_call": {"id": STR, "arguments": ANY, "execution": STR, "status": STR},
}


@attrs.frozen(kw_only=True)
class Stream:
    """A text that arrives as deltas and ends in a `.done` event.

    `part` is the part family the text lives in ("content" or "summary"), or None for texts
    held by the item itself (function arguments, code); `item_field` names the item's field
    that must end up holding the text.
    """

    name: str
    item_type: str
    done_field: str
    part: str | None = None
    part_type: str | None = None
    item_field: str | None = None


_STREAMS = (
    Stream(
        name="output_text",
        item_type="message",
        done_field="text",
        part="content",
        part_type="output_text",
    ),
    Stream(
        name="refusal",
        item_type="message",
        done_field="refusal",
        part="content",
        part_type="refusal",
    ),
    Stream(
        name="reasoning_text",
        item_type="reasoning",
        done_field="text",
        part="content",
        part_type="reasoning_text",
    ),
    Stream(
        name="reasoning_summary_text",
        item_type="reasoning",
        done_field="text",
        part="summary",
        part_type="summary_text",
    ),
    Stream(
        name="function_call_arguments",
        item_type="function_call",
        done_field="arguments",
        item_field="arguments",
    ),
    Stream(
        name="custom_tool_call_input",
        item_type="custom_tool_call",
        done_field="input",
        item_field="input",
    ),
    Stream(
        name="code_interpreter_call_code",
        item_type="code_interpreter_call",
        done_field="code",
        item_field="code",
    ),
    Stream(
        name="mcp_call_arguments",
        item_type="mcp_call",
        done_field="arguments",
        item_field="arguments",
    ),
)
DELTAS: dict[str, Stream] = {f"response.{s.name}.delta": s for s in _STREAMS}
DONES: dict[str, Stream] = {f"response.{s.name}.done": s for s in _STREAMS}

# Texts that a server must close with their `.done` even when no delta was sent.
ALWAYS_DONE = frozenset(
    {
        "output_text",
        "refusal",
        "reasoning_text",
        "reasoning_summary_text",
        "function_call_arguments",
    }
)


@attrs.frozen(kw_only=True)
class PartFamily:
    """Content parts (`content_index`, item `content`) or summary parts (`summary_index`)."""

    name: str
    index_field: str
    item_field: str
    allowed: dict[str, frozenset[str]]  # item type -> part types


CONTENT = PartFamily(
    name="content",
    index_field="content_index",
    item_field="content",
    allowed={
        "message": frozenset({"output_text", "refusal"}),
        "reasoning": frozenset({"reasoning_text"}),
    },
)
SUMMARY = PartFamily(
    name="summary",
    index_field="summary_index",
    item_field="summary",
    allowed={"reasoning": frozenset({"summary_text"})},
)
PART_EVENTS: dict[str, tuple[PartFamily, bool]] = {
    "response.content_part.added": (CONTENT, False),
    "response.content_part.done": (CONTENT, True),
    "response.reasoning_summary_part.added": (SUMMARY, False),
    "response.reasoning_summary_part.done": (SUMMARY, True),
}
FAMILIES = {"content": CONTENT, "summary": SUMMARY}
# The field of a part object that holds its text.
PART_TEXT_FIELD = {
    "output_text": "text",
    "refusal": "refusal",
    "reasoning_text": "text",
    "summary_text": "text",
}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_mapping(v: Any) -> TypeGuard[Mapping[str, Any]]:
    return type(v) is dict or isinstance(v, Mapping)  # the ABC check is slow; dicts are common


_CHECKS: dict[str, Callable[[Any], bool]] = {
    INT: _is_int,
    INDEX: lambda v: _is_int(v) and v >= 0,
    STR: lambda v: isinstance(v, str),
    LIST: lambda v: isinstance(v, list),
    OBJ: is_mapping,
    NUM: lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    BOOL: lambda v: isinstance(v, bool),
    ANY: lambda v: True,
}


def type_error(value: Any, kind: str) -> str | None:
    """Why `value` is not of the wire `kind`, or None when it is."""
    return None if _CHECKS[kind](value) else f"must be {kind}, saw {short(value)}"


def short(value: Any, limit: int = 60) -> str:
    """A value for a message: its repr, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def get(obj: Any, key: str) -> Any:
    """`obj[key]` for a mapping, else None: malformed input must never raise."""
    return obj.get(key) if is_mapping(obj) else None


def get_str(obj: Any, key: str) -> str | None:
    value = get(obj, key)
    return value if isinstance(value, str) else None


def get_index(obj: Any, key: str) -> int | None:
    value = get(obj, key)
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return value if ok else None


def first_difference(a: Any, b: Any, path: str) -> str | None:
    """The first place where two JSON values differ, as `path: a vs b`; None when equal."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in list(a) + [k for k in b if k not in a]:
            if key not in b:
                return f"{path}.{key} is missing (output_item.done had {short(a[key])})"
            if key not in a:
                return f"{path}.{key} is {short(b[key])}, absent from output_item.done"
            found = first_difference(a[key], b[key], f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path} has {len(b)} entries, output_item.done had {len(a)}"
        for k, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, f"{path}[{k}]")
            if found is not None:
                return found
        return None
    if a == b and type(a) is type(b):
        return None
    return f"{path} is {short(b)}, output_item.done had {short(a)}"
