"""Old home of the vLLM token source, kept so `streamfold.adapters.vllm_source` keeps working.
It lives in `streamfold.engines.vllm` now (issue 17: every token source is in `engines`)."""

from streamfold.engines.vllm import VLLMApi, VLLMTokenSource, build_vllm_engine, load_vllm_api

__all__ = ["VLLMApi", "VLLMTokenSource", "build_vllm_engine", "load_vllm_api"]
