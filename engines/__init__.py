"""Token sources: the seam (`TokenSource`), trace replay, and (behind the torch extra) the
native gpt-oss engine. Importing this package never imports torch."""

from typing import TYPE_CHECKING, Any

from ._source import (
    DecodingConstraint,
    FinishReason,
    GenerationRequest,
    LogitsConstraint,
    ReadyChunks,
    SamplingParams,
    TokenChunk,
    TokenSource,
)
from ._trace import (
    Trace,
    TraceFormatError,
    dump_trace,
    parse_trace,
    read_trace,
    record_trace,
    write_trace,
)
from ._trace_loop import server_tools_from_header, server_tools_line
from .native import build_native_engine
from .native.gptoss.errors import (
    CheckpointError,
    ConfigError,
    EngineError,
    MissingTensorError,
    TensorShapeError,
    UnsupportedDtypeError,
    UnsupportedQuantizationError,
)
from .replay import ReplaySource, TraceDirectorySource, UnknownTraceError

if TYPE_CHECKING:
    from .native.gptoss.config import GptOssConfig, RopeConfig, load_config

# Names whose modules import torch, or that replay and check do not need (the model's
# config: about 3 ms of their start): resolved on first attribute access only.
_LAZY = {
    "GptOssConfig": ".native.gptoss.config",
    "RopeConfig": ".native.gptoss.config",
    "load_config": ".native.gptoss.config",
    "GptOssModel": ".native.gptoss.model",
    "DenseAttention": ".native.gptoss.model",
    "EngineCore": ".native.core",
    "NativeEngine": ".native.engine",
    "init_model": ".native.gptoss.init_model",
    "dequantize_mxfp4": ".native.gptoss.mxfp4",
    "quantize_mxfp4": ".native.gptoss.mxfp4",
    "load_weights": ".native.gptoss.weights",
}

__all__ = [
    "CheckpointError",
    "ConfigError",
    "DecodingConstraint",
    "DenseAttention",
    "EngineCore",
    "EngineError",
    "FinishReason",
    "GenerationRequest",
    "GptOssConfig",
    "GptOssModel",
    "LogitsConstraint",
    "MissingTensorError",
    "NativeEngine",
    "ReadyChunks",
    "ReplaySource",
    "RopeConfig",
    "SamplingParams",
    "TensorShapeError",
    "TokenChunk",
    "TokenSource",
    "Trace",
    "TraceDirectorySource",
    "TraceFormatError",
    "UnknownTraceError",
    "UnsupportedDtypeError",
    "UnsupportedQuantizationError",
    "build_native_engine",
    "dequantize_mxfp4",
    "dump_trace",
    "init_model",
    "load_config",
    "load_weights",
    "parse_trace",
    "quantize_mxfp4",
    "read_trace",
    "record_trace",
    "server_tools_from_header",
    "server_tools_line",
    "write_trace",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
