"""What one request may cost the server, as data: `ServerLimits`.

Apart from the server package (whose import needs starlette) so that `streamfold serve --help`
shows each limit's default where the `server` extra is not installed (issue 33); the checks
that hold a request body to these limits are in `server/_limits.py`.
"""

from __future__ import annotations

import attrs

__all__ = ["ServerLimits"]


@attrs.frozen(kw_only=True)
class ServerLimits:
    """The limits `create_app(limits=...)` and `streamfold serve` flags enforce (docs/security.md).

    Defaults suit gpt-oss (a 131 072-token context) on one machine.
    """

    #: Request bodies larger than this are refused with 413 before they are read whole.
    max_body_bytes: int = 8 * 2**20
    #: Every string of the body together (input, instructions, tools): one character is at
    #: least a quarter of a token, so 4 x the context is already more than fits.
    max_input_chars: int = 4 * 131_072
    #: Items in `input` (rendering costs ~0.15 ms each, and every one is stored).
    max_input_items: int = 2048
    #: Function tools in `tools` (the API allows 128).
    max_tools: int = 128
    #: The rendered prompt, in tokens: the model's context.
    max_input_tokens: int = 131_072
    #: The largest `max_output_tokens` a request may ask for.
    max_output_tokens: int = 131_072
    #: Nesting of the JSON body (a tool's `parameters` schema included).
    max_json_depth: int = 64
    #: Prompts are rendered in worker processes (openai-harmony holds the GIL while it works,
    #: so a thread would still stall the event loop); at most this many at once.
    render_workers: int = 1
    #: A render that takes longer is stopped (its worker killed) and the request refused.
    render_timeout_s: float = 10.0
    #: Bodies up to this size are rendered on the event loop: they cost well under 10 ms and
    #: a worker round trip would cost more than the rendering.
    inline_render_bytes: int = 4096
    #: A connection must send a request's headers within this many seconds of connecting (or
    #: of sending data after an idle keep-alive), else it is closed: half-sent requests would
    #: otherwise hold their socket forever.
    header_timeout_s: float = 10.0
    #: The body must arrive within this many seconds of the headers (408 otherwise).
    body_timeout_s: float = 30.0
    #: A WebSocket connection lasts this long (OpenAI's: 60 minutes); then it answers what it
    #: was asked, says `websocket_connection_limit_reached` and closes (docs/websocket.md).
    websocket_lifetime_s: float = 3600.0
    #: The `store: false` conversations one WebSocket connection remembers for
    #: `previous_response_id`, as JSON text, together (the oldest go first).
    websocket_memory_bytes: int = 32 * 2**20
    #: Creates one WebSocket connection may have queued or running at once, all its lanes
    #: together (an HTTP connection holds one request at a time); past it a create is
    #: refused with an `error` (429) and the connection lives.
    websocket_max_pending: int = 32

    def __attrs_post_init__(self) -> None:
        for field in attrs.fields(type(self)):
            value = getattr(self, field.name)
            if not value > 0:
                raise ValueError(f"ServerLimits.{field.name} must be positive, got {value!r}")
