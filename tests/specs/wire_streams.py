"""A conformant Responses stream, built by hand as the OpenAI API sends it on the wire.

One reasoning item (raw `reasoning_text`, as open-weight reasoning models stream it), one
assistant message and one function call. Tests mutate copies of it to plant peers' bugs.
"""

from __future__ import annotations

import json
from typing import Any

RESPONSE_ID = "resp_68f1c0a2b3d4e5f60718293a4b5c6d7e"
REASONING = ["The user wants ", "the weather in Paris."]
MESSAGE = ["Let me ", "check the ", "weather ", "for you. ☀"]
ARGUMENTS = ['{"city"', ': "Par', 'is"}']

_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


def _response(status: str, output: list[dict[str, Any]], usage: Any = None) -> dict[str, Any]:
    return {
        "id": RESPONSE_ID,
        "object": "response",
        "created_at": 1760900000,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": None,
        "max_tool_calls": None,
        "model": "gpt-oss-120b",
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": "medium", "summary": None},
        "service_tier": "default",
        "store": True,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "auto",
        "tools": [_TOOL],
        "top_logprobs": 0,
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage,
        "user": None,
        "metadata": {},
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


def good_stream() -> list[dict[str, Any]]:
    """A fresh copy of the conformant stream (safe to mutate)."""
    reasoning_text = "".join(REASONING)
    message_text = "".join(MESSAGE)
    arguments = "".join(ARGUMENTS)
    rs = {"item_id": "rs_68f1c0a3", "output_index": 0}
    msg = {"item_id": "msg_68f1c0a4", "output_index": 1}
    fc = {"item_id": "fc_68f1c0a5", "output_index": 2}
    reasoning_done = {
        "id": rs["item_id"],
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": reasoning_text}],
        "status": "completed",
    }
    message_done = {
        "id": msg["item_id"],
        "type": "message",
        "status": "completed",
        "content": [_text_part(message_text)],
        "role": "assistant",
    }
    call_done = {
        "id": fc["item_id"],
        "type": "function_call",
        "status": "completed",
        "arguments": arguments,
        "call_id": "call_Xq3bT9aE1",
        "name": "get_weather",
    }
    usage = {
        "input_tokens": 92,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": 41,
        "output_tokens_details": {"reasoning_tokens": 9},
        "total_tokens": 133,
    }
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": _response("in_progress", [])},
        {"type": "response.in_progress", "response": _response("in_progress", [])},
        # reasoning item
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {
                "id": rs["item_id"],
                "type": "reasoning",
                "summary": [],
                "content": [],
                "status": "in_progress",
            },
        },
        {
            "type": "response.content_part.added",
            **rs,
            "content_index": 0,
            "part": {"type": "reasoning_text", "text": ""},
        },
        *(
            {"type": "response.reasoning_text.delta", **rs, "content_index": 0, "delta": d}
            for d in REASONING
        ),
        {"type": "response.reasoning_text.done", **rs, "content_index": 0, "text": reasoning_text},
        {
            "type": "response.content_part.done",
            **rs,
            "content_index": 0,
            "part": {"type": "reasoning_text", "text": reasoning_text},
        },
        {"type": "response.output_item.done", "output_index": 0, "item": reasoning_done},
        # assistant message
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": {
                "id": msg["item_id"],
                "type": "message",
                "status": "in_progress",
                "content": [],
                "role": "assistant",
            },
        },
        {"type": "response.content_part.added", **msg, "content_index": 0, "part": _text_part("")},
        *(
            {
                "type": "response.output_text.delta",
                **msg,
                "content_index": 0,
                "delta": d,
                "logprobs": [],
                "obfuscation": "mvkAadO",
            }
            for d in MESSAGE
        ),
        {
            "type": "response.output_text.done",
            **msg,
            "content_index": 0,
            "text": message_text,
            "logprobs": [],
        },
        {
            "type": "response.content_part.done",
            **msg,
            "content_index": 0,
            "part": _text_part(message_text),
        },
        {"type": "response.output_item.done", "output_index": 1, "item": message_done},
        # function call
        {
            "type": "response.output_item.added",
            "output_index": 2,
            "item": {**call_done, "status": "in_progress", "arguments": ""},
        },
        *({"type": "response.function_call_arguments.delta", **fc, "delta": d} for d in ARGUMENTS),
        {"type": "response.function_call_arguments.done", **fc, "arguments": arguments},
        {"type": "response.output_item.done", "output_index": 2, "item": call_done},
        {
            "type": "response.completed",
            "response": {
                **_response("completed", [reasoning_done, message_done, call_done], usage),
                "completed_at": 1760900002,
            },
        },
    ]
    return renumber(json.loads(json.dumps(events)))  # no dict shared between events


def renumber(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give every event its place as `sequence_number`, as a correct server does."""
    for seq, ev in enumerate(events):
        ev["sequence_number"] = seq
    return events


def index_of(events: list[dict[str, Any]], etype: str, nth: int = 0, **fields: Any) -> int:
    """Position of the `nth` event of type `etype` whose fields match `fields`."""
    hits = [
        i
        for i, ev in enumerate(events)
        if ev.get("type") == etype and all(ev.get(k) == v for k, v in fields.items())
    ]
    return hits[nth]


def summary_and_code_stream() -> list[dict[str, Any]]:
    """A second conformant stream: a reasoning item with a summary (as the OpenAI cloud streams
    reasoning), then a code interpreter call (gpt-oss's python tool) with its progress events."""
    events = good_stream()
    created, in_progress, completed = events[0], events[1], events[-1]
    rs = {"item_id": "rs_summary1", "output_index": 0}
    ci = {"item_id": "ci_code1", "output_index": 1}
    summary = "Checking the weather."
    code = "print(2 + 2)"
    reasoning_done = {
        "id": rs["item_id"],
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": summary}],
    }
    call_done = {
        "id": ci["item_id"],
        "type": "code_interpreter_call",
        "status": "completed",
        "code": code,
        "container_id": "cntr_1",
        "outputs": None,
    }
    body: list[dict[str, Any]] = [
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"id": rs["item_id"], "type": "reasoning", "summary": []},
        },
        {
            "type": "response.reasoning_summary_part.added",
            **rs,
            "summary_index": 0,
            "part": {"type": "summary_text", "text": ""},
        },
        {
            "type": "response.reasoning_summary_text.delta",
            **rs,
            "summary_index": 0,
            "delta": summary[:8],
        },
        {
            "type": "response.reasoning_summary_text.delta",
            **rs,
            "summary_index": 0,
            "delta": summary[8:],
        },
        {"type": "response.reasoning_summary_text.done", **rs, "summary_index": 0, "text": summary},
        {
            "type": "response.reasoning_summary_part.done",
            **rs,
            "summary_index": 0,
            "part": {"type": "summary_text", "text": summary},
        },
        {"type": "response.output_item.done", "output_index": 0, "item": reasoning_done},
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": {**call_done, "status": "in_progress", "code": ""},
        },
        {"type": "response.code_interpreter_call.in_progress", **ci},
        {"type": "response.code_interpreter_call_code.delta", **ci, "delta": code[:6]},
        {"type": "response.code_interpreter_call_code.delta", **ci, "delta": code[6:]},
        {"type": "response.code_interpreter_call_code.done", **ci, "code": code},
        {"type": "response.code_interpreter_call.interpreting", **ci},
        {"type": "response.code_interpreter_call.completed", **ci},
        {"type": "response.output_item.done", "output_index": 1, "item": call_done},
    ]
    completed["response"]["output"] = [reasoning_done, call_done]
    return renumber(json.loads(json.dumps([created, in_progress, *body, completed])))
