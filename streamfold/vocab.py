"""Old home of the vocabulary loaders, kept so `from streamfold.vocab import ...` keeps working.

They live in `streamfold.engines.vocab` now (issue 17); streamfold's own code imports them there.
"""

from streamfold.engines.vocab import (
    O200K_BASE_SHA256,
    encodings_dir,
    harmony_encoding,
    load_harmony_vocabulary,
    load_o200k_base_vocabulary,
    load_tiktoken_vocabulary,
)

__all__ = [
    "O200K_BASE_SHA256",
    "encodings_dir",
    "harmony_encoding",
    "load_harmony_vocabulary",
    "load_o200k_base_vocabulary",
    "load_tiktoken_vocabulary",
]
