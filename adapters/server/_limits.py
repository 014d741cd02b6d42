"""What one request may cost the server, and the checks that hold a request body to it.

A server that renders whatever it is sent can be stalled or exhausted by one client (issue 14):
a 200 MB body read whole, a 100 000-character word that openai-harmony tokenizes in quadratic
time, JSON nested deeply enough to overflow the parser, a lone surrogate that no encoder will
write. So a body is read against a byte cap (`read_body`), decoded with every decoder failure
turned into a 400 (`decode_body`), then walked once (`check_body`) before it is parsed into a
request: depth, lone surrogates, integers, characters and items are checked there, each error
naming the JSON path in `param` as the OpenAI API does. The walk is iterative: a value that
reached it was already decoded, but nothing here recurses on what a client sent.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio

from ..limits import ServerLimits
from ..protocol import RequestError

__all__ = [
    "MAX_SAFE_INTEGER",
    "ServerLimits",
    "body_within",
    "check_body",
    "decode_body",
    "read_body",
    "shown",
]

# JSON numbers beyond 2^53 are not exact in most clients (JavaScript's among them); no field of
# a request needs one, and huge ones reach SQLite or Rust as overflows.
MAX_SAFE_INTEGER = 2**53


def shown(value: str, limit: int = 64) -> str:
    """`value` as an error message may quote it: short, so an error never echoes a megabyte."""
    return value if len(value) <= limit else f"{value[:limit]}... ({len(value)} characters)"


def _too_large(limits: ServerLimits) -> RequestError:
    return RequestError(
        f"the request body is larger than this server's limit of {limits.max_body_bytes} bytes",
        status=413,
        code="request_too_large",
    )


async def read_body(
    headers: dict[str, str], chunks: AsyncIterator[bytes], limits: ServerLimits
) -> bytes:
    """The body, refused (413) as soon as it is known to exceed `max_body_bytes`."""
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise _too_large(limits)
    parts, size = [], 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limits.max_body_bytes:
            raise _too_large(limits)
        parts.append(chunk)
    return b"".join(parts)


async def body_within(
    headers: dict[str, str], chunks: AsyncIterator[bytes], limits: ServerLimits
) -> bytes:
    """The raw body, within the size limit (413) and the time limit (408)."""
    with anyio.move_on_after(limits.body_timeout_s):
        return await read_body(headers, chunks, limits)
    raise RequestError(
        f"the request body did not arrive within {limits.body_timeout_s:g} s",
        status=408,
        code="request_timeout",
    )


def decode_body(raw: bytes) -> Any:
    """JSON text as Python values; every way it can fail is a 400 naming what was wrong."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise RequestError("the JSON body is nested too deeply to be read") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(
            f"We could not parse the JSON body of your request ({exc}); send a JSON object"
        ) from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise RequestError(f"the JSON body cannot be read: {exc}") from None


def _path(parts: tuple[str | int, ...]) -> str | None:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or None


def _check_text(text: str, parts: tuple[str | int, ...]) -> None:
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise RequestError(
            f"invalid {_path(parts) or 'request'}: it holds a lone surrogate "
            f"({text[exc.start]!r} at character {exc.start}), which is not valid Unicode text",
            param=_path(parts),
        ) from None


def check_body(body: Any, limits: ServerLimits) -> None:
    """Refuse (400, naming `param`) a decoded body that no request should be: too deep, with
    text that is not Unicode, integers no client can represent, too many characters or items."""
    if isinstance(body, dict):
        items = body.get("input")
        if isinstance(items, list) and len(items) > limits.max_input_items:
            raise RequestError(
                f"input has {len(items)} items; this server takes at most {limits.max_input_items}",
                param="input",
            )
        tools = body.get("tools")
        if isinstance(tools, list) and len(tools) > limits.max_tools:
            raise RequestError(
                f"tools has {len(tools)} tools; at most {limits.max_tools} are allowed",
                param="tools",
            )
    chars = 0
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(body, ())]
    while stack:
        value, parts = stack.pop()
        if len(parts) > limits.max_json_depth:
            raise RequestError(
                f"invalid {_path(parts[:3])}: JSON nested more than {limits.max_json_depth} "
                "levels deep",
                param=_path(parts[:3]),
            )
        if isinstance(value, str):
            chars += len(value)
            _check_text(value, parts)
        elif isinstance(value, dict):
            for key, item in value.items():
                _check_text(key, parts)
                chars += len(key)
                stack.append((item, (*parts, key)))
        elif isinstance(value, list):
            stack.extend((item, (*parts, i)) for i, item in enumerate(value))
        elif isinstance(value, int) and not isinstance(value, bool):
            if abs(value) > MAX_SAFE_INTEGER:
                raise RequestError(
                    f"invalid {_path(parts) or 'request'}: integers must be within +-2^53",
                    param=_path(parts),
                )
        if chars > limits.max_input_chars:
            raise RequestError(
                f"the request holds more than {limits.max_input_chars} characters of text; "
                "this server's limit keeps the prompt within the model's context",
                param="input",
                code="context_length_exceeded",
            )
