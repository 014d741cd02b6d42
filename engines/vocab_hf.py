"""A token vocabulary from a Hugging Face `tokenizer.json` on local disk.

No hub download and no `tokenizers`/`transformers` import: the reducer only needs token id →
bytes, and that table is in the JSON. Two alphabets are understood:

* *byte-level* (GPT-2, Qwen, DeepSeek, Llama 3): every byte is stored as one printable
  character of GPT-2's `bytes_to_unicode` table; mapping each character back gives the bytes.
* *metaspace* (SentencePiece: Llama 2, Mistral, Gemma): `▁` stands for a space and byte
  fallback tokens `<0x0A>` for single bytes. A leading space that the tokenizer's decoder would
  strip at the very start is kept; the think-tag grammar drops leading whitespace anyway.

The model may be `BPE` (vocab is a name → id map) or `Unigram` (a list of [piece, score]).
Every entry of `added_tokens` becomes a special token (its content is its text), so the
think-tag grammar sees `<think>` as one token of text `<think>`, and other added tokens
(`<|im_end|>`) as control tokens that show no text.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streamfold.statemachine import Vocabulary, VocabularyError

__all__ = ["gpt2_unicode_to_byte", "load_tokenizer_json"]

_SUPPORTED = (
    "supported: model type BPE or Unigram, with a ByteLevel pre-tokenizer/decoder (GPT-2 "
    "alphabet) or a Metaspace/ByteFallback decoder (SentencePiece alphabet)"
)


@functools.cache
def gpt2_unicode_to_byte() -> dict[str, int]:
    """Inverse of GPT-2's `bytes_to_unicode`: printable bytes map to themselves, the other 68
    bytes to U+0100 onwards, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in printable:
            table[chr(256 + extra)] = b
            extra += 1
    return table


def _component_types(node: Any) -> set[str]:
    """Every `type` named in a pre-tokenizer or decoder, nested Sequences included."""
    if not isinstance(node, dict):
        return set()
    found = {node["type"]} if isinstance(node.get("type"), str) else set()
    for key in ("pretokenizers", "decoders"):
        for child in node.get(key) or ():
            found |= _component_types(child)
    return found


def _byte_level_bytes(piece: str, path: Path) -> bytes:
    table = gpt2_unicode_to_byte()
    try:
        return bytes(table[c] for c in piece)
    except KeyError as exc:
        raise VocabularyError(
            f"{path}: token {piece!r} has character {exc.args[0]!r} outside the GPT-2 byte "
            f"alphabet, so this is not a byte-level vocabulary; {_SUPPORTED}"
        ) from None


def _metaspace_bytes(piece: str) -> bytes:
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        try:
            return bytes([int(piece[3:5], 16)])
        except ValueError:
            pass
    return piece.replace("\u2581", " ").encode("utf-8")


def _pieces(model: dict[str, Any], path: Path) -> dict[int, str]:
    kind = model.get("type")
    vocab = model.get("vocab")
    if kind == "BPE" and isinstance(vocab, dict):
        return {int(i): piece for piece, i in vocab.items()}
    if kind == "Unigram" and isinstance(vocab, list):
        return {i: entry[0] for i, entry in enumerate(vocab)}
    raise VocabularyError(f"{path}: model type {kind!r} is not supported; {_SUPPORTED}")


def load_tokenizer_json(path: str | os.PathLike[str], name: str | None = None) -> Vocabulary:
    """The vocabulary of a Hugging Face `tokenizer.json` (see the module doc for what is read)."""
    path = Path(path)
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise VocabularyError(
            f"cannot read tokenizer file {path} ({exc}); pass the path of a local "
            "tokenizer.json (e.g. from a downloaded model directory)"
        ) from exc
    except ValueError as exc:
        raise VocabularyError(f"{path} is not JSON ({exc}); expected a tokenizer.json") from exc
    if not isinstance(spec, dict) or not isinstance(spec.get("model"), dict):
        raise VocabularyError(f"{path} has no 'model' object; expected a tokenizer.json")
    types = _component_types(spec.get("pre_tokenizer")) | _component_types(spec.get("decoder"))
    to_bytes: Callable[[str], bytes]
    if "ByteLevel" in types:
        to_bytes = functools.partial(_byte_level_bytes, path=path)
    elif types & {"Metaspace", "ByteFallback", "Replace"}:
        to_bytes = _metaspace_bytes
    else:
        raise VocabularyError(
            f"{path}: pre-tokenizer/decoder types {sorted(types)} name no known byte alphabet; "
            f"{_SUPPORTED}"
        )
    special: dict[str, int] = {}
    for entry in spec.get("added_tokens") or ():
        try:
            special[str(entry["content"])] = int(entry["id"])
        except (KeyError, TypeError, ValueError):
            raise VocabularyError(
                f"{path}: added token {entry!r} needs an integer 'id' and a 'content'"
            ) from None
    added = {token: name.encode("utf-8") for name, token in special.items()}
    table = {
        token: added[token] if token in added else to_bytes(piece)
        for token, piece in _pieces(spec["model"], path).items()
    }
    table.update(added)
    if not table or min(table) < 0:
        raise VocabularyError(f"{path}: the vocabulary is empty or has negative ids")
    # Ids a tokenizer never assigns (gaps) decode to nothing rather than failing the stream.
    token_bytes = tuple(table.get(i, b"") for i in range(max(table) + 1))
    return Vocabulary(
        name=name or path.parent.name or path.stem, token_bytes=token_bytes, special=special
    )
