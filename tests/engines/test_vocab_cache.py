"""The on-disk vocabulary cache: the same table as the source, rebuilt when it does not match.

The cache exists for start-up speed (benchmarks/bench_cli.py measures it); these tests pin that
it can never change what the reducer sees: a warm read equals a fresh build from the verified
source, a damaged or stale cache is rebuilt, and processes starting together all get the whole
table.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from streamfold.engines import vocab
from streamfold.statemachine import Vocabulary

HARMONY = f"o200k_harmony.py{sys.version_info[0]}{sys.version_info[1]}.vocab"

# Prints a digest of the vocabulary and whether openai-harmony had to be imported to get it.
_CHILD = (
    "import hashlib, sys; from streamfold.engines.vocab import load_harmony_vocabulary as load"
    "; v = load(); d = hashlib.sha256(repr((v.token_bytes, sorted(v.special.items()))).encode())"
    "; print(d.hexdigest(), 'openai_harmony' in sys.modules)"
)


@pytest.fixture(scope="module")
def fresh() -> Vocabulary:
    """o200k_harmony built straight from the verified source, no cache involved."""
    return vocab.load_tiktoken_vocabulary(
        vocab.encodings_dir() / "o200k_base.tiktoken", vocab._harmony_special(), "o200k_harmony"
    )


def _load(cache: Path, monkeypatch: pytest.MonkeyPatch) -> Vocabulary:
    monkeypatch.setenv("STREAMFOLD_CACHE_DIR", str(cache))
    return vocab.load_harmony_vocabulary.__wrapped__()


def _same(a: Vocabulary, b: Vocabulary) -> bool:
    return a.name == b.name and a.token_bytes == b.token_bytes and a.special == b.special


def _digest(v: Vocabulary) -> str:
    return hashlib.sha256(repr((v.token_bytes, sorted(v.special.items()))).encode()).hexdigest()


def test_cold_then_warm_equal_the_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh: Vocabulary
) -> None:
    cold = _load(tmp_path, monkeypatch)
    assert (tmp_path / "encodings" / HARMONY).is_file()  # $STREAMFOLD_CACHE_DIR/encodings
    warm = _load(tmp_path, monkeypatch)
    assert _same(cold, fresh) and _same(warm, fresh)
    assert warm.text_bytes == fresh.text_bytes and warm.special_ids == fresh.special_ids


@pytest.mark.parametrize(
    "damage",
    ["truncated", "payload_byte", "stale_stamp", "garbage", "empty"],
)
def test_a_damaged_or_stale_cache_is_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh: Vocabulary, damage: str
) -> None:
    _load(tmp_path, monkeypatch)
    path = tmp_path / "encodings" / HARMONY
    data = path.read_bytes()
    if damage == "truncated":
        data = data[: len(data) - 1000]
    elif damage == "payload_byte":  # a flipped byte deep in the table: only the hash sees it
        i = len(data) - 5000
        data = data[:i] + bytes([data[i] ^ 1]) + data[i + 1 :]
    elif damage == "stale_stamp":  # e.g. built by another openai-harmony install
        data = data.replace(b'"stamp": "', b'"stamp": "0', 1)
    elif damage == "garbage":
        data = b"streamfold-vocab\n{not json\n" + data
    else:
        data = b""
    path.write_bytes(data)
    assert vocab._read_cache(path, _key()) is None
    assert _same(_load(tmp_path, monkeypatch), fresh)
    assert vocab._read_cache(path, _key()) is not None  # rewritten whole


def _key() -> dict[str, object]:
    return {
        "format": 2,
        "name": "o200k_harmony",
        "source_sha256": vocab.O200K_BASE_SHA256,
        "stamp": vocab._harmony_stamp(),
    }


def test_an_unwritable_cache_directory_still_gives_the_vocabulary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh: Vocabulary
) -> None:
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where the cache directory should be")
    assert _same(_load(blocker, monkeypatch), fresh)


def test_concurrent_first_runs_all_get_the_whole_table(tmp_path: Path, fresh: Vocabulary) -> None:
    env = {**os.environ, "STREAMFOLD_CACHE_DIR": str(tmp_path)}
    procs = [
        subprocess.Popen([sys.executable, "-c", _CHILD], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=300)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert {digest for digest, _ in outputs} == {_digest(fresh)}
    encodings = tmp_path / "encodings"
    assert sorted(os.listdir(encodings)).count(HARMONY) == 1
    assert not [name for name in os.listdir(encodings) if name.startswith(".")]  # no temp left
    # A warm start reads the cache and never loads openai-harmony's encoding (~1 s of start-up).
    warm = subprocess.run(
        [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True
    )
    assert warm.stdout.split() == [_digest(fresh), "False"]
