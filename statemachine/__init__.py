"""The pure core: Responses event values, their wire format, and the token reducer.

Nothing here does I/O, reads a clock, draws random numbers, or imports torch or anyio.
"""

from ._accel import sse_event, step
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
    *_events_all,
    *_model_all,
]
