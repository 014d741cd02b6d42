"""llguidance: the engine that enforces a `DecodingConstraint`, token by token.

A constraint crosses the token-source seam as data (its grammar's text, `DecodingConstraint`);
each engine enforces it in its own way. vLLM and SGLang hand the text to their own grammar
backends; the native engine asks this module for a matcher per sequence and, before each
sampling step, for the batch's token masks.

- `Guidance(vocabulary)` builds llguidance's tokenizer once per vocabulary (about 0.6 s for
  o200k_harmony's 201,088 tokens), so an engine holds one.
- `matcher(grammar)` compiles a grammar once (1-5 ms for a request's harmony grammar) and keeps
  the pristine matcher in a small LRU keyed by the grammar's hash: a request repeating a schema
  gets a copy (`deep_copy`, microseconds) instead of a compile.
- `GuidanceConstraint` is one request's matcher as the engine's `LogitsConstraint`: it writes
  its row of the batch's mask (32-bit words, a set bit = allowed) and is told each token taken.

llguidance never raises for a bad grammar or an unexpected token: its matcher enters an error
state. `matcher` turns a grammar error into `ConstraintError` (a request error, said before any
token), and the engine reads `is_error()` after each token it feeds.
"""

from __future__ import annotations

import collections
import hashlib
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from streamfold.statemachine import StreamfoldError, Vocabulary

if TYPE_CHECKING:
    import llguidance

__all__ = [
    "O200K_PATTERN",
    "ConstraintError",
    "Guidance",
    "GuidanceConstraint",
    "guidance_for",
    "validate_grammar",
]

#: o200k's pre-tokenization pattern (tiktoken's `o200k_base`), which llguidance's tokenizer
#: uses to split text it is asked to tokenize; masks are computed from the tokens' bytes.
O200K_PATTERN = "|".join(
    [
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"\p{N}{1,3}",
        r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
        r"\s*[\r\n]+",
        r"\s+(?!\S)",
        r"\s+",
    ]
)

#: How many compiled grammars an engine keeps (each is a few hundred KB at most).
CACHE_SIZE = 256


class ConstraintError(StreamfoldError, ValueError):
    """A decoding constraint's grammar does not compile; the message says why."""


def _import() -> Any:
    try:
        import llguidance
    except ImportError as exc:  # pragma: no cover - the dependency is declared
        raise ConstraintError(
            "enforcing structured outputs needs llguidance: pip install 'streamfold[torch]'"
        ) from exc
    return llguidance


def _key(grammar: str) -> str:
    """A compiled grammar's key in the cache: the hash of its text."""
    return hashlib.sha256(grammar.encode()).hexdigest()


class Guidance:
    """llguidance's tokenizer for one vocabulary, and the grammars compiled against it."""

    def __init__(self, vocabulary: Vocabulary, *, pattern: str = O200K_PATTERN) -> None:
        llg = _import()
        special = dict(vocabulary.special)
        text = {
            token: rank
            for rank, token in enumerate(vocabulary.token_bytes)
            if rank not in vocabulary.special_ids
        }
        # The end of text is no grammar's business: harmony's `<|return|>` and `<|call|>` are
        # tokens of the grammar, so they are not the tokenizer's end-of-sequence.
        eos = special.get("<|endoftext|>", len(vocabulary) - 1)
        self.vocab_size = len(vocabulary)
        self.tokenizer: llguidance.LLTokenizer = llg.LLTokenizer.from_tiktoken(
            encoder=text,
            special_tokens=special,
            pattern=pattern,
            eos_token=eos,
            n_vocab=self.vocab_size,
        )
        self._llg = llg
        self._compiled: collections.OrderedDict[str, llguidance.LLMatcher] = (
            collections.OrderedDict()
        )
        self._lock = threading.Lock()

    @property
    def row_words(self) -> int:
        """32-bit words in one sequence's mask."""
        return (self.vocab_size + 31) // 32

    def cached_matcher(self, grammar: str) -> llguidance.LLMatcher | None:
        """A fresh matcher for `grammar` if it is compiled already (microseconds: cheap enough
        for an event loop), else None."""
        return self._copy_of(_key(grammar))

    def _copy_of(self, key: str) -> llguidance.LLMatcher | None:
        with self._lock:
            cached = self._compiled.get(key)
            if cached is None:
                return None
            self._compiled.move_to_end(key)
            return cached.deep_copy()

    def matcher(self, grammar: str) -> llguidance.LLMatcher:
        """A fresh matcher for `grammar` (compiled once, then copied)."""
        key = _key(grammar)
        found = self._copy_of(key)
        if found is not None:
            return found
        pristine: llguidance.LLMatcher = self._llg.LLMatcher(self.tokenizer, grammar, log_level=0)
        if pristine.is_error():
            raise ConstraintError(f"the grammar does not compile: {pristine.get_error()}")
        with self._lock:
            self._compiled[key] = pristine
            while len(self._compiled) > CACHE_SIZE:
                self._compiled.popitem(last=False)
        return pristine.deep_copy()


