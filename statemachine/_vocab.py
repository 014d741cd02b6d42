"""A token vocabulary as a plain value: token id -> bytes, and which ids are special.

The reducer decodes tokens through this table alone, so it needs no tokenizer library at run
time. Loading one from disk is I/O and lives outside the pure core (`streamfold.engines.vocab`).
"""

from __future__ import annotations

import attrs

from ._errors import ReducerUsageError

__all__ = ["Vocabulary"]


@attrs.frozen(kw_only=True, eq=False)
class Vocabulary:
    """`token_bytes[i]` is the bytes of token `i` (special tokens: their name as UTF-8).

    `special` maps the name of every special (control) token to its id. Compared by identity:
    vocabularies are large and shared, never rebuilt per request.
    """

    name: str
    token_bytes: tuple[bytes, ...] = attrs.field(repr=lambda v: f"<{len(v)} tokens>")
    special: dict[str, int] = attrs.field(factory=dict, repr=False)
    special_ids: frozenset[int] = attrs.field(init=False, repr=False)
    #: `token_bytes` with `None` for special tokens: the reducer's hot path tells text from
    #: control tokens and finds the bytes in one lookup.
    text_bytes: tuple[bytes | None, ...] = attrs.field(init=False, repr=False)

    @special_ids.default
    def _special_ids(self) -> frozenset[int]:
        return frozenset(self.special.values())

    @text_bytes.default
    def _text_bytes(self) -> tuple[bytes | None, ...]:
        table: list[bytes | None] = list(self.token_bytes)
        for token in self.special_ids:
            if 0 <= token < len(table):
                table[token] = None
        return tuple(table)

    def __len__(self) -> int:
        return len(self.token_bytes)

    def bytes_of(self, token: int) -> bytes:
        """The bytes of `token`; raises `ReducerUsageError` for an id outside the vocabulary."""
        if isinstance(token, bool) or not isinstance(token, int):
            raise ReducerUsageError(
                f"token id {token!r} is a {type(token).__name__}, not an int; pass the engine's "
                "integer token ids, one per step() call"
            )
        if not 0 <= token < len(self.token_bytes):
            raise ReducerUsageError(
                f"token id {token!r} is outside the {self.name} vocabulary "
                f"(0..{len(self.token_bytes) - 1}); check that the engine and the reducer use "
                "the same tokenizer"
            )
        return self.token_bytes[token]

    def id_of(self, special_name: str) -> int:
        """The id of a special token such as `<|channel|>`."""
        try:
            return self.special[special_name]
        except KeyError:
            raise ReducerUsageError(
                f"the {self.name} vocabulary has no special token {special_name!r}"
            ) from None

    def decode(self, tokens: list[int] | tuple[int, ...]) -> str:
        """Lossy text of a token sequence (invalid UTF-8 becomes U+FFFD)."""
        return b"".join(self.bytes_of(t) for t in tokens).decode("utf-8", "replace")
