"""Errors the native gpt-oss engine raises on bad input: a config, a checkpoint, a request.

Each message names the file (and tensor) at fault, what was expected, and what to do. They
live apart from the torch modules so that callers can catch them without importing torch.
"""

from __future__ import annotations

from streamfold.statemachine import StreamfoldError

__all__ = [
    "CheckpointError",
    "ConfigError",
    "EngineError",
    "MissingTensorError",
    "TensorShapeError",
    "UnsupportedDtypeError",
    "UnsupportedQuantizationError",
]


class EngineError(StreamfoldError):
    """Base class of the native engine's errors."""


class ConfigError(EngineError, ValueError):
    """A `config.json` field is missing, has the wrong type, or describes an unsupported model."""


class CheckpointError(EngineError):
    """The safetensors files do not hold what the config describes."""


class MissingTensorError(CheckpointError, KeyError):
    """A tensor the config requires is in no safetensors file of the checkpoint."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class TensorShapeError(CheckpointError, ValueError):
    """A tensor's shape disagrees with the shape the config implies."""


class UnsupportedDtypeError(CheckpointError, TypeError):
    """A tensor is stored in a dtype the engine cannot load."""


class UnsupportedQuantizationError(ConfigError, CheckpointError):
    """The checkpoint uses a quantization other than MXFP4 expert weights."""
