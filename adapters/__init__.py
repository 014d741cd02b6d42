"""streamfold.adapters: token sources to Responses on the wire.

From the ground up: the protocol layer (`protocol/`: the request model, input items, tool
parameters), structured outputs (`structured/`: what a request asks the model to write, as
the grammar a decoding constraint enforces), the chat formats (`formats/`: one object per model
family), the one chunk-to-step loop (`_stepping.py`) and the driver over a live source
(`driver.py`), engines by name (`registry.py`), the agent loop (`agent/`) and the HTTP server
(`server/`). The token sources themselves (vLLM, SGLang, the native engine) live in
`streamfold.engines`; the names below are re-exported from there for their old import path;
the vLLM and SGLang ones on first use, so that importing any module of this package
(`streamfold replay` and `check` import the driver and the formats) does not load the engine
modules (about 4 ms of the CLI's start).
"""

from typing import TYPE_CHECKING, Any

from streamfold.engines._engine_stream import EngineNotInstalledError, EngineOutputError

if TYPE_CHECKING:
    from streamfold.engines.sglang import SGLangTokenSource, build_sglang_engine, sglang_rid
    from streamfold.engines.vllm import (
        VLLMApi,
        VLLMTokenSource,
        build_vllm_engine,
        load_vllm_api,
    )

# Re-exported names, resolved on first attribute access.
_LAZY = {
    "SGLangTokenSource": "streamfold.engines.sglang",
    "build_sglang_engine": "streamfold.engines.sglang",
    "sglang_rid": "streamfold.engines.sglang",
    "VLLMApi": "streamfold.engines.vllm",
    "VLLMTokenSource": "streamfold.engines.vllm",
    "build_vllm_engine": "streamfold.engines.vllm",
    "load_vllm_api": "streamfold.engines.vllm",
}

__all__ = [
    "EngineNotInstalledError",
    "EngineOutputError",
    "SGLangTokenSource",
    "VLLMApi",
    "VLLMTokenSource",
    "build_sglang_engine",
    "build_vllm_engine",
    "load_vllm_api",
    "sglang_rid",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
