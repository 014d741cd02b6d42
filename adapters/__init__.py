"""streamfold.adapters: token sources to Responses on the wire.

From the ground up: the protocol layer (`protocol/`: the request model, input items, tool
parameters), the chat formats (`formats/`: one object per model family), the driver
(`driver.py`: the one chunk-to-step loop), engines by name (`registry.py`), the agent loop
(`agent/`) and the HTTP server (`server/`). The token sources themselves (vLLM, SGLang, the
native engine) live in `streamfold.engines`; the names below are re-exported from there for
their old import path.
"""

from streamfold.engines._engine_stream import EngineNotInstalledError, EngineOutputError
from streamfold.engines.sglang import SGLangTokenSource, build_sglang_engine, sglang_rid
from streamfold.engines.vllm import VLLMApi, VLLMTokenSource, build_vllm_engine, load_vllm_api

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
