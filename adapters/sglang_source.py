"""Old home of the SGLang token source, kept so `streamfold.adapters.sglang_source` keeps
working. It lives in `streamfold.engines.sglang` now (issue 17: every token source is in
`engines`)."""

from streamfold.engines.sglang import SGLangTokenSource, build_sglang_engine, sglang_rid

__all__ = ["SGLangTokenSource", "build_sglang_engine", "sglang_rid"]
