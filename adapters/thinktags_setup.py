"""Building a `ThinkTagGrammar` from a trace header (`"grammar": "thinktags"`).

The header names the vocabulary in one of two ways:

    {"encoding": "o200k_base"}                 the tiktoken vocabularies found offline
    {"encoding": "o200k_harmony"}              (`<think>` arrives split over ordinary tokens)
    {"tokenizer": "models/qwen3/tokenizer.json"}   a local Hugging Face tokenizer.json;
                                               a relative path is resolved against `base_dir`

and may set `"start_in_reasoning": true` (the chat template put `<think>` in the prompt) and
override the tags with `"think_open"`, `"think_close"`, `"tool_open"`, `"tool_close"`.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from streamfold.statemachine import ThinkTagGrammar, Vocabulary, VocabularyError

__all__ = ["ENCODINGS", "ThinkTagsHeaderError", "thinktags_grammar_from_header"]

ENCODINGS = ("o200k_base", "o200k_harmony")
_TAG_FIELDS = ("think_open", "think_close", "tool_open", "tool_close")


class ThinkTagsHeaderError(VocabularyError, ValueError):
    """A think-tag trace header that does not say which vocabulary or options to use."""


@functools.cache
def _tokenizer_vocabulary(resolved: str) -> Vocabulary:
    from streamfold.engines.vocab_hf import load_tokenizer_json

    return load_tokenizer_json(resolved)


def _vocabulary(header: dict[str, Any], base_dir: Path) -> Vocabulary:
    encoding, tokenizer = header.get("encoding"), header.get("tokenizer")
    if encoding is not None and tokenizer is not None:
        raise ThinkTagsHeaderError(
            f"trace header sets both 'encoding' ({encoding!r}) and 'tokenizer' ({tokenizer!r}); "
            "keep the one the trace's token ids come from"
        )
    if tokenizer is not None:
        if not isinstance(tokenizer, str) or not tokenizer:
            raise ThinkTagsHeaderError(
                f"trace header field 'tokenizer' must be a path to a tokenizer.json, got "
                f"{tokenizer!r}"
            )
        path = Path(tokenizer)
        if not path.is_absolute():
            path = base_dir / path
        return _tokenizer_vocabulary(str(path.resolve()))
    if encoding == "o200k_base":
        from streamfold.engines.vocab import load_o200k_base_vocabulary

        return load_o200k_base_vocabulary()
    if encoding == "o200k_harmony":
        from streamfold.engines.vocab import load_harmony_vocabulary

        return load_harmony_vocabulary()
    if encoding is not None:
        raise ThinkTagsHeaderError(
            f"trace header field 'encoding' is {encoding!r}; use one of {ENCODINGS}, or set "
            "'tokenizer' to the path of a tokenizer.json"
        )
    raise ThinkTagsHeaderError(
        "a thinktags trace header needs the vocabulary its token ids come from: set 'encoding' "
        f"to one of {ENCODINGS} or 'tokenizer' to the path of a local tokenizer.json"
    )


def thinktags_grammar_from_header(
    header: dict[str, Any], base_dir: str | os.PathLike[str] | None = None
) -> ThinkTagGrammar:
    """The grammar a think-tag trace header asks for; `base_dir` anchors a relative
    `tokenizer` path (the trace file's directory; the working directory when None)."""
    start_in_reasoning = header.get("start_in_reasoning", False)
    if not isinstance(start_in_reasoning, bool):
        raise ThinkTagsHeaderError(
            f"trace header field 'start_in_reasoning' must be true or false, got "
            f"{start_in_reasoning!r}"
        )
    tags: dict[str, str] = {}
    for field in _TAG_FIELDS:
        if field in header:
            value = header[field]
            if not isinstance(value, str) or not value:
                raise ThinkTagsHeaderError(
                    f"trace header field {field!r} must be a non-empty string, got {value!r}"
                )
            tags[field] = value
    vocabulary = _vocabulary(header, Path(base_dir) if base_dir is not None else Path.cwd())
    return ThinkTagGrammar(vocabulary, start_in_reasoning=start_in_reasoning, **tags)
