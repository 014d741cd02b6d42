"""`streamfold serve`: the Responses API server on uvicorn.

Wire it into `streamfold/cli.py` with `add_serve_parser(subparsers)`; the parser's `run` default
is `run_serve`.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streamfold.adapters.limits import ServerLimits

__all__ = ["add_serve_parser", "default_store_path", "missing_server_extra", "run_serve"]


def default_store_path() -> Path:
    """`$STREAMFOLD_CACHE_DIR/responses.sqlite3`, else under the user cache dir."""
    if os.environ.get("STREAMFOLD_CACHE_DIR"):
        return Path(os.environ["STREAMFOLD_CACHE_DIR"]) / "responses.sqlite3"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "streamfold" / "responses.sqlite3"


def add_serve_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    from streamfold.adapters.registry import NATIVE_MAX_OUTPUT_TOKENS

    from ._options import add_engine_options

    p = subparsers.add_parser(
        "serve",
        help="serve the OpenAI Responses API (POST /v1/responses) over HTTP",
        description="Serve /v1/responses for the official openai client. With --engine replay "
        "(the default) a request's `model` names a trace file: model 'weather_call' replays "
        "TRACES/weather_call.jsonl.",
    )
    add_engine_options(p, default_engine="replay", model_required=False)
    p.add_argument(
        "--replay-delay",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="replay: pause before each chunk, to mimic an engine's pace",
    )
    p.add_argument(
        "--default-max-output-tokens",
        type=int,
        default=None,
        metavar="N",
        help="native: the cap on a request that sets no max_output_tokens (default "
        f"{NATIVE_MAX_OUTPUT_TOKENS}; 0: no cap). A request's own max_output_tokens is kept",
    )
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    access = p.add_argument_group("access", "who may use the server (see docs/security.md)")
    access.add_argument(
        "--api-key",
        action="append",
        default=[],
        metavar="KEY",
        help="require `Authorization: Bearer KEY` (repeatable; also $STREAMFOLD_API_KEY); each "
        "key sees only the responses made with it. Without a key: local use only",
    )
    access.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a name requests may give in `Host` besides the address they came in on "
        "(repeatable; e.g. the name a reverse proxy forwards)",
    )
    p.add_argument("--port", type=int, default=8000, help="TCP port (default 8000)")
    p.add_argument(
        "--store",
        default=None,
        metavar="PATH",
        help="SQLite file of the event log (default: "
        f"{default_store_path()}); ':memory:' keeps nothing across restarts",
    )
    p.add_argument(
        "--reasoning-key-file",
        default=None,
        metavar="PATH",
        help="keys that seal reasoning items' encrypted_content, one secret a line (the first "
        "seals, all open; default: $STREAMFOLD_REASONING_KEY, else a random key per "
        "process, whose blobs do not survive a restart)",
    )
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    tools = p.add_argument_group(
        "agent tools", "server-side tools a request may use (all off by default; docs/agents.md)"
    )
    tools.add_argument(
        "--mcp-allow",
        action="append",
        default=[],
        metavar="URL",
        help="let requests use MCP servers at URL or below its path, by whole segments "
        "(repeatable; scheme, host and port must match; '*' allows any http(s) URL: the "
        "server then sends HTTP requests wherever a client says)",
    )
    tools.add_argument(
        "--python-tool",
        action="store_true",
        help="offer code_interpreter: run model-written python in a bubblewrap sandbox "
        "(needs `bwrap`: apt-get install bubblewrap; see docs/security.md)",
    )
    tools.add_argument(
        "--python-network",
        action="store_true",
        help="let the python sandbox use the network (off by default: it then reaches what "
        "this host reaches)",
    )
    tools.add_argument(
        "--refuse-unserved-tools",
        action="store_true",
        help="refuse (400) a request naming a hosted tool this server does not run (web_search "
        "without a browser, code_interpreter without --python-tool, image_generation, ...); "
        "by default such a tool is left out of the prompt and logged once",
    )
    tools.add_argument(
        "--tool-seconds",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="wall-clock limit of one tool call (default 60)",
    )
    tools.add_argument(
        "--max-tool-rounds",
        type=int,
        default=10,
        metavar="N",
        help="generations after tool calls per response before it ends incomplete (default 10)",
    )
    _add_limit_arguments(p)
    p.set_defaults(run=run_serve)
    return p


def _log_to_stderr(level: str) -> None:
    """streamfold's own log lines (readiness, store failures) beside uvicorn's, in its format."""
    import logging

    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))
    logger = logging.getLogger("streamfold")
    logger.addHandler(handler)
    logger.setLevel(level.upper())


# `--flag` -> the ServerLimits field it sets (docs/security.md: the table of limits).
_LIMIT_FLAGS = {
    "--max-body-bytes": ("max_body_bytes", int, "largest request body (413 beyond)"),
    "--max-input-chars": ("max_input_chars", int, "characters of text in one request"),
    "--max-input-items": ("max_input_items", int, "items in `input`"),
    "--max-input-tokens": ("max_input_tokens", int, "prompt tokens (the model's context)"),
    "--max-output-tokens": ("max_output_tokens", int, "largest max_output_tokens"),
    "--render-workers": ("render_workers", int, "processes rendering large prompts at once"),
    "--render-timeout": ("render_timeout_s", float, "seconds one prompt may take to render"),
    "--header-timeout": ("header_timeout_s", float, "seconds to send a request's headers"),
    "--body-timeout": ("body_timeout_s", float, "seconds to send a request's body"),
    "--websocket-lifetime": ("websocket_lifetime_s", float, "seconds a WebSocket lasts"),
    "--websocket-memory-bytes": (
        "websocket_memory_bytes",
        int,
        "store: false conversations a WebSocket remembers, in bytes",
    ),
    "--websocket-max-pending": (
        "websocket_max_pending",
        int,
        "creates one WebSocket may have queued or running at once",
    ),
}


def _add_limit_arguments(p: argparse.ArgumentParser) -> None:
    from streamfold.adapters.limits import ServerLimits

    defaults = ServerLimits()
    group = p.add_argument_group("limits", "what one request may cost (docs/security.md)")
    for flag, (field, kind, text) in _LIMIT_FLAGS.items():
        group.add_argument(
            flag,
            type=kind,
            default=None,
            metavar="N" if kind is int else "SECONDS",
            help=f"{text} (default {getattr(defaults, field)})",
        )
    group.add_argument(
        "--limit-concurrency",
        type=int,
        default=None,
        metavar="N",
        help="uvicorn: answer 503 once N connections are open (default: no limit)",
    )


def _limits(args: argparse.Namespace) -> ServerLimits:
    from streamfold.adapters.limits import ServerLimits

    given = {}
    for flag, (field, _, _) in _LIMIT_FLAGS.items():
        value = getattr(args, flag.removeprefix("--").replace("-", "_"), None)
        if value is not None and not value > 0:
            raise ValueError(f"{flag} must be positive, got {value}")
        given[field] = value
    return ServerLimits(**{k: v for k, v in given.items() if v is not None})


def missing_server_extra() -> str | None:
    """None when the `server` extra is importable; else one line naming what to install."""
    missing = [name for name in ("starlette", "uvicorn") if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    return (
        f"needs the server extra ({', '.join(missing)} not installed): "
        "pip install 'streamfold[server]' (in a clone: pip install -e '.[server]')"
    )


def _say_where(sock: socket.socket) -> None:
    """One log line with the address a client should use (uvicorn given a socket says none)."""
    import logging

    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    logging.getLogger("streamfold").info(
        "streamfold serves http://%s:%d/v1/responses (readiness: GET /health)", shown, port
    )


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=2048)


def _exit_through_finally(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def run_serve(args: argparse.Namespace) -> int:
    missing = missing_server_extra()
    if missing:
        print(f"streamfold serve: {missing}", file=sys.stderr)
        return 2
    import uvicorn

    from streamfold.adapters.agent import AgentConfig, PythonTool, SandboxUnavailable, ToolLimits
    from streamfold.adapters.registry import ENGINES
    from streamfold.adapters.server import (
        EventStore,
        MemoryEventStore,
        ReasoningKeyError,
        ReasoningKeys,
        SocketFramesProtocol,
        SQLiteEventStore,
        create_app,
        serving_asyncio,
        tune_gc_for_serving,
        uvicorn_http,
    )
    from streamfold.statemachine import StreamfoldError

    python = None
    if args.python_tool:
        # No silent downgrade: without the sandbox there is no python tool.
        try:
            python = PythonTool(network=args.python_network)
            python.probe()
        except SandboxUnavailable as exc:
            print(f"streamfold serve: --python-tool: {exc}", file=sys.stderr)
            return 2
    try:
        agent = AgentConfig(
            mcp_allow=tuple(args.mcp_allow),
            refuse_unserved_tools=args.refuse_unserved_tools,
            python=python,
            limits=ToolLimits(call_seconds=args.tool_seconds),
            max_iterations=args.max_tool_rounds,
        )
    except ValueError as exc:  # an --mcp-allow rule that does not parse
        print(f"streamfold serve: --mcp-allow: {exc}", file=sys.stderr)
        return 2
    try:
        limits = _limits(args)
    except ValueError as exc:
        print(f"streamfold serve: {exc}", file=sys.stderr)
        return 2
    try:
        reasoning_keys = (
            ReasoningKeys.from_file(args.reasoning_key_file)
            if args.reasoning_key_file
            else ReasoningKeys.from_environment()
        )
    except ReasoningKeyError as exc:
        print(f"streamfold serve: {exc}", file=sys.stderr)
        return 2
    try:
        engine = ENGINES[args.engine](args)
    except StreamfoldError as exc:
        print(f"streamfold serve: {exc}", file=sys.stderr)
        return 2
    # The port first, the store second: a server started by mistake on a port in use must
    # stop before it opens (and recovers) a store another server is using (issue 19).
    try:
        sock = _listen(args.host, args.port)
    except OSError as exc:
        print(
            f"streamfold serve: cannot listen on {args.host}:{args.port}: "
            f"{exc.strerror or exc}; is another server running there? pass --port",
            file=sys.stderr,
        )
        return 2
    store: EventStore | None = None
    previous_sigterm: Any = None
    keys = [*args.api_key, *filter(None, [os.environ.get("STREAMFOLD_API_KEY", "").strip()])]
    try:
        if args.store == ":memory:":
            store = MemoryEventStore()
        else:
            store = SQLiteEventStore(args.store or default_store_path())
        _log_to_stderr(args.log_level)
        # Followers of a background response hold their connection until it ends, and it
        # ends when the lifespan cancels it after the connections close: bound that wait.
        config = uvicorn.Config(
            create_app(
                engine,
                store=store,
                agent=agent,
                limits=limits,
                api_keys=keys,
                allowed_hosts=args.allowed_host,
                reasoning_keys=reasoning_keys,
            ),
            log_level=args.log_level,
            timeout_graceful_shutdown=10,
            http=uvicorn_http(limits.header_timeout_s),
            ws=SocketFramesProtocol,  # WebSocket mode's events in one write per batch
            limit_concurrency=args.limit_concurrency,
        )
        _say_where(sock)
        if not keys:
            logging.getLogger("streamfold").warning(
                "no API key: local use only (anyone who reaches this port may use it; "
                "pass --api-key or set STREAMFOLD_API_KEY)"
            )
        tune_gc_for_serving()
        # uvicorn shuts down gracefully on SIGTERM, then raises it again with the handler it
        # found: make that handler end the process through the `finally` below (the engine's
        # shutdown), not by the signal's default action, which skips it.
        if threading.current_thread() is threading.main_thread():
            previous_sigterm = signal.signal(signal.SIGTERM, _exit_through_finally)
        with serving_asyncio():  # uvicorn runs its asyncio loop in this thread
            uvicorn.Server(config).run(sockets=[sock])
    except StreamfoldError as exc:
        print(f"streamfold serve: {exc}", file=sys.stderr)
        return 2
    finally:
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)
        sock.close()
        if isinstance(store, SQLiteEventStore):
            store.close()
        # An engine with threads or devices of its own (the native engine) is shut down here,
        # so no generation outlives the server.
        close = getattr(engine.source, "close", None)
        if callable(close):
            close()
    return 0
