"""The OpenAI-compatible Responses API server (`streamfold serve`), as a mountable Starlette app.

Needs the `server` extra (starlette, uvicorn). `create_app(engine, store=...)` is the ASGI app;
`ENGINES` maps `--engine` names to engine factories; `EventStore` is the event-log interface,
with `MemoryEventStore` and `SQLiteEventStore`. `ServerLimits` bounds what one request may
cost; serve the app with `uvicorn_http(limits.header_timeout_s)` as uvicorn's `http` protocol
for the header timeout (httptools when installed, else h11; `Parser` names one), and
`SocketFramesProtocol` as its `ws` protocol for WebSocket mode at SSE's cost per event.
"""

from ..formats import render_prompt, stop_token_ids
from ..protocol import CreateRequest, RequestError, parse_create_request
from ..registry import (
    ENGINES,
    Engine,
    EngineFactory,
    ReplayEngine,
    UnknownModelError,
    bundled_traces_dir,
    replay_engine,
)
from ._app import create_app
from ._gc import serving_asyncio, tune_gc_for_serving
from ._http import Parser, uvicorn_http
from ._limits import ServerLimits
from ._prepare import Prepared
from ._reasoning_keys import KEY_ENV, ReasoningKeyError, ReasoningKeys
from ._service import ResponseService, ServiceNotRunningError
from ._socket_protocol import SocketFramesProtocol
from ._sqlite import SQLiteEventStore, StoreLockedError
from ._sse import EventStreamResponse
from ._store import (
    EventRecord,
    EventStore,
    InputStore,
    MemoryEventStore,
    Records,
    StoredResponse,
    StoreError,
)

__all__ = [
    "ENGINES",
    "KEY_ENV",
    "CreateRequest",
    "Engine",
    "EngineFactory",
    "EventRecord",
    "EventStore",
    "EventStreamResponse",
    "InputStore",
    "MemoryEventStore",
    "Parser",
    "Prepared",
    "ReasoningKeyError",
    "ReasoningKeys",
    "Records",
    "ReplayEngine",
    "RequestError",
    "ResponseService",
    "SQLiteEventStore",
    "ServerLimits",
    "ServiceNotRunningError",
    "SocketFramesProtocol",
    "StoreError",
    "StoreLockedError",
    "StoredResponse",
    "UnknownModelError",
    "bundled_traces_dir",
    "create_app",
    "parse_create_request",
    "render_prompt",
    "replay_engine",
    "serving_asyncio",
    "stop_token_ids",
    "tune_gc_for_serving",
    "uvicorn_http",
]
