"""Old home of the tokenizer.json loader, kept so `from streamfold.vocab_hf import ...` keeps
working. It lives in `streamfold.engines.vocab_hf` now (issue 17)."""

from streamfold.engines.vocab_hf import gpt2_unicode_to_byte, load_tokenizer_json

__all__ = ["gpt2_unicode_to_byte", "load_tokenizer_json"]
