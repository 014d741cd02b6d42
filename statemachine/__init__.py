"""The pure core: Responses event values, their wire format, and the token reducer.

Nothing here does I/O, reads a clock, draws random numbers, or imports torch or anyio.

Importing this package imports nothing else: each name below loads its module on first use
(PEP 562), so a program that needs a part pays for that part. `streamfold check` needs the
errors and the SSE parser, not the ~100 attrs classes of the events and the reducer (a tenth of
a second of its start-up, issue 16); `from streamfold.statemachine import X` and
`statemachine.X` work as before.
"""

from __future__ import annotations

import sys
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the names are, for type checkers and readers; at run time, _LAZY
    from ._accel import json_line, sse_event, step
    from ._controls import *  # noqa: F403
    from ._controls import __all__ as _controls_all
    from ._errors import ReducerUsageError, StreamfoldError, VocabularyError, WireFormatError
    from ._events import *  # noqa: F403
    from ._events import __all__ as _events_all
    from ._grammar import FINISH_REASONS, FinishReason, Grammar, ResponseState
    from ._grammars.harmony import HarmonyGrammar
    from ._grammars.thinktags import ThinkTagGrammar
    from ._loop import (
        ApprovedCallStep,
        ListToolsStep,
        LoopStep,
        McpToolInfo,
        NextGenerationStep,
        PendingCall,
        ToolResultStep,
        apply_loop_step,
        approved_call,
        list_tools,
        next_generation,
        pending_call,
        tool_result,
    )
    from ._model import *  # noqa: F403
    from ._model import __all__ as _model_all
    from ._recover import close_interrupted
    from ._reducer import finish, start
    from ._servertools import McpServer, ServerTools
    from ._snapshot import snapshot
    from ._sse import SSEFramingError, SSEMessage, SSEParser, parse_sse, sse_frame
    from ._vocab import Vocabulary
    from ._wire import dumps, from_wire, loads, structure, to_wire

    __all__ = [
        "FINISH_REASONS",
        "FinishReason",
        "Grammar",
        "HarmonyGrammar",
        "ApprovedCallStep",
        "ListToolsStep",
        "LoopStep",
        "McpServer",
        "McpToolInfo",
        "NextGenerationStep",
        "PendingCall",
        "ServerTools",
        "ToolResultStep",
        "apply_loop_step",
        "approved_call",
        "list_tools",
        "next_generation",
        "pending_call",
        "tool_result",
        "ReducerUsageError",
        "SSEFramingError",
        "SSEMessage",
        "SSEParser",
        "ResponseState",
        "close_interrupted",
        "finish",
        "snapshot",
        "json_line",
        "sse_event",
        "start",
        "step",
        "StreamfoldError",
        "ThinkTagGrammar",
        "Vocabulary",
        "VocabularyError",
        "WireFormatError",
        "dumps",
        "from_wire",
        "loads",
        "parse_sse",
        "sse_frame",
        "structure",
        "to_wire",
        *_controls_all,
        *_events_all,
        *_model_all,
    ]

# Each name's module; the event and model classes (`_events.__all__`, `_model.__all__`) are
# looked up in those two modules.
_LAZY: dict[str, str] = {
    "json_line": "._accel",
    "sse_event": "._accel",
    "step": "._accel",
    "ReducerUsageError": "._errors",
    "StreamfoldError": "._errors",
    "VocabularyError": "._errors",
    "WireFormatError": "._errors",
    "FINISH_REASONS": "._grammar",
    "FinishReason": "._grammar",
    "Grammar": "._grammar",
    "ResponseState": "._grammar",
    "HarmonyGrammar": "._grammars.harmony",
    "ThinkTagGrammar": "._grammars.thinktags",
    "ApprovedCallStep": "._loop",
    "ListToolsStep": "._loop",
    "LoopStep": "._loop",
    "McpToolInfo": "._loop",
    "NextGenerationStep": "._loop",
    "PendingCall": "._loop",
    "ToolResultStep": "._loop",
    "apply_loop_step": "._loop",
    "approved_call": "._loop",
    "list_tools": "._loop",
    "next_generation": "._loop",
    "pending_call": "._loop",
    "tool_result": "._loop",
    "close_interrupted": "._recover",
    "finish": "._reducer",
    "start": "._reducer",
    "McpServer": "._servertools",
    "ServerTools": "._servertools",
    "snapshot": "._snapshot",
    "SSEFramingError": "._sse",
    "SSEMessage": "._sse",
    "SSEParser": "._sse",
    "parse_sse": "._sse",
    "sse_frame": "._sse",
    "Vocabulary": "._vocab",
    "dumps": "._wire",
    "from_wire": "._wire",
    "loads": "._wire",
    "structure": "._wire",
    "to_wire": "._wire",
}
_STAR = ("._controls", "._events", "._model")


def __getattr__(name: str) -> Any:
    try:
        return _load(name)
    except AttributeError as exc:
        if exc.obj is not _face:  # raised while a module loaded: `from . import X` would
            raise ImportError(f"cannot load {__name__}.{name}: {exc}") from exc  # hide it
        raise


def _load(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name], __name__), name)
    elif name == "__all__":
        value = [*_LAZY, *(n for star in _STAR for n in import_module(star, __name__).__all__)]
    elif name.startswith("__"):  # `__wrapped__`, `__path__`, ...: asked by tools, never lazy
        raise _absent(name)
    elif name.startswith("_"):  # a private module, as `statemachine._wire.dumps` reads it
        try:
            value = import_module(f".{name}", __name__)
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise  # the module exists; something it imports is missing
            raise _absent(name) from None
    else:
        for star in _STAR:
            module = import_module(star, __name__)
            if name in module.__all__:
                value = getattr(module, name)
                break
        else:
            raise _absent(name)
    globals()[name] = value  # found once; later lookups are plain attribute reads
    return value


def _absent(name: str) -> AttributeError:
    return AttributeError(f"module {__name__!r} has no attribute {name!r}", name=name, obj=_face)


_face = sys.modules[__name__]


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
