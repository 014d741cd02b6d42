"""Token sources: the seam (`TokenSource`), trace replay, and (behind the torch extra) the
native gpt-oss engine. Importing this package never imports torch."""

from typing import Any

from ._source import (
    FinishReason,
    GenerationRequest,
    SamplingParams,
    TokenChunk,
    TokenSource,
)
from .gptoss_config import GptOssConfig, RopeConfig, load_config
from .gptoss_errors import (
    CheckpointError,
    ConfigError,
    EngineError,
    MissingTensorError,
    TensorShapeError,
    UnsupportedDtypeError,
    UnsupportedQuantizationError,
)

# Names whose modules import torch: resolved on first attribute access only.
_LAZY = {
    "GptOssModel": ".gptoss_model",
    "DenseAttention": ".gptoss_model",
    "load_weights": ".gptoss_weights",
    "dequantize_mxfp4": ".mxfp4",
    "quantize_mxfp4": ".mxfp4",
}

__all__ = [
    "CheckpointError",
    "ConfigError",
    "DenseAttention",
    "EngineError",
    "FinishReason",
    "GenerationRequest",
    "GptOssConfig",
    "GptOssModel",
    "MissingTensorError",
    "RopeConfig",
    "SamplingParams",
    "TensorShapeError",
    "TokenChunk",
    "TokenSource",
    "UnsupportedDtypeError",
    "UnsupportedQuantizationError",
    "dequantize_mxfp4",
    "load_config",
    "load_weights",
    "quantize_mxfp4",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