_executor: Any = None  # one llguidance thread, made by the first `fill_batch`


class GuidanceConstraint:
    """One request's matcher as the native engine's `LogitsConstraint`."""

    def __init__(self, matcher: llguidance.LLMatcher) -> None:
        self._matcher = matcher

    @classmethod
    def fill_batch(
        cls, bitmask: Any, rows: Sequence[tuple[int, GuidanceConstraint]]
    ) -> dict[int, Exception]:
        """Fill the rows of all these constraints (the engine's batch hook) in one call that
        holds no GIL; returns the rows whose matcher failed. The native engine calls it on the
        CPU only (after the forward, or beside it in a thread of its own with
        `EngineCore.OVERLAP_ROWS`, where a call per row took and gave back the GIL three times
        a row, each time waiting for the forward's next torch op to let go of it); on CUDA it
        fills row by row. One llguidance thread: its pool spread over every core measured
        slower (5f46ee8)."""
        global _executor
        if _executor is None:
            _executor = _import().LLExecutor(1)
        width = bitmask.shape[1]
        if bitmask.stride() != (width, 1):
            raise ValueError(f"a bitmask {tuple(bitmask.shape)} not contiguous")
        _executor.unsafe_compute_mask_ptr(
            [(c._matcher, row) for row, c in rows], bitmask.data_ptr(), width * 4, bitmask.shape[0]
        )
        return {
            row: ConstraintError(c._matcher.get_error()) for row, c in rows if c._matcher.is_error()
        }

    def fill_bitmask(self, bitmask: Any, row: int) -> None:
        # The row's address by arithmetic: `bitmask[row]` made a tensor per row and call,
        # half of this method's time (1 us of 2 at 16 rows in free text).
        width = bitmask.shape[1]
        if bitmask.stride() != (width, 1) or not 0 <= row < bitmask.shape[0]:
            raise ValueError(f"row {row} of a bitmask {tuple(bitmask.shape)} not contiguous")
        self._matcher.unsafe_compute_mask_ptr(bitmask.data_ptr() + row * width * 4, width * 4)
        if self._matcher.is_error():
            raise ConstraintError(self._matcher.get_error())

    def advance(self, token_id: int) -> None:
        if not self._matcher.consume_token(token_id):
            raise ConstraintError(
                f"token {token_id} broke the grammar: {self._matcher.get_error()}"
            )


def validate_grammar(grammar: str) -> str | None:
    """Why `grammar` does not compile, or None; needs no vocabulary (cheap, for a request's
    checks before anything is generated)."""
    is_error, messages = _import().LLMatcher.validate_grammar_with_warnings(grammar)
    if not is_error:
        return None
    return " ".join(" ".join(messages).split()) or "the grammar does not compile"


_by_vocabulary: dict[int, tuple[Vocabulary, Guidance]] = {}
_lock = threading.Lock()


def guidance_for(vocabulary: Vocabulary) -> Guidance:
    """The one `Guidance` of a vocabulary (vocabularies are shared, compared by identity)."""
    with _lock:
        # The vocabulary is kept with its Guidance, so its id cannot be reused by another.
        found = _by_vocabulary.get(id(vocabulary))
        if found is None:
            found = _by_vocabulary[id(vocabulary)] = (vocabulary, Guidance(vocabulary))
        return found[1]
