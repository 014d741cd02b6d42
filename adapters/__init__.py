"""streamfold.adapters: vLLM and SGLang as token sources (the engines themselves are imported
only when a real engine is built), the anyio driver, the HTTP server and CLI glue."""

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
